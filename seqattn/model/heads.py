"""Heads: encoder output ``[B, L, D]`` -> predictions.

Letters: b batch, l length, d width, c classes / targets.

- :class:`TokenHead` — one prediction per token (sequence labeling): ``[B, L, C]``.
- :class:`CTCHead` — per-token logits over the labels and a CTC blank: ``[B, L, 1 + C]``, blank first.
- :class:`PooledHead` — one prediction per sequence (classification / regression):
  pool ``[B, L, D] -> [B, D]`` (``mean`` | ``max`` | ``attention`` | ``cls`` | ``sum`` | ``mha`` | ``gru``),
  then ``[B, C]``. ``sum`` (over real tokens) suits extensive properties that grow with size (a molecule's
  polar surface). ``mha``: multi-head attention pooling by learned queries (:class:`QueryPool`, the
  Set Transformer's PMA). ``gru``: a recurrent attentive readout (:class:`GRUReadout`, as AttentiveFP's):
  a sequence state starts at the sum of the tokens and is refined ``pool_steps`` times by attending over
  the tokens with it and updating it with a GRU cell.
  ``cls`` reads position 0, the global token :class:`~seqattn.model.network.SequenceModel` prepends
  when the head asks for it (``head.needs_global_token``).

``num_outputs`` comes from the data (``spec_fields``): configs leave it out.
"""

from __future__ import annotations

import torch
from torch import nn

from seqattn.core.dropout import Dropout
from seqattn.model.protocols import HeadBase

POOLINGS = ("mean", "max", "attention", "cls", "sum", "mha", "gru")


def _mlp(dim: int, num_outputs: int, hidden: int | None, dropout: float) -> nn.Module:
    if num_outputs is None or int(num_outputs) <= 0:
        raise ValueError(f"num_outputs must be a positive int (number of classes/targets), got {num_outputs!r}")
    if not hidden:
        return nn.Sequential(Dropout(dropout), nn.Linear(dim, num_outputs))
    return nn.Sequential(Dropout(dropout), nn.Linear(dim, hidden), nn.GELU(), Dropout(dropout),
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


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax of ``scores`` over ``dim`` where ``mask`` (broadcastable, True = real); a row with no real
    entry gives zeros (never NaN)."""
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)
    return weights.nan_to_num(0.0)


class QueryPool(nn.Module):
    """Multi-head attention pooling by ``queries`` learned query vectors (the Set Transformer's PMA).

    ``forward(x [B, L, D], mask [B, L]) -> [B, queries·D]``: per query and head ``h``,
    ``softmax_l(q_h · k_lh / √(D/H)) v_lh`` over the real tokens (keys and values projected from ``x``), the
    heads concatenated and projected by ``W^O``; the queries' outputs concatenated. Padding never enters
    (a sequence with no real token pools to ``W^O``'s bias). Invariant to permutations of the tokens.
    """

    def __init__(self, dim: int, heads: int = 4, queries: int = 1) -> None:
        super().__init__()
        if heads <= 0 or dim % heads:
            raise ValueError(f"pool_heads must be a positive divisor of the width {dim}, got {heads}")
        if queries <= 0:
            raise ValueError(f"pool_queries must be a positive int, got {queries}")
        self.heads, self.num_queries = heads, queries
        self.query = nn.Parameter(torch.randn(queries, dim) * dim ** -0.5)  # [Q, D]
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, l, d = x.shape
        h, q = self.heads, self.num_queries
        k, v = self.kv(x).view(b, l, 2, h, d // h).unbind(2)  # [B, L, H, D/H] each
        qh = self.query.view(q, h, d // h)  # [Q, H, D/H]
        scores = torch.einsum("qhd,blhd->bhql", qh, k) * (d // h) ** -0.5  # [B, H, Q, L]
        weights = _masked_softmax(scores, mask[:, None, None, :], -1)  # [B, H, Q, L]
        pooled = torch.einsum("bhql,blhd->bqhd", weights, v).reshape(b, q, d)  # [B, Q, D]
        return self.out(pooled).reshape(b, q * d)  # [B, Q·D]


class GRUReadout(nn.Module):
    """A recurrent attentive readout (AttentiveFP's, Xiong et al. 2019).

    ``forward(x [B, L, D], mask [B, L]) -> [B, D]``: the state ``s = relu(Σ_l x_l)`` over the real tokens;
    then ``steps`` times: scores ``e_l = leaky_relu(a · [W_s s, W_x x_l])``, ``c = elu(Σ_l softmax(e)_l W_x x_l)``,
    ``s = relu(GRU(c, s))``. Padding never enters; invariant to permutations of the tokens.
    """

    def __init__(self, dim: int, steps: int = 2) -> None:
        super().__init__()
        if steps <= 0:
            raise ValueError(f"pool_steps must be a positive int (readout iterations), got {steps}")
        self.steps = steps
        self.state_proj = nn.Linear(dim, dim, bias=False)
        self.token_proj = nn.Linear(dim, dim)
        self.score = nn.Linear(2 * dim, 1)
        self.gru = nn.GRUCell(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1)  # [B, L, 1]
        state = (x * m).sum(1).relu()  # [B, D]
        tokens = self.token_proj(x)  # [B, L, D]
        for _ in range(self.steps):
            s = self.state_proj(state).unsqueeze(1).expand_as(tokens)  # [B, L, D]
            scores = nn.functional.leaky_relu(self.score(torch.cat([s, tokens], -1)), 0.2)  # [B, L, 1]
            weights = _masked_softmax(scores, m, 1)  # [B, L, 1]
            context = nn.functional.elu((weights * tokens).sum(1))  # [B, D]
            state = self.gru(context, state).relu()  # [B, D]
        return state


class PooledHead(HeadBase):
    """Pool the sequence, then predict. ``forward(x [B, L, D], mask [B, L] | None) -> [B, C]``.

    Padding never enters the pool (mean over real tokens, max over real tokens,
    attention pooling with padded scores at ``-inf``).

    ``pool_heads`` / ``pool_queries``: heads and learned queries of ``mha`` pooling (the pooled vector is
    ``queries·D`` wide); ``pool_steps``: iterations of the ``gru`` readout. Other poolings ignore them.
    """

    per_token = False

    def __init__(
        self, dim: int, num_outputs: int, pooling: str = "mean", hidden: int | None = None, dropout: float = 0.0,
        pool_heads: int = 4, pool_queries: int = 1, pool_steps: int = 2,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; expected one of {POOLINGS}")
        self.pooling = pooling
        self.needs_global_token = pooling == "cls"  # instance attribute: the declared hook, per pooling
        self.num_outputs = int(num_outputs)
        self.score = nn.Linear(dim, 1) if pooling == "attention" else None
        self.readout = (QueryPool(dim, pool_heads, pool_queries) if pooling == "mha"
                        else GRUReadout(dim, pool_steps) if pooling == "gru" else None)
        width = dim * pool_queries if pooling == "mha" else dim
        self.net = _mlp(width, num_outputs, hidden, dropout)

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, L, D] -> [B, D]`` (``mha``: ``[B, pool_queries·D]``)."""
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
        if self.readout is not None:
            return self.readout(x, mask)  # [B, D] (mha: [B, Q·D])
        scores = self.score(x).masked_fill(~m, float("-inf"))  # [B, L, 1]
        weights = torch.softmax(scores, dim=1).nan_to_num(0.0)  # empty sequence -> zeros
        return (weights * x).sum(1)  # [B, D]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(self.pool(x, mask))  # [B, C]
