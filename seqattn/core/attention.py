"""Multi-head self-attention.

Letters: b batch, l query length, s key length, d model width, h heads,
k q/k width per head (dim_k / h), v value width per head (dim_v / h).

``MultiHeadAttention`` = the seed's formula done right::

    head_i = softmax((x W_i^Q)(x W_i^K)ᵀ / √k) (x W_i^V)
    out    = concat(head_1, …, head_h) W^O

scaled by √(head width) — not √(total width) — with heads kept apart and a W^O
that maps ``dim_v`` back to ``dim`` (the three bugs of the seed's sample code).

With ``edge_dim > 0`` the layer also reads per-pair features (graph edges, ``c = edge_dim``) and adds
their projections to the keys and values (PyG ``TransformerConv(edge_dim=...)``, with separate key and
value projections)::

    score_ls = q_l · (k_s + e_ls W^EK) / √k,   out_l = Σ_s a_ls (v_s + e_ls W^EV)
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.attention_plan import AttentionPlan
from seqattn.core.kernels import check_kernel
from seqattn.core.plan import plan_layer
from seqattn.core.varlen import packed_linear

#: self-attention with rotary positions reads its q / k rows pair by pair and rotates with one complex product
#: (``MultiHeadAttention._project_rotated``); False: the half-width rotation of ``RotaryEmbedding.forward``
PAIRED_ROTARY = True


def check_heads(dim: int, heads: int, dim_k: int | None = None, dim_v: int | None = None) -> tuple[int, int]:
    """The query/key and value widths (``dim`` when None), checked: positive, and each split evenly over
    ``heads``. Raises ``ValueError`` naming the bad value."""
    dim_k = dim if dim_k is None else dim_k
    dim_v = dim if dim_v is None else dim_v
    if dim <= 0 or heads <= 0:
        raise ValueError(f"dim and heads must be positive, got dim={dim}, heads={heads}")
    for name, value in (("dim_k", dim_k), ("dim_v", dim_v)):
        if value % heads:
            raise ValueError(f"{name}={value} must be divisible by heads={heads}")
    return dim_k, dim_v


class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (``nn.Linear``).

    Args:
        dim: model width D (input and output).
        heads: number of heads H.
        dim_k: total q/k width (default ``dim``); must divide by ``heads``.
        dim_v: total value width (default ``dim``); must divide by ``heads``.
        dropout: attention dropout (training only), as ``dropout_mode`` says.
        dropout_mode: ``weights``: drop attention weights after the softmax (rescaled by ``1/(1-p)``);
            ``keys``: DropKey (Li et al. 2023), each query drops each key with probability ``p`` before the
            softmax (a token always keeps itself): one fused call with a ``[B, H, L, S]`` bool mask (CPU, one
            ``[64, 4, 32, 16]`` call with a padding mask, forward + backward: ~4.1 ms against ~3.2 ms for weights
            dropped with the cheap masks and ~2.3 ms without dropout); dense paths only.
        bias: bias in the four projections.
        kernel: default kernel, ``sdpa`` | ``math`` | ``linear`` | ``edge``.
        edge_dim: width C of the per-pair features ``edge_attr`` projected into key and value offsets
            (``edge_k_proj``, ``edge_v_proj``, no bias); 0 = none.
        scale: the score scale (``None`` = ``1/√k``, the default; ``1.0`` = un-scaled, sharper
            attention as in TENER 2019).
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
        edge_dim: int = 0,
        scale: float | None = None,
        dropout_mode: str = "weights",
    ) -> None:
        super().__init__()
        if dropout_mode not in ("weights", "keys"):
            raise ValueError(f"dropout_mode must be 'weights' or 'keys' (DropKey), got {dropout_mode!r}")
        self.dropout_mode = dropout_mode
        if scale is not None and not float(scale) > 0:
            raise ValueError(f"scale must be > 0 or None (1/sqrt(head width)), got {scale!r}")
        self.scale = None if scale is None else float(scale)
        dim_k, dim_v = check_heads(dim, heads, dim_k, dim_v)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dim, self.heads, self.dim_k, self.dim_v = dim, heads, dim_k, dim_v
        self.dropout = dropout
        self._pair_rows: torch.Tensor | None = None  # [2K+V] projection rows of _project_rotated (built on first use)
        self.kernel = check_kernel(kernel)
        self.q_proj = nn.Linear(dim, dim_k, bias=bias)
        self.k_proj = nn.Linear(dim, dim_k, bias=bias)
        self.v_proj = nn.Linear(dim, dim_v, bias=bias)
        self.out_proj = nn.Linear(dim_v, dim, bias=bias)
        if edge_dim < 0:
            raise ValueError(f"edge_dim must be >= 0, got {edge_dim}")
        self.edge_dim = int(edge_dim)
        self.edge_k_proj = nn.Linear(edge_dim, dim_k, bias=False) if edge_dim else None
        self.edge_v_proj = nn.Linear(edge_dim, dim_v, bias=False) if edge_dim else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
        for proj in (self.edge_k_proj, self.edge_v_proj):
            if proj is not None:
                proj.reset_parameters()

    def _qkv_weight(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One fused ``[2K+V, D]`` weight (and bias) for q, k and v (the parameters stay three nn.Linear)."""
        weight = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])  # [2K+V, D]
        bias = None
        if self.q_proj.bias is not None:
            bias = torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        return weight, bias

    def _project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        qkv = F.linear(x, *self._qkv_weight())  # [B, L, 2K+V]
        return qkv.split([self.dim_k, self.dim_k, self.dim_v], dim=-1)

    def _project_rotated(self, x: torch.Tensor, rotary: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, L, D]`` -> rotated ``q``, ``k`` ``[B, H, L, K/H]`` and ``v`` ``[B, H, L, V/H]``, the q / k dims of
        each head in ``rotary.pair_order()`` (the projection reads its rows in that order): the attention scores of
        :meth:`_project_self` + ``rotary(q, k)`` up to rounding, with one complex product for q and k together
        instead of strided half-width products (LinES' layer: 0.9 ms against 1.5 ms forward + backward)."""
        b, length, _ = x.shape
        width = self.dim_k // self.heads
        rows = self._pair_rows
        if rows is None or rows.device != x.device:
            order = rotary.pair_order()
            rows = torch.cat([g * width + order for g in range(2 * self.heads)]
                             + [torch.arange(2 * self.dim_k, 2 * self.dim_k + self.dim_v)]).to(x.device)
            self._pair_rows = rows  # [2K+V]: q and k rows pair by pair per head, v as it is
        weight, bias = self._qkv_weight()
        qkv = F.linear(x, weight.index_select(0, rows), None if bias is None else bias.index_select(0, rows))
        qk, v = qkv.split([2 * self.dim_k, self.dim_v], dim=-1)  # [B, L, 2K], [B, L, V]
        qk = rotary.rotate_pairs(qk.view(b, length, 2 * self.heads, width))  # [B, L, 2H, K/H]
        return qk[:, :, : self.heads].transpose(1, 2), qk[:, :, self.heads:].transpose(1, 2), self._split_heads(v)

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
        edge_attr: torch.Tensor | None = None,
        plan: AttentionPlan | None = None,
        attention_items: Sequence[int] | None = None,
        bias: torch.Tensor | None = None,
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
            edge_attr: per-pair features projected into key / value offsets (needs ``edge_dim``):
                ``[E, C]`` per edge of ``edge_index`` for ``kernel='edge'``, else dense ``[B, L, S, C]``
                (zeros where there is no pair).
            plan: an :class:`~seqattn.core.attention_plan.AttentionPlan` prepared once per forward (the
                encoder's): it replaces ``mask``, ``attn_mask``, ``edge_index``, ``edge_bias``, ``edge_attr``
                and ``kernel``; its padded query rows are zeros, and ``need_weights`` costs one
                recomputation (or nothing), not the math path. Without one, the layer builds the trivial
                plan of its arguments (:func:`seqattn.core.plan.plan_layer`): every call goes through
                :meth:`AttentionPlan.attend`.
            attention_items: with ``plan`` and ``need_weights``: the batch items whose weights are
                returned (default all).
            bias: a float score bias broadcastable to ``[B, H, L, S]`` (e.g. a relative position bias),
                added to the scores (see :meth:`AttentionPlan.attend`).

        Returns:
            ``[B, L, D]``, or ``(out [B, L, D], weights [B, H, L, S])`` when ``need_weights``.
        """
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be [B, L, D={self.dim}], got shape {tuple(x.shape)}")
        b, length, _ = x.shape
        if context is not None and (context.dim() != 3 or context.shape[0] != b or context.shape[-1] != self.dim):
            raise ValueError(f"context must be [B={b}, S, D={self.dim}], got shape {tuple(context.shape)}")
        src_len = length if context is None else context.shape[1]
        if plan is None:  # the trivial plan: the masks as given, over [L, S]
            plan = plan_layer(b, length, src_len, heads=self.heads, kernel=self.kernel if kernel is None else kernel,
                              mask=mask, attn_mask=attn_mask, edge_index=edge_index, edge_bias=edge_bias,
                              edge_attr=edge_attr, need_weights=need_weights)
        elif any(t is not None for t in (mask, attn_mask, edge_index, edge_bias, edge_attr, kernel)):
            raise ValueError("an attention plan carries the masks, graph and kernel: give either a plan or "
                             "mask / attn_mask / edge_index / edge_bias / edge_attr / kernel")
        elif (plan.key_length or plan.length) != src_len or plan.length != length:
            raise ValueError(f"the plan is for L={plan.length}, S={plan.key_length or plan.length}; the inputs "
                             f"have L={length}, S={src_len}")
        if plan.varlen is not None and plan.varlen.tokens is not None and context is None:
            # spread lengths: project the real tokens only (padded rows: zeros)
            return self._packed(x, plan.varlen.tokens, plan, rotary, need_weights, attention_items, bias)
        if (context is None and PAIRED_ROTARY and rotary is not None and hasattr(rotary, "rotate_pairs")
                and plan.edge_attr is None and rotary.head_dim * self.heads == self.dim_k and rotary.paired(x)):
            q, k, v = self._project_rotated(x, rotary)  # [B, H, L, K/H] x 2 (dims paired), [B, H, L, V/H]
        else:
            if context is None:
                q, k, v = self._project_self(x)  # [B, L, K], [B, L, K], [B, L, V]
            else:
                q, k, v = self.q_proj(x), self.k_proj(context), self.v_proj(context)
            q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)  # [B, H, L|S, K|V]
            if rotary is not None:
                q, k = rotary(q, k)
        edge_key, edge_value = self._edge_offsets(plan, b, length, src_len)
        out, weights = plan.attend(q, k, v, self.dropout if self.training else 0.0, self.scale, need_weights,
                                   attention_items, edge_key, edge_value, bias, drop_keys=self.dropout_mode == "keys")
        out = out.transpose(1, 2).reshape(b, length, self.dim_v)  # [B, H, L, V/H] -> [B, L, V]
        out = self.out_proj(out)  # [B, L, D]
        return (out, weights) if need_weights else out

    def _packed(self, x: torch.Tensor, tokens: torch.Tensor, plan: AttentionPlan, rotary: nn.Module | None,
                need_weights: bool, attention_items: Sequence[int] | None, bias: torch.Tensor | None = None):
        """The varlen plan's layer with the projections on the ``N`` real tokens ``tokens [N]``
        (flattened ``b·L + l``) only: ``x [B, L, D]`` -> ``[B, L, D]``, equal to the padded layer
        (padded rows: the output projection's bias, as ``out_proj`` of their zeroed attention)."""
        b, length, _ = x.shape
        # the real rows projected, padded rows zero; saves x, not a gathered copy of it
        qkv = packed_linear(x.reshape(b * length, self.dim), tokens, *self._qkv_weight()).view(b, length, -1)
        q, k, v = (self._split_heads(t) for t in qkv.split([self.dim_k, self.dim_k, self.dim_v], dim=-1))
        if rotary is not None:
            q, k = rotary(q, k)
        out, weights = plan.attend(q, k, v, self.dropout if self.training else 0.0, self.scale, need_weights,
                                   attention_items, bias=bias, drop_keys=self.dropout_mode == "keys")
        out = out.transpose(1, 2).reshape(b * length, self.dim_v)  # [B·L, V]: the kernel's output, kept by it
        # padded rows: the output bias alone, as out_proj of their zeroed attention
        out = packed_linear(out, tokens, self.out_proj.weight, self.out_proj.bias, fill_bias=True)
        out = out.view(b, length, self.dim)
        return (out, weights) if need_weights else out

    def _edge_offsets(self, plan: AttentionPlan, b: int, length: int,
                      src_len: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The plan's ``edge_attr`` -> per-head key and value offsets: ``[E, H, K/H]``, ``[E, H, V/H]``
        (edge path) or ``[B, H, L, S, K/H]``, ``[B, H, L, S, V/H]`` (dense math path)."""
        edge_attr = plan.edge_attr
        if edge_attr is None:
            return None, None
        if self.edge_k_proj is None:
            raise ValueError("edge_attr was given but this attention layer has edge_dim=0 (set edge_dim to its width)")
        h = self.heads
        if plan.path == "edge":
            if edge_attr.dim() != 2 or edge_attr.shape[1] != self.edge_dim:
                raise ValueError(f"edge_attr must be [E, C={self.edge_dim}] for kernel='edge', got "
                                 f"{tuple(edge_attr.shape)}")
            e = edge_attr.shape[0]
            return (self.edge_k_proj(edge_attr).view(e, h, self.dim_k // h),  # [E, H, K/H]
                    self.edge_v_proj(edge_attr).view(e, h, self.dim_v // h))  # [E, H, V/H]
        if edge_attr.dim() != 4 or tuple(edge_attr.shape[1:]) != (length, src_len, self.edge_dim) \
                or edge_attr.shape[0] not in (1, b):
            raise ValueError(f"edge_attr must be dense [B, L={length}, S={src_len}, C={self.edge_dim}] for "
                             f"kernel={plan.kernel!r}, got {tuple(edge_attr.shape)}")
        bb = edge_attr.shape[0]
        ek = self.edge_k_proj(edge_attr).view(bb, length, src_len, h, self.dim_k // h)  # [B, L, S, H, K/H]
        ev = self.edge_v_proj(edge_attr).view(bb, length, src_len, h, self.dim_v // h)  # [B, L, S, H, V/H]
        return ek.permute(0, 3, 1, 2, 4), ev.permute(0, 3, 1, 2, 4)  # [B, H, L, S, K/H], [B, H, L, S, V/H]


class GlobalLinearAttention(nn.Module):
    """SGFormer's simple global attention (Wu et al. 2023): every real token reads every real token of its
    batch item in ``O(L·D²)``, one head, no softmax. ``x [B, L, D]``, ``mask [B, L]`` (True = real) ->
    ``[B, L, D]`` (padding zero)::

        q, k, v = x W^Q, x W^K, x W^V           (padding rows zeroed)
        q̃ = q / ‖q‖_F,  k̃ = k / ‖k‖_F           (Frobenius norms over the item's N real tokens)
        out_l = (N v_l + q̃_l (k̃ᵀ v)) / (N + q̃_l · Σ_s k̃_s)

    i.e. weights ``a_ls = (N δ_ls + q̃_l · k̃_s) / (N + Σ_s' q̃_l · k̃_s')``: the token's own value plus every
    token's value weighed by its normalised score (``|q̃_l · k̃_s| ≤ 1``: the denominator stays ``≥ 0``;
    SGFormer's eq. 4 with the ``1/N`` multiplied out). The graph tasks mix it with the graph-masked attention
    (``Encoder(global_attention=w)``): a view beyond the neighbourhood at linear cost, SGFormer's GCN branch
    being the masked attention here.
    """

    def __init__(self, dim: int, bias: bool = True) -> None:
        super().__init__()
        self.q_proj = nn.Linear(dim, dim, bias=bias)
        self.k_proj = nn.Linear(dim, dim, bias=bias)
        self.v_proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, L, D]``, ``mask [B, L]`` bool (None = all real) -> ``[B, L, D]``."""
        b, length, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # [B, L, D] each
        if mask is None:
            n = x.new_full((b, 1, 1), float(length))  # [B, 1, 1]
        else:
            if mask.shape != (b, length):
                raise ValueError(f"mask must be [B={b}, L={length}] (True = real token), got {tuple(mask.shape)}")
            keep = mask.unsqueeze(-1).to(x.dtype)  # [B, L, 1]
            q, k, v = q * keep, k * keep, v * keep
            n = mask.sum(1).clamp_min(1).to(x.dtype).view(b, 1, 1)  # [B, 1, 1]
        tiny = torch.finfo(x.dtype).tiny
        q = q / q.flatten(1).norm(dim=1).clamp_min(tiny).view(b, 1, 1)  # [B, L, D], ‖q̃‖_F = 1 per item
        k = k / k.flatten(1).norm(dim=1).clamp_min(tiny).view(b, 1, 1)
        num = n * v + q @ (k.transpose(1, 2) @ v)  # [B, L, D]: (k̃ᵀ v) is [B, D, D]
        den = n + q @ k.sum(1).unsqueeze(-1)  # [B, L, 1]
        out = num / den
        return out if mask is None else out * keep
