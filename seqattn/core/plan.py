"""The attention plan of one forward: structure described -> one exact kernel, prepared once.

Letters: b batch, h heads, l length, s key length (= l), d head width, e edges, g global tokens.

The encoder receives structure as a description (``Tokens``: padding ``mask``, 1-D ``window``,
``grid`` + ``grid_window``, ``causal``, ``num_global``, graph ``edge_index`` + ``edge_bias``, or a
dense ``attn_mask``) and calls :func:`plan_attention` once per forward. The plan picks a kernel whose
cost follows the number of allowed pairs and prepares its masks once; every layer then calls
:meth:`AttentionPlan.attend`, which does no host synchronisation.

Paths (``AttentionPlan.path``), each equal to the dense reference (``math`` with the mask of
:meth:`AttentionPlan.reference_mask`), values and gradients (tests prove it):

- ``none``: nothing masked: the fused kernel without a mask.
- ``dense``: the fused kernel (or ``math``) with one prepared mask (float, converted once).
- ``causal``: ``is_causal=True`` (no mask; with right padding a real query never sees padding).
- ``band``: local windows (1-D ``window``, 2-D ``grid_window``, with ``causal``, padding and global
  tokens): blocked band kernel (:mod:`seqattn.core.band`), cost ``T·(g + span)`` pairs.
- ``varlen``: padding only, lengths spread: one fused call per length bucket (:mod:`seqattn.core.varlen`).
- ``biased``: graph edges with a learned bias (dense blocks): the fused kernel with the bias
  gradient computed only at the edges (:mod:`seqattn.core.fused`).
- ``edge``: the O(E) sparse edge kernel (large graphs; :mod:`seqattn.core.graph_cost` chooses).
- ``linear``: linear attention (padding only).
- ``flex``: FlexAttention block masks (CUDA, when asked; :mod:`seqattn.core.flex`).

Output rows of padded queries (``mask`` False) and of queries with nothing to attend to are zeros.
The only host synchronisation is one read per forward, here, when it decides something (the lengths
for ``varlen``/``causal``, the edge checks); under ``torch.compile`` / export the plan decides from
shapes only (``dense``, ``none``, ``causal``, ``edge``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from seqattn.core.band import BandLayout, band_attention, band_layout, grid_relative_mask, window_relative_mask
from seqattn.core.checks import tracing
from seqattn.core.fused import (
    SMALL_LENGTH,
    FlashAttentionCPU,
    SmallBiasedAttention,
    cpu_flash_available,
    weights_from_lse,
)
from seqattn.core.kernels import edge_attention, edge_weights_to_dense, linear_attention, linear_attention_weights, \
    math_attention
from seqattn.core.masks import additive_mask, dead_rows, revive_dead_rows, structure_mask
from seqattn.core.graph_cost import check_graph_path, choose_graph_path, edges_to_dense
from seqattn.core.varlen import VarlenLayout, varlen_attention, varlen_layout

PATHS = ("none", "dense", "causal", "band", "varlen", "biased", "edge", "linear", "flex")

#: the band kernel is planned when it computes at most this fraction of the dense pairs ...
BAND_MAX_FRACTION = 0.5
#: ... and the sequence has at least this many tokens (below, one dense call is cheaper)
BAND_MIN_LENGTH = 128
#: per-bucket dispatch is planned for padded batches of at least this length ...
VARLEN_MIN_LENGTH = 128
#: ... when the buckets compute at most this fraction of the padded pairs
VARLEN_MAX_FRACTION = 0.7


def band_block_size(window: int) -> int:
    """Queries per block for a 1-D window ±``window`` (measured: ``python -m seqattn.bench core``)."""
    return int(min(256, max(32, window)))


def grid_block_rows(width: int, half: int) -> int:
    """Grid rows per block for a ``(2·half+1)²`` window on rows of ``width`` tokens."""
    return int(max(1, 2 * half, -(-32 // width)))


@dataclass
class AttentionPlan:
    """One forward's attention: the path and everything prepared for it (see the module docstring).

    ``pairs``: query-key pairs per head the path computes; ``allowed_pairs``: pairs the structure
    allows (``None`` when not counted); both for cost reports (GFLOP/s = 14·pairs·d per head, fwd+bwd).
    """

    path: str
    kernel: str
    batch: int
    length: int
    heads: int
    mask: torch.Tensor | None = None  # [B, L] bool padding (True = real)
    kernel_mask: torch.Tensor | None = None  # broadcastable [B, H, L, S], no dead rows (bool or float)
    dead: torch.Tensor | None = None  # [B|1, H|1, L, 1] bool: rows zeroed after the kernel
    band: BandLayout | None = None
    varlen: VarlenLayout | None = None
    causal: bool = False
    edge_index: torch.Tensor | None = None
    edge_bias: torch.Tensor | None = None
    flat: torch.Tensor | None = None  # [E, H] positions of edge_bias in the [B, H, L, L] mask
    bias_mask: torch.Tensor | None = None  # differentiable float mask (biased path off CPU / with dropout)
    block_mask: Any = None  # FlexAttention
    graph_path: str | None = None
    pairs: int | None = None
    allowed_pairs: int | None = None
    structure: dict = field(default_factory=dict)  # window, grid, grid_window, causal, num_global, attn_mask
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
            if m.dtype == torch.bool:
                self._cache[key] = additive_mask(m, dtype)
            else:
                self._cache[key] = m.to(dtype)
        return self._cache[key]

    def reference_mask(self) -> torch.Tensor | None:
        """The dense mask (broadcastable ``[B, H, L, S]``; bool, or float with the graph bias) that
        this plan's path equals, with padded query rows left to :attr:`dead` (built on demand, cached)."""
        if "reference" in self._cache:
            return self._cache["reference"]
        if self.path in ("dense", "biased", "linear", "none"):
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
                key = self.mask[:, None, None, :]
                ref = key if ref is None else (ref & key if ref.dtype == torch.bool else
                                               ref.masked_fill(~key, float("-inf")))
        self._cache["reference"] = ref
        return ref

    def _device(self) -> torch.device | None:
        for t in (self.mask, self.kernel_mask, self.edge_index):
            if t is not None:
                return t.device
        return self.structure.get("device")

    # -- attend -------------------------------------------------------------------------------
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
               scale: float | None = None, need_weights: bool = False,
               items: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``q, k [B, H, L, D]``, ``v [B, H, L, E]`` -> ``(out [B, H, L, E], weights | None)``.

        ``need_weights``: also the exact weights ``[B', H, L, S]`` (no gradient) of this layer, for
        the batch ``items`` asked (default all): from the fused call's logsumexp or one recomputation,
        never by running the layer on the math path.
        """
        weights = lse = None
        lse_mask = None
        path = self.path
        if path == "edge":
            out, alpha, kept = edge_attention(q, k, v, self.edge_index, None, dropout_p, scale, self.edge_bias)
            if need_weights:
                weights = edge_weights_to_dense(alpha.detach(), kept, self.batch, self.length)
        elif path == "linear":
            out = linear_attention(q, k, v, self.kernel_mask)
            if need_weights:
                with torch.no_grad():
                    weights = linear_attention_weights(q, k, self.kernel_mask)
        elif self.kernel == "math":
            out, weights = math_attention(q, k, v, self.kernel_mask, dropout_p, scale)
            weights = weights.detach() if need_weights else None
        elif path == "biased":
            out, weights = self._biased(q, k, v, dropout_p, scale, need_weights)
        elif path == "band":
            out = band_attention(q, k, v, self.band, dropout_p, scale)
        elif path == "varlen":
            out = varlen_attention(q, k, v, self.varlen, dropout_p, scale, causal=self.causal)
        elif path == "causal":
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, is_causal=True)
        elif path == "flex":
            from seqattn.core.flex import flex_attention_for

            out = flex_attention_for(q, k, v, self.block_mask, scale)
        else:  # none | dense
            mask = self.mask_for(q.dtype)
            if need_weights and cpu_flash_available(q, dropout_p):
                # the same fused kernel, called directly: it also returns the logsumexp
                if mask is not None and mask.dtype == torch.bool:  # the op takes an additive mask
                    mask = additive_mask(mask, q.dtype)
                out, lse = FlashAttentionCPU.apply(q, k, v, mask, scale, None, None, None, None)
                lse_mask = mask
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
        if self.dead is not None:
            out = out.masked_fill(self.dead, 0.0)
        if not need_weights:
            return out, None
        sel = None if items is None else torch.as_tensor(list(items), dtype=torch.long, device=q.device)
        if weights is None:  # only the rows asked for
            weights = self._weights(q, k, scale, lse, lse_mask, sel)
        elif sel is not None:
            weights = weights.index_select(0, sel)
        if self.dead is not None:
            dead = self.dead if (sel is None or self.dead.shape[0] == 1) else self.dead.index_select(0, sel)
            weights = weights.masked_fill(dead, 0.0)
        return out, weights

    def _biased(self, q, k, v, dropout_p, scale, need_weights):
        scale_value = q.shape[-1] ** -0.5 if scale is None else scale
        mask = self.mask_for(q.dtype)
        if q.device.type == "cpu" and dropout_p == 0.0:
            if self.length <= SMALL_LENGTH:
                out, weights = SmallBiasedAttention.apply(q, k, v, mask, scale_value, self.edge_bias, self.flat)
                return out, (weights if need_weights else None)
            if cpu_flash_available(q):
                src, dst = self.edge_index
                out, lse = FlashAttentionCPU.apply(q, k, v, mask, scale, self.edge_bias, src, dst, self.flat)
                return out, (weights_from_lse(q, k, mask, lse, scale) if need_weights else None)
        # elsewhere (CUDA, dropout): the fused kernel with the differentiable mask
        if self.bias_mask is None:
            self.bias_mask = self._differentiable_mask()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias_mask.to(q.dtype), dropout_p=dropout_p,
                                             scale=scale)
        return out, None

    def _differentiable_mask(self) -> torch.Tensor:
        dense = edges_to_dense(self.edge_index, self.edge_bias, self.batch, self.length, self.heads,
                               self.edge_bias.dtype)
        dense = combine(dense, self.structure.get("extra_mask"))
        if self.dead is not None:
            dense = dense.masked_fill(self.dead, 0.0)
        return dense

    def _weights(self, q, k, scale, lse, lse_mask, sel) -> torch.Tensor:
        def pick(t):
            return t if (sel is None or t is None or t.shape[0] == 1) else t.index_select(0, sel)

        q, k = pick(q), pick(k)
        if lse is not None:
            return weights_from_lse(q, k, pick(lse_mask), pick(lse), scale)
        ref = pick(self.reference_mask())
        with torch.no_grad():
            if ref is not None:
                ref = revive_dead_rows(ref, dead_rows(ref))
            _, weights = math_attention(q, k, q.new_zeros(q.shape[:-1] + (1,)), ref, 0.0, scale)
        return weights

    def describe(self) -> dict[str, Any]:
        """What ran, for logs and benchmarks."""
        return {"path": self.path, "kernel": self.kernel, "graph_path": self.graph_path, "pairs": self.pairs,
                "allowed_pairs": self.allowed_pairs}


# ---------------------------------------------------------------------------------------------


def combine(base: torch.Tensor | None, other: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of two masks broadcastable to ``[B, H, L, S]`` (bool, or float biases: -inf wins)."""
    if other is None:
        return base
    if base is None:
        return other
    if base.dtype == torch.bool and other.dtype == torch.bool:
        return base & other
    if base.dtype == torch.bool:
        base, other = other, base
    if other.dtype == torch.bool:
        return base.masked_fill(~other, float("-inf"))
    return base + other.to(base.dtype)


def _as_4d(m: torch.Tensor) -> torch.Tensor:
    return m[None, None] if m.dim() == 2 else m[:, None] if m.dim() == 3 else m


def _host_lengths(mask: torch.Tensor) -> tuple[list[int], bool]:
    """Per-row real-token counts and whether every row is a prefix (right padding): one host read."""
    lengths = mask.sum(1)  # [B]
    prefix = (torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths[:, None]) == mask  # [B, L]
    values = torch.cat([lengths, prefix.all().reshape(1).to(lengths.dtype)]).tolist()
    return [int(x) for x in values[:-1]], bool(values[-1])


def plan_attention(
    batch: int,
    length: int,
    *,
    heads: int,
    dim: int,
    device: torch.device,
    kernel: str = "sdpa",
    mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    window: int | None = None,
    grid: tuple[int, int] | None = None,
    grid_window: int | None = None,
    causal: bool = False,
    num_global: int = 0,
    edge_index: torch.Tensor | None = None,
    edge_bias: torch.Tensor | None = None,
    graph_path: str = "auto",
    max_dense_bytes: int = 2**30,
    dense_min_fill: float = 0.15,
    flex: bool = False,
    path: str | None = None,
) -> AttentionPlan:
    """Plan one forward's attention (see the module docstring).

    Args:
        batch, length: ``B`` and ``L`` of the input.
        heads, dim: attention heads and model width (for memory estimates and per-head masks).
        kernel: the encoder's kernel: ``sdpa`` (planned), ``math`` (the reference, always dense),
            ``linear`` (padding only) or ``edge`` (graph structure only).
        mask: ``[B, L]`` bool, True = real token.
        attn_mask: a dense structure ``[L, L]`` / ``[B, L, L]`` / ``[B, H, L, L]`` (bool or float bias).
        window, grid, grid_window, causal, num_global: the described structure (see :class:`~seqattn.core.Tokens`).
        edge_index, edge_bias: graph edges ``[2, E]`` over flattened ``b·L + l`` and their bias ``[E, H]``.
        graph_path, max_dense_bytes, dense_min_fill: the graph path choice (:func:`choose_graph_path`).
        flex: allow FlexAttention block masks (used only where :func:`seqattn.core.flex.flex_available`).
        path: force a path (tests and benchmarks); ``None`` plans it.
    """
    traced = tracing()
    if mask is not None:
        if mask.dtype != torch.bool or mask.shape != (batch, length):
            raise ValueError(f"mask must be bool [B, L] = ({batch}, {length}) (True = real token), got "
                             f"{mask.dtype} {tuple(mask.shape)}")
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise ValueError(f"attn_mask must be bool (True = may attend) or a float bias, got {attn_mask.dtype}")
        if tuple(attn_mask.shape[-2:]) != (length, length) or attn_mask.dim() not in (2, 3, 4):
            raise ValueError(f"attn_mask must be [L, L], [B, L, L] or [B, H, L, L] with L={length}, got "
                             f"{tuple(attn_mask.shape)}")
    structured = window is not None or grid_window is not None or causal
    st = {"window": window, "grid": grid, "grid_window": grid_window, "causal": causal, "num_global": num_global,
          "device": device}
    common = dict(kernel=kernel, batch=batch, length=length, heads=heads, mask=mask, structure=st)
    query_dead = None if mask is None else ~mask[:, None, :, None]  # [B, 1, L, 1]

    if kernel == "linear":
        if structured or attn_mask is not None or edge_index is not None:
            raise ValueError("the 'linear' kernel supports only a padding mask; use kernel='sdpa' for windows, "
                             "causal, attn_mask or graph structure")
        return AttentionPlan("linear", kernel_mask=None if mask is None else mask[:, None, None, :], dead=query_dead,
                             **common)

    if edge_index is not None:
        return _plan_graph(edge_index, edge_bias, attn_mask, structured, st, common, query_dead, dim, device,
                           graph_path, max_dense_bytes, dense_min_fill, traced, path)
    if kernel == "edge":
        raise ValueError("kernel='edge' needs graph structure (Tokens.edge_index)")

    struct = structure_mask(length, num_global=num_global, window=window, grid=grid, grid_window=grid_window,
                            causal=causal, device=device) if (structured and (
                                attn_mask is not None or kernel == "math" or traced or path == "dense")) else None
    if attn_mask is not None or kernel == "math" or (path == "dense"):
        kernel_mask = combine(None if struct is None else struct[None, None],
                              None if attn_mask is None else _as_4d(attn_mask))
        dead = query_dead
        if mask is not None:
            kernel_mask = combine(kernel_mask, mask[:, None, None, :])
        if attn_mask is not None:  # a given structure may leave rows with nothing to attend to
            rows = dead_rows(kernel_mask)
            kernel_mask = revive_dead_rows(kernel_mask, rows)
            dead = rows if dead is None else dead | rows
        return AttentionPlan("dense" if kernel_mask is not None else "none", kernel_mask=kernel_mask, dead=dead,
                             **common)

    if structured:
        if flex and not traced and (path in (None, "flex")):
            from seqattn.core.flex import flex_available, flex_block_mask, structure_mask_mod

            if flex_available(device) or path == "flex":
                mod = structure_mask_mod(length, num_global=num_global, window=window, grid=grid,
                                         grid_window=grid_window, causal=causal, mask=mask)
                return AttentionPlan("flex", block_mask=flex_block_mask(mod, batch, length, device), dead=query_dead,
                                     **common)
        band = None if traced or path not in (None, "band") else _band(window, grid, grid_window, causal, num_global,
                                                                      batch, length, mask, device, path == "band")
        if band is not None:
            return AttentionPlan("band", band=band, dead=query_dead, pairs=band.pairs, **common)
        only_causal = causal and window is None and grid_window is None and num_global == 0
        if only_causal and mask is None and path in (None, "causal"):
            return AttentionPlan("causal", causal=True, **common)
        if only_causal and not traced and path in (None, "causal", "varlen"):
            lengths, prefix = _host_lengths(mask)
            if prefix:
                return AttentionPlan("causal", causal=True, dead=query_dead, **common)
        struct = structure_mask(length, num_global=num_global, window=window, grid=grid, grid_window=grid_window,
                                causal=causal, device=device)
        kernel_mask = combine(struct[None, None], None if mask is None else mask[:, None, None, :])
        return AttentionPlan("dense", kernel_mask=kernel_mask, dead=query_dead, **common)

    if mask is None:
        return AttentionPlan("none", pairs=batch * length * length, **common)
    if not traced and path in (None, "varlen") and (length >= VARLEN_MIN_LENGTH or path == "varlen"):
        lengths, prefix = _host_lengths(mask)
        if prefix:
            layout = varlen_layout(lengths, length, device)
            if path == "varlen" or layout.pairs <= VARLEN_MAX_FRACTION * batch * length * length:
                return AttentionPlan("varlen", varlen=layout, dead=query_dead, pairs=layout.pairs,
                                     allowed_pairs=sum(n * n for n in lengths), **common)
    return AttentionPlan("dense", kernel_mask=mask[:, None, None, :], dead=query_dead,
                         pairs=batch * length * length, **common)


def _band(window, grid, grid_window, causal, num_global, batch, length, mask, device, forced) -> BandLayout | None:
    tokens = length - num_global
    if window is not None and grid_window is not None:
        return None  # both at once: the dense mask
    if window is not None:
        block = band_block_size(window)
        left, right = window, (0 if causal else window)
        relative = window_relative_mask(block, left, right, window, causal)
    elif grid_window is not None:
        height, width = grid
        half = grid_window // 2
        rows = grid_block_rows(width, half)
        block, left, right = rows * width, half * width, half * width
        relative = grid_relative_mask(rows, width, half, causal)
    else:
        return None  # causal alone: is_causal
    blocks = -(-tokens // block)
    pairs = batch * (blocks * block * (num_global + block + left + right) + num_global * length)
    if not forced and (length < BAND_MIN_LENGTH or pairs > BAND_MAX_FRACTION * batch * length * length):
        return None
    return band_layout(relative, block, left, right, tokens, num_global, batch, mask, device)


def _biased_mask(edge_index: torch.Tensor, bias: torch.Tensor, flat: torch.Tensor, batch: int, length: int,
                 heads: int, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The biased path's float mask ``[B, H, L, L]`` (the bias on the edges, ``-inf`` elsewhere and
    on edges from padded keys, dead rows 0) and its dead rows ``[B, H, L, 1]``, from the ``E`` edges
    alone: the values are set at ``flat [E, H]`` and the dead rows counted per query and head, so
    the full tensor is written twice (fill, revive) instead of scanned and copied per step.
    Equals ``revive_dead_rows(combine(edges_to_dense(...), key padding))``."""
    src, dst = edge_index
    values = bias  # [E, H]
    if mask is not None:  # edges from padded keys attend nowhere
        values = values.masked_fill(~mask.reshape(-1).index_select(0, src)[:, None], float("-inf"))
    dense = torch.full((batch * heads * length * length,), float("-inf"), dtype=bias.dtype, device=bias.device)
    dense.index_put_((flat.reshape(-1),), values.reshape(-1))  # repeated edges: one of them (as edges_to_dense)
    alive = torch.zeros(batch * length, heads, dtype=torch.int32, device=bias.device)
    alive.index_add_(0, dst, (values > float("-inf")).to(torch.int32))  # [B·L, H]: allowed keys per query
    rows = (alive == 0).view(batch, length, heads).permute(0, 2, 1).unsqueeze(-1)  # [B, H, L, 1]
    dense = dense.view(batch, heads, length, length).masked_fill_(rows, 0.0)
    return dense, rows


def _plan_graph(edge_index, edge_bias, attn_mask, structured, st, common, query_dead, dim, device, graph_path,
                max_dense_bytes, dense_min_fill, traced, forced):
    batch, length, heads, kernel, mask = common["batch"], common["length"], common["heads"], common["kernel"], \
        common["mask"]
    if attn_mask is not None:
        raise ValueError("tokens carry both an attn_mask and an edge_index; give one structure")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    if edge_bias is not None and (edge_bias.dim() != 2 or edge_bias.shape[0] != edge_index.shape[1]):
        raise ValueError(f"edge_bias must be [E={edge_index.shape[1]}, H], got shape {tuple(edge_bias.shape)}")
    n = batch * length
    if not traced and edge_index.numel():  # validated once per forward (one host read)
        lo, hi, cross = torch.stack([edge_index.min(), edge_index.max(),
                                     (edge_index[0] // length != edge_index[1] // length).any().long()]).tolist()
        if lo < 0 or hi >= n:
            raise ValueError(f"edge_index values must lie in [0, B*L) = [0, {n}), got [{lo}, {hi}]")
        if cross:
            raise ValueError("edge_index has an edge between two different sequences of the batch")
    check_graph_path(graph_path)
    struct = structure_mask(length, num_global=st["num_global"], window=st["window"], grid=st["grid"],
                            grid_window=st["grid_window"], causal=st["causal"], device=device) if structured else None
    if kernel == "edge" or forced == "edge":
        chosen = "edge"
    elif forced in ("dense", "biased"):
        chosen = "dense"
    else:
        chosen = choose_graph_path(batch, length, edge_index.shape[1], heads, dim, graph_path, max_dense_bytes,
                                   dense_min_fill, device)
    if chosen == "edge":
        if structured:
            raise ValueError("graph attention on the edge path takes its structure from edge_index alone; window / "
                             "grid_window / causal need the dense path (graph_path='dense')")
        if mask is not None:  # edges from padded sources are dropped once per forward
            keep = mask.reshape(n).index_select(0, edge_index[0])
            edge_index = edge_index[:, keep]
            edge_bias = edge_bias[keep] if edge_bias is not None else None
        return AttentionPlan("edge", edge_index=edge_index, edge_bias=edge_bias, dead=query_dead, graph_path="edge",
                             pairs=int(edge_index.shape[1]), allowed_pairs=int(edge_index.shape[1]), **common)
    extra = None if struct is None else struct[None, None]
    if mask is not None:
        extra = combine(extra, mask[:, None, None, :])
    common["structure"] = dict(st, extra_mask=extra)
    pairs = batch * length * length
    if edge_bias is not None and kernel == "sdpa" and forced in (None, "biased"):
        src, dst = edge_index
        hh = torch.arange(heads, device=edge_index.device)
        flat = (((dst // length)[:, None] * heads + hh[None]) * length + (dst % length)[:, None]) * length \
            + (src % length)[:, None]  # [E, H] into [B, H, L, L]
        if struct is None:  # the graph and key padding only: built at the edges, two passes over [B, H, L, L]
            dense, rows = _biased_mask(edge_index, edge_bias.detach(), flat, batch, length, heads, mask)
        else:
            dense = edges_to_dense(edge_index, edge_bias.detach(), batch, length, heads, edge_bias.dtype)
            dense = combine(dense, extra)  # [B, H, L, L]
            rows = dead_rows(dense)
            dense = revive_dead_rows(dense, rows)
        return AttentionPlan("biased", kernel_mask=dense, dead=rows | query_dead if query_dead is not None else rows,
                             edge_index=edge_index, edge_bias=edge_bias, flat=flat, graph_path="dense",
                             pairs=pairs, allowed_pairs=int(edge_index.shape[1]), **common)
    dense = edges_to_dense(edge_index, edge_bias, batch, length, heads, edge_bias.dtype if edge_bias is not None
                           else torch.float32)  # bool [B, L, L] or float [B, H, L, L] (differentiable)
    dense = combine(_as_4d(dense), extra)
    rows = dead_rows(dense)
    dense = revive_dead_rows(dense, rows)
    return AttentionPlan("dense", kernel_mask=dense, dead=rows | query_dead if query_dead is not None else rows,
                         edge_index=edge_index, edge_bias=edge_bias, graph_path="dense", pairs=pairs,
                         allowed_pairs=int(edge_index.shape[1]), **common)
