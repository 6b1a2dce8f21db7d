"""A fast path for Lightning's ``self.log`` when the logged result already lives on the value's device.

Every ``LightningModule.log`` call ends in ``_ResultCollection.log``, which calls
``_ResultMetric.to(value.device)`` on the stored result. That ``to`` walks the result's whole
``__dict__`` with ``apply_to_collection`` (nn.Module internals, torchmetrics state lists, and a deep
copy of its metadata dataclass) even when nothing has to move, which is every call after the first
on one device. Under cProfile, ``python -m seqattn.bench overhead --one social`` (one full-graph step per
epoch, three log calls a step) spent about 15 % of the recipe loop's time in these calls; a log call
measured alone took ~0.4 ms of CPU with the walk and ~0.03 ms without (docs/benchmarks.md). The cost is Lightning's known issue 20388 (an upstream fix, pull request 21769,
was open and unreleased in lightning 2.6.6).

:func:`install` wraps ``_ResultMetric.to``: a call ``to(device)`` whose stored tensors are all on
``device`` already returns the result unchanged, as the full walk would have left it; any other
call (a dtype, keyword arguments, a move, a result not yet holding a value) takes Lightning's own
path. Idempotent; ``seqattn.run`` installs it when it builds a Trainer. :func:`uninstall` restores
Lightning's method (the tests compare the two).
"""

from __future__ import annotations

from typing import Any

import torch

try:  # Lightning's private module: if it moves, the fast path is simply not installed
    from lightning.pytorch.trainer.connectors.logger_connector import result as _result
except ImportError:  # pragma: no cover - depends on the installed Lightning
    _result = None

_ORIGINAL = getattr(getattr(_result, "_ResultMetric", None), "to", None)


def _device_of(value: Any) -> torch.device | None:
    """The device of a tensor or a torchmetrics ``Metric`` (``None`` for anything else)."""
    if isinstance(value, torch.Tensor):
        return value.device
    device = getattr(value, "device", None)
    return device if isinstance(device, torch.device) else None


def _already_on(metric: Any, target: torch.device) -> bool:
    """Whether every tensor the result stores (its value and, for a mean, the batch-size count) is on
    ``target``: then Lightning's walk would move nothing."""
    state = metric.__dict__
    if "value" not in state:  # a Metric-valued result before its first update: let Lightning set it up
        return False
    for name in ("value", "cumulated_batch_size"):
        if name in state:
            device = _device_of(state[name])
            if device is None or device != target:
                return False
    return True


def _to(self: Any, *args: Any, **kwargs: Any) -> Any:
    if not kwargs and len(args) == 1 and isinstance(args[0], (str, torch.device)):
        target = torch.device(args[0])  # "cuda" (no index) never equals a tensor's "cuda:0": the walk runs
        if _already_on(self, target):
            return self
    return _ORIGINAL(self, *args, **kwargs)


def install() -> bool:
    """Wrap ``_ResultMetric.to`` with the fast path (once); ``False`` when this Lightning has no such class."""
    if _ORIGINAL is None:
        return False
    _result._ResultMetric.to = _to
    return True


def uninstall() -> None:
    """Lightning's own ``_ResultMetric.to`` again."""
    if _ORIGINAL is not None:
        _result._ResultMetric.to = _ORIGINAL


def installed() -> bool:
    return _ORIGINAL is not None and _result._ResultMetric.to is _to
