"""Resuming a killed run exactly where it stopped: ``python -m seqattn.run resume=PATH_TO_RUN``.

Three pieces make a resumed run end with the same weights as an uninterrupted one:

1. ``last.ckpt`` is written every ``checkpoint_every_n_steps`` training steps (and at every
   epoch end), atomically (:class:`seqattn.training.callbacks.AtomicCheckpointIO`), with the loops'
   progress, optimizer, scheduler and callback states (Lightning) and the global random states
   (:class:`seqattn.training.callbacks.ExactResume`).
2. The training DataLoader is made *resumable* (:func:`make_resumable`): its checkpointed state is
   the shuffling generator's state at the start of the epoch and the number of batches already
   handed out. Resumed mid-epoch, it draws the same permutation and skips the batches already
   trained on, so the epoch is neither replayed nor reshuffled (without this, Lightning restarts
   the data iterator: the rest of the epoch would see the first batches of a new order).
3. ``resume=`` reads the run's own ``config.yaml`` (the config as composed) and ``run_plan.json``
   (the epochs and checkpoint selection the run decided from its data; :mod:`seqattn.training.plan`),
   writes into the same run directory and continues from ``checkpoints/last.ckpt``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader, RandomSampler

log = logging.getLogger("seqattn.training.resume")


def _shuffle_generator(loader: DataLoader, create: bool) -> torch.Generator | None:
    """The ``torch.Generator`` the loader's sampler shuffles with; a RandomSampler without one gets
    one (seeded from the global RNG) when ``create``, so its order becomes part of the state. A batch
    sampler with a ``generator`` (the length-bucketed one) shares it with its inner sampler."""
    batch_sampler = loader.batch_sampler
    if batch_sampler is not None and hasattr(batch_sampler, "generator"):  # e.g. LengthBucketSampler
        if batch_sampler.generator is None and create:
            batch_sampler.generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
            inner = getattr(batch_sampler, "sampler", None)
            if isinstance(inner, RandomSampler) and inner.generator is None:
                inner.generator = batch_sampler.generator  # one generator: one state to checkpoint
        if create and loader.generator is None and batch_sampler.generator is not None:
            loader.generator = batch_sampler.generator
        return batch_sampler.generator
    sampler = loader.sampler
    if isinstance(sampler, RandomSampler):
        if sampler.generator is None and create:
            sampler.generator = torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,)).item()))
        if create and loader.generator is None:
            loader.generator = sampler.generator  # the iterator's base seed: from it, not from the global RNG
        return sampler.generator
    return getattr(sampler, "generator", None)  # e.g. DistributedSampler: order = f(seed, epoch), no generator


class ResumableDataLoader(DataLoader):
    """A DataLoader with ``state_dict`` / ``load_state_dict`` (Lightning checkpoints and restores it):
    the shuffling generator's state at the start of the current epoch, its state now, and the
    number of batches handed out in this epoch. See :func:`make_resumable`."""

    _resume_state: dict[str, Any] | None = None
    _epoch_start: torch.Tensor | None = None
    _handed_out: int = 0

    def state_dict(self) -> dict[str, Any]:
        generator = _shuffle_generator(self, create=False)
        return {"epoch_start": self._epoch_start, "now": generator.get_state() if generator is not None else None,
                "handed_out": self._handed_out}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_state = dict(state_dict)

    def __iter__(self) -> Iterator[Any]:
        # a generator: nothing happens until the first batch is drawn (Lightning creates the iterator
        # before it restores a checkpoint, and draws the first batch after)
        generator = _shuffle_generator(self, create=True)
        skip = 0
        if self._resume_state is not None:
            state, self._resume_state = self._resume_state, None
            finished = state["handed_out"] >= len(self)  # saved at the end of an epoch: start the next one
            saved = state["now"] if finished else state["epoch_start"]
            if generator is not None and saved is not None:
                generator.set_state(saved)
            skip = 0 if finished else int(state["handed_out"])
            if skip:
                log.info("resuming mid-epoch: skipping the %d batches of this epoch already trained on", skip)
        self._epoch_start = generator.get_state() if generator is not None else None
        self._handed_out = skip
        iterator = super().__iter__()
        for _ in range(skip):  # same permutation; the batches already trained on are drawn and dropped
            next(iterator)
        for batch in iterator:
            self._handed_out += 1
            yield batch


def make_resumable(loader: Any) -> Any:
    """Turn a plain ``DataLoader`` into a :class:`ResumableDataLoader` in place (same object, same
    arguments); anything else is returned unchanged (with a log line: mid-epoch resume then
    replays data the way Lightning does by default)."""
    if type(loader) is DataLoader:
        loader.__class__ = ResumableDataLoader
    elif not isinstance(loader, ResumableDataLoader):
        log.info("train loader %s is not a plain DataLoader: mid-epoch resume is not exact", type(loader).__name__)
    return loader


def resumable_train_loader(datamodule: Any) -> None:
    """Wrap ``datamodule.train_dataloader`` so every loader it returns is resumable."""
    original = datamodule.train_dataloader

    def train_dataloader():
        return make_resumable(original())

    datamodule.train_dataloader = train_dataloader


def finished_run(run_dir: str | Path) -> dict[str, Any] | None:
    """The ``metrics.json`` of a run that finished (it is written last), or None for a run that did not."""
    path = Path(run_dir).expanduser() / "metrics.json"
    if not path.is_file():
        return None
    import json

    metrics = json.loads(path.read_text())
    metrics.setdefault("epochs", 0)
    return metrics


def keep_previous_metrics(run_dir: str | Path) -> Path | None:
    """Before a finished run trains further: its ``metrics.json`` -> ``metrics.previous.json``."""
    path = Path(run_dir).expanduser() / "metrics.json"
    if not path.is_file():
        return None
    target = path.with_name("metrics.previous.json")
    path.replace(target)
    log.info("kept the finished run's metrics as %s", target)
    return target


def resume_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """The config of an earlier run to continue: its ``config.yaml`` with ``ckpt_path`` set to its
    ``checkpoints/last.ckpt``, ``paths.output_dir`` to ``run_dir`` and ``resume`` to ``run_dir``;
    ``overrides`` (``key=value`` strings, e.g. ``trainer.max_epochs=60``) are applied on top. The
    run's plan (``run_plan.json``) is read back by ``seqattn.run``, not folded into the config."""
    run_dir = Path(run_dir).expanduser().resolve()
    config, last = run_dir / "config.yaml", run_dir / "checkpoints" / "last.ckpt"
    if not config.is_file():
        raise ValueError(f"resume={run_dir}: no config.yaml there; resume takes a run directory written by "
                         "seqattn.run (e.g. outputs/speech/2026-01-01_12-00-00)")
    if not last.is_file():
        raise ValueError(f"resume={run_dir}: no checkpoints/last.ckpt (the run stopped before its first "
                         "checkpoint); start it again instead")
    cfg = OmegaConf.load(config)
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    with open_dict(cfg):
        cfg.ckpt_path = str(last)
        cfg.paths.output_dir = str(run_dir)
        cfg.resume = str(run_dir)
    log.info("resuming %s from %s", run_dir, last)
    return cfg
