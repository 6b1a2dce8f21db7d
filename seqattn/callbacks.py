"""Small Lightning callbacks used by the recipes."""

from __future__ import annotations

import logging
import time

import lightning as L

log = logging.getLogger("seqattn.train")


class EpochSummary(L.Callback):
    """Logs one line per validation epoch (metrics and elapsed time), so progress stays
    visible in log files and CI output where no progress bar is drawn."""

    def __init__(self) -> None:
        self._start = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        # validation ends inside the training epoch: show this epoch's val metrics and the training loss
        shown = {k: float(v) for k, v in trainer.callback_metrics.items()
                 if (k.startswith("val/") or k == "train/loss_epoch") and v.numel() == 1}
        text = " ".join(f"{k}={v:.4f}" for k, v in sorted(shown.items()))
        elapsed = time.perf_counter() - (self._start or time.perf_counter())
        log.info("epoch %d/%s %s (%.0f s)", trainer.current_epoch + 1, trainer.max_epochs, text, elapsed)
