"""Property prediction: one or more real-valued or binary targets per sequence (molecule, graph, text).

Batch: ``targets [B, T]`` float, ``NaN`` = missing label (masked out of loss and metrics);
network output ``logits [B, T]`` (a pooled head with ``num_outputs = T``).

Per target ``kind``:

- ``regression``: the network predicts the *standardised* target ``(y - mean) / std``; loss MSE
  on that scale; metrics RMSE and MAE in the original units. The kinds and ``mean`` / ``std`` come
  from the data (``DataSpec.target_kinds`` / ``target_mean`` / ``target_std``, statistics of the
  training split) and are saved in the checkpoint with the spec.
- ``classification``: binary, labels 0/1; loss BCE with logits; metric ROC-AUC.

Letters: b batch, t targets.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torchmetrics import Metric, MetricCollection
from torchmetrics.functional.classification import binary_auroc

from seqattn.objectives.base import Objective
from seqattn.objectives.predictions import Prediction

KINDS = ("regression", "classification")


class _MaskedColumnMetric(Metric):
    """A metric of one target column over its present (non-NaN) labels."""

    full_state_update = False

    def __init__(self, column: int) -> None:
        super().__init__()
        self.column = column

    def _present(self, preds: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p, t = preds[:, self.column], targets[:, self.column]
        keep = ~torch.isnan(t)
        return p[keep].float(), t[keep].float()


class MaskedRMSE(_MaskedColumnMetric):
    def __init__(self, column: int) -> None:
        super().__init__(column)
        self.add_state("sum_sq", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, targets: torch.Tensor) -> None:
        p, t = self._present(preds, targets)
        self.sum_sq += ((p - t).double() ** 2).sum()
        self.count += t.numel()

    def compute(self) -> torch.Tensor:
        return (self.sum_sq / self.count.clamp_min(1)).sqrt().float()


class MaskedMAE(MaskedRMSE):
    def update(self, preds: torch.Tensor, targets: torch.Tensor) -> None:
        p, t = self._present(preds, targets)
        self.sum_sq += (p - t).double().abs().sum()
        self.count += t.numel()

    def compute(self) -> torch.Tensor:
        return (self.sum_sq / self.count.clamp_min(1)).float()


class MaskedAUROC(_MaskedColumnMetric):
    """Binary ROC-AUC of one column; NaN when only one class is present."""

    def __init__(self, column: int) -> None:
        super().__init__(column)
        self.add_state("preds", [], dist_reduce_fx="cat")
        self.add_state("targets", [], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, targets: torch.Tensor) -> None:
        p, t = self._present(preds, targets)
        self.preds.append(p)
        self.targets.append(t)

    undefined: str | None = None  # why the last compute() gave NaN

    def compute(self) -> torch.Tensor:
        p = torch.cat(self.preds) if self.preds else torch.zeros(0)
        t = torch.cat(self.targets) if self.targets else torch.zeros(0)
        if t.numel() == 0 or t.min() == t.max():
            self.undefined = ("ROC-AUC is undefined: no labeled examples" if t.numel() == 0 else
                              f"ROC-AUC is undefined: every labeled example of the split is {int(t[0])}")
            return torch.tensor(float("nan"))
        self.undefined = None
        return binary_auroc(p, t.long())


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in str(name))


class PropertyPrediction(Objective):
    """Regression and/or binary classification of ``T`` targets per sequence, missing labels masked.

    Args (besides :class:`Objective`'s; ``labels`` are the target names):
        target_kinds: ``regression`` | ``classification``, one for all targets or a list of ``T``;
            default: the spec's, else ``regression``.
        target_mean, target_std: ``[T]`` training statistics for standardising regression targets
            (ignored for classification targets); default: the spec's, else 0 and 1.
    """

    def __init__(
        self,
        *args,
        target_kinds: str | Sequence[str] | None = None,
        target_mean: Sequence[float] | None = None,
        target_std: Sequence[float] | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        spec = self.spec
        if target_kinds is None:
            target_kinds = list(spec.target_kinds) if spec is not None and spec.target_kinds else "regression"
        if target_mean is None and spec is not None and spec.target_mean is not None:
            target_mean = list(spec.target_mean)
        if target_std is None and spec is not None and spec.target_std is not None:
            target_std = list(spec.target_std)
        t = self.num_targets
        kinds = [target_kinds] * t if isinstance(target_kinds, str) else list(target_kinds)
        if len(kinds) != t or any(k not in KINDS for k in kinds):
            raise ValueError(f"target_kinds must be one of {KINDS} or a list of {t} of them, got {target_kinds!r}")
        self.kinds = kinds
        mean = torch.zeros(t) if target_mean is None else torch.as_tensor(list(target_mean), dtype=torch.float32)
        std = torch.ones(t) if target_std is None else torch.as_tensor(list(target_std), dtype=torch.float32)
        if mean.shape != (t,) or std.shape != (t,):
            raise ValueError(f"target_mean / target_std must have {t} values (one per target), got "
                             f"{list(mean.shape)} / {list(std.shape)}")
        if (std <= 0).any() or not torch.isfinite(std).all() or not torch.isfinite(mean).all():
            raise ValueError(f"target_std must be finite and > 0 and target_mean finite, got mean={mean.tolist()}, "
                             f"std={std.tolist()}")
        is_reg = torch.tensor([k == "regression" for k in kinds])
        self.register_buffer("target_mean", torch.where(is_reg, mean, torch.zeros(t)))
        self.register_buffer("target_std", torch.where(is_reg, std, torch.ones(t)))
        self.register_buffer("is_regression", is_reg)
        self.metrics = torch.nn.ModuleDict({f"{s}_metrics": self._build_metrics() for s in ("train", "val", "test")})
        # the trivial baseline at test time: every regression target predicted as its training mean
        self.test_baseline = MetricCollection(
            {f"baseline_rmse_{_safe_name(n)}": MaskedRMSE(i) for i, (n, k) in enumerate(zip(self.target_names, kinds))
             if k == "regression"}, compute_groups=False)

    @property
    def num_targets(self) -> int:
        return int(self.net.head.num_outputs)

    @property
    def target_names(self) -> list[str]:
        return list(self.labels) if self.labels else [f"target{i}" for i in range(self.num_targets)]

    def make_metrics(self) -> MetricCollection:
        return MetricCollection({}, compute_groups=False)  # built in __init__ once the kinds are known

    def _build_metrics(self) -> MetricCollection:
        metrics = {}
        for i, (name, kind) in enumerate(zip(self.target_names, self.kinds)):
            name = _safe_name(name)
            if kind == "regression":
                metrics[f"rmse_{name}"] = MaskedRMSE(i)
                metrics[f"mae_{name}"] = MaskedMAE(i)
            else:
                metrics[f"auroc_{name}"] = MaskedAUROC(i)
        return MetricCollection(metrics, compute_groups=False)

    def on_test_epoch_start(self) -> None:
        self.test_baseline.reset()

    def update_stage_metrics(self, stage: str, preds: torch.Tensor, targets: torch.Tensor) -> None:
        if stage == "test" and len(self.test_baseline):
            self.test_baseline.update(self.target_mean.expand_as(targets), targets)

    def on_test_epoch_end(self) -> None:
        if len(self.test_baseline):
            self.log_dict({f"test/{k}": v for k, v in self.test_baseline.compute().items()})
        self.undefined_reasons = {}
        for name, metric in self.metrics["test_metrics"].items():
            if isinstance(metric, MaskedAUROC):
                metric.compute()
                if metric.undefined:
                    self.undefined_reasons[f"test/{name}"] = metric.undefined

    # -- scales ---------------------------------------------------------------------------------
    def standardize(self, targets: torch.Tensor) -> torch.Tensor:
        """Original units ``[B, T]`` -> the network's scale (regression columns standardised)."""
        return (targets - self.target_mean) / self.target_std

    def unstandardize(self, outputs: torch.Tensor) -> torch.Tensor:
        """Network outputs ``[B, T]`` -> original units for regression columns (logits unchanged)."""
        return outputs * self.target_std + self.target_mean

    def _check(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        if logits.dim() != 2 or targets.shape != logits.shape:
            raise ValueError(f"property prediction needs logits [B, T] and targets [B, T]; got {tuple(logits.shape)} "
                             f"and {tuple(targets.shape)} (use a pooled head with num_outputs = T)")

    # -- objective ------------------------------------------------------------------------------
    def loss(self, out: dict, batch: dict) -> torch.Tensor:
        logits, targets = out["logits"], batch["targets"].to(out["logits"].dtype)
        self._check(logits, targets)
        present = ~torch.isnan(targets)  # [B, T]
        y = torch.nan_to_num(self.standardize(targets))
        reg = self.is_regression.expand_as(targets)
        per = torch.where(reg, (logits - y) ** 2,
                          F.binary_cross_entropy_with_logits(logits, y.clamp(0, 1), reduction="none"))
        return (per * present).sum() / present.sum().clamp_min(1)

    def predict_values(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits [B, T]`` -> predictions in original units (regression) / probabilities (classification)."""
        return torch.where(self.is_regression, self.unstandardize(logits), torch.sigmoid(logits))

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return self.predict_values(out["logits"].detach()), batch["targets"]

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        out = self(batch)
        return Prediction("properties", self.predict_values(out["logits"].float()), names=self.target_names)
