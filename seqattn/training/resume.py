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

A run folder may have been copied or moved (``cp -r runs/a runs/b; resume=runs/b``): ``config.yaml`` and
the checkpoint's callback states hold absolute paths under the folder the run was written in. Every
such path is taken relative to the folder given to ``resume=`` (:func:`relocate_paths` on the config,
:class:`RunFolder` on the checkpoint), so a resumed copy reads and writes only the copy.

The resumed run's curves continue the earlier ones (:func:`continue_curves`): Lightning's CSV logger would
delete ``csv/metrics.csv``; instead its rows logged before the checkpoint's step are kept and the
resumed run appends to them (the rows a killed run logged after its checkpoint are logged again).
One row can be lost: Lightning writes a mid-epoch checkpoint (``on_train_batch_end``) just before it logs
that batch's row, so a kill between the two leaves the curves without the row of the checkpoint's last
batch (the resumed run starts at the next batch). The weights and every later row are exact.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any, Iterator, Sequence

import lightning as L
import torch
from lightning.pytorch.loggers.csv_logs import CSVLogger, ExperimentWriter
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.utils.data import DataLoader, RandomSampler

from seqattn.training.throttle import Throttled

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


def _under(value: str, old: str) -> bool:
    """Whether the path string ``value`` is the folder ``old`` or lies inside it."""
    old = old.rstrip("/")
    return bool(old) and (value == old or value.startswith(old + "/"))


def _same_folder(old: str, run_dir: str | Path) -> bool:
    return Path(old).expanduser().resolve() == Path(run_dir).expanduser().resolve()


def _moved(value: Any, old: str, new: str, where: str, moved: list[str]) -> Any:
    """``value`` (plain containers, strings) with every path string under ``old`` moved under ``new``
    (dict keys too); the location of each moved string is appended to ``moved``."""
    if isinstance(value, str):
        if _under(value, old):
            moved.append(where)
            return new + value[len(old.rstrip("/")):]
        return value
    if isinstance(value, dict):
        return {_moved(k, old, new, f"{where}[key]", moved): _moved(v, old, new, f"{where}.{k}".lstrip("."), moved)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_moved(v, old, new, f"{where}[{i}]", moved) for i, v in enumerate(value))
    return value


def relocate_paths(cfg: DictConfig, run_dir: Path) -> DictConfig:
    """``cfg`` (a run's saved config) with every path under the folder it was written in (its
    ``paths.output_dir``) moved under ``run_dir``: checkpoint folders, logger folders, anything else
    there. Logs what moved; a config written in ``run_dir`` itself is returned as is."""
    old = OmegaConf.select(cfg, "paths.output_dir")
    if not isinstance(old, str) or _same_folder(old, run_dir):
        return cfg
    moved: list[str] = []
    relocated = OmegaConf.create(_moved(OmegaConf.to_container(cfg, resolve=False), old, str(run_dir), "", moved))
    log.info("resume=%s: the run was written in %s; %d path(s) of its config.yaml now point into %s instead: %s",
             run_dir, old, len(moved), run_dir, ", ".join(moved))
    return relocated


RUN_DIR_KEY = "seqattn_run_dir"  # a checkpoint's key: the run folder it was written in


class RunFolder(L.Callback):
    """Every checkpoint records the run folder it is written in (``checkpoint["seqattn_run_dir"]``).

    Resumed in another folder (a copied or moved run: ``run_dir`` is not the folder recorded, or, for a
    checkpoint written before the key, not its ``seqattn_config.paths.output_dir``), the checkpoint's
    callback states (the best checkpoint's path, the checkpoint folder, ``best_k_models``...) name
    files of the original; they are moved under ``run_dir`` before the callbacks read them
    (``on_load_checkpoint`` runs before their ``load_state_dict``), so neither the test of the best
    checkpoint nor a later save touches the original folder.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = str(Path(run_dir).expanduser().resolve())

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint[RUN_DIR_KEY] = self.run_dir

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        old = checkpoint.get(RUN_DIR_KEY)
        if old is None:  # written before the key: the folder of the run config it carries
            old = ((checkpoint.get("seqattn_config") or {}).get("paths") or {}).get("output_dir")
        if not isinstance(old, str) or _same_folder(old, self.run_dir) or "callbacks" not in checkpoint:
            return
        moved: list[str] = []
        checkpoint["callbacks"] = _moved(checkpoint["callbacks"], old, self.run_dir, "", moved)
        log.info("resume: the checkpoint was written in %s; %d path(s) of its callback states now point into %s",
                 old, len(moved), self.run_dir)


def _write_csv_atomically(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    """``rows`` under ``header`` into ``path``, written beside it and moved into place (never half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


class AtomicCurveWriter(ExperimentWriter):
    """Lightning's CSV writer, but a new column never leaves ``metrics.csv`` cut short: Lightning rewrites the
    whole file in place when a metric appears for the first time (truncate, then write every row), so a
    run killed during that rewrite loses every row logged so far, which a resumed run cannot get back.
    This one writes the new file beside it and moves it into place (``os.replace``: the old file or the
    new one, never half of either). Appending rows is Lightning's (a kill cuts at most the last line,
    which :class:`_ContinuedWriter` drops on resume)."""

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        path = Path(self.metrics_file_path)
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        _write_csv_atomically(path, fieldnames, rows)


class CurveLogger(Throttled, CSVLogger):
    """Lightning's ``CSVLogger`` (``csv/metrics.csv``, the same rows and columns), its rows written at most every
    ``flush_seconds`` instead of at every log call.

    Lightning's trainer calls ``save()`` after every ``log_metrics`` (every ``log_every_n_steps`` steps and at every
    epoch end), and each save opens the file to append a row. With one full-graph step per epoch (task=social) that
    was ~6 % of the step: ``python -m seqattn.bench overhead --tasks social``, recipe / bare 1.28x -> 1.20x (means of
    7 and 8 runs, 2026-12-07; docs/benchmarks.md). Here the rows wait in memory and are written

    - at a ``save()`` once ``flush_seconds`` have passed since the last write (the first row at once);
    - before every ``last.ckpt`` (:class:`seqattn.training.callbacks.LastCheckpoint` calls :func:`flush_curves`),
      so a resumed run finds every row logged before its checkpoint;
    - when the run ends or fails (``finalize``), so a finished run's file is complete.

    A kill (SIGKILL, power loss) loses the rows of at most the last ``flush_seconds``, all logged after the last
    checkpoint: the resumed run logs them again. ``flush_seconds=0`` writes at every call, as Lightning's does.
    """

    def __init__(self, *args: Any, flush_seconds: float = 5.0, **kwargs: Any) -> None:
        self._set_min_seconds(flush_seconds, "write at every log call", "flush_seconds")
        super().__init__(*args, **kwargs)

    @property
    def flush_seconds(self) -> float:
        return self.min_seconds

    @rank_zero_only
    def save(self) -> None:
        if self._due():
            self.flush()

    @rank_zero_only
    def flush(self) -> None:
        """Write the rows logged so far now (the clock of ``flush_seconds`` starts at a write of rows)."""
        if self._experiment is not None and self._experiment.metrics:
            super().save()
            self._wrote()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._experiment is not None:
            self.flush()


def flush_curves(trainer: L.Trainer) -> None:
    """Write the rows every :class:`CurveLogger` of ``trainer`` holds (before a checkpoint is written)."""
    for logger in trainer.loggers:
        if isinstance(logger, CurveLogger):
            logger.flush()


def atomic_curves(loggers: Sequence[Any]) -> None:
    """Give every Lightning ``CSVLogger`` of a new run an :class:`AtomicCurveWriter` (rank 0, before the
    trainer uses the loggers); a resumed run's get a :class:`_ContinuedWriter` (:func:`continue_curves`)."""
    for logger in loggers:
        if isinstance(logger, CSVLogger) and logger._experiment is None:
            Path(logger.root_dir).mkdir(parents=True, exist_ok=True)
            logger._experiment = AtomicCurveWriter(logger.log_dir)


class _ContinuedWriter(AtomicCurveWriter):
    """The CSV logger's writer, continuing the ``metrics.csv`` already in ``log_dir``: where Lightning's
    deletes the file (with a warning), this one keeps its rows with ``step < before_step`` (rewritten
    atomically, the text of each kept row unchanged) and appends the resumed run's rows after them."""

    def __init__(self, log_dir: str, before_step: int) -> None:
        self.before_step = before_step
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:  # called by __init__, instead of the deletion
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with open(path, newline="", encoding="utf-8") as f:
            text = f.read()
        partial = bool(text) and not text.endswith("\n")  # a kill during a write: its last line is cut
        reader = csv.DictReader(io.StringIO(text[:text.rfind("\n") + 1], newline=""))
        header, kept, later = list(reader.fieldnames or []), [], 0
        if not header:  # nothing logged yet: as Lightning does
            path.unlink()
            return
        for row in reader:
            try:
                step = int(row["step"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path}:{reader.line_num}: step {row.get('step')!r} is not a whole number; "
                                 "resume continues the curves of metrics.csv, which Lightning's CSV logger "
                                 "writes (remove the file to start them anew)") from None
            if step < self.before_step:
                kept.append(row)
            else:
                later += 1
        _write_csv_atomically(path, header, kept)
        self.metrics_keys = header  # the resumed rows are appended under it (a new column rewrites it)
        log.info("resume: %s continues: kept its %d row(s) logged before step %d; dropped %d logged at or "
                 "after it%s (the resumed run logs those steps again; a finished run's test metrics stay in "
                 "metrics.previous.json)", path, len(kept), self.before_step, later,
                 " and 1 line cut short by the kill" if partial else "")


def continue_curves(loggers: Sequence[Any], ckpt_path: str | Path) -> None:
    """Make every Lightning ``CSVLogger`` of a resumed run continue its ``metrics.csv`` (see
    :class:`_ContinuedWriter`) from the checkpoint's ``global_step`` (the step the resumed run logs
    first). Call it before the trainer uses the loggers (on rank 0): the writer is made now, so the
    logger never makes its own (which would delete the file)."""
    csv_loggers = [lg for lg in loggers if isinstance(lg, CSVLogger) and lg._experiment is None]
    if not csv_loggers:
        return
    step = int(torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)["global_step"])
    for logger in csv_loggers:
        Path(logger.root_dir).mkdir(parents=True, exist_ok=True)
        logger._experiment = _ContinuedWriter(logger.log_dir, before_step=step)


def resume_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """The config of an earlier run to continue: its ``config.yaml`` with ``ckpt_path`` set to its
    ``checkpoints/last.ckpt``, ``paths.output_dir`` to ``run_dir`` and ``resume`` to ``run_dir``, every
    other path under the folder the run was written in moved under ``run_dir`` (:func:`relocate_paths`:
    a copied run folder writes only into the copy); ``overrides`` (``key=value`` strings, e.g.
    ``trainer.max_epochs=60``) are applied on top. The run's plan (``run_plan.json``) is read back by
    ``seqattn.run``, not folded into the config."""
    run_dir = Path(run_dir).expanduser().resolve()
    config, last = run_dir / "config.yaml", run_dir / "checkpoints" / "last.ckpt"
    if not config.is_file():
        raise ValueError(f"resume={run_dir}: no config.yaml there; resume takes a run directory written by "
                         "seqattn.run (e.g. outputs/speech/2026-01-01_12-00-00)")
    if not last.is_file():
        raise ValueError(f"resume={run_dir}: no checkpoints/last.ckpt (the run stopped before its first "
                         "checkpoint); start it again instead")
    cfg = relocate_paths(OmegaConf.load(config), run_dir)
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    with open_dict(cfg):
        cfg.ckpt_path = str(last)
        cfg.paths.output_dir = str(run_dir)
        cfg.resume = str(run_dir)
    log.info("resuming %s from %s", run_dir, last)
    return cfg
