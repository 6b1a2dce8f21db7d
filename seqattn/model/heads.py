"""Heads: encoder output ``[B, L, D]`` -> predictions.

Letters: b batch, l length, d width, c classes / targets.

- :class:`TokenHead` — one prediction per token (sequence labeling): ``[B, L, C]``.
- :class:`CTCHead` — per-token logits over the labels and a CTC blank: ``[B, L, 1 + C]``, blank first.
- :class:`PooledHead` — one prediction per sequence (classification / regression):
  pool ``[B, L, D] -> [B, D]`` (``mean`` | ``max`` | ``attention`` | ``cls`` | ``sum``), then ``[B, C]``.
  ``sum`` (over real tokens) suits extensive properties that grow with size (a molecule's polar surface).
  ``cls`` reads position 0, the global token :class:`~seqattn.model.network.SequenceModel` prepends
  when the head asks for it (``head.needs_global_token``).

``num_outputs`` comes from the data (``spec_fields``): configs leave it out.
"""

from __future__ import annotations

import torch
from torch import nn

from seqattn.model.protocols import HeadBase

POOLINGS = ("mean", "max", "attention", "cls", "sum")


def _mlp(dim: int, num_outputs: int, hidden: int | None, dropout: float) -> nn.Module:
    if num_outputs is None or int(num_outputs) <= 0:
        raise ValueError(f"num_outputs must be a positive int (number of classes/targets), got {num_outputs!r}")
    if not hidden:
        return nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, num_outputs))
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout),
                         nn.Linear(hidden, num_outputs))


class TokenHead(HeadBase):
    """Per-token logits. ``forward(x [B, L, D], mask [B, L] | None) -> [B, L, C]``."""

    per_token = True

    def __init__(self, dim: int, num_outputs: int, hidden: int | None = None, dropout: float = 0.0) -> None:
        super().__init__()
        self.num_outputs = int(num_outputs)
        self.net = _mlp(dim, num_outputs, hidden, dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(x)  # [B, L, C]


class CTCHead(TokenHead):
    """Per-frame logits for CTC: the blank at index 0, label ``c`` of the data at index ``c + 1``.

    ``forward(x [B, L, D], mask) -> [B, L, 1 + C]``; ``num_labels`` (C) comes from the data's spec,
    ``num_outputs`` is ``C + 1``. The objective (:mod:`seqattn.objectives.ctc`) owns the convention.
    """

    spec_fields = {"num_labels": "num_outputs"}
    blank = 0

    def __init__(self, dim: int, num_labels: int, hidden: int | None = None, dropout: float = 0.0) -> None:
        if num_labels is None or int(num_labels) <= 0:
            raise ValueError(f"num_labels must be a positive int (the label vocabulary), got {num_labels!r}")
        super().__init__(dim, int(num_labels) + 1, hidden, dropout)
        self.num_labels = int(num_labels)


class PooledHead(HeadBase):
    """Pool the sequence, then predict. ``forward(x [B, L, D], mask [B, L] | None) -> [B, C]``.

    Padding never enters the pool (mean over real tokens, max over real tokens,
    attention pooling with padded scores at ``-inf``).
    """

    per_token = False

    def __init__(
        self, dim: int, num_outputs: int, pooling: str = "mean", hidden: int | None = None, dropout: float = 0.0
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; expected one of {POOLINGS}")
        self.pooling = pooling
        self.needs_global_token = pooling == "cls"  # instance attribute: the declared hook, per pooling
        self.num_outputs = int(num_outputs)
        self.score = nn.Linear(dim, 1) if pooling == "attention" else None
        self.net = _mlp(dim, num_outputs, hidden, dropout)

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, L, D] -> [B, D]``."""
        if mask is None:
            mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        if self.pooling == "cls":
            return x[:, 0]  # the global token, always real
        m = mask.unsqueeze(-1)  # [B, L, 1]
        if self.pooling == "mean":
            return (x * m).sum(1) / m.sum(1).clamp_min(1)
        if self.pooling == "sum":
            return (x * m).sum(1)
        if self.pooling == "max":
            return x.masked_fill(~m, float("-inf")).amax(1).nan_to_num(neginf=0.0)
        scores = self.score(x).masked_fill(~m, float("-inf"))  # [B, L, 1]
        weights = torch.softmax(scores, dim=1).nan_to_num(0.0)  # empty sequence -> zeros
        return (weights * x).sum(1)  # [B, D]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(self.pool(x, mask))  # [B, C]
