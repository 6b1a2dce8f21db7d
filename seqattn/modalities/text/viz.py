"""Text figures: the learned word embeddings in 2-D (PCA) and the attention map of one test
sentence with its words on the axes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from seqattn.viz import first_test_batch, plt


def pca_2d(vectors: torch.Tensor) -> np.ndarray:
    """``[N, E]`` -> ``[N, 2]``: projection on the two leading principal components."""
    x = vectors.detach().float().cpu()
    x = x - x.mean(0, keepdim=True)
    if x.shape[0] < 2:
        return np.zeros((x.shape[0], 2))
    _, _, v = torch.linalg.svd(x, full_matrices=False)  # v: [min(N, E), E]
    comps = v[:2].T  # [E, <=2]
    out = (x @ comps).numpy()
    return np.pad(out, ((0, 0), (0, 2 - out.shape[1])))


@torch.no_grad()
def plot_word_embeddings(model, datamodule, out_dir: str | Path, max_words: int = 300, labelled: int = 40) -> Path:
    """PCA of the adapter's word vectors (``<pad>``/``<unk>`` left out), coloured by each word's most
    frequent tag in train when the datamodule knows it (``word_tags``); the ``labelled`` most frequent
    words are named. Returns ``out_dir/word_embeddings.png``."""
    adapter = model.net.adapter
    words = adapter.vocab.words[2 : 2 + max_words]  # most frequent first
    points = pca_2d(adapter.word_vectors()[2 : 2 + len(words)])
    kinds = getattr(datamodule, "word_tags", {}) or {}
    fig, ax = plt.subplots(figsize=(9, 7), constrained_layout=True)
    groups = sorted({kinds.get(w, "?") for w in words})
    cmap = plt.get_cmap("tab20")
    for g, name in enumerate(groups):
        idx = [i for i, w in enumerate(words) if kinds.get(w, "?") == name]
        ax.scatter(points[idx, 0], points[idx, 1], s=14, color=cmap(g % 20), label=name if kinds else None)
    for i, w in enumerate(words[:labelled]):
        ax.annotate(w, points[i], fontsize=8, xytext=(2, 2), textcoords="offset points")
    if kinds:
        ax.legend(title="most frequent tag", fontsize=7, loc="best", ncol=2)
    ax.set_title(f"{adapter.embedding} word embeddings, PCA to 2-D ({len(words)} most frequent words)")
    path = Path(out_dir) / "word_embeddings.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pick_sentence(batch: dict, max_words: int = 18) -> int:
    """A test sentence to show: the first with a far-decided word (built-in tagging corpus), else the
    first of at most ``max_words`` words."""
    far = batch.get("subsets", {}).get("far")
    lengths = [len(w) for w in batch["words"]]
    if far is not None:
        for i, n in enumerate(lengths):
            if n <= max_words and bool(far[i].any()):
                return i
    return next((i for i, n in enumerate(lengths) if n <= max_words), 0)


@torch.no_grad()
def plot_attention_sentence(model, datamodule, out_dir: str | Path, layer: int = -1) -> Path:
    """One test sentence: the attention of ``layer`` (mean over heads), words on both axes; for a
    tagger the tick labels read ``word/predicted`` (true tag in brackets when wrong). Returns
    ``out_dir/test_sentence.png``."""
    model.eval()
    batch = first_test_batch(datamodule)
    i = _pick_sentence(batch)
    one = {k: (v[i : i + 1] if isinstance(v, (torch.Tensor, list)) else v) for k, v in batch.items() if k != "subsets"}
    one = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in one.items()}
    out = model.net(one, return_attention=[layer])
    words = list(one["words"][0])
    names = list(model.labels or [])
    logits = out["logits"][0]
    axis = list(words)
    title = " ".join(words)
    if logits.dim() == 2:  # per token
        pred = logits[: len(words)].argmax(-1).tolist()
        true = one["labels"][0, : len(words)].tolist() if "labels" in one else pred
        axis = [f"{w}/{names[p] if names else p}" + ("" if t == p or t < 0 else f" [{names[t] if names else t}]")
                for w, p, t in zip(words, pred, true)]
    else:
        p = int(logits.argmax(-1))
        t = int(one["labels"][0]) if "labels" in one else p
        title += f"\npredicted {names[p] if names else p}, true {names[t] if names else t}"
    if out["tokens"].num_global:
        axis = ["[CLS]"] + axis
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(axis) + 2), max(5, 0.42 * len(axis) + 1.5)),
                           constrained_layout=True)
    if out["attention"]:
        attn = out["attention"][0][0].mean(0)[: len(axis), : len(axis)].float().cpu().numpy()  # [L, L]
        image = ax.imshow(attn, cmap="viridis", interpolation="nearest")
        fig.colorbar(image, ax=ax, shrink=0.8)
        ax.set_xticks(range(len(axis)), axis, rotation=90, fontsize=8)
        ax.set_yticks(range(len(axis)), axis, fontsize=8)
        ax.set_xlabel("key (attended word)")
        ax.set_ylabel("query word")
        name = "last layer" if layer == -1 else f"layer {layer}"
        ax.set_title(f"attention of the {name}, mean over heads\n{title}", fontsize=9)
    else:
        ax.text(0.5, 0.5, f"{type(model.net.encoder).__name__} has no attention\n{title}", ha="center",
                va="center", wrap=True)
        ax.set_axis_off()
    path = Path(out_dir) / "test_sentence.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_text(model, datamodule, out_dir: str | Path) -> Path:
    """Both text figures: ``word_embeddings.png`` and ``test_sentence.png`` (returned)."""
    plot_word_embeddings(model, datamodule, out_dir)
    return plot_attention_sentence(model, datamodule, out_dir)
