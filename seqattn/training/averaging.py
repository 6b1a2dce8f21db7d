"""An exponential moving average of the weights, validated, checkpointed and tested in their place.

``callbacks.weight_average.decay=d`` (``0`` = off, the default): after every optimizer step the average
``a`` of each parameter ``w`` moves ``a <- a + (1 - d_t) (w - a)``; with ``warmup`` (default) the decay of
update ``t`` (counted from 1) is ``d_t = min(d, (1 + t) / (10 + t))`` (TensorFlow's
``ExponentialMovingAverage(num_updates=t)``), so a run of a few dozen steps (one full-graph step per epoch)
averages its recent steps instead of its initial weights. Modality-free: it reads only the module's
parameters.

Where the average is used:

- **validation** (every validation of a fit) scores the average; the trained weights come back before the
  next training step, so training itself is unchanged by the callback;
- **the best checkpoint** (``BestCheckpoint``, weights only) is written while the average is in place: it
  holds the averaged weights, which ``test``, ``predict`` and ``init_from`` read;
- **full checkpoints** (``last.ckpt``, for ``resume``) hold the trained weights in ``state_dict`` and the
  average in the callback's state, so a resumed run continues both;
- **the end of training**: the module is left holding the average (what the run produced).

Buffers (batch-norm statistics) are not averaged: they stay the trained model's.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

log = logging.getLogger("seqattn.train")


class WeightAverage(L.Callback):
    """Exponential moving average of every parameter (module docstring).

    Args:
        decay: ``d`` in ``[0, 1)``; ``0`` turns the callback off (no copies, no work). ``0.999`` averages over
            roughly the last 1,000 steps.
        warmup: use ``min(d, (1 + t) / (10 + t))`` at update ``t`` (short runs average their recent steps).
    """

    def __init__(self, decay: float = 0.0, warmup: bool = True) -> None:
        if isinstance(decay, bool) or not 0.0 <= float(decay) < 1.0:
            raise ValueError(f"weight_average decay must lie in [0, 1) (0 = off), got {decay!r}")
        self.decay, self.warmup = float(decay), bool(warmup)
        self._names: list[str] = []
        self._average: list[torch.Tensor] | None = None  # one tensor per parameter, in named_parameters order
        self._trained: list[torch.Tensor] | None = None  # the trained weights while the average is in place
        self._updates = 0
        self._last_step = -1
        self._loaded: dict[str, Any] | None = None

    @property
    def enabled(self) -> bool:
        return self.decay > 0.0

    def decay_at(self, update: int) -> float:
        """The decay of update ``update`` (counted from 1)."""
        return min(self.decay, (1.0 + update) / (10.0 + update)) if self.warmup else self.decay

    # -- fit ------------------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        if not self.enabled:
            return
        named = list(pl_module.named_parameters())
        self._names = [name for name, _ in named]
        params = [p for _, p in named]
        loaded, self._loaded = self._loaded, None
        if loaded is not None and loaded.get("names") == self._names:
            self._average = [a.to(device=p.device, dtype=p.dtype) for a, p in zip(loaded["average"], params)]
            self._updates = int(loaded["updates"])
        else:
            if loaded is not None:
                log.warning("weight_average: the checkpoint's average is of other parameters; it starts again from "
                            "the loaded weights")
            self._average = [p.detach().clone() for p in params]
            self._updates = 0
        log.info("weight_average: validating and checkpointing an exponential moving average of the weights "
                 "(decay %g%s)", self.decay, ", warm-up min(d, (1+t)/(10+t))" if self.warmup else "")

    @torch.no_grad()
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._average is None or trainer.global_step == self._last_step:
            return  # off, or no optimizer step in this batch (gradient accumulation)
        self._last_step = trainer.global_step
        self._updates += 1
        params = [p.detach() for p in pl_module.parameters()]
        torch._foreach_lerp_(self._average, params, 1.0 - self.decay_at(self._updates))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._put_back_trained(pl_module)  # a validation (at an epoch's end or within it) left the average in

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if self._average is None or self._trained is not None or trainer.state.fn != TrainerFn.FITTING:
            return
        with torch.no_grad():
            params = list(pl_module.parameters())
            self._trained = [p.detach().clone() for p in params]
            torch._foreach_copy_([p.data for p in params], self._average)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        # the average stays in place from validation through the epoch's end, where the checkpoint callbacks
        # write best.ckpt (Lightning saves at the train epoch's end when validation runs once per epoch)
        self._put_back_trained(pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if self._average is None:
            return
        self._put_back_trained(pl_module)
        with torch.no_grad():
            torch._foreach_copy_([p.data for p in pl_module.parameters()], self._average)

    def _put_back_trained(self, pl_module) -> None:
        if self._trained is None:
            return
        with torch.no_grad():
            torch._foreach_copy_([p.data for p in pl_module.parameters()], self._trained)
        self._trained = None

    # -- checkpoints ----------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        """Full checkpoints only (Lightning skips this for weights-only ones): ``state_dict`` gets the trained
        weights when the average is in place (a resumed run trains on from them)."""
        if self._trained is None:
            return
        state = checkpoint.get("state_dict", {})
        for name, trained in zip(self._names, self._trained):
            if name in state:
                state[name] = trained.detach().clone()

    def state_dict(self) -> dict[str, Any]:
        if self._average is None:
            return {}
        return {"names": list(self._names), "average": [a.detach().clone() for a in self._average],
                "updates": self._updates}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = dict(state_dict) if state_dict else None
