"""``budget.seconds``: a run shortened to fit a time budget, its learning-rate schedule shaped to end there.

``python -m seqattn.run task=molecule budget.seconds=30`` trains at most the epochs the run plan gives
(``budget.steps`` or ``trainer.max_epochs``) and at most about 30 seconds of the training loop (training steps,
validation and checkpoints; not the start-up, the data loading before it or the test). The budget only shortens a run:
for a longer one, raise ``trainer.max_epochs`` (or ``budget.steps``) as well.

How: :class:`TimeBudget` measures the loop as it runs. After the first ``probe_steps`` training steps of a long
first epoch, and again at every epoch end (its validation included), it predicts how many whole epochs fit in the
budget from the mean time per epoch so far (of the epochs after the first, once there are any: the first epoch's
one-time costs do not recur), sets the Trainer's ``max_epochs`` to that (never more than the plan's,
never fewer than the epochs already run) and the schedule's length to those epochs' optimizer steps
(:class:`seqattn.objectives.schedules.WarmupCosineFactor`), so the learning rate decays to its floor at the last
epoch instead of being cut mid-way. A run on a slower (or busier) machine trains fewer epochs: the run length,
unlike ``budget.steps``, depends on the machine, and the log line and ``metrics.json["time_budget"]`` say what was
run. The elapsed time is kept in checkpoints, so ``resume=`` continues the budget instead of restarting it.

A schedule that cannot change its length (another ``objective.scheduler``, or one stepped per epoch) is refused
when training starts, with the reason, rather than cut off part-way.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import lightning as L

from seqattn.objectives.schedules import can_set_length, set_schedule_length

log = logging.getLogger("seqattn.train")


def check_seconds(value: Any) -> float | None:
    """``budget.seconds`` as a float (None: no time budget); ``ValueError`` naming the value otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"budget.seconds={value!r} must be a positive number of seconds (or null: no time budget)")
    return float(value)


class TimeBudget(L.Callback):
    """Ends training after about ``seconds`` of the training loop, with the schedule shortened to match.

    Args:
        seconds: the budget, > 0 (``budget.seconds``).
        probe_steps: a first epoch of at least ``3 * probe_steps`` batches is measured after this many steps as
            well, so a long epoch does not run under the plan's full-length schedule.
    """

    def __init__(self, seconds: float, probe_steps: int = 20) -> None:
        self.seconds = check_seconds(seconds)
        if self.seconds is None:
            raise ValueError("TimeBudget needs a number of seconds")
        self.probe_steps = int(probe_steps)
        self._before = 0.0        # seconds of training loop in earlier processes (a resumed run)
        self._start: float | None = None
        self._first_end: float | None = None  # when this process's first epoch ended
        self._first_epoch = 0
        self.plan_epochs: int | None = None
        self.epochs: int | None = None  # the epochs the budget allows, as last decided
        self.message: str | None = None

    # --- the budget's state in checkpoints (resume continues it) -------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"elapsed": self._elapsed()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._before = float(state_dict.get("elapsed", 0.0))

    def _elapsed(self) -> float:
        return self._before + (time.monotonic() - self._start if self._start is not None else 0.0)

    # --- the loop -------------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for config in trainer.lr_scheduler_configs:
            if config.interval != "step" or not can_set_length(config.scheduler):
                raise ValueError(
                    f"budget.seconds={self.seconds:g}: the learning-rate schedule {type(config.scheduler).__name__} "
                    f"(stepped per {config.interval}) cannot be shortened to fit the time budget; use "
                    "objective.scheduler=seqattn.objectives.warmup_cosine (the recipes' default) or "
                    "objective.scheduler=null, or budget.steps / trainer.max_epochs instead of budget.seconds")
        if not math.isfinite(trainer.num_training_batches):
            raise ValueError(f"budget.seconds={self.seconds:g} needs a training loader with a length (its epochs are "
                             "counted): use budget.steps / trainer.max_steps for an endless one")
        planned = trainer.fit_loop.max_epochs
        self.plan_epochs = int(planned) if planned is not None and planned >= 0 else None  # None: no epoch limit
        self._first_epoch = int(trainer.current_epoch)  # > 0 in a resumed run
        self._start, self._first_end = time.monotonic(), None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx + 1 != self.probe_steps:  # every step passes here: the one cheap test first
            return
        batches = trainer.num_training_batches
        # not under DDP: a mid-epoch decision would need a collective where other hooks (the progress bar's metrics on
        # rank 0 only) may be running theirs
        if trainer.world_size == 1 and trainer.current_epoch == self._first_epoch and batches >= 3 * self.probe_steps:
            per_epoch = (time.monotonic() - self._start) / self.probe_steps * batches  # no validation yet
            # the epoch under way counts from its start: what is left of the budget since then
            self._decide(trainer, per_epoch, done=int(trainer.current_epoch), remaining=self.seconds - self._before)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # runs after the epoch's validation (Lightning 2): the time per epoch includes it
        done, now = int(trainer.current_epoch) + 1, time.monotonic()
        here = done - self._first_epoch  # this process's epochs
        if self._first_end is None:  # this process's first epoch
            self._first_end = now
            per_epoch = now - self._start
        else:  # the epochs after this process's first: its one-time costs (caches, a GPU's first shapes) do not recur
            per_epoch = (now - self._first_end) / (here - 1)
        self._decide(trainer, per_epoch, done=done, remaining=self.seconds - self._elapsed())

    def _decide(self, trainer: L.Trainer, per_epoch: float, done: int, remaining: float) -> None:
        """``done`` epochs completed; ``remaining`` seconds of budget for the epochs after them."""
        fit = done + max(0, math.floor(remaining / max(per_epoch, 1e-9)))
        epochs = max(done, 1, fit if self.plan_epochs is None else min(self.plan_epochs, fit))
        if trainer.world_size > 1:  # every process trains the same epochs: rank 0's clock decides
            # the epoch's metrics are synchronised (a collective) the first time anything reads them, which on rank 0
            # an earlier callback may have done alone (EpochSummary's line): read them here on every rank first, so
            # the collectives pair up in the same order and the broadcast below meets its partner (else: a hang)
            _ = trainer.callback_metrics
            epochs = int(trainer.strategy.broadcast(epochs, src=0))
        if epochs != self.epochs:
            if self.epochs is None and (self.plan_epochs is None or epochs < self.plan_epochs):
                log.info("budget.seconds=%g: ~%.2f s per epoch -> %d epochs (%s; the learning-rate schedule shortened "
                         "to end there)", self.seconds, per_epoch, epochs, self._plan_text())
            self.epochs = epochs
            trainer.fit_loop.max_epochs = epochs
            accumulate = max(1, int(trainer.accumulate_grad_batches))
            steps = max(1, math.ceil(trainer.num_training_batches / accumulate)) * epochs
            if trainer.max_steps is not None and trainer.max_steps > 0:  # trainer.max_steps ends it sooner
                steps = min(steps, int(trainer.max_steps))
            for config in trainer.lr_scheduler_configs:
                set_schedule_length(config.scheduler, max(steps, trainer.global_step + 1))
        if epochs <= done:
            trainer.should_stop = True

    def _plan_text(self) -> str:
        return "no epoch limit" if self.plan_epochs is None else f"the plan's {self.plan_epochs} epochs"

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        run = int(trainer.current_epoch)  # epochs completed (a resumed run's earlier ones included)
        plan = self._plan_text()
        shortened = self.epochs is not None and (self.plan_epochs is None or self.epochs < self.plan_epochs)
        self.message = (f"budget.seconds={self.seconds:g}: {run} epochs ({plan}) in {self._elapsed():.1f} s of "
                        "training loop"
                        + (f"; the schedule shortened to {self.epochs} epochs" if shortened
                           else "; the budget did not shorten it")
                        + ("; stopped sooner by the early stopper" if self.epochs is not None and run < self.epochs
                           else ""))
        log.info("%s", self.message)
