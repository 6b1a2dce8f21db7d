"""Image figures: the test confusion matrix and where a query pixel attends, overlaid on the image."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from seqattn.viz import first_test_batch, plt
from seqattn.viz.confusion import plot_confusion_matrix

log = logging.getLogger("seqattn.modalities.image.viz")


@torch.no_grad()
def plot_image_classification(model, datamodule, out_dir: str | Path, n_images: int = 6,
                              query: tuple[int, int] | None = None, layer: int = -1) -> Path:
    """Write ``confusion_matrix.png`` (test set) and ``attention_map.png`` into ``out_dir``.

    ``attention_map.png``: for ``n_images`` test images, the image with the query pixel marked,
    and the attention of that query (``layer``, mean over heads) over every key pixel as a heat map
    overlaid on the image. ``query = (row, col)`` in pixels; default: the image centre.
    Returns the attention map's path.
    """
    out_dir = Path(out_dir)
    model.eval()
    matrix = model.confusion_matrix  # a TrainedModel (seqattn.model.protocols): None until tested
    batch = first_test_batch(datamodule)
    names = list(model.labels or [])
    if matrix is None:  # not tested in this process: count over the test split
        matrix = confusion_over(model, datamodule.test_dataloader(), len(names) or model.num_classes)
    plot_confusion_matrix(np.asarray(matrix), names, out_dir / "confusion_matrix.png")
    path = out_dir / "attention_map.png"
    plot_attention_map(model, batch, path, n_images=n_images, query=query, layer=layer)
    log.info("figures: %s, %s", out_dir / "confusion_matrix.png", path)
    return path


def confusion_over(model, loader, num_classes: int) -> torch.Tensor:
    """``[C, C]`` counts (row true, column predicted) of ``model`` over ``loader``."""
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long)
    for batch in loader:
        batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        pred = model(batch)["logits"].argmax(-1).cpu()
        matrix += torch.bincount(batch["labels"].cpu() * num_classes + pred,
                                 minlength=num_classes**2).view(num_classes, num_classes)
    return matrix


def plot_attention_map(model, batch: dict, path: Path, n_images: int = 6, query: tuple[int, int] | None = None,
                       layer: int = -1) -> Path:
    """Two rows per figure: images with the query pixel marked, and its attention overlaid."""
    batch = {k: v[:n_images] if isinstance(v, (torch.Tensor, list)) else v for k, v in batch.items()}
    batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out = model.net(batch, return_attention=[layer])
    images = batch["images"].float().cpu()  # [B, 3, H, W]
    n, _, height, width = images.shape
    tokens = out["tokens"]
    h, w = tokens.grid if tokens.grid is not None else (height, width)
    p = int(tokens.extra.get("patch_size", 1))
    offset = tokens.num_global
    pred = out["logits"].argmax(-1).cpu()
    names = list(model.labels or [str(i) for i in range(out["logits"].shape[-1])])
    attention = out["attention"][0] if out.get("attention") else None
    q_row, q_col = query if query is not None else (height // 2, width // 2)
    if not (0 <= q_row < height and 0 <= q_col < width):
        raise ValueError(f"query pixel {(q_row, q_col)} is outside the {height}×{width} image")
    q_index = offset + (q_row // p) * w + q_col // p  # the query's token

    fig, axes = plt.subplots(2, n, figsize=(2.2 * n, 4.8), squeeze=False, constrained_layout=True)
    for i in range(n):
        rgb = images[i].permute(1, 2, 0).clamp(0, 1).numpy()
        title = names[int(pred[i])]
        if "labels" in batch:
            title = f"true {names[int(batch['labels'][i])]}\npred {title}"
        for ax, shown in zip(axes[:, i], (rgb, rgb.mean(-1))):  # the heat map goes over a gray copy
            ax.imshow(shown, interpolation="nearest", cmap="gray", vmin=0, vmax=1)
            ax.plot(q_col, q_row, marker="+", color="white", markersize=12, mew=2)
            ax.plot(q_col, q_row, marker="+", color="black", markersize=8, mew=1)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[0, i].set_title(title, fontsize=8)
        if attention is None:
            axes[1, i].set_title("no attention", fontsize=8)
            continue
        weights = attention[i, :, q_index, offset:offset + h * w].mean(0).float().cpu()  # [h·w], mean over heads
        grid = weights.view(h, w).repeat_interleave(p, 0).repeat_interleave(p, 1)[:height, :width].numpy()
        axes[1, i].imshow(grid, cmap="inferno", alpha=0.75, interpolation="nearest",
                          vmin=0, vmax=max(float(grid.max()), 1e-8))
    name = "last layer" if layer == -1 else f"layer {layer}"
    encoder = type(model.net.encoder).__name__
    suffix = f"where pixel (row {q_row}, col {q_col}) attends ({name}, mean over heads)" if attention is not None \
        else f"{encoder} has no attention"
    fig.suptitle(f"top: test images and predictions; bottom: {suffix}", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
