"""The run plan: what a run decides from its data, kept apart from the config the user composed.

Two decisions depend on the data, not only on the config:

- **how long to train** (``budget.steps``): the epochs that make about that many optimizer steps over
  the training split, clamped to ``[budget.min_epochs, budget.max_epochs]``, and the early-stopping
  patience, ``budget.patience`` of those epochs but at least ``budget.min_patience``; a
  ``trainer.max_epochs`` or early-stopping ``patience`` given on the command line wins for that value.
  A training split too small for the budget (it would take more than ``budget.max_epochs`` epochs: 40
  images or 36 molecules, two batches an epoch) trains ``budget.max_epochs`` epochs with a patience of
  at most :data:`CAPPED_PATIENCE` of them, and the log line says so and why;
- **the batch size of a small set** (``budget.batch_scale = k > 1``): where the step budget sets the epochs (the
  training split at ``data.batch_size`` takes more than ``budget.min_epochs`` epochs, and no more than
  ``budget.max_epochs``), the run trains at ``k`` × the batch, ``k`` × the learning rate and ``budget.steps / k``
  steps: the same epochs in fewer, larger steps (:func:`plan_batch_scale`). A ``data.batch_size``,
  ``objective.optimizer.lr`` or ``trainer.max_epochs`` given on the command line keeps everything as given;
- **how the best checkpoint is chosen** when the data has no validation examples (or
  ``objective.monitor=null``): no monitor, no early stopping, the last epoch kept as ``best.ckpt``,
  and, without validation examples, no validation loop (``limit_val_batches=0``, no sanity steps).

:func:`make_plan` takes those decisions once, from typed inputs (:class:`Budget`, :class:`Asked`: built
by the entry point ``seqattn.run`` from the config) and the data's sizes; it never reads or edits a
config. The :class:`RunPlan` is logged, written as ``run_plan.json`` beside ``config.yaml`` in the
run directory (:func:`write_plan`), its messages go into ``metrics.json`` (keys ``budget`` and
``selection``), and ``seqattn.run`` applies it as arguments: the Trainer's ``max_epochs`` (and
``limit_val_batches`` / ``num_sanity_val_steps``), the early stopper's ``patience`` (or no early
stopper), the objective's and the callbacks' ``monitor``. ``config.yaml`` stays the composed config.

``resume=RUN_DIR`` reads the plan back (:func:`read_plan`) instead of deciding again, so a resumed
run trains under the same plan; a value given on the resume's command line (``trainer.max_epochs=N``
to train further) replaces the planned one (:meth:`RunPlan.given`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

PLAN_FILE = "run_plan.json"
_VERSION = 1
# patience at most this fraction of the epochs when the budget wants more than budget.max_epochs: the steps
# cannot be met on so small a set anyway, and a run whose validation score stopped moving then ends
CAPPED_PATIENCE = 0.25


@dataclass(frozen=True)
class Budget:
    """The ``budget.*`` options (defaults in conf/config.yaml); ``steps=None``: no budget. ``seconds`` (a time budget)
    is not planned from the data: :class:`seqattn.training.time_budget.TimeBudget` applies it while training."""

    steps: int | None
    min_epochs: int
    max_epochs: int
    patience: float
    min_patience: int
    seconds: float | None = None
    batch_scale: int = 1


@dataclass(frozen=True)
class Asked:
    """What the composed config asks for, and which of it was given on the command line.

    ``early_stopping``: the config has an early-stopping callback, with ``patience`` (None: its
    class's default); ``monitor`` is ``objective.monitor``.
    """

    max_epochs: int | None
    early_stopping: bool
    patience: int | None
    monitor: str | None
    accumulate_grad_batches: int
    epochs_given: bool = False
    patience_given: bool = False
    monitor_given: bool = False
    batch_given: bool = False


@dataclass(frozen=True)
class StepBudget:
    """How ``budget.steps`` became epochs: ``steps_per_epoch`` optimizer steps per epoch on this data;
    ``wanted_epochs``: the epochs the steps asked for when that was more than ``max_epochs``
    (``budget.max_epochs``, the cap), else None; ``patience_capped``: the patience was lowered to
    :data:`CAPPED_PATIENCE` of the epochs then; ``raised_from``: the epochs the steps alone make when
    ``budget.min_epochs`` raised them (a large training split), else None."""

    steps: int
    steps_per_epoch: int
    epochs_given: bool
    patience_given: bool
    wanted_epochs: int | None = None
    max_epochs: int | None = None
    patience_capped: bool = False
    raised_from: int | None = None


@dataclass(frozen=True)
class NoSelection:
    """Why the best checkpoint is the last epoch: ``"no_validation"`` (the data has no validation
    examples; ``monitor`` is the configured one, ``split_sizes`` the data's) or ``"monitor_null"``."""

    reason: str
    monitor: str | None
    split_sizes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RunPlan:
    """The decisions a run takes from its data (see the module docstring).

    Attributes:
        max_epochs: the Trainer's ``max_epochs``.
        patience: the early stopper's patience; None = as configured.
        monitor: the metric the best checkpoint (and early stopping) is chosen by; None = the last epoch.
        early_stopping: False = every early-stopping callback is left out.
        validate: False = no validation loop (``limit_val_batches=0``, ``num_sanity_val_steps=0``).
        budget: how ``budget.steps`` set the epochs (None without a budget).
        selection: why there is no monitor (None when there is one).
        batch_scale: the factor applied to ``data.batch_size`` and the learning rate (1: as configured; see
            :func:`plan_batch_scale`); the budget's steps are already divided by it.
        threads: the intra-op thread count and why (:class:`seqattn.training.threads.ThreadChoice` as a
            dict: ``threads``, ``reason``, ``setting``, ``other_load``); None until ``seqattn.run`` decides it.
            A resumed run under ``cpu_threads=auto`` keeps the recorded count (float sums continue alike).
    """

    max_epochs: int | None
    patience: int | None
    monitor: str | None
    early_stopping: bool
    validate: bool
    budget: StepBudget | None = None
    selection: NoSelection | None = None
    threads: dict[str, Any] | None = None
    batch_scale: int = 1

    @property
    def budget_message(self) -> str | None:
        """The log line (and ``metrics.json["budget"]``) of the step budget, None without one."""
        if self.budget is None:
            return None
        b = self.budget
        capped = (f" (the budget wants {b.wanted_epochs} epochs of a training split this small: capped at "
                  f"budget.max_epochs={b.max_epochs}; trainer.max_epochs=N to choose)"
                  if b.wanted_epochs is not None and not b.epochs_given else
                  f" ({b.steps} steps would be {b.raised_from} epochs: raised to budget.min_epochs={self.max_epochs})"
                  if b.raised_from is not None and not b.epochs_given else "")
        bounded = f" (capped at {CAPPED_PATIENCE:g} of the epochs)" if b.patience_capped and not b.patience_given else ""
        scaled = (f" (budget.batch_scale={self.batch_scale}: batches {self.batch_scale}x data.batch_size and "
                  f"{self.batch_scale}x the learning rate for the configured steps / {self.batch_scale})"
                  if self.batch_scale > 1 else "")
        return (f"budget.steps={b.steps}{scaled}: {b.steps_per_epoch} steps per epoch -> trainer.max_epochs={self.max_epochs}"
                + (" (given)" if b.epochs_given else capped)
                + (f", early-stopping patience {self.patience}" + (" (given)" if b.patience_given else bounded)
                   if self.patience is not None else ""))

    @property
    def capped(self) -> bool:
        """Whether the training split was too small for ``budget.steps`` (the plan trains ``budget.max_epochs``)."""
        return self.budget is not None and self.budget.wanted_epochs is not None and not self.budget.epochs_given

    @property
    def selection_message(self) -> str | None:
        """The warning (and ``metrics.json["selection"]``) when the last epoch is kept, None otherwise."""
        s = self.selection
        if s is None:
            return None
        if s.reason == "no_validation":
            return (f"no validation examples (splits: {s.split_sizes}): training for all {self.max_epochs} epochs "
                    f"without early stopping and keeping the last epoch as best.ckpt instead of choosing by {s.monitor}")
        return f"objective.monitor=null: training for all {self.max_epochs} epochs, keeping the last epoch"

    def describe(self) -> str:
        """One line: ``max_epochs=8, early-stopping patience 5, best by val/acc, validation on``."""
        return (f"max_epochs={self.max_epochs}"
                + (f", batch and learning rate x{self.batch_scale} (budget.batch_scale)" if self.batch_scale > 1 else "")
                + (f", early-stopping patience {self.patience}" if self.patience is not None and self.early_stopping
                   else "" if self.early_stopping else ", no early stopping")
                + (f", best by {self.monitor}" if self.monitor else ", best = the last epoch")
                + (", validation on" if self.validate else ", no validation loop"))

    def trainer_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``lightning.Trainer`` (on top of the config's ``trainer``)."""
        arguments: dict[str, Any] = {"max_epochs": self.max_epochs}
        if not self.validate:
            arguments.update(limit_val_batches=0, num_sanity_val_steps=0)
        return arguments

    def given(self, max_epochs: int | None = None, patience: int | None = None) -> RunPlan:
        """This plan with a value given on a later command line (``resume=... trainer.max_epochs=N``)
        in place of the planned one; None keeps the planned value."""
        plan = self
        if max_epochs is not None:
            budget = replace(plan.budget, epochs_given=True) if plan.budget is not None else None
            plan = replace(plan, max_epochs=int(max_epochs), budget=budget)
        if patience is not None:
            budget = replace(plan.budget, patience_given=True) if plan.budget is not None else None
            plan = replace(plan, patience=int(patience), budget=budget)
        return plan

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: the fields, and the messages for a reader (ignored by :meth:`from_dict`)."""
        return {"version": _VERSION, **asdict(self),
                "messages": {"budget": self.budget_message, "selection": self.selection_message}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPlan:
        """The inverse of :meth:`to_dict`; ``ValueError`` for data it did not write."""
        if data.get("version") != _VERSION:
            raise ValueError(f"run plan version {data.get('version')!r}, expected {_VERSION}")
        fields = {k: v for k, v in data.items() if k not in ("version", "messages")}
        budget, selection = fields.pop("budget", None), fields.pop("selection", None)
        try:
            return cls(**fields, budget=StepBudget(**budget) if budget else None,
                       selection=NoSelection(**selection) if selection else None)
        except TypeError as err:
            raise ValueError(f"not a run plan: {err}") from None


def plan_epochs(budget: Budget, asked: Asked, train_batches: int) -> tuple[int | None, int | None, StepBudget | None]:
    """``(max_epochs, patience, step budget)`` for ``train_batches`` batches per epoch.

    Without ``budget.steps``: the configured epochs, patience as configured (None), no step budget.
    """
    if budget.steps is None:
        return asked.max_epochs, None, None
    if int(budget.steps) <= 0:
        raise ValueError(f"budget.steps={budget.steps} must be a positive number of optimizer steps (or null)")
    for name, value, least in (("min_epochs", budget.min_epochs, 1), ("max_epochs", budget.max_epochs, 1),
                               ("min_patience", budget.min_patience, 0)):
        if int(value) < least:
            raise ValueError(f"budget.{name}={value} must be an int >= {least}")
    if not budget.patience > 0:
        raise ValueError(f"budget.patience={budget.patience} must be > 0 (early-stopping patience as a fraction of the "
                         "epochs)")
    per_epoch, by_steps = _epochs_of_steps(budget, asked, train_batches)
    wanted = max(budget.min_epochs, by_steps)
    epochs = min(wanted, budget.max_epochs)
    patience = max(budget.min_patience, round(budget.patience * epochs))
    capped = wanted > epochs  # a set too small for the budget: patience at most CAPPED_PATIENCE of the epochs
    bound = max(budget.min_patience, round(CAPPED_PATIENCE * epochs)) if capped else patience
    patience_capped = bound < patience
    patience = min(patience, bound)
    if asked.epochs_given:
        epochs = int(asked.max_epochs)
    if not asked.early_stopping:
        patience = None  # no early stopper to give it to
    elif asked.patience_given:
        patience = int(asked.patience)
    return epochs, patience, StepBudget(int(budget.steps), per_epoch, asked.epochs_given,
                                        asked.patience_given and asked.early_stopping,
                                        wanted_epochs=wanted if capped else None,
                                        max_epochs=budget.max_epochs if capped else None,
                                        patience_capped=patience_capped and asked.early_stopping,
                                        raised_from=by_steps if by_steps < budget.min_epochs else None)


def plan_batch_scale(budget: Budget, asked: Asked, train_batches: int | None) -> int:
    """The factor for the batch size and the learning rate: ``budget.batch_scale`` where the step budget sets the
    epochs at the configured batch (``train_batches`` per epoch: more than ``budget.min_epochs`` of them, no more
    than ``budget.max_epochs``), else 1. 1 as well without ``budget.steps``, or when the batch size or the learning
    rate was given on the command line (``asked.batch_given``)."""
    scale = check_batch_scale(budget.batch_scale)
    if scale == 1 or not budget.steps or asked.batch_given or asked.epochs_given or train_batches is None:
        return 1
    by_steps = _epochs_of_steps(budget, asked, train_batches)[1]
    return scale if budget.min_epochs < by_steps <= budget.max_epochs else 1


def check_batch_scale(scale: Any) -> int:
    """``budget.batch_scale`` as an int >= 1, else a ``ValueError`` naming the value."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"budget.batch_scale={scale!r} must be an int >= 1 (1 = the configured batch size)")
    return scale


def _epochs_of_steps(budget: Budget, asked: Asked, train_batches: int) -> tuple[int, int]:
    """``(optimizer steps per epoch, the epochs that make budget.steps)`` for ``train_batches`` batches an epoch."""
    per_epoch = max(1, math.ceil(train_batches / asked.accumulate_grad_batches))
    return per_epoch, math.ceil(int(budget.steps) / per_epoch)


def plan_selection(asked: Asked, split_sizes: dict[str, int]) -> NoSelection | None:
    """How the best checkpoint is chosen, given the data's split sizes (``{"train": n, "val": n, ...}``).

    - ``monitor`` on ``val/`` with validation examples, or on ``train/``: as configured (None returned);
    - no validation examples and the configured monitor: the last epoch (``"no_validation"``);
    - a ``val/`` monitor given on the command line without validation examples, or a monitor on the
      test split: ``ValueError`` saying how to fix it;
    - ``monitor=None``: the last epoch (``"monitor_null"``).
    """
    monitor = asked.monitor
    if not monitor:
        return NoSelection("monitor_null", None, _sizes(split_sizes))
    split = str(monitor).split("/", 1)[0]
    if split not in ("train", "val"):
        raise ValueError(f"objective.monitor={monitor!r}: the model must be chosen on the training or validation "
                         "split (val/..., train/...), never on the test split")
    if split != "val" or split_sizes.get("val", 0) > 0:
        return None
    if asked.monitor_given:
        raise ValueError(f"objective.monitor={monitor!r} but the data has no validation examples (splits: "
                         f"{split_sizes}); give it a validation split (data.val_fraction, a split column, "
                         "data.val_path), monitor a training metric (objective.monitor=train/loss_epoch), or "
                         "objective.monitor=null to train for trainer.max_epochs and keep the last checkpoint")
    return NoSelection("no_validation", str(monitor), _sizes(split_sizes))


def _sizes(split_sizes: dict[str, int]) -> dict[str, int]:
    return {str(k): int(v) for k, v in split_sizes.items()}


def make_plan(budget: Budget, asked: Asked, split_sizes: dict[str, int], train_batches: int | None = None,
              batch_scale: int = 1) -> RunPlan:
    """The run plan. ``train_batches`` (batches per training epoch) is needed only with ``budget.steps``;
    with ``batch_scale > 1`` (:func:`plan_batch_scale`) they are the batches at the scaled size, and the budget's
    steps are divided by it."""
    if budget.steps and train_batches is None:
        raise ValueError("budget.steps is set: make_plan needs the number of training batches per epoch")
    if batch_scale > 1:
        budget = replace(budget, steps=math.ceil(int(budget.steps) / batch_scale))
    max_epochs, patience, steps = plan_epochs(budget, asked, train_batches or 0)
    selection = plan_selection(asked, split_sizes)
    if selection is None:
        return RunPlan(max_epochs, patience, asked.monitor, early_stopping=True, validate=True, budget=steps,
                       batch_scale=batch_scale)
    validate = bool(split_sizes.get("val", 0))
    return RunPlan(max_epochs, patience, None, early_stopping=False, validate=validate, budget=steps,
                   selection=selection, batch_scale=batch_scale)


def write_plan(run_dir: str | Path, plan: RunPlan) -> Path:
    """``run_dir/run_plan.json``."""
    path = Path(run_dir) / PLAN_FILE
    path.write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
    return path


def read_plan(run_dir: str | Path) -> RunPlan | None:
    """The plan saved in ``run_dir`` (None when the run was written before run plans existed)."""
    path = Path(run_dir).expanduser() / PLAN_FILE
    if not path.is_file():
        return None
    try:
        return RunPlan.from_dict(json.loads(path.read_text()))
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{path}: {err}; it is written by seqattn.run (delete it to plan the run again)") from None
