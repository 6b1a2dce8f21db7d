"""A confusion-matrix figure with class names (modality-free)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from seqattn.viz import plt


def plot_confusion_matrix(matrix: np.ndarray, names: Sequence[str] | None, path: str | Path,
                          title: str = "test confusion matrix") -> Path:
    """``matrix [C, C]`` counts (rows true, columns predicted) as a PNG: counts written in the cells,
    colours normalised per row (recall), class names on both axes, the accuracy in the title."""
    matrix = np.asarray(matrix)
    c = matrix.shape[0]
    names = list(names) if names else [str(i) for i in range(c)]
    rates = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
    size = max(3.0, 0.9 + 0.55 * c)
    fig, ax = plt.subplots(figsize=(size + 0.6, size), constrained_layout=True)
    ax.imshow(rates, cmap="Blues", vmin=0, vmax=1)
    for i in range(c):
        for j in range(c):
            if matrix[i, j]:
                ax.text(j, i, int(matrix[i, j]), ha="center", va="center", fontsize=8 if c <= 16 else 6,
                        color="white" if rates[i, j] > 0.5 else "black")
    ax.set_xticks(range(c), names, rotation=60, ha="right")
    ax.set_yticks(range(c), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    accuracy = np.trace(matrix) / max(matrix.sum(), 1)
    ax.set_title(f"{title} (accuracy {accuracy:.3f}, {int(matrix.sum())} items)")
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
