"""Log which attention path a run takes: one line, at the first training batch.

The line is the encoder's plan summary (:meth:`seqattn.core.attention_plan.AttentionPlan.summary`), e.g.
``attention: band ±64 via the CPU flash kernel, 4 layers``, or for a fallback its reason, e.g.
``attention: dense mask via the CPU flash kernel (window and grid window together cannot use the band
kernel), 3 layers``. Networks without a seqattn :class:`~seqattn.core.Encoder` (the baselines) log nothing.
"""

from __future__ import annotations

import logging

import lightning as L

from seqattn.core import Encoder

log = logging.getLogger("seqattn.run")


def attention_summary(module: L.LightningModule) -> str | None:
    """The summary line of the last forward of the first :class:`Encoder` inside ``module``, or None
    (no encoder, or no forward yet)."""
    encoder = next((m for m in module.modules() if isinstance(m, Encoder)), None)
    if encoder is None or encoder.last_plan is None:
        return None
    return encoder.last_plan.get("summary")


class AttentionPathLog(L.Callback):
    """Logs the attention plan's summary line once, after the first training batch (logger
    ``seqattn.run``, INFO, rank zero); silent for networks without a seqattn encoder."""

    def __init__(self) -> None:
        self._logged = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._logged:
            return
        self._logged = True
        line = attention_summary(pl_module)
        if line is not None and trainer.is_global_zero:
            log.info(line)
