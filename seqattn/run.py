"""Train, validate and test a recipe: ``python -m seqattn.run task=speech [overrides]``.

``train(cfg)`` does the work and returns the metrics (tests call it directly);
``main()`` is the Hydra entry point. A run directory holds ``config.yaml`` (the
resolved config), ``checkpoints/{best,last}.ckpt``, ``metrics.json`` (test metrics),
``csv/metrics.csv`` (per-epoch curves) and the task's figures.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

from seqattn.model.build import locate
from seqattn.training.callbacks import LastCheckpoint
from seqattn.training.distill import apply_distill
from seqattn.training.finetune import apply_finetune
from seqattn.training.resume import finished_run, keep_previous_metrics, resumable_train_loader, resume_config
from seqattn.training.sweep import record_failure

log = logging.getLogger("seqattn.run")

CONFIG_DIR = Path(__file__).resolve().parent.parent / "conf"  # a source checkout
if not (CONFIG_DIR / "config.yaml").is_file():  # an installed wheel ships conf/ as seqattn.conf
    import seqattn.conf as _conf

    CONFIG_DIR = Path(_conf.__file__).resolve().parent


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate every ``_target_`` entry of a config group (callbacks, loggers); nulls are skipped."""
    if not group:
        return []
    return [instantiate(node) for node in group.values() if node is not None and "_target_" in node]


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def build_objective(cfg: DictConfig, datamodule: L.LightningDataModule) -> L.LightningModule:
    """The objective with its network, built from the config and what the data says about itself.

    ``datamodule.spec()`` (a :class:`~seqattn.datakit.spec.DataSpec`: classes, label names,
    vocabulary, feature sizes, target statistics) fills the parts' data-derived arguments; the
    spec is saved in the checkpoint, so a loaded model maps inputs exactly as in training.
    Nothing is written into the config.
    """
    spec = datamodule.spec()
    log.info("data: %s", spec.describe())
    net_cfg = OmegaConf.to_container(cfg.net, resolve=True)
    objective = OmegaConf.to_container(cfg.objective, resolve=True)  # plain containers only in checkpoints
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


def plan_selection(cfg: DictConfig, sizes: dict[str, int]) -> str | None:
    """How the best checkpoint is chosen, given the data's split sizes; edits ``cfg`` for the run.

    - ``objective.monitor`` on ``val/`` with validation examples: as configured (early stopping, best by it);
    - no validation examples and the default monitor: train for ``trainer.max_epochs``, no early stopping,
      keep the last epoch's weights as ``best.ckpt`` -- and say so (returns the message);
    - a monitor named on the command line that the data cannot compute (no validation split, or a test
      metric): ``ValueError`` saying how to fix it;
    - ``objective.monitor=null``: the last epoch, as above.
    """
    monitor = cfg.objective.get("monitor")
    if monitor:
        split = str(monitor).split("/", 1)[0]
        if split not in ("train", "val"):
            raise ValueError(f"objective.monitor={monitor!r}: the model must be chosen on the training or validation "
                             "split (val/..., train/...), never on the test split")
        if split != "val" or sizes.get("val", 0) > 0:
            return None
        if _overridden("objective.monitor"):
            raise ValueError(f"objective.monitor={monitor!r} but the data has no validation examples (splits: {sizes}); "
                             "give it a validation split (data.val_fraction, a split column, data.val_path), monitor a "
                             "training metric (objective.monitor=train/loss_epoch), or objective.monitor=null to "
                             "train for trainer.max_epochs and keep the last checkpoint")
        reason = (f"no validation examples (splits: {sizes}): training for all {cfg.trainer.max_epochs} epochs without "
                  f"early stopping and keeping the last epoch as best.ckpt instead of choosing by {monitor}")
    else:
        reason = f"objective.monitor=null: training for all {cfg.trainer.max_epochs} epochs, keeping the last epoch"
    with open_dict(cfg):
        cfg.objective.monitor = None
        if cfg.get("callbacks"):
            for key in [k for k, v in cfg.callbacks.items() if v is not None and "EarlyStopping" in str(v.get("_target_"))]:
                cfg.callbacks[key] = None
        if not sizes.get("val", 0):
            cfg.trainer.limit_val_batches = 0
            cfg.trainer.num_sanity_val_steps = 0
    return reason


def plan_budget(cfg: DictConfig, datamodule: L.LightningDataModule,
                overridden: Callable[[str], bool] = lambda key: False) -> str | None:
    """``budget.steps``: the epochs (and early-stopping patience) that give about that many optimizer
    steps on this data; edits ``cfg.trainer.max_epochs`` and the patience, logs the plan. A
    ``trainer.max_epochs`` or ``callbacks.early_stopping.patience`` given on the command line
    (``overridden(key)``) wins for that value."""
    budget = cfg.get("budget") or {}
    steps = budget.get("steps")
    if not steps:
        return None
    if int(steps) <= 0:
        raise ValueError(f"budget.steps={steps} must be a positive number of optimizer steps (or null)")
    batches = len(datamodule.train_dataloader())
    accumulate = int(cfg.trainer.get("accumulate_grad_batches") or 1)
    per_epoch = max(1, math.ceil(batches / accumulate))
    epochs = max(int(budget.get("min_epochs", 1)), math.ceil(int(steps) / per_epoch))
    epochs = min(epochs, int(budget.get("max_epochs", 1000)))
    patience = max(int(budget.get("min_patience", 5)), round(float(budget.get("patience", 0.2)) * epochs))
    given_epochs, given_patience = overridden("trainer.max_epochs"), overridden("callbacks.early_stopping.patience")
    with open_dict(cfg):
        if given_epochs:
            epochs = int(cfg.trainer.max_epochs)
        cfg.trainer.max_epochs = epochs
        stopper = (cfg.get("callbacks") or {}).get("early_stopping")
        if stopper is not None:
            if given_patience:
                patience = int(stopper.patience)
            cfg.callbacks.early_stopping.patience = patience
    message = (f"budget.steps={steps}: {per_epoch} steps per epoch -> trainer.max_epochs={epochs}"
               + (" (given)" if given_epochs else "")
               + (f", early-stopping patience {patience}" + (" (given)" if given_patience else "")
                  if stopper is not None else ""))
    log.info("%s", message)
    return message


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
    torch.set_float32_matmul_precision(cfg.matmul_precision)
    threads = cfg.get("cpu_threads")
    if threads:  # tiny steps: intra-op threads only add synchronisation (each op waits for every thread)
        torch.set_num_threads(int(threads))
    L.seed_everything(cfg.seed, workers=True)
    out_dir = Path(cfg.paths.output_dir)
    # DDP: every rank runs this function; only rank 0 writes the run's files (Lightning's loggers and
    # checkpoints do the same), the other ranks only read the data and train
    is_rank_zero = rank_zero_only.rank == 0
    if is_rank_zero:
        out_dir.mkdir(parents=True, exist_ok=True)

    datamodule = instantiate(cfg.data)
    resumable_train_loader(datamodule)  # mid-epoch checkpoints resume exactly (seqattn.training.resume)
    datamodule.prepare_data()
    datamodule.setup("fit")
    length = plan_budget(cfg, datamodule, _overridden)
    selection = plan_selection(cfg, datamodule.split_sizes())
    if selection:
        log.warning("%s", selection)
    model = build_objective(cfg, datamodule)
    check_lengths(model, datamodule)
    finetune = apply_finetune(model, cfg)  # init_from / freeze / finetune.pretrained_lr_mult
    distill = apply_distill(model, cfg)  # distill.teacher / temperature / alpha
    if is_rank_zero:
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    model.run_config = OmegaConf.to_container(cfg, resolve=True)  # travels inside every checkpoint

    callbacks = _instantiate_all(cfg.get("callbacks"))
    if not cfg.trainer.get("enable_progress_bar", True):
        callbacks = [c for c in callbacks if not isinstance(c, L.pytorch.callbacks.ProgressBar)]
    loggers = _instantiate_all(cfg.get("logger"))
    trainer: L.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False,
                                     default_root_dir=str(out_dir))
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %s encoder, %.2fk parameters", type(model.net.encoder).__name__, n_params / 1e3)

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
        "fit_seconds": round(fit_seconds, 1),
        "best_checkpoint": best,
        "output_dir": str(out_dir),
    }
    if finetune:
        metrics["finetune"] = finetune
    if selection:
        metrics["selection"] = selection
    if length:
        metrics["budget"] = length
    if distill:
        metrics["distill"] = distill
    if checkpoint is not None and checkpoint.monitor and checkpoint.best_model_score is not None:
        metrics[f"best_{checkpoint.monitor}"] = _jsonable(checkpoint.best_model_score)
    if cfg.get("test"):
        results = trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=True)
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


if __name__ == "__main__":
    main()
