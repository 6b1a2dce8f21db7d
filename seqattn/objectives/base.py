"""The shared LightningModule: builds the network from its config and the data's spec, one ``model_step``.

A checkpoint's hyper-parameters hold the resolved network config (plain dicts), the data's spec
(:class:`~seqattn.datakit.spec.DataSpec` as plain data: label names, vocabulary, target
statistics) and the optimizer config, so ``SequenceLabeling.load_from_checkpoint(path)`` rebuilds
the model without Hydra and without the training data.

Weight decay applies to weight matrices only (parameters of two or more dimensions), never to
biases, norms or learned positional tables.
"""

from __future__ import annotations

import inspect
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchmetrics import MeanMetric

from seqattn.datakit.spec import DataSpec
from seqattn.model.build import build_network
from seqattn.objectives.predictions import Prediction

#: parameter names that never get weight decay besides the 1-D ones (biases, norms, global tokens)
NO_DECAY_NAMES = ("positional.weight", "pos_table", "distance.weight", "crf.transitions")


def decays(name: str, param: torch.Tensor) -> bool:
    """Whether ``param`` gets weight decay: weight matrices (>= 2-D) except learned position / distance tables."""
    return param.dim() >= 2 and not any(name.endswith(n) for n in NO_DECAY_NAMES)


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def _is_text(value: Any) -> bool:
    """Whether ``value`` is a list or tuple of strings, or of lists / tuples of strings (sentences of words): data
    with no tensor in it, which a move to a device leaves as it is."""
    if not isinstance(value, (list, tuple)) or not value:
        return False
    if all(type(item) is str for item in value):
        return True
    return all(isinstance(item, (list, tuple)) and all(type(w) is str for w in item) for item in value)


def _no_graph_capture_check() -> None:
    """Stands in for an optimizer's CUDA-graph capture check when it updates CPU tensors only."""


def skip_graph_capture_check(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``optimizer``, without torch's CUDA/XPU graph-capture check in each ``step`` when every parameter it
    updates is on the CPU (a CPU update is never part of a device graph capture, which the check is about).

    ``Adam``, ``AdamW`` and others call ``_accelerator_graph_capture_health_check`` at every step; it asks
    ``torch.accelerator.current_accelerator(check_available=True)``, which Lightning (it sets
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` on import) sends to NVML: with a CUDA build of torch on a machine without
    a GPU, ``ctypes`` tries to load the NVML library again at every step, ~0.25 ms per step (the molecule
    recipe's steps are ~12-20 ms). Other optimizers and any parameter off the CPU keep the check."""
    if not hasattr(optimizer, "_accelerator_graph_capture_health_check"):
        return optimizer
    if all(p.device.type == "cpu" for group in optimizer.param_groups for p in group["params"]):
        optimizer._accelerator_graph_capture_health_check = _no_graph_capture_check
    return optimizer


class Objective(L.LightningModule):
    """Base objective. Subclasses define ``loss``, ``predictions`` and ``make_metrics``.

    Args:
        net: a network config (dict with ``_target_``, e.g. ``seqattn.model.network.SequenceModel``)
            or an already built ``nn.Module`` (then it is not stored in the checkpoint's hparams).
        spec: what the data told the model (a :class:`DataSpec` or its ``to_dict()``): fills the
            network's data-derived arguments (classes, vocabulary, feature sizes) and the objective's
            (label names, target statistics). None: everything comes from ``net`` and the arguments.
        optimizer: config of a ``torch.optim`` class (``_target_``, lr, ...); params are added here.
        scheduler: optional config of a callable ``(optimizer, total_steps) -> LRScheduler``
            (``_partial_: true``), stepped every batch.
        labels: class names (index -> name); default ``spec.labels``.
        monitor, mode: the metric that picks the best checkpoint (used by callbacks).
    """

    def __init__(
        self,
        net: dict | nn.Module,
        spec: dict | DataSpec | None = None,
        optimizer: dict | None = None,
        scheduler: dict | None = None,
        labels: list[str] | None = None,
        monitor: str = "val/loss",
        mode: str = "min",
    ) -> None:
        super().__init__()
        optimizer = _plain(optimizer) or {"_target_": "torch.optim.AdamW", "lr": 1e-3}
        scheduler = _plain(scheduler)
        data_spec = DataSpec.from_dict(_plain(spec))
        spec = data_spec.to_dict() if data_spec is not None else None  # plain data in the checkpoint
        if labels is None and data_spec is not None and data_spec.labels is not None:
            labels = list(data_spec.labels)
        labels = list(labels) if labels is not None else None
        if isinstance(net, nn.Module):
            self.save_hyperparameters(ignore=["net"], logger=False)  # the logger's record: on_fit_start
            self.net = net
        else:
            net = _plain(net)  # plain dicts: the checkpoint loads without Hydra or OmegaConf objects
            self.save_hyperparameters(logger=False)  # the logger's record: on_fit_start
            self.net = self.build_net(net, data_spec)
        self.spec = data_spec
        self.undefined_reasons: dict[str, str] = {}
        self.optimizer_cfg, self.scheduler_cfg = optimizer, scheduler
        self.labels = labels
        # keys carry a suffix: a ModuleDict key "train" would shadow nn.Module.train
        self.metrics = nn.ModuleDict({f"{stage}_metrics": self.make_metrics() for stage in ("train", "val", "test")})
        # val / test epoch loss: a weighted mean whose sums torchmetrics adds up across processes (DDP)
        self.epoch_loss = nn.ModuleDict({f"{stage}_loss": MeanMetric() for stage in ("val", "test")})

    run_config: dict | None = None  # the whole resolved run config, set by seqattn.run.train
    #: None when the objective's head predicts what a user asks for (``seqattn.load(...).predict``); else why
    #: not (a pretraining objective's head predicts its own training targets, not a task's)
    no_prediction: str | None = None
    # [C, C] test counts (row true, column predicted) once tested, None before (seqattn.model.protocols.TrainedModel)
    confusion_matrix: torch.Tensor | None = None
    # metric name -> why it is undefined (NaN) this run, e.g. ROC-AUC on a split with one class
    undefined_reasons: dict[str, str] = {}
    # parameter name -> learning-rate multiplier (fine-tuning: pretrained parts slower); set by seqattn.training.finetune
    lr_multipliers: dict[str, float] | None = None

    def on_fit_start(self) -> None:
        """The loggers' record of the hyper-parameters (the CSV logger's ``hparams.yaml``): all of them but the data's
        spec, which holds the vocabulary, characters and label maps and is summarised in one line instead. Lightning's
        own record wrote the whole spec as YAML at fit and again at test: on UD English-LinES (an 8,300-line spec)
        0.62 s + 0.43 s per run, growing with the vocabulary. Checkpoints keep every hyper-parameter, the spec too."""
        params = {key: value for key, value in self.hparams_initial.items() if key != "spec"}
        if self.spec is not None:
            params["data"] = self.spec.describe()
        for logger in self.loggers:
            logger.log_hyperparams(params)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Lightning's move of the batch to ``device``, with a dict batch's text (:func:`_is_text`: the words of its
        sentences, its example ids) passed through as it is: Lightning's walk visits every string with its
        collection checks, 1.65 ms per LinES batch of 64 sentences (~3 % of a training step)."""
        if isinstance(batch, dict):
            text = {key for key, value in batch.items() if _is_text(value)}
            if text:
                moved = super().transfer_batch_to_device({k: v for k, v in batch.items() if k not in text}, device,
                                                         dataloader_idx)
                return {key: batch[key] if key in text else moved[key] for key in batch}
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.run_config is not None:
            checkpoint["seqattn_config"] = self.run_config

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.run_config = checkpoint.get("seqattn_config")

    def build_net(self, net: dict, spec: DataSpec | None) -> nn.Module:
        """The network from its config and the data's spec (an objective that sizes a part itself
        overrides it)."""
        return build_network(net, spec)

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

    def loss_weight(self, out: dict, batch: dict) -> int:
        """How many examples this batch's loss averages over (the epoch loss weights batches by it):
        sequences by default; labeled tokens for token labeling."""
        return int(out["logits"].shape[0])

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        out = self(batch)
        loss = self.loss(out, batch)
        preds, targets = self.predictions(out, batch)
        metrics = self.metrics[f"{stage}_metrics"]
        metrics.update(preds, targets)
        self.update_stage_metrics(stage, preds, targets)
        weight = self.loss_weight(out, batch)
        if weight > 0:  # a batch with nothing labeled adds nothing to the epoch loss
            if stage == "train":
                self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=weight)
            else:  # the mean over every labeled example of the split, on every process together
                mean = self.epoch_loss[f"{stage}_loss"]
                mean.update(loss.detach().float(), weight)
                self.log(f"{stage}/loss", mean, prog_bar=stage == "val", on_step=False, on_epoch=True)
        self.log_dict({f"{stage}/{k}": v for k, v in metrics.items()}, prog_bar=stage == "val", on_step=False,
                      on_epoch=True, batch_size=int(out["logits"].shape[0]))
        return loss

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self.model_step(batch, "train")

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.model_step(batch, "val")

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.model_step(batch, "test")

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        """A typed :class:`Prediction` for ``seqattn.predict`` (each objective defines its kind)."""
        raise NotImplementedError

    def parameter_groups(self) -> list[dict]:
        """The trainable parameters (frozen ones left out) in groups ``{"params", "weight_decay"[, "lr"]}``:
        weight decay (``optimizer.weight_decay``) on weight matrices only (:func:`decays`), and the
        learning rate scaled by ``lr_multipliers`` (fine-tuning) when set."""
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("no trainable parameters: everything is frozen (see the run's `freeze` option)")
        lr = self.optimizer_cfg.get("lr")
        if self.lr_multipliers and lr is None:
            raise ValueError(f"lr_multipliers need optimizer.lr; the optimizer config is {self.optimizer_cfg}")
        weight_decay = float(self.optimizer_cfg.get("weight_decay", 0.0) or 0.0)
        groups: dict[tuple[float, bool], list] = {}
        for name, param in named:
            mult = float(self.lr_multipliers.get(name, 1.0)) if self.lr_multipliers else 1.0
            groups.setdefault((mult, decays(name, param)), []).append(param)
        out = []
        for (mult, decay), params in sorted(groups.items(), key=lambda kv: (-kv[0][0], not kv[0][1])):
            group = {"params": params, "weight_decay": weight_decay if decay else 0.0}
            if self.lr_multipliers:
                group["lr"] = lr * mult
            out.append(group)
        return out

    def build_optimizer(self) -> torch.optim.Optimizer:
        """``optimizer`` (the config) over :meth:`parameter_groups`, with torch's fastest update unless the
        config sets ``foreach`` or ``fused``: ``fused=True`` (one kernel per parameter; AdamW on CPU 0.52 vs
        1.31 ms per step of the molecule recipe's 138k parameters against ``foreach``, 1.9 ms for torch's
        default loop) where the optimizer takes it, every parameter is a float tensor on CPU or CUDA and the
        trainer does not run mixed precision (Lightning refuses gradient clipping with a fused optimizer under
        AMP: it unscales the gradients inside ``step``); else ``foreach=True`` where it is taken (one
        multi-tensor update, the loop's numbers to the last bit)."""
        # partial, then called: Hydra would wrap a list of param-group dicts in an OmegaConf container
        make = instantiate(self.optimizer_cfg, _partial_=True)
        extra = {}
        if not {"foreach", "fused"} & set(self.optimizer_cfg):
            takes = inspect.signature(make.func).parameters
            if "fused" in takes and self._fused_update_ok():
                extra["fused"] = True
            elif "foreach" in takes:
                extra["foreach"] = True
        return skip_graph_capture_check(make(params=self.parameter_groups(), **extra))

    def _fused_update_ok(self) -> bool:
        """Whether torch's fused optimizer step can take this model (see :meth:`build_optimizer`)."""
        params = [p for p in self.parameters() if p.requires_grad]
        if not params or any(not p.is_floating_point() or p.device.type not in ("cpu", "cuda") for p in params):
            return False
        trainer = getattr(self, "_trainer", None)
        return trainer is None or "mixed" not in str(getattr(trainer, "precision", ""))

    def _schedule_steps(self) -> int:
        """The run's length in optimizer steps, which ``objective.scheduler`` is built for; a run without one (no
        epoch limit and no step limit, or an endless training loader without ``trainer.max_steps``) is refused with
        what to set instead."""
        trainer = self.trainer
        total = trainer.estimated_stepping_batches
        if total == float("inf") or total <= 0:
            if trainer.max_epochs == -1:
                why = "trainer.max_epochs=-1 (no epoch limit) and no trainer.max_steps"
            else:
                why = "the training loader is endless (it has no length) and trainer.max_steps is not set"
            raise ValueError(
                f"objective.scheduler ({self.scheduler_cfg.get('_target_', self.scheduler_cfg)}) needs the run's "
                f"length in optimizer steps, and this run has none: {why}. Set trainer.max_epochs=N or "
                "trainer.max_steps=N, or objective.scheduler=null (a constant learning rate; budget.seconds then "
                "ends the run)")
        return int(total)

    def configure_optimizers(self):
        optimizer = self.build_optimizer()
        if not self.scheduler_cfg:
            return optimizer
        total = self._schedule_steps()
        scheduler = instantiate(self.scheduler_cfg)(optimizer, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
