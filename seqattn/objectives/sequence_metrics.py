"""Metrics over label sequences: token error rate (edit distance) and exact-match rate.

The token error rate is ``(substitutions + deletions + insertions) / reference tokens``, summed
over the corpus (not averaged per utterance): the phone error rate (PER) when the tokens are phones,
the character error rate (CER) for characters, the word error rate (WER) for words. Its unit is
the *token* -- a multi-character phone such as ``sh`` counts once -- which torchmetrics'
``CharErrorRate`` on joined strings would get wrong.

Both metrics keep sum-reduced counts (``dist_reduce_fx="sum"``), so DDP processes add their
counts before the rate is computed. Inputs are padded ``[B, S]`` long tensors; negative values are
padding (-1 for decoded sequences, -100 for references).
"""

from __future__ import annotations

import torch
from torchmetrics import Metric

from seqattn.labels import edit_distance  # the shared helper (also used by the audio figures)


def unpad(rows: torch.Tensor) -> list[list[int]]:
    """``[B, S]`` padded with negative values -> lists of the non-negative entries."""
    rows = rows.detach().cpu()
    return [[int(v) for v in row.tolist() if v >= 0] for row in rows]


class TokenErrorRate(Metric):
    """Edit distance over tokens / reference tokens. ``update(preds [B, S'], targets [B, S])``."""

    full_state_update = False
    higher_is_better = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("errors", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor | None = None) -> None:
        """``keep [B]`` bool: count only those items (a subset, e.g. unseen speakers)."""
        chosen = range(preds.shape[0]) if keep is None else torch.nonzero(keep.cpu()).flatten().tolist()
        hyps, refs = unpad(preds), unpad(targets)
        for i in chosen:
            self.errors += edit_distance(hyps[i], refs[i])
            self.total += len(refs[i])

    def compute(self) -> torch.Tensor:
        return self.errors.float() / self.total.clamp_min(1).float()


class SequenceAccuracy(Metric):
    """Fraction of items whose decoded sequence equals the reference exactly."""

    full_state_update = False
    higher_is_better = True

    def __init__(self) -> None:
        super().__init__()
        self.add_state("correct", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, targets: torch.Tensor) -> None:
        for h, r in zip(unpad(preds), unpad(targets)):
            self.correct += int(h == r)
            self.total += 1

    def compute(self) -> torch.Tensor:
        return self.correct.float() / self.total.clamp_min(1).float()
