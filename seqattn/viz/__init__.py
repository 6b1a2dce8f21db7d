"""Shared figure helpers (modality-free): headless matplotlib (``Agg``) and the first test batch.

Each modality's figures live in its own folder (``seqattn/modalities/<m>/viz.py``); every
``plot_*`` takes ``(model, datamodule, out_dir)`` and returns the PNG path, so a task config
selects its figure with ``plot_fn: {_target_: seqattn.modalities.<m>.viz.plot_..., _partial_: true}``.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["first_test_batch", "plt"]


def first_test_batch(datamodule) -> dict:
    """The datamodule's first test batch (``setup("test")`` is called)."""
    if getattr(datamodule, "test_dataloader", None) is None:
        raise ValueError("the datamodule has no test split to plot")
    datamodule.setup("test")
    return next(iter(datamodule.test_dataloader()))
