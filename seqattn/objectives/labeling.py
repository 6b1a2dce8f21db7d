"""Sequence labeling (a label per token / frame / node) and sequence classification (a label per sequence).

Batch: ``labels [B, L]`` long with ``ignore_index`` (-100) on padding and unlabeled positions
(labeling) or ``labels [B]`` (classification); network output ``logits [B, L, C]`` / ``[B, C]``.
Optionally ``subsets``: ``{name: bool mask shaped like labels}``; at test time the accuracy on each
subset is logged as ``test/acc_<name>`` (e.g. the ambiguous words of a tagging corpus); the data's
spec names them (``DataSpec.subsets``), so their counts are synchronised across DDP processes.
Optionally ``groups``: ``{name: [B] long}``, each item's index into ``DataSpec.groups[name]`` (-1 =
none), e.g. its speaker; at test time the accuracy per group goes into ``metrics.json``
(``acc_per_speaker``, ``count_per_speaker``) and its worst / mean over groups is logged
(``test/acc_speaker_worst``, ``test/acc_speaker_mean``).

Distillation (:mod:`seqattn.objectives.distill`): with a teacher set (``distillation``), the training
loss is ``alpha · T² · KL(teacher_T ‖ student_T) + (1 − alpha) · CE`` over the labeled positions.

Consistency (:mod:`seqattn.objectives.consistency`, ``consistency > 0``, labeling only): each training step runs
the network ``consistency_views`` times (2 by default; each its own dropout draws); the loss is the mean of the
views' cross-entropies plus ``consistency`` × the squared distance of each view's probabilities from their sharpened mean
(``consistency_temperature``), over every real token, labeled or not (GRAND's regularisation: few labels).

CRF (:mod:`seqattn.objectives.crf`, ``crf=True``, labeling only): the logits are a linear-chain CRF's emissions; the
loss is ``−log p(gold sequence)`` per labelled token, validation / test / prediction decode the best sequence
(Viterbi), the training metrics read each token's argmax (decoding every training batch would cost a pass over
its length), and ``predict`` reports the CRF's marginals as the probabilities.

Mixup (:mod:`seqattn.objectives.mixup`, ``mixup = α > 0``, classification only): each training batch is mixed
with a permutation of itself on the adapter's tokens, and the loss weighs both items' labels by the mix.

Metrics: accuracy (micro: over labeled tokens), macro-F1; at test time the per-class accuracy
(recall) of every class that has test examples (``test/acc_<class>``; a class without test
examples is left out, not reported as 0) and the confusion matrix (rows true, columns predicted).
The epoch loss is the mean over labeled tokens (each batch weighted by its labeled tokens).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix, MulticlassF1Score

from seqattn.labels import IGNORE_INDEX
from seqattn.model.protocols import augmented_inputs
from seqattn.objectives.base import Objective
from seqattn.objectives.consistency import sharpened_consistency
from seqattn.objectives.crf import LinearChainCRF
from seqattn.objectives.distill import Distillation
from seqattn.objectives.mixup import Mix, draw_mix
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


class GroupAccuracy(Metric):
    """Accuracy per group (e.g. per speaker): ``correct`` and ``total`` counts ``[G]``, summed across
    processes. ``update(preds [N], targets [N], group [N])`` with group ``-1`` = none."""

    full_state_update = False

    def __init__(self, num_groups: int) -> None:
        super().__init__()
        self.num_groups = int(num_groups)
        self.add_state("correct", torch.zeros(self.num_groups, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.zeros(self.num_groups, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, targets: torch.Tensor, group: torch.Tensor) -> None:
        group = group.to(preds.device)
        keep = (group >= 0) & (group < self.num_groups) & (targets != IGNORE_INDEX)
        g = group[keep]
        self.correct += torch.bincount(g, weights=(preds[keep] == targets[keep]).float(),
                                       minlength=self.num_groups).long()
        self.total += torch.bincount(g, minlength=self.num_groups)

    def compute(self) -> torch.Tensor:
        """``[2, G]``: correct and total per group."""
        return torch.stack([self.correct, self.total])


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in str(name))


class SequenceLabeling(Objective):
    """Cross-entropy per token; token accuracy (micro) and macro-F1 over labeled tokens."""

    def __init__(self, *args, label_smoothing: float = 0.0, consistency: float = 0.0,
                 consistency_temperature: float = 0.5, consistency_views: int = 2, crf: bool = False,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = label_smoothing
        if isinstance(consistency, bool) or not float(consistency) >= 0.0:
            raise ValueError(f"consistency must be a weight >= 0 (0 = off), got {consistency!r}")
        if not 0.0 < float(consistency_temperature) <= 1.0:
            raise ValueError(f"consistency_temperature must lie in (0, 1], got {consistency_temperature!r}")
        if isinstance(consistency_views, bool) or not isinstance(consistency_views, int) or consistency_views < 2:
            raise ValueError(f"consistency_views must be an int >= 2 (dropout views per step), got {consistency_views!r}")
        #: weight of the consistency term over every real token (module docstring); 0 = off
        self.consistency, self.consistency_temperature = float(consistency), float(consistency_temperature)
        #: views per training step when ``consistency > 0`` (GRAND's S; each one more forward and backward)
        self.consistency_views = consistency_views
        if not isinstance(crf, bool):
            raise ValueError(f"crf must be true or false, got {crf!r}")
        if crf and (self.label_smoothing or self.consistency):
            raise ValueError(f"crf=true scores whole label sequences; label_smoothing={self.label_smoothing} and "
                             f"consistency={self.consistency} act on per-token probabilities: set them to 0")
        #: a linear-chain CRF over the logits (module docstring), or None
        self.crf = LinearChainCRF(self.num_classes) if crf else None
        self.test_confusion = MulticlassConfusionMatrix(self.num_classes, ignore_index=IGNORE_INDEX)
        self.confusion_matrix: torch.Tensor | None = None  # [C, C] counts (row true, column predicted)
        names = tuple(self.spec.subsets) if self.spec is not None else ()
        self.test_subsets = torch.nn.ModuleDict({_safe(n): SubsetAccuracy() for n in names})
        self._subsets: dict | None = None  # the current test batch's subset masks
        self._seen_subsets: set[str] = set()
        groups = dict(self.spec.groups) if self.spec is not None else {}
        self.group_names = {name: list(members) for name, members in groups.items() if members}
        self.test_groups = torch.nn.ModuleDict({_safe(n): GroupAccuracy(len(m)) for n, m in self.group_names.items()})
        self._groups: dict | None = None  # the current test batch's group indices
        self._labels_shape: tuple[int, ...] | None = None
        self.group_results: dict[str, dict[str, tuple[float, int]]] = {}

    #: a teacher to distil from (:mod:`seqattn.objectives.distill`); set by :meth:`set_distillation`
    distillation: Distillation | None = None

    def set_distillation(self, distillation: Distillation | None) -> None:
        """Train against ``distillation``'s teacher as well as the labels (None: the labels only).
        ``ValueError`` when the teacher's label set differs from this model's."""
        if distillation is not None and self.crf is not None:
            raise ValueError("crf=true with a distillation teacher: the teacher's per-token probabilities do not "
                             "match a sequence model; set objective.crf=false or leave distill.teacher unset")
        if distillation is not None:
            distillation.check_labels(self.labels, self.num_classes)
        self.distillation = distillation

    def on_test_epoch_start(self) -> None:
        self.test_confusion.reset()
        for metric in self.test_subsets.values():
            metric.reset()
        self._seen_subsets = set()
        for metric in self.test_groups.values():
            metric.reset()
        self.group_results = {}

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        self._subsets = batch.get("subsets") if stage == "test" else None
        self._groups = batch.get("groups") if stage == "test" else None
        self._labels_shape = tuple(batch["labels"].shape) if "labels" in batch else None
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
        for name, group in (self._groups or {}).items():
            key = _safe(name)
            if key not in self.test_groups:  # not declared by the data's spec: no names to report
                continue
            if group.dim() != 1 or self._labels_shape is None or group.shape[0] != self._labels_shape[0]:
                raise ValueError(f"groups[{name!r}] must be [B] (one index per item), got {tuple(group.shape)}")
            per_position = group.view(-1, *([1] * (len(self._labels_shape) - 1))).expand(self._labels_shape)
            self.test_groups[key].update(preds, targets, per_position.flatten())

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
        for name, members in self.group_names.items():
            correct, total = self.test_groups[_safe(name)].compute().cpu()  # [G] each, synchronised
            results = {m: (float(c) / float(t), int(t)) for m, c, t in zip(members, correct, total) if t > 0}
            if not results:
                continue
            self.group_results[name] = results
            accs = torch.tensor([acc for acc, _ in results.values()])
            self.log_dict({f"test/acc_{_safe(name)}_worst": accs.min(), f"test/acc_{_safe(name)}_mean": accs.mean()})

    @property
    def num_classes(self) -> int:
        return self.net.head.num_outputs

    def make_metrics(self) -> MetricCollection:
        c = self.num_classes
        # validate_args=False: the predictions are argmaxes and the loss, computed first in every step, has checked the
        # targets (cross-entropy raises on a class outside [0, C) other than the ignore index); torchmetrics' own checks
        # (torch.unique of both tensors) cost 0.07 ms an update at 34 nodes, 0.25 ms at 2,708 (2 metrics, one thread)
        return MetricCollection({
            "acc": MulticlassAccuracy(c, average="micro", ignore_index=IGNORE_INDEX, validate_args=False),
            "f1": MulticlassF1Score(c, average="macro", ignore_index=IGNORE_INDEX, validate_args=False),
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
        for name, results in self.group_results.items():
            summary[f"acc_per_{_safe(name)}"] = {m: round(acc, 6) for m, (acc, _) in results.items()}
            summary[f"count_per_{_safe(name)}"] = {m: n for m, (_, n) in results.items()}
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
        if self.crf is not None:
            return self.crf.nll(logits, labels, self._token_mask(out, labels))
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.flatten(), ignore_index=IGNORE_INDEX,
                             label_smoothing=self.label_smoothing)
        if self.consistency and self.training:
            ce = self._with_consistency(ce, out, batch)
        if self.distillation is None or not self.training:
            return ce
        inputs = augmented_inputs(self.net.adapter)  # the student's augmented view, if any (a declared hook)
        loss, soft = self.distillation.loss(ce, logits, batch, keep=labels != IGNORE_INDEX, inputs=inputs)
        weight = int((labels != IGNORE_INDEX).sum())
        if self._trainer is not None:  # called from a training loop
            self.log_dict({"train/loss_ce": ce.detach(), "train/loss_kd": soft.detach()}, on_step=False,
                          on_epoch=True, batch_size=weight)
        return loss

    def _with_consistency(self, ce: torch.Tensor, out: dict, batch: dict) -> torch.Tensor:
        """``consistency_views - 1`` more views of ``batch`` (the network again, each with its own dropout
        draws): the mean of the views' cross-entropies + ``consistency`` × :func:`sharpened_consistency` of
        the views' ``logits [B, L, C]`` over the real tokens ``out["mask"] [B, L]``."""
        logits, labels = out["logits"], batch["labels"]
        views, ces = [logits], [ce]
        for _ in range(self.consistency_views - 1):
            view = self(batch)["logits"]  # [B, L, C]
            views.append(view)
            ces.append(F.cross_entropy(view.reshape(-1, view.shape[-1]), labels.flatten(),
                                       ignore_index=IGNORE_INDEX, label_smoothing=self.label_smoothing))
        mask = self._token_mask(out, labels)
        agree = sharpened_consistency(views, mask, self.consistency_temperature)
        if self._trainer is not None:  # called from a training loop
            self.log("train/loss_consistency", agree.detach(), on_step=False, on_epoch=True,
                     batch_size=int(mask.sum()))
        return torch.stack(ces).mean() + self.consistency * agree

    @staticmethod
    def _token_mask(out: dict, labels: torch.Tensor) -> torch.Tensor:
        """The real tokens ``[B, L]``: the network's ``mask``, or every position when it gives none."""
        mask = out.get("mask")
        return torch.ones(labels.shape, dtype=torch.bool, device=labels.device) if mask is None else mask

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        if self.crf is not None and not self.training:  # the decoded sequence (while training: the argmax)
            preds = self.crf.decode(out["logits"], self._token_mask(out, batch["labels"]))
            return preds.flatten(), batch["labels"].flatten()
        return out["logits"].argmax(-1).flatten(), batch["labels"].flatten()  # [B·L], [B·L]

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        out = self(batch)
        if self.crf is not None:  # Viterbi labels, the CRF's marginals as the probabilities
            mask = out["mask"]
            return Prediction("labels", self.crf.decode(out["logits"], mask), self.crf.marginals(out["logits"], mask),
                              mask, self.labels)
        probs = out["logits"].float().softmax(-1)  # [B, L, C]
        return Prediction("labels", probs.argmax(-1), probs, out["mask"], self.labels)


class SequenceClassification(SequenceLabeling):
    """One label per sequence (sentence, image, graph, audio clip): ``logits [B, C]``, ``labels [B]``.

    Same loss and metrics as :class:`SequenceLabeling` (accuracy, macro-F1, per-class test
    accuracy, test confusion matrix); the head must pool (``PooledHead``).

    Args:
        mixup: ``α > 0``: mix each training batch with a permutation of itself, ``λ ~ Beta(α, α)``
            (:mod:`seqattn.objectives.mixup`; the training accuracy counts each item's own label, the one
            with weight ``max(λ, 1 − λ)``); 0 = off. Validation, test and prediction never mix.
    """

    def __init__(self, *args, mixup: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.crf is not None:
            raise ValueError("crf=true scores label sequences (SequenceLabeling); a sequence label has no "
                             "neighbouring labels, set crf=false")
        if self.consistency:
            raise ValueError(f"consistency={self.consistency}: the two-view consistency is per token "
                             "(SequenceLabeling); a sequence label has no unlabeled tokens to reach, set consistency=0")
        if isinstance(mixup, bool) or not isinstance(mixup, (int, float)) or not float(mixup) >= 0.0:
            raise ValueError(f"mixup must be a Beta concentration alpha >= 0 (0 = off, 0.2-0.4 usual), got {mixup!r}")
        #: mixup's alpha (0 = off)
        self.mixup = float(mixup)
        if self.mixup and "transform" not in inspect.signature(self.net.forward).parameters:
            raise ValueError(f"mixup={self.mixup} mixes the adapter's tokens through the network's `transform` "
                             f"argument, which {type(self.net).__name__}.forward does not take: set objective.mixup=0")
        self._mix: Mix | None = None  # the current training batch's mix

    def set_distillation(self, distillation: Distillation | None) -> None:
        if distillation is not None and self.mixup:
            raise ValueError(f"mixup={self.mixup} with a distillation teacher: the teacher would see the unmixed "
                             "inputs; set objective.mixup=0 or leave distill.teacher unset")
        super().set_distillation(distillation)

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        if stage != "train" or not self.mixup:
            return super().model_step(batch, stage)
        labels = batch["labels"]
        self._mix = draw_mix(self.mixup, int(labels.shape[0]), labels.device)
        try:
            return super().model_step(batch, stage)
        finally:
            self._mix = None

    def forward(self, batch: dict, return_attention: bool | list[int] = False) -> dict:
        if self._mix is None:
            return super().forward(batch, return_attention)
        return self.net(batch, return_attention=return_attention, transform=self._mix.tokens)

    def loss(self, out: dict, batch: dict) -> torch.Tensor:
        if self._mix is None:
            return super().loss(out, batch)
        logits, labels = out["logits"], batch["labels"]
        self._check(logits, labels)
        return self._mix.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, label_smoothing=self.label_smoothing)

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
