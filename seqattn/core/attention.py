"""Multi-head self-attention.

Letters: b batch, l query length, s key length, d model width, h heads,
k q/k width per head (dim_k / h), v value width per head (dim_v / h).

``MultiHeadAttention`` = the seed's formula done right::

    head_i = softmax((x W_i^Q)(x W_i^K)ᵀ / √k) (x W_i^V)
    out    = concat(head_1, …, head_h) W^O

scaled by √(head width) — not √(total width) — with heads kept apart and a W^O
that maps ``dim_v`` back to ``dim`` (the three bugs of the seed's sample code).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.kernels import check_kernel, scaled_dot_product_attention
from seqattn.core.masks import build_attention_mask
from seqattn.core.plan import AttentionPlan


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (``nn.Linear``).

    Args:
        dim: model width D (input and output).
        heads: number of heads H.
        dim_k: total q/k width (default ``dim``); must divide by ``heads``.
        dim_v: total value width (default ``dim``); must divide by ``heads``.
        dropout: dropout on the attention weights (training only).
        bias: bias in the four projections.
        kernel: default kernel, ``sdpa`` | ``math`` | ``linear`` | ``edge``.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        dim_k: int | None = None,
        dim_v: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        kernel: str = "sdpa",
    ) -> None:
        super().__init__()
        dim_k = dim if dim_k is None else dim_k
        dim_v = dim if dim_v is None else dim_v
        if dim <= 0 or heads <= 0:
            raise ValueError(f"dim and heads must be positive, got dim={dim}, heads={heads}")
        for name, value in (("dim_k", dim_k), ("dim_v", dim_v)):
            if value % heads:
                raise ValueError(f"{name}={value} must be divisible by heads={heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dim, self.heads, self.dim_k, self.dim_v = dim, heads, dim_k, dim_v
        self.dropout = dropout
        self.kernel = check_kernel(kernel)
        self.q_proj = nn.Linear(dim, dim_k, bias=bias)
        self.k_proj = nn.Linear(dim, dim_k, bias=bias)
        self.v_proj = nn.Linear(dim, dim_v, bias=bias)
        self.out_proj = nn.Linear(dim_v, dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)

    def _project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # one fused matmul for q, k and v (the parameters stay three separate nn.Linear)
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])  # [2K+V, D]
        bias = None
        if self.q_proj.bias is not None:
            bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        qkv = F.linear(x, weight, bias)  # [B, L, 2K+V]
        return qkv.split([self.dim_k, self.dim_k, self.dim_v], dim=-1)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, length, width = t.shape
        return t.view(b, length, self.heads, width // self.heads).transpose(1, 2)  # [B, H, L, width/H]

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        *,
        context: torch.Tensor | None = None,
        edge_index: torch.Tensor | None = None,
        edge_bias: torch.Tensor | None = None,
        rotary: nn.Module | None = None,
        kernel: str | None = None,
        plan: AttentionPlan | None = None,
        attention_items: Sequence[int] | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend.

        Args:
            x: ``[B, L, D]`` queries (and keys/values unless ``context`` is given).
            mask: ``[B, S]`` bool, True = real token (padding of the keys).
            attn_mask: ``[L, S]`` / ``[B, L, S]`` / ``[B, H, L, S]``; bool (True = may attend)
                or float additive bias.
            need_weights: also return the attention weights ``[B, H, L, S]``.
            context: ``[B, S, D]`` keys/values for cross-attention (default: ``x``).
            edge_index, edge_bias: graph structure for ``kernel='edge'`` (see ``kernels.edge_attention``).
            rotary: a ``RotaryEmbedding`` applied to q and k per head.
            kernel: override the module's default kernel for this call.
            plan: an :class:`~seqattn.core.plan.AttentionPlan` prepared once per forward (the encoder's):
                it replaces ``mask``, ``attn_mask``, ``edge_index``, ``edge_bias`` and ``kernel``; its
                padded query rows are zeros, and ``need_weights`` costs one recomputation (or nothing),
                not the math path.
            attention_items: with ``plan`` and ``need_weights``: the batch items whose weights are
                returned (default all).

        Returns:
            ``[B, L, D]``, or ``(out [B, L, D], weights [B, H, L, S])`` when ``need_weights``.
        """
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [B, L, D={self.dim}], got shape {tuple(x.shape)}")
        kernel = self.kernel if kernel is None else check_kernel(kernel)
        b, length, _ = x.shape
        if context is None:
            q, k, v = self._project_self(x)  # [B, L, K], [B, L, K], [B, L, V]
            src_len = length
        else:
            if context.dim() != 3 or context.shape[0] != b or context.shape[-1] != self.dim:
                raise ValueError(f"context must be [B={b}, S, D={self.dim}], got shape {tuple(context.shape)}")
            q, k, v = self.q_proj(x), self.k_proj(context), self.v_proj(context)
            src_len = context.shape[1]
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)  # [B, H, L|S, K|V]
        if rotary is not None:
            q, k = rotary(q, k)
        if plan is not None:
            if context is not None:
                raise ValueError("an attention plan is for self-attention; cross-attention takes masks")
            out, weights = plan.attend(q, k, v, self.dropout if self.training else 0.0, None, need_weights,
                                       attention_items)
            out = self.out_proj(out.transpose(1, 2).reshape(b, length, self.dim_v))  # [B, L, D]
            return (out, weights) if need_weights else out
        if mask is not None:
            if mask.dtype != torch.bool:
                raise ValueError(f"mask must be bool [B, S] (True = real token), got dtype {mask.dtype}")
            if mask.shape != (b, src_len):
                raise ValueError(f"mask must be [B, S] = ({b}, {src_len}), got {tuple(mask.shape)}")
        if attn_mask is not None and tuple(attn_mask.shape[-2:]) != (length, src_len):
            raise ValueError(f"attn_mask must end in (L, S) = ({length}, {src_len}), got {tuple(attn_mask.shape)}")
        kernel_mask = build_attention_mask(mask, attn_mask)  # None | [B|1, H|1, L|1, S]
        result = scaled_dot_product_attention(
            q,
            k,
            v,
            kernel_mask,
            kernel=kernel,
            dropout_p=self.dropout if self.training else 0.0,
            edge_index=edge_index,
            edge_bias=edge_bias,
            need_weights=need_weights,
        )
        out, weights = result if need_weights else (result, None)
        out = out.transpose(1, 2).reshape(b, length, self.dim_v)  # [B, H, L, V/H] -> [B, L, V]
        out = self.out_proj(out)  # [B, L, D]
        return (out, weights) if need_weights else out
