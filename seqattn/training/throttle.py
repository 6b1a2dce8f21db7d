"""A write at most every N seconds: the checkpoints (:class:`seqattn.training.callbacks.BestCheckpoint`,
:class:`~seqattn.training.callbacks.LastCheckpoint`) and the curves (:class:`seqattn.training.resume.CurveLogger`)."""

from __future__ import annotations

import time


class Throttled:
    """At most one write per ``min_seconds`` (>= 0; 0: no limit): ``_due()`` since the last ``_wrote()``
    (the first write is always due)."""

    min_seconds: float = 0.0
    _written: float | None = None  # time.monotonic() of the last write

    def _set_min_seconds(self, value: float, zero_means: str, name: str = "min_seconds") -> None:
        """``value`` (the option ``name``, for the error) as the limit; ``zero_means`` says what 0 does."""
        if value is None or not value >= 0:
            raise ValueError(f"{name} must be a number of seconds >= 0 (0: {zero_means}), got {value}")
        self.min_seconds, self._written = float(value), None

    def _due(self) -> bool:
        return self._written is None or time.monotonic() - self._written >= self.min_seconds

    def _wrote(self) -> None:
        self._written = time.monotonic()
