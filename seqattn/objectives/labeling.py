"""Sequence labeling: one label per token / frame / node.

Batch: ``labels [B, L]`` long with ``ignore_index`` (-100) on padding and unlabeled
positions; network output ``logits [B, L, C]``. Optionally ``subsets``: ``{name: bool mask
shaped like labels}``; at test time the accuracy on each subset is logged as
``test/acc_<name>`` (e.g. the ambiguous words of a tagging corpus).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MetricCollection
from torchmetrics.classification import (
    MulticlassAccuracy,
    MulticlassConfusionMatrix,
    MulticlassF1Score,
    MulticlassRecall,
)

from seqattn.core.tokens import IGNORE_INDEX
from seqattn.objectives.base import Objective


class SequenceLabeling(Objective):
    """Cross-entropy per token; token accuracy (micro) and macro-F1 over labeled tokens."""

    def __init__(self, *args, label_smoothing: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.label_smoothing = label_smoothing
        # accuracy of each class on its own (recall), at test time: shows *where* context helps
        self.test_per_class = MulticlassRecall(self.num_classes, average="none", ignore_index=IGNORE_INDEX)
        self.test_confusion = MulticlassConfusionMatrix(self.num_classes, ignore_index=IGNORE_INDEX)
        self.confusion_matrix: torch.Tensor | None = None  # [C, C] counts (row true, column predicted)
        self._subsets: dict | None = None  # the current test batch's subset masks
        self._subset_counts: dict[str, list[int]] = {}  # name -> [correct, total] over the test epoch

    def on_test_epoch_start(self) -> None:
        self.test_per_class.reset()
        self.test_confusion.reset()
        self._subset_counts = {}

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        self._subsets = batch.get("subsets") if stage == "test" else None
        return super().model_step(batch, stage)

    def update_stage_metrics(self, stage: str, preds: torch.Tensor, targets: torch.Tensor) -> None:
        if stage == "test":
            self.test_per_class.update(preds, targets)
            self.test_confusion.update(preds, targets)
            for name, subset in (self._subsets or {}).items():
                if subset.numel() != preds.numel():
                    raise ValueError(f"subset {name!r} must have the labels' shape, got {tuple(subset.shape)}")
                keep = subset.flatten().to(preds.device) & (targets != IGNORE_INDEX)  # same order as preds
                counts = self._subset_counts.setdefault(name, [0, 0])
                counts[0] += int((preds[keep] == targets[keep]).sum())
                counts[1] += int(keep.sum())

    def on_test_epoch_end(self) -> None:
        names = self.labels or [str(i) for i in range(self.num_classes)]
        per_class = self.test_per_class.compute()
        self.log_dict({f"test/acc_{name}": value for name, value in zip(names, per_class)})
        subsets = {f"test/acc_{name}": correct / total for name, (correct, total) in self._subset_counts.items()
                   if total}
        if subsets:
            self.log_dict(subsets)
        self.confusion_matrix = self.test_confusion.compute().cpu()

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
        if self._subset_counts:
            summary["subset_sizes"] = {name: total for name, (_, total) in self._subset_counts.items()}
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
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.flatten(), ignore_index=IGNORE_INDEX,
                               label_smoothing=self.label_smoothing)

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        return out["logits"].argmax(-1).flatten(), batch["labels"].flatten()  # [B·L], [B·L]

    def predict_step(self, batch: dict, batch_idx: int) -> dict:
        out = self(batch)
        probs = out["logits"].softmax(-1)  # [B, L, C]
        return {"pred": probs.argmax(-1), "prob": probs, "mask": out["mask"], "ids": batch.get("ids")}


class SequenceClassification(SequenceLabeling):
    """One label per sequence (sentence, image, graph): ``logits [B, C]``, ``labels [B]``.

    Same loss and metrics as :class:`SequenceLabeling` (accuracy, macro-F1, per-class test
    accuracy, test confusion matrix); the head must pool (``PooledHead``).
    """

    @staticmethod
    def _check(logits: torch.Tensor, labels: torch.Tensor) -> None:
        if logits.dim() != 2 or labels.shape != logits.shape[:1]:
            raise ValueError(
                f"sequence classification needs logits [B, C] and labels [B]; got {tuple(logits.shape)} "
                f"and {tuple(labels.shape)} (a per-token head with a per-sequence objective? use head=pooled)"
            )
