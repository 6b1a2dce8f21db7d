"""Sequence to sequence with CTC: the network reads frames and decides how many labels it outputs.

Batch: ``labels [B, S]`` long, the data's label indices ``0..C-1`` of each target sequence, padded
with -100; ``label_lengths [B]``; optionally ``subsets`` ``{name: bool [B]}`` (e.g.
``unseen_speaker``). Network output: ``logits [B, F, 1 + C]`` per frame (``head=ctc``:
:class:`~seqattn.model.heads.CTCHead`) and ``mask [B, F]``; with time subsampling ``F`` is the
subsampled frame count (the mask says which frames are real, so the CTC input lengths follow).

**Blank: class 0.** Label ``c`` of the data is class ``c + 1``. A decoded class ``j > 0`` is label
``j - 1``; the blank is never output.

Loss: ``torch.nn.functional.ctc_loss`` on ``log_softmax`` (float32), each utterance's loss divided
by its target length, then averaged over the batch (torch's ``reduction="mean"``). A target that
cannot be aligned to its frames (fewer frames than labels plus repeated neighbours: a repeat needs
a blank between) has infinite loss; ``zero_infinity=true`` (default) zeroes it and its gradient,
and the count of such utterances is logged as ``<stage>/ctc_infeasible`` (and warned about) --
never silently dropped. Lower the subsampling factor if it is not 0.

Decoding (:mod:`seqattn.objectives.ctc_decoding`): ``decoder=greedy`` (best path) or ``beam``
(prefix beam search, ``beam_width``), for validation, test and predict; training batches are
decoded greedily. Metrics: ``ter`` = token error rate (edit distance over tokens / reference
tokens: PER for phones, CER for characters, WER for words), ``seq_acc`` = exact-match rate; at test
time also ``test/ter_greedy`` and ``test/ter_beam`` (both decoders on the same model) and
``test/ter_<subset>`` for the data's subsets (e.g. unseen speakers).

Letters: b batch, f frames, k classes (1 + C), s target length.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics import MetricCollection

from seqattn.objectives.base import Objective
from seqattn.objectives.ctc_decoding import beam_decode, greedy_decode, pad_sequences
from seqattn.objectives.labeling import _safe
from seqattn.objectives.predictions import Prediction
from seqattn.objectives.sequence_metrics import SequenceAccuracy, TokenErrorRate, unpad

log = logging.getLogger("seqattn.objectives.ctc")

BLANK = 0
DECODERS = ("greedy", "beam")


def repeats(labels: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Adjacent equal labels within each target: ``labels [B, S]``, ``lengths [B]`` -> ``[B]``."""
    if labels.shape[1] < 2:
        return torch.zeros(labels.shape[0], dtype=torch.long, device=labels.device)
    same = labels[:, 1:] == labels[:, :-1]  # [B, S-1]
    inside = torch.arange(1, labels.shape[1], device=labels.device)[None] < lengths[:, None]  # [B, S-1]
    return (same & inside).sum(1)


def min_frames(labels: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The fewest frames a CTC alignment of each target needs: its length plus its repeats."""
    return lengths + repeats(labels, lengths)


class CTCRecognition(Objective):
    """CTC over per-frame logits; token error rate and exact-match rate (see the module docstring).

    Args (besides :class:`~seqattn.objectives.base.Objective`'s; ``labels`` = the data's tokens):
        decoder: ``greedy`` | ``beam`` (validation, test and predict).
        beam_width: prefixes kept by the beam decoder.
        zero_infinity: zero the loss of utterances too short for their target (counted and logged).
    """

    def __init__(self, *args, decoder: str = "greedy", beam_width: int = 8, zero_infinity: bool = True,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r} is not one of {DECODERS}")
        if not isinstance(beam_width, int) or beam_width < 1:
            raise ValueError(f"beam_width must be an int >= 1, got {beam_width!r}")
        self.decoder, self.beam_width, self.zero_infinity = decoder, beam_width, bool(zero_infinity)
        outputs = int(self.net.head.num_outputs)
        if self.labels is not None and outputs != len(self.labels) + 1:
            raise ValueError(f"CTC needs one output per label plus the blank ({len(self.labels)} + 1), the head has "
                             f"{outputs}: use head=ctc (seqattn.model.heads.CTCHead)")
        if outputs < 2:
            raise ValueError(f"CTC needs at least one label besides the blank; the head has {outputs} output(s)")
        names = tuple(self.spec.subsets) if self.spec is not None else ()
        self.test_decoders = torch.nn.ModuleDict({f"ter_{d}": TokenErrorRate() for d in DECODERS})
        self.test_subsets = torch.nn.ModuleDict({_safe(n): TokenErrorRate() for n in names})
        self._seen_subsets: set[str] = set()
        self._stage = "train"
        self._infeasible = 0  # in the current batch
        self._epoch_infeasible: dict[str, int] = {}  # per stage, this epoch (on this process), for warnings
        self.examples: list[dict[str, Any]] = []  # a few test utterances: reference vs decoded

    @property
    def num_labels(self) -> int:
        return int(self.net.head.num_outputs) - 1

    def make_metrics(self) -> MetricCollection:
        return MetricCollection({"ter": TokenErrorRate(), "seq_acc": SequenceAccuracy()}, compute_groups=False)

    # -- loss -----------------------------------------------------------------------------------
    @staticmethod
    def _check(logits: torch.Tensor, labels: torch.Tensor) -> None:
        if logits.dim() != 3 or labels.dim() != 2 or labels.shape[0] != logits.shape[0]:
            raise ValueError(f"CTC needs per-frame logits [B, F, K] and label sequences [B, S]; got "
                             f"{tuple(logits.shape)} and {tuple(labels.shape)} (head=ctc, a per-frame head)")

    def log_probs(self, out: dict) -> torch.Tensor:
        """``[B, F, K]`` float32 log-softmax over the classes (blank = 0)."""
        return out["logits"].float().log_softmax(-1)

    def loss(self, out: dict, batch: dict) -> torch.Tensor:
        logits, labels = out["logits"], batch["labels"]
        self._check(logits, labels)
        lengths = batch["label_lengths"].to(labels.device)
        frames = out["mask"].sum(1)  # [B]
        self._infeasible = int((frames < min_frames(labels, lengths)).sum())
        targets = labels.clamp_min(-1) + 1  # data label c -> class c + 1; padding -> 0, beyond the lengths
        per = F.ctc_loss(self.log_probs(out).transpose(0, 1), targets, frames, lengths, blank=BLANK,
                         reduction="none", zero_infinity=self.zero_infinity)  # [F, B, K] -> [B]
        return (per / lengths.clamp_min(1).to(per.dtype)).mean()

    # -- decoding -------------------------------------------------------------------------------
    def decode(self, out: dict, decoder: str | None = None) -> list[list[int]]:
        """The decoded label sequences (data label indices) of a network output."""
        decoder = decoder or self.decoder
        lp = self.log_probs(out).detach()
        frames = out["mask"].sum(1)
        if decoder == "greedy":
            classes = greedy_decode(lp, frames, blank=BLANK)
        else:
            classes = beam_decode(lp, frames, self.beam_width, blank=BLANK)
        return [[c - 1 for c in seq] for seq in classes]

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(decoded [B, S'] padded with -1, targets [B, S] padded with -100)``."""
        decoder = "greedy" if self._stage == "train" else self.decoder
        decoded = pad_sequences(self.decode(out, decoder)).to(batch["labels"].device)
        if self._stage == "test":
            self._test_extras(out, batch, decoded)
        return decoded, batch["labels"]

    def _test_extras(self, out: dict, batch: dict, decoded: torch.Tensor) -> None:
        targets = batch["labels"]
        for d in DECODERS:
            same = pad_sequences(self.decode(out, d)) if d != self.decoder else decoded
            self.test_decoders[f"ter_{d}"].update(same, targets)
        for name, subset in (batch.get("subsets") or {}).items():
            key = _safe(name)
            if key not in self.test_subsets:  # not declared by the spec: counted on this process only
                self.test_subsets[key] = TokenErrorRate().to(decoded.device)
            self.test_subsets[key].update(decoded, targets, subset.to(torch.bool))
            if bool(subset.any()):
                self._seen_subsets.add(key)
        if len(self.examples) < 5:
            names = self.labels or [str(i) for i in range(self.num_labels)]
            ids = batch.get("ids") or [str(i) for i in range(decoded.shape[0])]
            for ident, hyp, ref in zip(ids, unpad(decoded), unpad(targets)):
                if len(self.examples) >= 5:
                    break
                self.examples.append({"id": ident, "reference": [names[k] for k in ref],
                                      "decoded": [names[k] for k in hyp]})

    # -- steps ----------------------------------------------------------------------------------
    def loss_weight(self, out: dict, batch: dict) -> int:
        return int(batch["labels"].shape[0])

    def model_step(self, batch: dict, stage: str) -> torch.Tensor:
        self._stage = stage
        loss = super().model_step(batch, stage)
        self.log(f"{stage}/ctc_infeasible", float(self._infeasible), reduce_fx="sum", on_step=False, on_epoch=True,
                 sync_dist=True, batch_size=int(batch["labels"].shape[0]))
        self._epoch_infeasible[stage] = self._epoch_infeasible.get(stage, 0) + self._infeasible
        return loss

    def _warn_infeasible(self, stage: str) -> None:
        n = self._epoch_infeasible.pop(stage, 0)
        if n:
            log.warning("%d %s utterance(s) this epoch have fewer frames than their target needs (length + repeats): "
                        "their CTC loss is %s; lower the time subsampling (net.subsample.factor)", n, stage,
                        "zeroed (zero_infinity)" if self.zero_infinity else "infinite")

    def on_train_epoch_end(self) -> None:
        self._warn_infeasible("train")

    def on_validation_epoch_end(self) -> None:
        self._warn_infeasible("val")

    def on_test_epoch_start(self) -> None:
        for metric in [*self.test_decoders.values(), *self.test_subsets.values()]:
            metric.reset()
        self._seen_subsets = set()
        self.examples = []

    def on_test_epoch_end(self) -> None:
        self._warn_infeasible("test")
        values = {f"test/{k}": m.compute() for k, m in self.test_decoders.items()}
        values.update({f"test/ter_{k}": m.compute() for k, m in self.test_subsets.items() if k in self._seen_subsets})
        self.log_dict(values)

    def test_summary(self) -> dict[str, Any]:
        """For ``metrics.json``: the label set, the decoder, a few decoded test utterances."""
        return {"labels": list(self.labels or []), "blank_index": BLANK, "decoder": self.decoder,
                "beam_width": self.beam_width, "test_examples": list(self.examples)}

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        self._stage = "predict"
        out = self(batch)
        return Prediction("sequence", pad_sequences(self.decode(out)), names=self.labels)
