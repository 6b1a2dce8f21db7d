"""Training length from the data: epochs and early-stopping patience follow the training-set size.

A fixed ``trainer.max_epochs`` is wrong at both ends: 600 molecules in batches of 32 are 17 steps
an epoch, so 60 epochs are 1,000 optimizer steps -- far too few -- while 100,000 molecules get
190,000 steps. A recipe that sets ``train_length`` (e.g. ``conf/task/molecule.yaml``) asks for a
number of **optimizer steps** instead; :func:`plan_length` turns it into epochs once the data is
split::

    steps per epoch = ceil(training items / (batch size * devices))     (accumulate_grad_batches too)
    max_epochs      = clamp(ceil(steps / steps per epoch), min_epochs, max_epochs)
    patience        = max(min_patience, ceil(patience * max_epochs))    (a fraction of the epochs)

The warm-up + cosine schedule (``objective.scheduler``) already spans the real number of steps of
these epochs (Lightning's ``estimated_stepping_batches``), so a small set gets a long schedule and
enough patience to reach its end. A ``trainer.max_epochs`` or ``callbacks.early_stopping.patience``
given on the command line wins over the plan for that value; ``train_length=null`` turns it off.
"""

from __future__ import annotations

import math
from typing import Callable

from omegaconf import DictConfig, open_dict

KEYS = ("steps", "min_epochs", "max_epochs", "patience", "min_patience")


def _early_stopping_key(cfg: DictConfig) -> str | None:
    for key, node in (cfg.get("callbacks") or {}).items():
        if node is not None and "EarlyStopping" in str(node.get("_target_", "")):
            return key
    return None


def plan_length(cfg: DictConfig, train_items: int, overridden: Callable[[str], bool] = lambda key: False) -> str | None:
    """Set ``trainer.max_epochs`` and the early-stopping patience of ``cfg`` from ``cfg.train_length`` and
    the number of training items; returns what was chosen (for the log and metrics.json), or None when the
    config has no ``train_length``. ``overridden(key)`` tells whether the user set ``key`` on the command line."""
    plan = cfg.get("train_length")
    if not plan:
        return None
    unknown = sorted(set(plan) - set(KEYS))
    if unknown:
        raise ValueError(f"train_length has unknown keys {unknown}; expected {list(KEYS)}")
    steps, lo, hi = int(plan.get("steps")), int(plan.get("min_epochs", 1)), int(plan.get("max_epochs", 10**6))
    frac, min_patience = float(plan.get("patience", 0.2)), int(plan.get("min_patience", 5))
    if steps <= 0 or lo < 1 or hi < lo or not 0 < frac <= 1 or min_patience < 1:
        raise ValueError(f"train_length needs steps > 0, 1 <= min_epochs <= max_epochs, 0 < patience <= 1 and "
                         f"min_patience >= 1; got {dict(plan)}")
    if train_items <= 0:
        return None
    devices = cfg.trainer.get("devices", 1)
    world = devices if isinstance(devices, int) and devices > 0 else 1
    accumulate = int(cfg.trainer.get("accumulate_grad_batches", 1) or 1)
    batch = int(cfg.data.batch_size)
    per_epoch = max(1, math.ceil(train_items / (batch * world) / accumulate))
    epochs = min(hi, max(lo, math.ceil(steps / per_epoch)))
    parts = []
    with open_dict(cfg):
        if overridden("trainer.max_epochs"):
            epochs = int(cfg.trainer.max_epochs)
            parts.append(f"trainer.max_epochs={epochs} (given)")
        else:
            cfg.trainer.max_epochs = epochs
            parts.append(f"{epochs} epochs (aim {steps} steps, clamped to [{lo}, {hi}] epochs)")
        patience = max(min_patience, math.ceil(frac * epochs))
        key = _early_stopping_key(cfg)
        if key is not None:
            given = overridden(f"callbacks.{key}.patience")
            if not given:
                cfg.callbacks[key].patience = patience
            parts.append(f"early-stopping patience {cfg.callbacks[key].patience}" + (" (given)" if given else ""))
        cfg.train_length = None  # applied: config.yaml keeps the concrete numbers (a resumed run reuses them)
    return (f"training length: {train_items} training items, batch {batch} x {world} device(s) -> {per_epoch} "
            f"steps per epoch; " + ", ".join(parts) + f" = {epochs * per_epoch} steps at most")
