"""Speech figures of one test utterance: frame labeling (features, true/predicted frame labels, the
attention map) and CTC recognition (spectrogram, per-frame CTC posteriors, reference vs decoded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from matplotlib.colors import ListedColormap

from seqattn.labels import edit_distance
from seqattn.model.protocols import head_pooling
from seqattn.viz import first_test_batch, plt


@torch.no_grad()
def plot_frame_labeling(model, datamodule, out_dir: str | Path, index: int = 0, layer: int = -1) -> Path:
    """One test utterance: its features (spectrogram), true and predicted frame labels, and the
    encoder's attention map (mean over heads of ``layer``). Returns ``out_dir/test_utterance.png``."""
    model.eval()
    batch = first_test_batch(datamodule)
    batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out = model.net(batch, return_attention=[layer])
    n = int(out["mask"][index].sum())
    feats = out["tokens"].extra.get("features", out["tokens"].x)[index, :n].float().cpu().numpy()  # [F, n_feat]
    pred = out["logits"][index, :n].argmax(-1).cpu().numpy()
    true = batch["labels"][index, :n].cpu().numpy()
    names = list(model.labels or [str(i) for i in range(out["logits"].shape[-1])])
    attention = out["attention"][0] if out["attention"] else None

    fig = plt.figure(figsize=(11, 9), constrained_layout=True)
    grid = fig.add_gridspec(4, 1, height_ratios=[2.2, 0.35, 0.35, 3.2])
    ax = fig.add_subplot(grid[0])
    ax.imshow(feats.T, aspect="auto", origin="lower", cmap="magma", interpolation="nearest")
    ax.set_ylabel("feature")
    ax.set_title(f"test utterance {batch.get('ids', ['?'] * (index + 1))[index]}: features ({n} frames)")
    cmap = ListedColormap(plt.get_cmap("tab20").colors[: max(len(names), 1)])
    accuracy = float((pred == true)[true >= 0].mean()) if (true >= 0).any() else float("nan")
    for row, (labels, title) in enumerate([(true, "true"), (pred, f"predicted (frame acc {accuracy:.2f})")]):
        ax = fig.add_subplot(grid[1 + row])
        shown = np.where(labels >= 0, labels, np.nan)[None, :]
        ax.imshow(shown, aspect="auto", cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, interpolation="nearest")
        ax.set_yticks([])
        ax.set_ylabel(title, rotation=0, ha="right", va="center")
        for start, end, label in _runs(labels):
            if label >= 0 and end - start >= 3:
                ax.text((start + end - 1) / 2, 0, names[label], ha="center", va="center", fontsize=7)
    ax = fig.add_subplot(grid[3])
    attn = None if attention is None else attention[index, :, :n, :n].mean(0)  # [F, F], mean over heads
    _attention_panel(fig, ax, attn, model, layer, colorbar_width=0.012)
    path = Path(out_dir) / "test_utterance.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@torch.no_grad()
def plot_ctc(model, datamodule, out_dir: str | Path, index: int = 0) -> Path:
    """One test utterance of a CTC model: its features (spectrogram), the CTC posteriors of every
    class over time (blank first, at the network's frame rate after any subsampling) and the
    reference vs the decoded token sequence. Returns ``out_dir/test_utterance.png``.

    ``model`` is a CTC objective: ``model.net(batch)`` gives per-frame ``logits [B, F', 1 + C]`` and
    ``model.decode(out)`` the decoded label sequences; ``batch["labels"]`` holds the references."""
    model.eval()
    batch = first_test_batch(datamodule)
    batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out = model.net(batch, return_attention=False)
    tokens = model.net.adapter(**{k: batch[k] for k in model.net.input_names})
    n_feat = int(tokens.mask[index].sum())
    feats = tokens.extra.get("features", tokens.x)[index, :n_feat].float().cpu().numpy()  # [F, n_feat]
    n = int(out["mask"][index].sum())
    post = out["logits"][index, :n].float().softmax(-1).cpu().numpy()  # [F', 1 + C]
    names = list(model.labels or [str(i) for i in range(post.shape[1] - 1)])
    classes = ["<blank>"] + names
    decoded = [names[k] for k in model.decode({k: v[index: index + 1] for k, v in out.items()})[0]]
    reference = [names[int(k)] for k in batch["labels"][index].tolist() if int(k) >= 0]
    hop_s = datamodule.hop / datamodule.sample_rate
    step_s = hop_s * n_feat / max(n, 1)  # seconds per network frame (subsampled)
    errors = edit_distance(decoded, reference)

    fig = plt.figure(figsize=(11, 8.5), constrained_layout=True)
    grid = fig.add_gridspec(3, 1, height_ratios=[2.0, 2.6, 0.7])
    ax = fig.add_subplot(grid[0])
    ax.imshow(feats.T, aspect="auto", origin="lower", cmap="magma", interpolation="nearest",
              extent=(0, n_feat * hop_s, -0.5, feats.shape[1] - 0.5))
    ax.set_ylabel("feature")
    ax.set_title(f"test utterance {batch.get('ids', ['?'] * (index + 1))[index]}: features ({n_feat} frames)")
    ax = fig.add_subplot(grid[1])
    image = ax.imshow(post.T, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest", vmin=0, vmax=1,
                      extent=(0, n * step_s, -0.5, len(classes) - 0.5))
    ax.set_yticks(range(len(classes)))
    ax.set_yticklabels(classes, fontsize=7 if len(classes) > 20 else 8)
    ax.set_xlabel("time (s)")
    ax.set_title(f"CTC posteriors per network frame ({n} frames of {1000 * step_s:.0f} ms; blank = class 0)")
    fig.colorbar(image, cax=ax.inset_axes([1.01, 0.0, 0.012, 1.0]))
    for t, k in enumerate(post.argmax(-1)):  # label the frames where a non-blank token wins
        if k > 0 and (t == 0 or post[t - 1].argmax() != k):
            ax.text((t + 0.5) * step_s, k, classes[k], color="white", fontsize=7, ha="center", va="center")
    ax = fig.add_subplot(grid[2])
    ax.set_axis_off()
    ax.text(0.0, 0.75, "reference: " + " ".join(reference), family="monospace", fontsize=9, transform=ax.transAxes)
    ax.text(0.0, 0.25, f"decoded ({model.decoder}): " + " ".join(decoded) + f"   [{errors} edit(s) / "
            f"{len(reference)} tokens]", family="monospace", fontsize=9, transform=ax.transAxes)
    path = Path(out_dir) / "test_utterance.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _runs(labels: np.ndarray):
    """Maximal runs of equal labels: yields ``(start, end, label)``."""
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            yield start, i, int(labels[start])
            start = i


@torch.no_grad()
def plot_clip_classification(model, datamodule, out_dir: str | Path, index: int = 0, layer: int = -1) -> Path:
    """Utterance classification figures in ``out_dir``:

    - ``confusion_matrix.png``: the test confusion matrix with the class names;
    - ``test_clip.png``: one test clip's features, the attention map of ``layer`` (mean over heads),
      how the head reads the frames (``head.pooling=attention``: the pooling weights; ``cls``: the
      global token's attention row of ``layer``) and the predicted class probabilities (top 5)
      against the true label.

    Returns the confusion matrix's path.
    """
    from seqattn.viz.confusion import plot_confusion_matrix

    out_dir = Path(out_dir)
    model.eval()
    names = list(model.labels or [str(i) for i in range(model.num_classes)])
    batch = first_test_batch(datamodule)
    batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    matrix = model.confusion_matrix  # a TrainedModel (seqattn.model.protocols): None until tested
    if matrix is None:  # not tested in this process: count over the test split
        matrix = torch.zeros(len(names), len(names), dtype=torch.long)
        for b in datamodule.test_dataloader():
            b = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            pred = model(b)["logits"].argmax(-1).cpu()
            matrix += torch.bincount(b["labels"].cpu() * len(names) + pred, minlength=len(names) ** 2).view(
                len(names), len(names))
    confusion = plot_confusion_matrix(np.asarray(matrix), names, out_dir / "confusion_matrix.png",
                                      title="test confusion matrix (unseen speakers)" if getattr(
                                          datamodule, "speakers", None) else "test confusion matrix")

    out = model.net(batch, return_attention=[layer])
    tokens = out["tokens"]
    g = tokens.num_global
    n = int(out["mask"][index].sum()) - g  # the network's tokens of the clip
    feats, k = clip_frames(model, batch, tokens, index)  # [F, C]; k frames per token
    probs = out["logits"][index].float().softmax(-1).cpu()
    true = int(batch["labels"][index])
    fig = plt.figure(figsize=(11, 8.5), constrained_layout=True)
    grid = fig.add_gridspec(3, 2, height_ratios=[2.0, 0.6, 3.2], width_ratios=[4, 1.3])
    ax = fig.add_subplot(grid[0, 0])
    # in token units, so the frames line up with the token panels below (k frames per token)
    ax.imshow(feats.T, aspect="auto", origin="lower", cmap="magma", interpolation="nearest",
              extent=(-0.5, len(feats) / k - 0.5, -0.5, feats.shape[1] - 0.5))
    ax.set_ylabel("feature")
    tokens_said = f" ({n} tokens of {k} frames)" if k > 1 else ""
    ax.set_title(f"test clip {batch['ids'][index]}: {len(feats)} frames{tokens_said}, true '{names[true]}'")
    ax = fig.add_subplot(grid[1, 0])
    head = model.net.head
    attention = out.get("attention")
    pooling = head_pooling(head)
    weights = None
    if pooling == "attention":
        encoded = model.net.encoder(tokens)
        scores = head.score(encoded).squeeze(-1)[index, : n + g]  # [L]
        weights = scores.float().softmax(-1)[g:].cpu().numpy()  # the pooling weights over frames
        label = "pooling\nweight"
    elif pooling == "cls" and attention and g:
        weights = attention[0][index, :, 0, g : n + g].mean(0).float().cpu().numpy()  # the global token's row
        label = "CLS\nattention"
    if weights is not None:
        ax.fill_between(np.arange(n), weights, step="mid", color="tab:blue")
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylabel(label)
    else:
        ax.text(0.5, 0.5, f"pooling: {pooling or '?'}", ha="center", va="center")
        ax.set_axis_off()
    ax = fig.add_subplot(grid[2, 0])
    attn = attention[0][index, :, g : n + g, g : n + g].mean(0) if attention else None  # [F, F]
    _attention_panel(fig, ax, attn, model, layer, colorbar_width=0.015)
    ax = fig.add_subplot(grid[:, 1])
    top = probs.argsort(descending=True)[:5].tolist()
    ax.barh(range(len(top)), [float(probs[k]) for k in top],
            color=["tab:green" if k == true else "tab:gray" for k in top])
    ax.set_yticks(range(len(top)), [names[k] for k in top])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_title("predicted (green = true)")
    path = out_dir / "test_clip.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return confusion


def clip_frames(model, batch: dict, tokens, index: int) -> tuple[np.ndarray, int]:
    """The adapter's frame features of item ``index`` and the frames per network token:
    ``(features [F, C], k)``. ``tokens`` are the tokens the encoder saw (``out["tokens"]``): with a time
    subsampling (``extra["subsample"] = k``) they are ``ceil(F / k)`` per clip while ``extra["features"]``
    keeps every frame, so the real frames are counted on the adapter's own mask. Without features: the
    token vectors themselves, ``k = 1``."""
    g = tokens.num_global
    k = int(tokens.extra.get("subsample", 1))
    if "features" not in tokens.extra:
        n = int(tokens.mask[index].sum()) - g if tokens.mask is not None else tokens.x.shape[1] - g
        return tokens.x[index, g:g + n].float().cpu().numpy(), 1
    frames = model.net.adapter(**{name: batch[name] for name in model.net.input_names}).mask
    n_frames = int(frames[index].sum()) if frames is not None else tokens.extra["features"].shape[1]
    return tokens.extra["features"][index, :n_frames].float().cpu().numpy(), k


def _attention_panel(fig, ax, attn, model, layer: int, colorbar_width: float) -> None:
    """Token-by-token attention ``attn [F', F']`` (mean over heads; a token per network frame, after any time
    subsampling) on ``ax``, or a note that the encoder has none (``attn`` None). ``aspect="auto"``: key tokens
    line up with the panels above."""
    if attn is None:
        ax.text(0.5, 0.5, f"{type(model.net.encoder).__name__} has no attention", ha="center", va="center")
        ax.set_axis_off()
        return
    image = ax.imshow(attn.float().cpu().numpy(), cmap="viridis", interpolation="nearest", aspect="auto")
    fig.colorbar(image, cax=ax.inset_axes([1.01, 0.0, colorbar_width, 1.0]))
    name = "last layer" if layer == -1 else f"layer {layer}"
    ax.set_title(f"attention of the {name}, mean over heads")
    ax.set_xlabel("key token")
    ax.set_ylabel("query token")
