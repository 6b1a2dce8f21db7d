"""Small Lightning callbacks used by the recipes."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any
from weakref import proxy

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, RichModelSummary, RichProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO

from seqattn.training.checkpoint import atomic_torch_save
from seqattn.training.resume import flush_curves
from seqattn.training.throttle import Throttled

log = logging.getLogger("seqattn.train")


def epoch_label(current_epoch: int, max_epochs: int | None) -> str:
    """``"4/40"`` for the fourth epoch of 40 (counted from 1; ``"4/?"`` without a limit): how the epoch
    line and the progress bar number epochs, so a one-epoch run says ``1/1``, not ``0/0``."""
    return f"{current_epoch + 1}/{max_epochs if max_epochs and max_epochs > 0 else '?'}"


class EpochSummary(L.Callback):
    """Logs one line per training epoch, after its validation: this epoch's training loss and
    validation metrics and the elapsed time, so progress stays visible in log files and CI output
    where no progress bar is drawn. Epochs are counted from 1, as :class:`EpochProgressBar` counts them
    (``epoch 4/40`` = the fourth of 40)."""

    def __init__(self) -> None:
        self._start = None

    def on_fit_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        # read on every rank, though only rank 0 writes the line: the first read of an epoch's metrics synchronises
        # them across processes (a collective), and a read on rank 0 alone would pair with whatever collective the
        # other ranks meet next (budget.seconds' broadcast hung on it)
        metrics = trainer.callback_metrics
        if not trainer.is_global_zero:
            return
        # at the end of the training epoch: its epoch-mean training loss and the validation that ran inside it
        shown = {k: float(v) for k, v in metrics.items()
                 if (k.startswith("val/") or k == "train/loss_epoch") and v.numel() == 1}
        text = " ".join(f"{k}={v:.4f}" for k, v in sorted(shown.items()))
        elapsed = time.perf_counter() - (self._start or time.perf_counter())
        log.info("epoch %s %s (%.0f s)", epoch_label(trainer.current_epoch, trainer.max_epochs), text, elapsed)


class EpochProgressBar(RichProgressBar):
    """Lightning's Rich progress bar, its epochs counted from 1 (``Epoch 1/1`` for a one-epoch run, where
    Lightning's says ``Epoch 0/0``), as :class:`EpochSummary` counts them.

    Drawn ``refresh_rate`` times a second (Lightning's default: 100), and a training or validation
    batch updates the bar and its metrics only when a redraw is due (and at an epoch's last batch):
    redrawing after every small step cost 15 % of the step time of task=text_cls on 2 busy cores
    (``python -m seqattn.bench overhead``)."""

    def __init__(self, refresh_rate: int = 4, **kwargs: Any) -> None:
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self._drawn = float("-inf")

    def _due(self, batch_idx: int, total: float | int) -> bool:
        """Whether batch ``batch_idx`` (of ``total``) updates the bar: a redraw is due, or it is the last."""
        now = time.monotonic()
        if batch_idx + 1 >= total or now - self._drawn >= 1.0 / max(self.refresh_rate, 1e-9):
            self._drawn = now
            return True
        return False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.train_progress_bar_id is None or self._due(batch_idx, self.total_train_batches):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        if self._due(batch_idx, self.total_val_batches_current_dataloader):
            super().on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    def _init_progress(self, trainer) -> None:
        """Lightning's progress, its synchronous redraws made deferred: Rich's ``add_task`` and ``reset`` (a
        validation's bar, every epoch start) redraw the whole display at once, a few ms each, which a run of
        short epochs (one full-graph step each: task=social) pays every epoch. Deferred, they are drawn by the
        refresh thread at its next tick (``refresh_rate`` times a second); stopping the display draws the
        final state."""
        super()._init_progress(trainer)
        progress = self.progress
        if progress is not None and "refresh" not in vars(progress):
            progress.refresh = progress.soft_refresh  # a no-op where no refresh thread runs (bar disabled)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        """Lightning adds a new (hidden) validation task at every validation and never removes the old one
        (its TODO), so each redraw walks one more task per epoch; the replaced task is removed here."""
        before = self.val_progress_bar_id
        super().on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)
        if self.progress is not None and before is not None and self.val_progress_bar_id != before:
            self.progress.remove_task(before)

    def _get_train_description(self, current_epoch: int) -> str:
        description = f"Epoch {epoch_label(current_epoch, self.trainer.max_epochs)}"
        return f"{description:{len(self.validation_description)}}"  # padded as Lightning pads it: no flicker


class QuietModelSummary(RichModelSummary):
    """Lightning's Rich model summary without its FLOPs column and "Total FLOPs: 0" line when nothing was
    counted (FLOPs are counted only for a module with an ``example_input_array``, which seqattn's have not).
    ``seqattn.run`` adds it in place of Lightning's default summary (``trainer.enable_model_summary``)."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs" or total_flops]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, style="dim" if name == " " else None,
                             justify="left" if name in (" ", "Name", "Type", "Mode") else "right", no_wrap=name == "Name")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        totals = [("Trainable params", get_human_readable_count(int(trainable_parameters))),
                  ("Non-trainable params", get_human_readable_count(int(total_parameters - trainable_parameters))),
                  ("Total params", get_human_readable_count(int(total_parameters))),
                  ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
                  ("Modules in train mode", str(total_training_modes["train"])),
                  ("Modules in eval mode", str(total_training_modes["eval"]))]
        if total_flops:
            totals.append(("Total FLOPs", get_human_readable_count(total_flops)))
        grid = Table.grid(expand=True)
        grid.add_column()
        for name, value in totals:
            grid.add_row(f"[bold]{name}[/]: {value}")
        console = get_console()
        console.print(table)
        console.print(grid)


class MonitorGuard(L.Callback):
    """Stops a run whose monitored metric is missing or not a number, with a message saying why.

    Early stopping and best-checkpoint selection on a NaN ``val/loss`` (a validation split with
    nothing labeled, say) would end the run after one epoch and report its test score as a normal
    result; this raises a ``ValueError`` naming the metric, the epoch and the metrics that exist.
    """

    def __init__(self, monitor: str | None) -> None:
        self.monitor = monitor

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not self.monitor or trainer.sanity_checking or not self.monitor.startswith("val/"):
            return
        self._check(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.monitor and self.monitor.startswith("train/"):
            self._check(trainer)

    def _check(self, trainer) -> None:
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            raise ValueError(f"objective.monitor={self.monitor!r} was not logged in epoch {trainer.current_epoch}; "
                             f"logged: {sorted(metrics)}")
        value = metrics[self.monitor]
        if not torch.isfinite(torch.as_tensor(value)).all():
            raise ValueError(
                f"objective.monitor={self.monitor!r} is {float(value)} after epoch {trainer.current_epoch}: the split "
                "it is computed on gives no usable value (no labeled examples there?). Give that split labeled "
                "examples, or monitor another metric (objective.monitor=train/loss_epoch)")


# ---------------------------------------------------------------------------------------------
# reliability: atomic checkpoint files, RNG state in checkpoints, last.ckpt every N steps


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` writing each checkpoint to a temporary file in the same
    folder and renaming it into place (``os.replace``): a crash while saving leaves the previous
    ``last.ckpt`` / ``best.ckpt`` whole. Configured as ``trainer.plugins`` in conf/trainer/default.yaml."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        atomic_torch_save(checkpoint, path)


class ExactResume(L.Callback):
    """Makes a resumed run continue exactly where the checkpoint was taken (see :mod:`seqattn.training.resume`):

    - keeps the global random states (torch, CUDA, numpy, python) in every checkpoint and restores
      them at the first training batch after resuming, so dropout draws what the uninterrupted run drew
      (plain tensors and lists only: the checkpoint still loads with ``weights_only=True``);
    - hands the checkpointed state of the train loader (Lightning saves a resumable loader's
      ``state_dict``) back to it at ``on_train_start``: Lightning itself does not when, as here, the
      learning-rate schedule asks for ``estimated_stepping_batches`` before the loops are restored.
    """

    _loader_states: list | None = None

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        fit_state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        self._loader_states = fit_state.get("combined_loader")

    def on_train_start(self, trainer, pl_module) -> None:
        states, self._loader_states = self._loader_states, None
        combined = trainer.fit_loop._combined_loader
        if not states or combined is None:
            return
        loaders = combined.flattened
        if len(loaders) != len(states):
            log.warning("checkpoint has %d train loader states for %d loaders: not restored", len(states), len(loaders))
            return
        for loader, state in zip(loaders, states):
            if hasattr(loader, "load_state_dict"):
                loader.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        state = {
            "torch": torch.get_rng_state(),
            "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached": float(cached)},
            "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    _pending: dict[str, Any] | None = None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # applied at the first training batch, not now: between restoring and training Lightning runs
        # the sanity check, whose DataLoader iterator draws a seed from the global RNG
        self._pending = state_dict

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._pending is not None:  # after the sanity check and the first batch's fetch
            state, self._pending = self._pending, None
            self.restore(state)

    @staticmethod
    def restore(state_dict: dict[str, Any]) -> None:
        """Set the global random states to ``state_dict`` (from :meth:`state_dict`)."""
        torch.set_rng_state(state_dict["torch"])
        n = state_dict["numpy"]
        np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
        p = state_dict["python"]
        random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


def _detached_copy(obj: Any) -> Any:
    """``obj`` (a checkpoint dict) with every tensor copied: the model's state dict shares storage with the
    live parameters, which the next optimizer steps change in place."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        copied = {k: _detached_copy(v) for k, v in obj.items()}
        if type(obj) is not dict:  # OrderedDict (a state dict), Lightning's AttributeDict
            copied = type(obj)(copied)
            if hasattr(obj, "_metadata"):  # a state dict's per-module versions, read by load_state_dict
                copied._metadata = obj._metadata
        return copied
    if isinstance(obj, list):
        return [_detached_copy(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_detached_copy(v) for v in obj)
    return obj


class BestCheckpoint(Throttled, ModelCheckpoint):
    """``checkpoints/best.ckpt``: Lightning's ``ModelCheckpoint`` (``save_top_k=1``: the epoch with the best
    monitored value, or the latest without a monitor), written at most every ``min_seconds``.

    A new best found sooner than ``min_seconds`` after the previous write is kept in memory (a copy of the
    checkpoint's tensors) and written at the next epoch end that is due, before any ``last.ckpt`` write (so a
    ``last.ckpt`` on disk never names a best score whose weights are not in ``best.ckpt``), when training
    ends (before the test reads it) and when it stops on an exception. Epochs of one full-graph step
    (task=social) find a new best nearly every ~10 ms epoch, and each write costs ~10-18 ms (pickling and
    fsync). A killed run keeps the best of at most ``min_seconds`` earlier, consistent with its
    ``last.ckpt``. ``min_seconds=0`` writes every new best at once; under DDP every new best is written at
    once (the write is collective).

    ``save_weights_only`` (the default config: true) leaves out the optimizer, scheduler and callback
    states: test, predict, export, ``seqattn.load`` and ``init_from`` read the weights, hyper-parameters
    and run config it keeps; resuming reads ``last.ckpt``, which has everything.
    """

    def __init__(self, *args: Any, min_seconds: float = 0.0, **kwargs: Any) -> None:
        self._set_min_seconds(min_seconds, "write every new best at once")
        super().__init__(*args, **kwargs)
        self._pending: tuple[dict[str, Any], str] | None = None  # (checkpoint, path) not yet written

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        if trainer.world_size > 1 or self._due():
            self._pending = None
            super()._save_checkpoint(trainer, filepath)
            self._wrote()
            return
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(self.save_weights_only)
        self._pending = (_detached_copy(checkpoint), filepath)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath

    def write_pending(self, trainer) -> None:
        """Write the best checkpoint kept in memory, if any (see the class docstring)."""
        if self._pending is None:
            return
        checkpoint, filepath = self._pending
        self._pending = None
        trainer.strategy.save_checkpoint(checkpoint, filepath)
        self._wrote()
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))

    def on_train_epoch_end(self, trainer, pl_module) -> None:  # after the epoch's validation
        super().on_train_epoch_end(trainer, pl_module)
        if self._pending is not None and self._due():
            self.write_pending(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        self.write_pending(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        super().on_exception(trainer, pl_module, exception)
        self.write_pending(trainer)


class LastCheckpoint(Throttled, ModelCheckpoint):
    """``checkpoints/last.ckpt`` at epoch ends and, with ``every_n_steps``, every N training steps too
    (mid-epoch), so a killed run loses at most N steps (``resume=PATH_TO_RUN``), and at the end of training.

    An epoch end writes it only when ``min_seconds`` have passed since the previous write (0: at every
    epoch end): epochs of one full-graph step (task=social) would otherwise write a whole checkpoint after
    every ~10 ms step (~18 ms each, fsync included). Epochs longer than ``min_seconds`` save at every end
    as before; a killed run loses at most ``max(one epoch, min_seconds)`` of training. Under DDP, rank 0
    decides and every process follows (the write is collective).

    Keeps no other file (``save_top_k=0``); the best checkpoint is the other ModelCheckpoint's job.
    """

    def __init__(self, dirpath: str | Path, every_n_steps: int | None = None, min_seconds: float = 0.0) -> None:
        if every_n_steps is not None and every_n_steps < 0:
            raise ValueError(f"every_n_steps must be a positive number of training steps or null, got {every_n_steps}")
        self._set_min_seconds(min_seconds, "every epoch end")
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, enable_version_counter=False)
        self.every_n_steps = int(every_n_steps or 0)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):  # no validation in this epoch
            self._save_at_epoch_end(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):  # after the epoch's validation
            self._save_at_epoch_end(trainer)

    def _save_at_epoch_end(self, trainer) -> None:
        """Lightning's own epoch-end save of ``last.ckpt`` happens only in a step where a top-k checkpoint was
        written, which with ``save_top_k=0`` is never (lightning 2.6): this callback writes it itself."""
        if self._should_skip_saving_checkpoint(trainer):
            return
        if self.min_seconds > 0:
            due = self._due()
            if trainer.world_size > 1:
                due = trainer.strategy.broadcast(due, src=0)
            if not due:
                return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer, monitor_candidates) -> None:
        flush_curves(trainer)  # every row logged so far on disk before the checkpoint a resumed run continues from
        for best in trainer.checkpoint_callbacks:  # the best checkpoint its callback state names, on disk first
            if isinstance(best, BestCheckpoint):
                best.write_pending(trainer)
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self._wrote()

    @property
    def state_key(self) -> str:
        return self._generate_state_key(last_every_n_steps=self.every_n_steps)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if (self.every_n_steps and trainer.global_step % self.every_n_steps == 0
                and not self._should_skip_saving_checkpoint(trainer)):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_end(self, trainer, pl_module) -> None:
        """The final state: the last steps of a run are in last.ckpt even when they end mid-way between
        two ``every_n_steps`` saves (or after the last epoch-end save)."""
        super().on_train_end(trainer, pl_module)
        if self._last_global_step_saved != trainer.global_step and not trainer.sanity_checking:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
