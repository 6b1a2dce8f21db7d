"""Train, validate and test a recipe: ``python -m seqattn.run task=speech [overrides]``.

``train(cfg)`` does the work and returns the metrics (tests call it directly);
``main()`` is the Hydra entry point. A run directory holds ``config.yaml`` (the
resolved config), ``checkpoints/{best,last}.ckpt``, ``metrics.json`` (test metrics),
``csv/metrics.csv`` (per-epoch curves) and the task's figures.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict

from seqattn.model.build import locate
from seqattn.training.finetune import apply_finetune
from seqattn.training.resume import resumable_train_loader, resume_config

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
    model = build_objective(cfg, datamodule)
    finetune = apply_finetune(model, cfg)  # init_from / freeze / finetune.pretrained_lr_mult
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

    checkpoint = next((c for c in callbacks if isinstance(c, L.pytorch.callbacks.ModelCheckpoint) and c.monitor),
                      None)
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
    if checkpoint is not None and checkpoint.best_model_score is not None:
        metrics[f"best_{checkpoint.monitor}"] = _jsonable(checkpoint.best_model_score)
    if cfg.get("test"):
        results = trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=True)
        metrics.update({k: _jsonable(v) for k, v in results[0].items()})
        if hasattr(model, "test_summary"):
            metrics.update(model.test_summary())
        if best:  # keep the in-memory model at the tested (best) weights for the figures
            model.load_state_dict(torch.load(best, map_location="cpu", weights_only=True)["state_dict"])
    if not trainer.is_global_zero:
        return metrics
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
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


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    if cfg.get("resume"):
        cfg = resume_config(cfg.resume, _command_line_overrides(exclude=("resume",)))
    metrics = train(cfg)
    _print_summary(metrics)
    monitor = cfg.objective.get("monitor")
    value = metrics.get(f"best_{monitor}")
    return float(value) if isinstance(value, (int, float)) else None  # for Hydra sweepers


if __name__ == "__main__":
    main()
