"""Shared plotting setup: headless matplotlib (``Agg``) and the first test batch."""

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
