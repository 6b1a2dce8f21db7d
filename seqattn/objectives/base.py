"""The shared LightningModule: builds the network from its config, one ``model_step``.

A checkpoint's hyper-parameters hold the resolved network config (plain dicts),
the label names and the optimizer config, so
``SequenceLabeling.load_from_checkpoint(path)`` rebuilds the model without Hydra.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


class Objective(L.LightningModule):
    """Base objective. Subclasses define ``loss``, ``predictions`` and ``make_metrics``.

    Args:
        net: a network config (dict with ``_target_``, e.g. ``seqattn.network.SequenceModel``)
            or an already built ``nn.Module`` (then it is not stored in the checkpoint's hparams).
        optimizer: config of a ``torch.optim`` class (``_target_``, lr, ...); params are added here.
        scheduler: optional config of a callable ``(optimizer, total_steps) -> LRScheduler``
            (``_partial_: true``), stepped every batch.
        labels: class names (index -> name), stored with the model.
        monitor, mode: the metric that picks the best checkpoint (used by callbacks).
    """

    def __init__(
        self,
        net: dict | nn.Module,
        optimizer: dict | None = None,
        scheduler: dict | None = None,
        labels: list[str] | None = None,
        monitor: str = "val/loss",
        mode: str = "min",
    ) -> None:
        super().__init__()
        optimizer = _plain(optimizer) or {"_target_": "torch.optim.AdamW", "lr": 1e-3}
        scheduler = _plain(scheduler)
        labels = list(labels) if labels is not None else None
        if isinstance(net, nn.Module):
            self.save_hyperparameters(ignore=["net"])
            self.net = net
        else:
            net = _plain(net)  # plain dicts: the checkpoint loads without Hydra or OmegaConf objects
            self.save_hyperparameters()
            self.net = instantiate(net, _convert_="all")
        self.optimizer_cfg, self.scheduler_cfg = optimizer, scheduler
        self.labels = labels
        # keys carry a suffix: a ModuleDict key "train" would shadow nn.Module.train
        self.metrics = nn.ModuleDict({f"{stage}_metrics": self.make_metrics() for stage in ("train", "val", "test")})

    run_config: dict | None = None  # the whole resolved run config, set by seqattn.run.train
    # parameter name -> learning-rate multiplier (fine-tuning: pretrained parts slower); set by seqattn.finetune
    lr_multipliers: dict[str, float] | None = None

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.run_config is not None:
            checkpoint["seqattn_config"] = self.run_config

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.run_config = checkpoint.get("seqattn_config")

    # --- to be defined by each objective ------------------------------------------------
    def make_metrics(self) -> nn.Module:
        raise NotImplementedError

    def loss(self, out: dict, batch: dict) -> torch.Tensor:
        raise NotImplementedError

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(preds, targets)`` flattened the way the metrics want them."""
        raise NotImplementedError

    def update_stage_metrics(self, stage: str, preds: torch.Tensor, targets: torch.Tensor) -> None:
        """Hook for metrics only some stages keep (e.g. per-class scores at test time)."""

    # --- shared ------------------------------------------------------------------------
    def forward(self, batch: dict, return_attention: bool | list[int] = False) -> dict:
        return self.net(batch, return_attention=return_attention)

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        out = self(batch)
        loss = self.loss(out, batch)
        preds, targets = self.predictions(out, batch)
        metrics = self.metrics[f"{stage}_metrics"]
        metrics.update(preds, targets)
        self.update_stage_metrics(stage, preds, targets)
        batch_size = out["logits"].shape[0]
        self.log(f"{stage}/loss", loss, prog_bar=stage != "test", on_step=stage == "train", on_epoch=True,
                 batch_size=batch_size)
        self.log_dict({f"{stage}/{k}": v for k, v in metrics.items()}, prog_bar=stage == "val", on_step=False,
                      on_epoch=True, batch_size=batch_size)
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self.model_step(batch, "train")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.model_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.model_step(batch, "test")

    def predict_step(self, batch: dict, batch_idx: int) -> dict:
        """Raw network output for ``seqattn.predict`` (objectives override with probabilities etc.)."""
        out = self(batch)
        return {"logits": out["logits"], "mask": out["mask"], "ids": batch.get("ids")}

    def parameter_groups(self) -> list:
        """The trainable parameters (frozen ones left out), grouped by ``lr_multipliers`` when set:
        ``[{"params": [...], "lr": lr * mult}, ...]``."""
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("no trainable parameters: everything is frozen (see the run's `freeze` option)")
        if not self.lr_multipliers:
            return [p for _, p in named]
        lr = self.optimizer_cfg.get("lr")
        if lr is None:
            raise ValueError(f"lr_multipliers need optimizer.lr; the optimizer config is {self.optimizer_cfg}")
        groups: dict[float, list] = {}
        for name, param in named:
            groups.setdefault(float(self.lr_multipliers.get(name, 1.0)), []).append(param)
        return [{"params": params, "lr": lr * mult} for mult, params in sorted(groups.items(), reverse=True)]

    def configure_optimizers(self):
        # partial, then called: Hydra would wrap a list of param-group dicts in an OmegaConf container
        optimizer = instantiate(self.optimizer_cfg, _partial_=True)(params=self.parameter_groups())
        if not self.scheduler_cfg:
            return optimizer
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = instantiate(self.scheduler_cfg)(optimizer, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
