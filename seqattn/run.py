"""Train, validate and test a recipe: ``python -m seqattn.run task=speech [overrides]``.

``train(cfg)`` does the work and returns the metrics (tests call it directly);
``main()`` is the Hydra entry point. A run directory holds ``config.yaml`` (the
config as composed, resolved), ``run_plan.json`` (what the run decided from its data:
epochs, early stopping, how the best checkpoint is chosen; :mod:`seqattn.training.plan`),
``checkpoints/{best,last}.ckpt``, ``metrics.json`` (test metrics), ``csv/metrics.csv``
(per-epoch curves; a resumed run continues them) and the task's figures.

This module is the only reader of the config: what ``seqattn.training`` needs reaches it as
typed arguments (:class:`~seqattn.training.plan.RunPlan`, ``FinetuneOptions``, ``DistillOptions``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import hydra
import lightning as L
import torch
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from seqattn.cli import process_seconds
from seqattn.configs import CONFIG_DIR  # also seqattn.run.CONFIG_DIR for callers
from seqattn.model.build import locate
from seqattn.core.dropout import set_fast_dropout
from seqattn.training import log_fast_path
from seqattn.training.callbacks import LastCheckpoint, QuietModelSummary
from seqattn.training.compile import compile_encoder, parse_compile
from seqattn.training.distill import DistillOptions, apply_distill
from seqattn.training.finetune import FinetuneOptions, apply_finetune, use_checkpoint_vocabulary
from seqattn.training.options import check_trainer_options
from seqattn.training.plan import (PLAN_FILE, Asked, Budget, RunPlan, check_batch_scale, make_plan, plan_batch_scale,
                                   read_plan, write_plan)
from seqattn.training.quiet import quiet_known_noise
from seqattn.training.resume import (RunFolder, atomic_curves, continue_curves, finished_run, keep_previous_metrics,
                                    resumable_train_loader, resume_config)
from seqattn.training.sweep import record_failure
from seqattn.training.threads import LoadProbe, ThreadChoice, choose_threads, parse_setting, parse_split_from
from seqattn.training.time_budget import TimeBudget, check_seconds

log = logging.getLogger("seqattn.run")

_ABSENT = object()
#: torch's intra-op threads before any run set them (one per physical core, or OMP_NUM_THREADS): what
#: cpu_threads=null keeps and the most cpu_threads=auto uses, also for a second run in the same process
_TORCH_DEFAULT_THREADS = torch.get_num_threads()


def _required(cfg: DictConfig, key: str) -> Any:
    """``cfg``'s value at the dotted ``key``; its default lives in conf/, so an absent key is an error."""
    value = OmegaConf.select(cfg, key, default=_ABSENT)
    if value is _ABSENT:
        raise ValueError(f"the run config has no {key}: conf/config.yaml (or its group) defines it; a config "
                         f"written by an older seqattn needs it added (e.g. {key}=... on the command line)")
    return value


def _number(cfg: DictConfig, key: str, kind: type) -> int | float:
    """:func:`_required` as ``kind`` (int or float); a value that is not one (``null``, ``abc``, ``true``, or ``1.5``
    for an int) is an error naming the key and the value."""
    value = _required(cfg, key)
    try:
        if isinstance(value, bool) or value is None or (kind is int and isinstance(value, float) and value % 1):
            raise TypeError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}={value!r} must be {'an int' if kind is int else 'a number'}") from None


def _nodes(group: DictConfig | None) -> list[tuple[str, DictConfig]]:
    """The ``(key, node)`` entries of a config group (callbacks, loggers) that name a ``_target_``."""
    return [(key, node) for key, node in (group or {}).items() if node is not None and "_target_" in node]


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate every ``_target_`` entry of a config group (callbacks, loggers); nulls are skipped."""
    return [instantiate(node) for _, node in _nodes(group)]


def _is_early_stopping(node: DictConfig) -> bool:
    """Whether a callback node builds a Lightning ``EarlyStopping`` (or a subclass): by type."""
    try:
        cls = get_class(node._target_)
    except (ImportError, ValueError):  # not a class: instantiate() reports a wrong target
        return False
    return issubclass(cls, EarlyStopping)


def _early_stopper(cfg: DictConfig) -> tuple[str, DictConfig] | None:
    """The config's early-stopping callback ``(key, node)``, or None."""
    return next(((key, node) for key, node in _nodes(cfg.get("callbacks")) if _is_early_stopping(node)), None)


def _budget_seconds(cfg: DictConfig) -> float | None:
    """``budget.seconds``, checked (None: no time budget; a bad value is a ``ValueError`` naming it)."""
    return check_seconds(cfg.get("budget", {}).get("seconds"))


def build_callbacks(cfg: DictConfig, plan: RunPlan) -> list[Any]:
    """The config's callbacks, instantiated under the run plan: an early stopper (found by type) is left
    out when the plan says so, or gets the planned patience; a callback watching ``objective.monitor``
    watches the plan's monitor (None: the last epoch is the best). The config is not edited."""
    configured = cfg.objective.get("monitor")
    callbacks = []
    for _, node in _nodes(cfg.get("callbacks")):
        arguments: dict[str, Any] = {}
        if _is_early_stopping(node):
            if not plan.early_stopping:
                continue
            if plan.patience is not None:
                arguments["patience"] = plan.patience
        if plan.monitor != configured and configured is not None and node.get("monitor") == configured:
            arguments["monitor"] = plan.monitor
        callbacks.append(instantiate(node, **arguments))
    seconds = _budget_seconds(cfg)
    if seconds is not None:  # budget.seconds: fewer epochs when the time runs out, the schedule shortened to match
        callbacks.append(TimeBudget(seconds))
    return callbacks


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def build_objective(cfg: DictConfig, datamodule: L.LightningDataModule,
                    plan: RunPlan | None = None) -> L.LightningModule:
    """The objective with its network, built from the config and what the data says about itself.

    ``datamodule.spec()`` (a :class:`~seqattn.datakit.spec.DataSpec`: classes, label names,
    vocabulary, feature sizes, target statistics) fills the parts' data-derived arguments; the
    spec is saved in the checkpoint, so a loaded model maps inputs exactly as in training.
    ``plan`` (the run plan) gives the monitor in place of ``objective.monitor``, and its ``batch_scale``
    multiplies ``objective.optimizer.lr``. Nothing is written into the config.
    """
    spec = datamodule.spec()
    log.info("data: %s", spec.describe())
    net_cfg = OmegaConf.to_container(cfg.net, resolve=True)
    objective = OmegaConf.to_container(cfg.objective, resolve=True)  # plain containers only in checkpoints
    if plan is not None:
        objective["monitor"] = plan.monitor
        if plan.batch_scale > 1:  # larger batches of a small set, and the learning rate with them (the run plan)
            objective["optimizer"]["lr"] = float(objective["optimizer"]["lr"]) * plan.batch_scale
    cls = locate(objective.pop("_target_"))
    return cls(net=net_cfg, spec=spec.to_dict(), **objective)


def _overridden(key: str) -> bool:
    """Whether ``key`` was set on this run's command line (Hydra's overrides; False outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    try:
        overrides = HydraConfig.get().overrides.task
    except Exception:  # noqa: BLE001 -- a composed config without the hydra node
        return False
    return any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides)


def plan_inputs(cfg: DictConfig, given: Callable[[str], bool] = lambda key: False) -> tuple[Budget, Asked]:
    """What the run plan is decided from, read from the config: the ``budget.*`` options and what the
    config asks for (epochs, early stopper, monitor); ``given(key)``: ``key`` was on the command line."""
    steps = _required(cfg, "budget.steps")
    budget = Budget(steps=None if steps is None else _number(cfg, "budget.steps", int),
                    min_epochs=_number(cfg, "budget.min_epochs", int), max_epochs=_number(cfg, "budget.max_epochs", int),
                    patience=_number(cfg, "budget.patience", float),
                    min_patience=_number(cfg, "budget.min_patience", int),
                    seconds=_budget_seconds(cfg), batch_scale=_batch_scale(cfg))
    stopper = _early_stopper(cfg)
    patience = stopper[1].get("patience") if stopper is not None else None
    asked = Asked(
        max_epochs=_required(cfg, "trainer.max_epochs"),
        early_stopping=stopper is not None,
        patience=None if patience is None else int(patience),
        monitor=cfg.objective.get("monitor"),
        accumulate_grad_batches=int(cfg.trainer.get("accumulate_grad_batches") or 1),  # Lightning's default: 1
        epochs_given=given("trainer.max_epochs"),
        patience_given=stopper is not None and given(f"callbacks.{stopper[0]}.patience"),
        monitor_given=given("objective.monitor"),
        batch_given=given("data.batch_size") or given("objective.optimizer.lr"),
    )
    return budget, asked


def _batch_scale(cfg: DictConfig) -> int:
    """``budget.batch_scale`` (1 where the config has none: a run written before it existed). A scale above 1
    needs ``objective.optimizer.lr`` to scale with the batch."""
    scale = check_batch_scale(_number(cfg, "budget.batch_scale", int)) if "batch_scale" in cfg.get("budget", {}) else 1
    if scale != 1 and OmegaConf.select(cfg, "objective.optimizer.lr") is None:
        raise ValueError(f"budget.batch_scale={scale} scales the learning rate with the batch, but the config has "
                         "no objective.optimizer.lr; give one, or budget.batch_scale=1")
    return scale


def plan_run(cfg: DictConfig, datamodule: L.LightningDataModule,
             given: Callable[[str], bool] = lambda key: False) -> RunPlan:
    """The run plan of ``cfg`` on this data (:func:`seqattn.training.plan.make_plan`): the epochs and
    early-stopping patience from ``budget.steps``, and how the best checkpoint is chosen without a
    validation split. A value given on the command line (``given(key)``) wins over the plan's."""
    budget, asked = plan_inputs(cfg, given)
    batches = len(datamodule.train_dataloader()) if budget.steps else None
    scale = plan_batch_scale(budget, asked, batches)
    if scale > 1:  # the batches per epoch at the scaled size; the datamodule keeps its own (apply_batch_scale)
        configured = datamodule.batch_size
        datamodule.batch_size = configured * scale
        try:
            batches = len(datamodule.train_dataloader())
        finally:
            datamodule.batch_size = configured
    return make_plan(budget, asked, datamodule.split_sizes(), batches, batch_scale=scale)


def apply_batch_scale(datamodule: L.LightningDataModule, plan: RunPlan) -> None:
    """The run plan's ``batch_scale`` on the datamodule's batch size (training, validation and test loaders)."""
    if plan.batch_scale > 1:
        datamodule.batch_size = int(datamodule.batch_size) * plan.batch_scale
        log.info("budget.batch_scale=%d: batches of %d (data.batch_size x %d) and the learning rate x %d: the step "
                 "budget sets this training split's epochs", plan.batch_scale, datamodule.batch_size, plan.batch_scale,
                 plan.batch_scale)


def _resumed_plan(cfg: DictConfig, datamodule: L.LightningDataModule) -> RunPlan:
    """``resume=RUN_DIR``: the run's own ``run_plan.json``, with a ``trainer.max_epochs`` (or early-stopping
    patience) given on this command line in place of the planned one. A run written before run plans
    has none: planned again from the data, its config.yaml's epochs and patience (the old plan's,
    saved in the config then) taken as given."""
    run_dir = Path(cfg.resume)
    saved = read_plan(run_dir)
    if saved is None:
        log.info("resume=%s: no %s (a run written before run plans): planning it again from the data, with its "
                 "config.yaml's trainer.max_epochs and early-stopping patience", run_dir, PLAN_FILE)
        return plan_run(cfg, datamodule, given=lambda key: key == "trainer.max_epochs" or key.endswith(".patience")
                        or _overridden(key))
    log.info("resume=%s: run plan read back from %s", run_dir, run_dir / PLAN_FILE)
    stopper = _early_stopper(cfg)
    patience = (stopper[1].get("patience") if stopper is not None and _overridden(f"callbacks.{stopper[0]}.patience")
                else None)
    return saved.given(max_epochs=cfg.trainer.max_epochs if _overridden("trainer.max_epochs") else None,
                       patience=patience)


def finetune_options(cfg: DictConfig) -> FinetuneOptions:
    """``init_from`` / ``freeze`` / ``finetune.*`` of the config."""
    init_from = _required(cfg, "init_from")
    return FinetuneOptions(init_from=None if init_from is None else str(init_from),
                           freeze=tuple(_required(cfg, "freeze") or ()),
                           pretrained_lr_mult=float(_required(cfg, "finetune.pretrained_lr_mult")),
                           resize_positional=bool(_required(cfg, "finetune.resize_positional")),
                           vocabulary=str(_required(cfg, "finetune.vocabulary")),
                           adapter=OmegaConf.to_container(cfg.adapter, resolve=True) if cfg.get("adapter") else None)


def distill_options(cfg: DictConfig) -> DistillOptions:
    """``distill.*`` of the config."""
    teacher = _required(cfg, "distill.teacher")
    return DistillOptions(teacher=None if teacher is None else str(teacher),
                          temperature=float(_required(cfg, "distill.temperature")),
                          alpha=float(_required(cfg, "distill.alpha")))


def check_lengths(model: L.LightningModule, datamodule: L.LightningDataModule) -> None:
    """Every split's longest item against the network's length limit, before any training."""
    limit = model.net.max_tokens
    if limit is None:
        return
    for split, (length, where) in sorted(datamodule.longest().items()):
        if length > limit:
            raise ValueError(f"{where}: the {split} split has an item of {length} tokens, longer than the model "
                             f"takes ({limit}: model.positional=learned with model.max_len); raise model.max_len or "
                             "use model.positional=sinusoidal|rotary (any length)")


def apply_threads(setting: Any, model: torch.nn.Module, load: LoadProbe | None = None,
                  resumed: dict[str, Any] | None = None, split_from: Any = None) -> ThreadChoice:
    """Set torch's intra-op threads from ``cpu_threads`` (:mod:`seqattn.training.threads`) and log the
    count and why in one INFO line. ``load``: the probe started with the run (other processes' load);
    ``resumed``: the choice the resumed run recorded (its ``run_plan.json``), kept under ``auto``;
    ``split_from``: ``cpu_threads_split_from`` (None: the module's default)."""
    parsed = parse_setting(setting)
    default = torch.get_num_threads() if parsed is None else _TORCH_DEFAULT_THREADS  # null: left as it is
    other = load.other_load if load is not None else None  # measured only when the choice needs it
    choice = choose_threads(setting, sum(p.numel() for p in model.parameters()), default, os.cpu_count() or 1, other,
                            resumed, split_from)
    if parsed is not None:
        torch.set_num_threads(choice.threads)
    log.info("%s%s", choice.describe(), " (kept from the resumed run's run_plan.json)"
             if resumed and parsed == "auto" and choice.threads == resumed.get("threads") else "")
    return choice


def build_trainer(cfg: DictConfig, plan: RunPlan, out_dir: Path, resumed: bool = False,
                  **arguments: Any) -> tuple[L.Trainer, list[Any]]:
    """The run's Trainer and its callbacks, as ``seqattn.run`` trains (``seqattn.bench overhead`` times
    the same loop): the config's callbacks under the plan, its loggers, ``plan.trainer_arguments()``;
    ``arguments`` go to the Trainer on top. ``resumed``: the CSV curves continue the checkpoint's."""
    log_fast_path.install()  # self.log without Lightning's per-call walk of results already in place
    callbacks = build_callbacks(cfg, plan)
    callbacks.append(RunFolder(out_dir))  # checkpoints name their folder; resumed in a copy, their paths move into it
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [c for c in callbacks if not isinstance(c, L.pytorch.callbacks.ProgressBar)]
    if cfg.trainer.get("enable_model_summary") is not False and not any(
            isinstance(c, L.pytorch.callbacks.ModelSummary) for c in callbacks):
        callbacks.append(QuietModelSummary())  # Lightning's own would print "Total FLOPs: 0"
    loggers = _instantiate_all(cfg.get("logger"))
    if resumed:  # csv/metrics.csv keeps the rows before the checkpoint, appends the rest
        continue_curves(loggers, cfg.ckpt_path)
    elif rank_zero_only.rank == 0:  # a kill while a new column rewrites csv/metrics.csv loses no row
        atomic_curves(loggers)
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False,
                                     default_root_dir=str(out_dir), enable_model_summary=False,
                                     **{**plan.trainer_arguments(), **arguments})
    return trainer, callbacks


def _finite_metrics(metrics: dict[str, Any], reasons: dict[str, str]) -> dict[str, Any]:
    """NaN / inf metric values -> None (valid JSON), each listed under ``undefined`` with the reason."""
    out, undefined = {}, {}
    for key, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[key] = None
            undefined[key] = reasons.get(key, f"{value} (undefined on this split)")
        else:
            out[key] = value
    if undefined:
        out["undefined"] = undefined
    return out


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, test and write the run's artefacts. Returns ``{"test/...": float, ..., "output_dir": str}``."""
    check_trainer_options(cfg.trainer)  # a misspelt key or a mistyped value: before any data is read
    # Lightning's and PyTorch's messages a user cannot act on (seqattn.training.quiet)
    quiet_known_noise(resuming=bool(cfg.get("resume")))
    torch.set_float32_matmul_precision(cfg.matmul_precision)
    set_fast_dropout(cfg.get("fast_dropout", True))
    parse_setting(cfg.get("cpu_threads"))  # a bad value: before any data is read
    split_from = parse_split_from(cfg.get("cpu_threads_split_from"))  # the same: checked once, used below
    parse_compile(cfg.get("compile"))
    _budget_seconds(cfg)  # budget.seconds: before any data is read
    _batch_scale(cfg)  # budget.batch_scale: likewise
    load = LoadProbe()  # other processes' CPU load while the data is read (cpu_threads=auto)
    L.seed_everything(cfg.seed, workers=True)
    out_dir = Path(cfg.paths.output_dir)
    # DDP: every rank runs this function; only rank 0 writes the run's files (Lightning's loggers and
    # checkpoints do the same), the other ranks only read the data and train
    is_rank_zero = rank_zero_only.rank == 0
    if is_rank_zero:
        out_dir.mkdir(parents=True, exist_ok=True)

    datamodule = instantiate(cfg.data)
    resumable_train_loader(datamodule)  # mid-epoch checkpoints resume exactly (seqattn.training.resume)
    use_checkpoint_vocabulary(datamodule, finetune_options(cfg))  # finetune.vocabulary=checkpoint: before setup
    datamodule.prepare_data()
    datamodule.setup("fit")
    # decided once from the data, applied below as arguments; the config stays as composed
    plan = _resumed_plan(cfg, datamodule) if cfg.get("resume") else plan_run(cfg, datamodule, _overridden)
    if plan.budget_message:  # a warning when the data is too small for budget.steps (epochs capped)
        (log.warning if plan.capped else log.info)("%s", plan.budget_message)
    if plan.selection_message:
        log.warning("%s", plan.selection_message)
    apply_batch_scale(datamodule, plan)
    model = build_objective(cfg, datamodule, plan)
    check_lengths(model, datamodule)
    resumed_threads = plan.threads if cfg.get("resume") else None  # auto: a resumed run keeps its count
    plan = replace(plan, threads=apply_threads(cfg.get("cpu_threads"), model, load, resumed_threads,
                                                 split_from).to_dict())
    finetune = apply_finetune(model, finetune_options(cfg))  # init_from / freeze / finetune.pretrained_lr_mult
    distill = apply_distill(model, distill_options(cfg))  # distill.teacher / temperature / alpha
    compiled = compile_encoder(model.net, cfg.get("compile"))  # compile=inductor: torch.compile of the encoder
    if is_rank_zero:
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        log.info("run plan: %s (%s)", plan.describe(), write_plan(out_dir, plan))
    model.run_config = OmegaConf.to_container(cfg, resolve=True)  # travels inside every checkpoint

    trainer, callbacks = build_trainer(cfg, plan, out_dir, resumed=is_rank_zero and bool(cfg.get("resume")))
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %s encoder, %.2fk parameters", type(model.net.encoder).__name__, n_params / 1e3)

    startup_seconds = process_seconds()  # interpreter, imports, config, data and model, before training
    start = time.perf_counter()
    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    fit_seconds = time.perf_counter() - start

    checkpoint = next((c for c in callbacks if isinstance(c, L.pytorch.callbacks.ModelCheckpoint)
                       and not isinstance(c, LastCheckpoint)), None)
    best = checkpoint.best_model_path if checkpoint is not None and checkpoint.best_model_path else None
    metrics: dict[str, Any] = {
        "task": cfg.task_name,
        "encoder": type(model.net.encoder).__name__,
        "parameters": n_params,
        "epochs": trainer.current_epoch,
        "startup_seconds": None if startup_seconds is None else round(startup_seconds, 1),
        "fit_seconds": round(fit_seconds, 1),
        "best_checkpoint": best,
        "output_dir": str(out_dir),
    }
    if finetune:
        metrics["finetune"] = finetune
    if plan.selection_message:
        metrics["selection"] = plan.selection_message
    if plan.budget_message:
        metrics["budget"] = plan.budget_message
    time_budget = next((c.message for c in callbacks if isinstance(c, TimeBudget)), None)
    if time_budget:
        metrics["time_budget"] = time_budget
    if distill:
        metrics["distill"] = distill
    if compiled:
        metrics["compile"] = compiled
    if checkpoint is not None and checkpoint.monitor and checkpoint.best_model_score is not None:
        metrics[f"best_{checkpoint.monitor}"] = _jsonable(checkpoint.best_model_score)
    if cfg.get("test"):
        start = time.perf_counter()
        results = trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=True)
        metrics["test_seconds"] = round(time.perf_counter() - start, 1)
        metrics.update({k: _jsonable(v) for k, v in results[0].items()})
        if hasattr(model, "test_summary"):
            metrics.update(model.test_summary())
        if best:  # keep the in-memory model at the tested (best) weights for the figures
            model.load_state_dict(torch.load(best, map_location="cpu", weights_only=True)["state_dict"])
    metrics = _finite_metrics(metrics, model.undefined_reasons)
    if not trainer.is_global_zero:
        return metrics
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, allow_nan=False))
    if cfg.get("plot") and cfg.get("plot_fn") is not None:
        figure = instantiate(cfg.plot_fn)(model, datamodule, out_dir)
        metrics["figure"] = str(figure)
        log.info("figure: %s", figure)
    log.info("metrics: %s", out_dir / "metrics.json")
    return metrics


def _print_summary(metrics: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"seqattn {metrics.get('task')}: {metrics.get('encoder')}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if isinstance(value, (list, dict)):
            continue  # e.g. the confusion matrix: in metrics.json
        if isinstance(value, float):
            value = f"{value:.4f}"
        table.add_row(key, str(value))
    Console().print(table)


def _command_line_overrides(exclude: tuple[str, ...] = ()) -> list[str]:
    """This run's ``key=value`` command-line overrides (Hydra's), without the keys in ``exclude``."""
    from hydra.core.hydra_config import HydraConfig

    out = []
    for override in HydraConfig.get().overrides.task:
        key, _, _ = override.partition("=")
        if key.lstrip("+~") in exclude:
            continue
        if key.startswith(("+", "~")) or "/" in key:
            raise ValueError(f"with resume=, only plain key=value overrides apply on top of the run's config.yaml; "
                             f"got {override!r}")
        out.append(override)
    return out


def user_error(err: BaseException) -> str | None:
    """The message of a user mistake (a ``ValueError`` / ``FileNotFoundError`` for bad input or config,
    also when Hydra's ``instantiate`` wrapped it), or None for an internal error."""
    seen = 0
    while err is not None and seen < 5:
        if isinstance(err, (ValueError, FileNotFoundError)):
            return str(err)
        err, seen = err.__cause__, seen + 1
    return None


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def run(cfg: DictConfig) -> float | None:
    """One run of ``python -m seqattn.run``: resume handling, training, the summary table."""
    check_trainer_options(cfg.trainer)
    if cfg.get("resume"):
        done = finished_run(cfg.resume)
        overrides = _command_line_overrides(exclude=("resume",))
        epochs = [int(o.split("=", 1)[1]) for o in overrides if o.split("=", 1)[0] == "trainer.max_epochs"]
        longer = epochs[-1] if epochs else None  # the last override wins, as in Hydra
        if done is not None and (longer is None or longer <= done["epochs"]):
            log.warning("resume=%s: the run already finished (%s epochs, metrics.json written); nothing to resume. To "
                        "train it further: resume=%s trainer.max_epochs=N with N > %s", cfg.resume, done["epochs"],
                        cfg.resume, done["epochs"])
            return None
        if done is not None:
            keep_previous_metrics(cfg.resume)
        cfg = resume_config(cfg.resume, overrides)
    metrics = train(cfg)
    _print_summary(metrics)
    monitor = cfg.objective.get("monitor")
    value = metrics.get(f"best_{monitor}")
    return float(value) if isinstance(value, (int, float)) else None  # for Hydra sweepers


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """``python -m seqattn.run``: a user mistake (``ValueError``: bad input or config) prints one clear
    message and exits 2; an internal error keeps its traceback. In a sweep (``-m``), a failed job is
    recorded in its folder (``failed.json``) and the sweep goes on; its summary marks it."""
    try:
        return run(cfg)
    except Exception as err:  # noqa: BLE001 -- reported below, by kind
        if _multirun():
            record_failure(Path(cfg.paths.output_dir), err)
            log.error("job failed (%s: %s); the sweep goes on, see %s", type(err).__name__, err,
                      Path(cfg.paths.output_dir) / "failed.json")
            return None
        message = user_error(err)
        if message is not None:
            print(f"seqattn.run: error: {message}", file=sys.stderr)
            sys.exit(2)
        raise


def cli() -> None:
    """The ``seqattn-run`` console script and ``python -m seqattn.run``: :func:`main`, then the end of the
    process without the teardown of the modules a run imports (``seqattn.cli.exit_without_teardown``)."""
    from seqattn.cli import exit_without_teardown

    main()
    exit_without_teardown(0)


if __name__ == "__main__":
    cli()
