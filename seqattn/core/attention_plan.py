"""One forward's attention, prepared: :class:`AttentionPlan` and the one table from path to kernel.

Letters: b batch, h heads, l query length, s key length, d head width, e edges, c edge-feature width.

The planner (:mod:`seqattn.core.plan`) describes a batch, picks a path and prepares its masks once;
every layer then calls :meth:`AttentionPlan.attend`, which looks its path up in :data:`KERNEL_OF_PATH`
and does no host synchronisation. Paths, each equal to the dense reference (``math`` with the mask
of :meth:`AttentionPlan.reference_mask`), values and gradients (tests prove it):

- ``none``: nothing masked: the fused kernel without a mask.
- ``dense``: the fused kernel with one prepared mask (float, converted once).
- ``math``: the reference kernel with one prepared mask (``kernel='math'``; per-pair edge features on
  the dense graph path; a layer called alone that asks for its weights).
- ``causal``: ``is_causal=True`` (no mask; with right padding a real query never sees padding).
- ``band``: local windows (1-D ``window``, 2-D ``grid_window``, with ``causal``, padding and global
  tokens): blocked band kernel (:mod:`seqattn.core.band`), cost ``T·(g + span)`` pairs.
- ``varlen``: padding only, lengths spread: one fused call per length bucket (:mod:`seqattn.core.varlen`).
- ``biased``: graph edges with a learned bias (dense blocks): the fused kernel with the bias
  gradient computed only at the edges (:mod:`seqattn.core.fused`).
- ``edge``: the O(E) sparse edge kernel (large graphs; :mod:`seqattn.core.graph_cost` chooses).
- ``linear``: linear attention (padding only).
- ``flex``: FlexAttention block masks (CUDA, when asked; :mod:`seqattn.core.flex`).

A plan also carries the per-pair edge features (``edge_attr``: ``[E, C]`` per edge on the ``edge``
path, dense ``[B, L, S, C]`` on the ``math`` path); :class:`~seqattn.core.attention.MultiHeadAttention`
projects them into key / value offsets and hands them to :meth:`AttentionPlan.attend`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from seqattn.core.band import BandLayout, band_attention
from seqattn.core.dropout import keep_mask
from seqattn.core.fused import SMALL_LENGTH, FlashAttentionCPU, SmallBiasedAttention, cpu_flash_available, \
    cpu_flash_on, weights_from_lse
from seqattn.core.graph_cost import edges_to_dense
from seqattn.core.kernels import cpu_dropout_attention, edge_attention, edge_weights_to_dense, linear_attention, \
    linear_attention_weights, math_attention, takes_cpu_dropout
from seqattn.core.masks import additive_mask, combine_masks, dead_rows, revive_dead_rows, structure_mask
from seqattn.core.varlen import VarlenLayout, varlen_attention

#: what each path computes, for :meth:`AttentionPlan.summary`
_WHAT = {"none": "no mask", "dense": "dense mask", "math": "dense mask", "causal": "causal", "band": "band",
         "varlen": "spread lengths", "biased": "graph with a learned edge bias", "edge": "graph edges",
         "linear": "linear attention", "flex": "FlexAttention block mask"}


@dataclass
class AttentionPlan:
    """One forward's attention: the path and everything prepared for it (see the module docstring).

    ``pairs``: query-key pairs per head the path computes; ``allowed_pairs``: pairs the structure
    allows (``None`` when not counted); both for cost reports (GFLOP/s = 14·pairs·d per head, fwd+bwd).
    ``reason``: why a faster path was not taken (a fallback), or None.
    """

    path: str
    kernel: str
    batch: int
    length: int
    heads: int
    key_length: int | None = None  # S of cross-attention (None: S = L)
    mask: torch.Tensor | None = None  # [B, L] bool padding (True = real)
    kernel_mask: torch.Tensor | None = None  # broadcastable [B, H, L, S] (bool or float)
    dead: torch.Tensor | None = None  # [B|1, H|1, L, 1] bool: rows zeroed after the kernel
    band: BandLayout | None = None
    varlen: VarlenLayout | None = None
    causal: bool = False
    edge_index: torch.Tensor | None = None
    edge_bias: torch.Tensor | None = None
    edge_attr: torch.Tensor | None = None  # [E, C] (edge path) or [B, L, S, C] (math path)
    flat: torch.Tensor | None = None  # [E, H] positions of edge_bias in the [B, H, L, L] mask
    bias_mask: torch.Tensor | None = None  # differentiable float mask (biased path off CPU / with dropout)
    block_mask: Any = None  # FlexAttention
    graph_path: str | None = None
    pairs: int | None = None
    allowed_pairs: int | None = None
    reason: str | None = None
    structure: dict = field(default_factory=dict)  # window, grid, grid_window, causal, num_global, device
    _cache: dict = field(default_factory=dict, repr=False)

    # -- masks --------------------------------------------------------------------------------
    def mask_for(self, dtype: torch.dtype) -> torch.Tensor | None:
        """The kernel mask in the form the fused kernel takes: float masks in ``dtype``, and bool
        masks with more than one query row converted to ``dtype`` once (SDPA would on every call)."""
        m = self.kernel_mask
        if m is None:
            return None
        if m.dtype == torch.bool and m.shape[-2] == 1:
            return m
        key = ("kernel", dtype)
        if key not in self._cache:
            self._cache[key] = additive_mask(m, dtype) if m.dtype == torch.bool else m.to(dtype)
        return self._cache[key]

    def reference_mask(self) -> torch.Tensor | None:
        """The dense mask (broadcastable ``[B, H, L, S]``; bool, or float with the graph bias) that
        this plan's path equals, with padded query rows left to :attr:`dead` (built on demand, cached)."""
        if "reference" in self._cache:
            return self._cache["reference"]
        if self.path in ("dense", "math", "biased", "linear", "none"):
            ref = self.kernel_mask
        else:
            st = self.structure
            struct = structure_mask(self.length, num_global=st.get("num_global", 0), window=st.get("window"),
                                    grid=st.get("grid"), grid_window=st.get("grid_window"),
                                    causal=st.get("causal", False), device=self._device())
            ref = None if struct is None else struct[None, None]
            if self.path == "edge":
                ref = edges_to_dense(self.edge_index, None if self.edge_bias is None else self.edge_bias.detach(),
                                     self.batch, self.length, self.heads, torch.float32)
                ref = ref[:, None] if ref.dtype == torch.bool else ref
            if self.mask is not None:
                ref = combine_masks(ref, self.mask[:, None, None, :])
        self._cache["reference"] = ref
        return ref

    def _device(self) -> torch.device | None:
        for t in (self.mask, self.kernel_mask, self.edge_index):
            if t is not None:
                return t.device
        return self.structure.get("device")

    # -- attend -------------------------------------------------------------------------------
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
               scale: float | None = None, need_weights: bool = False, items: Sequence[int] | None = None,
               edge_key: torch.Tensor | None = None,
               edge_value: torch.Tensor | None = None,
               bias: torch.Tensor | None = None,
               drop_keys: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``q [B, H, L, D]``, ``k [B, H, S, D]``, ``v [B, H, S, E]`` -> ``(out [B, H, L, E], weights | None)``.

        ``need_weights``: also the exact weights ``[B', H, L, S]`` (no gradient) of this layer, for
        the batch ``items`` asked (default all): from the kernel, the fused call's logsumexp or one
        recomputation, never by running the layer on the math path.
        ``edge_key`` / ``edge_value``: the key / value offsets of :attr:`edge_attr` (``[E, H, .]`` on
        the ``edge`` path, ``[B, H, L, S, .]`` on the ``math`` path).
        ``bias``: a float additive score bias broadcastable to ``[B, H, L, S]`` (a learned relative
        position bias, :class:`~seqattn.core.positional.RelativePositionBias`), added to this plan's
        :meth:`reference_mask`; every path but ``edge``, ``linear``, ``biased`` and ``flex`` then runs
        the fused kernel with that one dense float mask (its gradient reaches ``bias``).
        ``drop_keys``: ``dropout_p`` drops keys before the softmax instead of weights after it (DropKey, each
        query its own draw, a token always keeping itself), as one dense mask on the fused kernel: the dense
        paths only (not ``edge``, ``linear``, ``biased``, ``flex``, nor with edge features).
        """
        if (edge_key is not None or edge_value is not None) and self.path not in ("math", "edge"):
            raise ValueError(f"per-pair key / value offsets need the 'math' or 'edge' path, not {self.path!r}")
        if bias is not None:
            if self.path in ("edge", "linear", "biased", "flex") or edge_key is not None or edge_value is not None:
                raise ValueError(f"an additive attention bias needs a dense path (none, dense, math, causal, band, "
                                 f"varlen) without edge features, not {self.path!r}")
            if bias.dim() != 4 or bias.shape[-2:] != (q.shape[-2], k.shape[-2]):
                raise ValueError(f"bias must be [B|1, H|1, L={q.shape[-2]}, S={k.shape[-2]}], got {tuple(bias.shape)}")
        if drop_keys and dropout_p > 0.0:
            if self.path in ("edge", "linear", "biased", "flex") or edge_key is not None or edge_value is not None:
                raise ValueError(f"key dropout (attn_dropout_mode=keys) needs a dense path without edge features, "
                                 f"not {self.path!r}: use attn_dropout_mode=weights here")
            out, weights, lse = self._dense_dropped_keys(q, k, v, dropout_p, scale, need_weights, bias)
        elif bias is not None:
            out, weights, lse = self._dense_biased(q, k, v, dropout_p, scale, need_weights, bias)
        else:
            out, weights, lse = KERNEL_OF_PATH[self.path](self, q, k, v, dropout_p, scale, need_weights, edge_key,
                                                          edge_value)
        return self._finish(out, weights, lse, q, k, scale, need_weights, items)

    def _finish(self, out, weights, lse, q, k, scale, need_weights, items):
        """Zero the dead rows; the weights of the ``items`` asked, when asked."""
        if self.dead is not None:
            out = out.masked_fill(self.dead, 0.0)
        if not need_weights:
            return out, None
        sel = None if items is None else torch.as_tensor(list(items), dtype=torch.long, device=q.device)
        if weights is None:  # only the rows asked for
            weights = self._weights(q, k, scale, lse, sel)
        elif sel is not None:
            weights = weights.index_select(0, sel)
        if self.dead is not None:
            dead = self.dead if (sel is None or self.dead.shape[0] == 1) else self.dead.index_select(0, sel)
            weights = weights.masked_fill(dead, 0.0)
        return out, weights

    def _dense_biased(self, q, k, v, dropout_p, scale, need_weights, bias):
        """Any dense structure plus a float ``bias``: one ``[B|1, H, L, S]`` float mask (the reference mask's
        ``-inf`` kept, dead rows revived; :meth:`attend` zeroes them), the fused kernel or (weights) math."""
        ref = self.reference_mask()
        mask = combine_masks(None if ref is None else ref.to(q.device), bias.to(q.dtype))
        mask = revive_dead_rows(mask, dead_rows(mask))  # no host sync; dead rows are zeroed by attend
        if need_weights or self.path == "math":
            out, weights = math_attention(q, k, v, mask, dropout_p, scale)
            return out, (weights.detach() if need_weights else None), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale), None, None

    def _dense_dropped_keys(self, q, k, v, dropout_p, scale, need_weights, bias):
        """DropKey: this plan's dense mask AND a fresh ``[B, H, L, S]`` draw keeping each key with probability
        ``1 - dropout_p`` (the diagonal always kept when ``L == S``), plus ``bias``; the fused kernel, or math
        for weights. Rows left without a key (the plan's dead rows; padded queries the draw emptied) give zeros."""
        b, h, length, s = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
        keep, _ = keep_mask((b, h, length, s), dropout_p, q.device)  # the cheap CPU draws: ~0.15 vs ~0.96 ms (rand)
        if length == s:
            keep |= torch.eye(length, dtype=torch.bool, device=q.device)
        ref = self.reference_mask()
        if ref is not None:  # a float mask is filled where keys drop: its full shape first
            ref = ref.to(q.device) if ref.dtype == torch.bool else ref.to(q.device).expand(b, h, length, s)
        mask = combine_masks(ref, keep)
        if bias is not None:
            mask = combine_masks(mask, bias.to(q.dtype).expand(b, h, length, s))
        dead = dead_rows(mask)  # [B, H, L, 1]: the plan's dead rows, and padded queries left without a key
        mask = revive_dead_rows(mask, dead)
        if need_weights or self.path == "math":
            out, weights = math_attention(q, k, v, mask, 0.0, scale)
            return out.masked_fill(dead, 0.0), (weights.masked_fill(dead, 0.0).detach() if need_weights else None), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).masked_fill(dead, 0.0), None, None

    def _differentiable_mask(self) -> torch.Tensor:
        dense = edges_to_dense(self.edge_index, self.edge_bias, self.batch, self.length, self.heads,
                               self.edge_bias.dtype)
        dense = combine_masks(dense, self.structure.get("extra_mask"))
        if self.dead is not None:
            dense = dense.masked_fill(self.dead, 0.0)
        return dense

    def _weights(self, q, k, scale, lse, sel) -> torch.Tensor:
        def pick(t):
            return t if (sel is None or t is None or t.shape[0] == 1) else t.index_select(0, sel)

        q, k = pick(q), pick(k)
        if lse is not None:
            lse, lse_mask = lse
            return weights_from_lse(q, k, pick(lse_mask), pick(lse), scale)
        ref = pick(self.reference_mask())
        with torch.no_grad():
            if ref is not None:
                ref = revive_dead_rows(ref, dead_rows(ref))
            _, weights = math_attention(q, k, q.new_zeros(q.shape[:-1] + (1,)), ref, 0.0, scale)
        return weights

    # -- reports ------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What ran, for logs and benchmarks."""
        return {"path": self.path, "kernel": self.kernel, "graph_path": self.graph_path, "pairs": self.pairs,
                "allowed_pairs": self.allowed_pairs, "reason": self.reason}

    def summary(self, depth: int | None = None) -> str:
        """One human line: what the structure is, the kernel that computes it, and for a fallback its
        reason, e.g. ``attention: band ±64 via the CPU flash kernel, 4 layers``."""
        line = f"attention: {self._what()} via {self._via()}"
        if self.reason:
            line += f" ({self.reason})"
        if depth is not None:
            line += f", {depth} layer{'' if depth == 1 else 's'}"
        return line

    def _what(self) -> str:
        st, what = self.structure, _WHAT[self.path]
        if self.path == "band":
            if st.get("window") is not None:
                what = f"band ±{st['window']}"
            else:
                what = f"grid window {st['grid_window']}×{st['grid_window']}"
            what += " causal" if st.get("causal") else ""
        elif self.path == "varlen":
            what += f" ({len(self.varlen.buckets)} length buckets)"
        elif self.path in ("dense", "math") and self.edge_index is not None:
            what = "graph adjacency as a dense mask"
        if st.get("num_global"):
            what += f" + {st['num_global']} global token{'' if st['num_global'] == 1 else 's'}"
        if self.edge_attr is not None:
            what += " with edge features"
        return what

    def _via(self) -> str:
        cpu = cpu_flash_on(self._device())
        fused = "the CPU flash kernel" if cpu else "the fused kernel (scaled_dot_product_attention)"
        return {"none": fused, "dense": fused, "math": "the math reference kernel", "causal": f"{fused}, is_causal",
                "band": "the CPU flash kernel" if cpu else "the blocked band kernel",
                "varlen": f"{fused}, one call per bucket", "biased": f"{fused}, bias gradient at the edges",
                "edge": "the O(E) edge kernel", "linear": "the elu+1 feature map, O(L)",
                "flex": "flex_attention"}[self.path]


# --------------------------------------------------------------------------- the kernel of each path
# Each takes (plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value) and returns
# (out [B, H, L, E], weights [B, H, L, S] | None, (lse, lse_mask) | None).


def _none_or_dense(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    mask = plan.mask_for(q.dtype)
    if takes_cpu_dropout(q, dropout_p) and not need_weights:
        # the fused CPU kernel has no dropout: the math path with the cheap masks, not torch's bernoulli draws
        return cpu_dropout_attention(q, k, v, mask, dropout_p, scale), None, None
    if need_weights and cpu_flash_available(q, dropout_p):
        # the same fused kernel, called directly: it also returns the logsumexp
        if mask is not None and mask.dtype == torch.bool:  # the op takes an additive mask
            mask = additive_mask(mask, q.dtype)
        out, lse = FlashAttentionCPU.apply(q, k, v, mask, scale, None, None, None, None)
        return out, None, (lse, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale), None, None


def _math(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    out, weights = math_attention(q, k, v, plan.kernel_mask, dropout_p, scale, edge_key, edge_value)
    return out, (weights.detach() if need_weights else None), None


def _causal(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, is_causal=True), None, None


def _band(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    return band_attention(q, k, v, plan.band, dropout_p, scale), None, None


def _varlen(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    return varlen_attention(q, k, v, plan.varlen, dropout_p, scale, causal=plan.causal), None, None


def _biased(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    scale_value = q.shape[-1] ** -0.5 if scale is None else scale
    mask = plan.mask_for(q.dtype)
    if q.device.type == "cpu" and dropout_p == 0.0:
        if plan.length <= SMALL_LENGTH:
            out, weights = SmallBiasedAttention.apply(q, k, v, mask, scale_value, plan.edge_bias, plan.flat)
            return out, (weights if need_weights else None), None
        if cpu_flash_available(q):
            src, dst = plan.edge_index
            out, lse = FlashAttentionCPU.apply(q, k, v, mask, scale, plan.edge_bias, src, dst, plan.flat)
            return out, (weights_from_lse(q, k, mask, lse, scale) if need_weights else None), None
    # elsewhere (CUDA, dropout): the fused kernel with the differentiable mask
    if plan.bias_mask is None:
        plan.bias_mask = plan._differentiable_mask()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=plan.bias_mask.to(q.dtype), dropout_p=dropout_p,
                                         scale=scale)
    return out, None, None


def _edge(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    # kernel_mask: a [B, 1, 1, L] key padding mask when the plan left the padded sources to the kernel
    out, alpha, kept = edge_attention(q, k, v, plan.edge_index, plan.kernel_mask, dropout_p, scale, plan.edge_bias,
                                      edge_key, edge_value)
    weights = edge_weights_to_dense(alpha.detach(), kept, plan.batch, plan.length) if need_weights else None
    return out, weights, None


def _linear(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    out = linear_attention(q, k, v, plan.kernel_mask)
    weights = None
    if need_weights:
        with torch.no_grad():
            weights = linear_attention_weights(q, k, plan.kernel_mask)
    return out, weights, None


def _flex(plan, q, k, v, dropout_p, scale, need_weights, edge_key, edge_value):
    from seqattn.core.flex import flex_attention_for

    return flex_attention_for(q, k, v, plan.block_mask, scale), None, None


#: the one table from path to kernel
KERNEL_OF_PATH: dict[str, Callable] = {
    "none": _none_or_dense,
    "dense": _none_or_dense,
    "math": _math,
    "causal": _causal,
    "band": _band,
    "varlen": _varlen,
    "biased": _biased,
    "edge": _edge,
    "linear": _linear,
    "flex": _flex,
}

PATHS = tuple(KERNEL_OF_PATH)
