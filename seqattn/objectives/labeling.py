"""Sequence labeling (a label per token / frame / node) and sequence classification (a label per sequence).

Batch: ``labels [B, L]`` long with ``ignore_index`` (-100) on padding and unlabeled positions
(labeling) or ``labels [B]`` (classification); network output ``logits [B, L, C]`` / ``[B, C]``.
Optionally ``subsets``: ``{name: bool mask shaped like labels}``; at test time the accuracy on each
subset is logged as ``test/acc_<name>`` (e.g. the ambiguous words of a tagging corpus); the data's
spec names them (``DataSpec.subsets``), so their counts are synchronised across DDP processes.

Metrics: accuracy (micro: over labeled tokens), macro-F1; at test time the per-class accuracy
(recall) of every class that has test examples (``test/acc_<class>``; a class without test
examples is left out, not reported as 0) and the confusion matrix (rows true, columns predicted).
The epoch loss is the mean over labeled tokens (each batch weighted by its labeled tokens).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix, MulticlassF1Score

from seqattn.labels import IGNORE_INDEX
from seqattn.objectives.base import Objective
from seqattn.objectives.predictions import Prediction


class SubsetAccuracy(Metric):
    """Accuracy over the labeled tokens of one boolean subset (counts summed across processes)."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, targets: torch.Tensor, subset: torch.Tensor) -> None:
        keep = subset.flatten().to(preds.device) & (targets != IGNORE_INDEX)  # same order as preds
        self.correct += (preds[keep] == targets[keep]).sum()
        self.total += keep.sum()

    def compute(self) -> torch.Tensor:
        return self.correct.float() / self.total.clamp_min(1)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in str(name))


class SequenceLabeling(Objective):
    """Cross-entropy per token; token accuracy (micro) and macro-F1 over labeled tokens."""

    def __init__(self, *args, label_smoothing: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        self.test_confusion = MulticlassConfusionMatrix(self.num_classes, ignore_index=IGNORE_INDEX)
        self.confusion_matrix: torch.Tensor | None = None  # [C, C] counts (row true, column predicted)
        names = tuple(self.spec.subsets) if self.spec is not None else ()
        self.test_subsets = torch.nn.ModuleDict({_safe(n): SubsetAccuracy() for n in names})
        self._subsets: dict | None = None  # the current test batch's subset masks
        self._seen_subsets: set[str] = set()

    def on_test_epoch_start(self) -> None:
        self.test_confusion.reset()
        for metric in self.test_subsets.values():
            metric.reset()
        self._seen_subsets = set()

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        self._subsets = batch.get("subsets") if stage == "test" else None
        return super().model_step(batch, stage)

    def loss_weight(self, out: dict, batch: dict) -> int:
        """Labeled positions in the batch: the epoch loss is a mean over them, not over sequences."""
        return int((batch["labels"] != IGNORE_INDEX).sum())

    def update_stage_metrics(self, stage: str, preds: torch.Tensor, targets: torch.Tensor) -> None:
        if stage != "test":
            return
        self.test_confusion.update(preds, targets)
        for name, subset in (self._subsets or {}).items():
            if subset.numel() != preds.numel():
                raise ValueError(f"subset {name!r} must have the labels' shape, got {tuple(subset.shape)}")
            key = _safe(name)
            if key not in self.test_subsets:  # not declared by the data's spec: counted on this process only
                self.test_subsets[key] = SubsetAccuracy().to(preds.device)
            self.test_subsets[key].update(preds, targets, subset)
            self._seen_subsets.add(key)

    def on_test_epoch_end(self) -> None:
        names = self.labels or [str(i) for i in range(self.num_classes)]
        matrix = self.test_confusion.compute()  # [C, C], synchronised
        support = matrix.sum(1)
        recall = matrix.diagonal().float() / support.clamp_min(1)
        self.log_dict({f"test/acc_{_safe(name)}": recall[i] for i, name in enumerate(names) if support[i] > 0})
        subsets = {f"test/acc_{key}": metric.compute() for key, metric in self.test_subsets.items()
                   if key in self._seen_subsets}
        if subsets:
            self.log_dict(subsets)
        self.confusion_matrix = matrix.cpu()

    @property
    def num_classes(self) -> int:
        return self.net.head.num_outputs

    def make_metrics(self) -> MetricCollection:
        c = self.num_classes
        return MetricCollection({
            "acc": MulticlassAccuracy(c, average="micro", ignore_index=IGNORE_INDEX),
            "f1": MulticlassF1Score(c, average="macro", ignore_index=IGNORE_INDEX),
        })

    def test_summary(self) -> dict:
        """What ``seqattn.run`` adds to ``metrics.json`` after testing."""
        if self.confusion_matrix is None:
            return {}
        summary = {"labels": list(self.labels or range(self.num_classes)),
                   "confusion_matrix": self.confusion_matrix.tolist()}
        support = self.confusion_matrix.sum(1).tolist()
        absent = [name for name, n in zip(summary["labels"], support) if n == 0]
        if absent:
            summary["classes_without_test_examples"] = absent
        sizes = {key: int(self.test_subsets[key].total) for key in sorted(self._seen_subsets)}
        if sizes:
            summary["subset_sizes"] = sizes
        return summary

    @staticmethod
    def _check(logits: torch.Tensor, labels: torch.Tensor) -> None:
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise ValueError(
                f"sequence labeling needs logits [B, L, C] and labels [B, L]; got {tuple(logits.shape)} "
                f"and {tuple(labels.shape)} (is the adapter's framing the same as the data's?)"
            )

    def loss(self, out: dict, batch: dict) -> torch.Tensor:
        logits, labels = out["logits"], batch["labels"]
        self._check(logits, labels)
        if not bool((labels != IGNORE_INDEX).any()):  # nothing labeled here: no gradient, not NaN
            return logits.sum() * 0.0
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.flatten(), ignore_index=IGNORE_INDEX,
                               label_smoothing=self.label_smoothing)

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return out["logits"].argmax(-1).flatten(), batch["labels"].flatten()  # [B·L], [B·L]

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        out = self(batch)
        probs = out["logits"].float().softmax(-1)  # [B, L, C]
        return Prediction("labels", probs.argmax(-1), probs, out["mask"], self.labels)


class SequenceClassification(SequenceLabeling):
    """One label per sequence (sentence, image, graph, audio clip): ``logits [B, C]``, ``labels [B]``.

    Same loss and metrics as :class:`SequenceLabeling` (accuracy, macro-F1, per-class test
    accuracy, test confusion matrix); the head must pool (``PooledHead``).
    """

    def loss_weight(self, out: dict, batch: dict) -> int:
        return int(batch["labels"].shape[0])

    @staticmethod
    def _check(logits: torch.Tensor, labels: torch.Tensor) -> None:
        if logits.dim() != 2 or labels.shape != logits.shape[:1]:
            raise ValueError(
                f"sequence classification needs logits [B, C] and labels [B]; got {tuple(logits.shape)} "
                f"and {tuple(labels.shape)} (a per-token head with a per-sequence objective? use head=pooled)"
            )

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        out = self(batch)
        probs = out["logits"].float().softmax(-1)  # [B, C]
        return Prediction("label", probs.argmax(-1), probs, None, self.labels)
