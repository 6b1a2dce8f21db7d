"""The messages a seqattn run prints that its user can do nothing about, silenced one by one.

Each entry names one known message (its text, and for a warning its category and the module that
issues it) and why it is noise; nothing else is filtered, so a new warning still shows.
:func:`quiet_known_noise` installs them (idempotent); ``seqattn.run.train`` calls it first.

Kept on purpose: "Seed set to …", "`Trainer.fit` stopped: …", "Loaded model weights from the
checkpoint at …" / "Restored all states …" (which checkpoint was tested or resumed), Lightning's
"GPU available but not used" warning, and its device line when a GPU is there.
"""

from __future__ import annotations

import logging
import re
import warnings

# (message regex, category, issuing module regex, why it is noise)
WARNINGS: list[tuple[str, type[Warning], str, str]] = [
    (r"`torch\.jit\.script` is deprecated", FutureWarning, r"torch\.jit\._script",
     "PyTorch Geometric scripts a class when it is imported (torch_geometric/nn/pool/select/base.py); "
     "seqattn never calls torch.jit.script"),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, r"lightning\.pytorch\.utilities\._pytree",
     "inside Lightning's own pytree helper"),
    (r"The number of training batches \(\d+\) is smaller than the logging interval", Warning,
     r"lightning\.pytorch\.loops\.fit_loop",
     "a small training split: the epoch's metrics (train/loss_epoch, val/*) are logged every epoch anyway"),
]
# only when resuming (resume=): the run writes on into its own folder by design
RESUME_WARNINGS: list[tuple[str, type[Warning], str, str]] = [
    (r"Checkpoint directory .* exists and is not empty", UserWarning, r"lightning\.pytorch\.callbacks\.model_checkpoint",
     "resume= continues the run in its folder: its checkpoints are there on purpose (a fresh run into a used "
     "folder still warns)"),
]
# Lightning's rank-zero INFO lines: (logger, message regex, why it is noise)
LOG_LINES: list[tuple[str, str, str]] = [
    ("lightning.pytorch.utilities.rank_zero", r"GPU available: False, used: False$", "no GPU: nothing to choose"),
    ("lightning.pytorch.utilities.rank_zero", r"TPU available: False, using: 0 TPU cores$", "no TPU"),
    ("lightning.pytorch.utilities.rank_zero", r"💡 Tip: ", "advertising (litlogger, litmodels)"),
    ("lightning.pytorch.utilities.rank_zero", r"Loading `train_dataloader` to estimate number of stepping batches",
     "the learning-rate schedule's length: internal"),
    ("lightning.pytorch.utilities.rank_zero", r"Restoring states from the checkpoint path at ",
     "said again, with the outcome, by the line that follows (Loaded model weights / Restored all states)"),
]


class _DropKnown(logging.Filter):
    """Drops the records whose message matches one of ``patterns``."""

    def __init__(self, patterns: list[str]) -> None:
        super().__init__()
        self.pattern = re.compile("|".join(f"(?:{p})" for p in patterns))

    def filter(self, record: logging.LogRecord) -> bool:
        return self.pattern.match(record.getMessage()) is None


def quiet_known_noise(resuming: bool = False) -> None:
    """Install the :data:`WARNINGS` filters (and :data:`RESUME_WARNINGS` when ``resuming``) and the
    :data:`LOG_LINES` log filters (once per logger)."""
    for message, category, module, _ in WARNINGS + (RESUME_WARNINGS if resuming else []):
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    by_logger: dict[str, list[str]] = {}
    for name, pattern, _ in LOG_LINES:
        by_logger.setdefault(name, []).append(pattern)
    for name, patterns in by_logger.items():
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, _DropKnown)]:
            logger.removeFilter(old)
        logger.addFilter(_DropKnown(patterns))
