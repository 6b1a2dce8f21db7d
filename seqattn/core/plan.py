"""The planner: a batch's structure described -> one exact path, prepared once (an :class:`AttentionPlan`).

Letters: b batch, h heads, l length, s key length, d head width, e edges, c edge-feature width.

Every attention call goes through here. The encoder describes its batch (:class:`Structure`, from
``Tokens`` and the encoder's ``window``), adds its options (:class:`PlanOptions`: kernel, graph path,
memory cap, FlexAttention, a forced path) and calls :func:`plan_structure` once per forward; a
``MultiHeadAttention`` called without a plan builds the trivial one (:func:`plan_layer`: masks as
given, over ``[L, S]``, cross-attention included). The paths and their kernels are listed in
:mod:`seqattn.core.attention_plan`.

The only host synchronisation is one read per forward, here, when it decides something (the lengths
for ``varlen``/``causal``, the edge checks); under ``torch.compile`` / export the plan decides from
shapes only (``dense``, ``none``, ``causal``, ``edge``). When a faster path cannot take a structure, the
plan says why (:attr:`AttentionPlan.reason`, :meth:`AttentionPlan.summary`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from seqattn.core.attention_plan import KERNEL_OF_PATH, PATHS, AttentionPlan
from seqattn.core.band import BandLayout, band_layout, grid_relative_mask, window_relative_mask
from seqattn.core.checks import tracing
from seqattn.core.graph_cost import DENSE_MIN_FILL, check_graph_path, choose_graph_path, edge_attr_to_dense, edges_to_dense
from seqattn.core.kernels import check_kernel
from seqattn.core.masks import as_4d, build_attention_mask, combine_masks, dead_rows, revive_dead_rows, \
    structure_mask
from seqattn.core.varlen import varlen_layout

__all__ = ["PATHS", "KERNEL_OF_PATH", "AttentionPlan", "PlanOptions", "Structure", "pack_edge_plan", "plan_attention",
           "plan_layer", "plan_structure"]

#: the band kernel is planned when it computes at most this fraction of the dense pairs ...
BAND_MAX_FRACTION = 0.5
#: ... and the sequence has at least this many tokens (below, one dense call is cheaper)
BAND_MIN_LENGTH = 128
#: per-bucket dispatch is planned for padded batches of at least this length ...
VARLEN_MIN_LENGTH = 128
#: ... when the buckets compute at most this fraction of the padded pairs
VARLEN_MAX_FRACTION = 0.7

TRACED = "under tracing the plan decides from shapes only"


def band_block_size(window: int) -> int:
    """Queries per block for a 1-D window ±``window`` (measured: ``python -m seqattn.bench core``)."""
    return int(min(256, max(32, window)))


def grid_block_rows(width: int, half: int) -> int:
    """Grid rows per block for a ``(2·half+1)²`` window on rows of ``width`` tokens."""
    return int(max(1, 2 * half, -(-32 // width)))


@dataclass
class Structure:
    """What may attend to what in one batch of ``batch`` sequences of ``length`` tokens (self-attention).

    ``mask [B, L]`` bool padding (True = real); ``attn_mask`` a dense structure ``[L, L]`` /
    ``[B, L, L]`` / ``[B, H, L, L]`` (bool or float bias); a described structure (``window`` ±w,
    ``grid`` + odd ``grid_window`` k, ``causal``, ``num_global`` leading global tokens); graph edges
    ``edge_index [2, E]`` over flattened ``b·L + l`` with ``edge_bias [E, H]`` and ``edge_attr [E, C]``.
    ``dtype``: the inputs' dtype (the dense mask of a graph with edge features is built in it).
    """

    batch: int
    length: int
    device: torch.device
    mask: torch.Tensor | None = None
    attn_mask: torch.Tensor | None = None
    window: int | None = None
    grid: tuple[int, int] | None = None
    grid_window: int | None = None
    causal: bool = False
    num_global: int = 0
    edge_index: torch.Tensor | None = None
    edge_bias: torch.Tensor | None = None
    edge_attr: torch.Tensor | None = None
    dtype: torch.dtype = torch.float32

    @property
    def described(self) -> bool:
        """A window, a grid window or causal tokens (planned from the description, not a tensor)."""
        return self.window is not None or self.grid_window is not None or self.causal

    def dense(self) -> torch.Tensor | None:
        """The described structure as ``[L, L]`` bool (:func:`~seqattn.core.masks.structure_mask`), or None."""
        return structure_mask(self.length, num_global=self.num_global, window=self.window, grid=self.grid,
                              grid_window=self.grid_window, causal=self.causal, device=self.device)

    def description(self) -> dict[str, Any]:
        return {"window": self.window, "grid": self.grid, "grid_window": self.grid_window, "causal": self.causal,
                "num_global": self.num_global, "device": self.device}


@dataclass
class PlanOptions:
    """How to plan: ``kernel`` (``sdpa`` planned | ``math`` reference | ``linear`` | ``edge``), the graph
    path choice (``graph_path``, ``max_dense_bytes``, ``dense_min_fill``: :func:`choose_graph_path`),
    ``flex`` (allow FlexAttention where :func:`seqattn.core.flex.flex_available`), and ``path``: a forced
    path (tests and benchmarks; None = planned)."""

    kernel: str = "sdpa"
    graph_path: str = "auto"
    max_dense_bytes: int = 2**30
    dense_min_fill: float = DENSE_MIN_FILL
    flex: bool = False
    path: str | None = None

    def __post_init__(self) -> None:
        check_kernel(self.kernel)
        check_graph_path(self.graph_path)
        if self.path is not None and self.path not in PATHS:
            raise ValueError(f"attention path {self.path!r} is not one of {PATHS} (or None = planned)")


# --------------------------------------------------------------------------- the planner


def plan_structure(s: Structure, options: PlanOptions | None = None, *, heads: int, dim: int) -> AttentionPlan:
    """Plan one forward's attention of ``heads`` heads over width ``dim`` (memory estimates)."""
    options = PlanOptions() if options is None else options
    _check_structure(s)
    if options.kernel == "linear":
        return _plan_linear(s, options, heads)
    if s.edge_index is not None:
        return _plan_graph(s, options, heads, dim)
    if options.kernel == "edge":
        raise ValueError("kernel='edge' needs graph structure (Tokens.edge_index)")
    if s.attn_mask is not None or options.kernel == "math" or options.path == "dense":
        return _plan_dense(s, options, heads)
    if s.described:
        return _plan_described(s, options, heads)
    return _plan_padding(s, options, heads)


def plan_attention(batch: int, length: int, *, heads: int, dim: int, device: torch.device,
                   **given: Any) -> AttentionPlan:
    """The keyword form of :func:`plan_structure` (tests, benchmarks): ``given`` holds fields of
    :class:`PlanOptions` (``kernel``, ``graph_path``, ``max_dense_bytes``, ``dense_min_fill``, ``flex``,
    ``path``; their defaults there) and of :class:`Structure` (``mask``, ``attn_mask``, ``window``,
    ``grid``, ``grid_window``, ``causal``, ``num_global``, ``edge_index``, ``edge_bias``, ``edge_attr``)."""
    names = {f.name for f in fields(PlanOptions)}
    options = PlanOptions(**{k: v for k, v in given.items() if k in names})
    structure = Structure(batch, length, device, **{k: v for k, v in given.items() if k not in names})
    return plan_structure(structure, options, heads=heads, dim=dim)


def _common(s: Structure, options: PlanOptions, heads: int) -> dict:
    return dict(kernel=options.kernel, batch=s.batch, length=s.length, heads=heads, mask=s.mask,
                structure=s.description())


def _query_dead(s: Structure) -> torch.Tensor | None:
    return None if s.mask is None else ~s.mask[:, None, :, None]  # [B, 1, L, 1]


def _key(s: Structure) -> torch.Tensor | None:
    return None if s.mask is None else s.mask[:, None, None, :]  # [B, 1, 1, L]


def _check_structure(s: Structure) -> None:
    batch, length, mask, attn_mask = s.batch, s.length, s.mask, s.attn_mask
    if mask is not None and (mask.dtype != torch.bool or mask.shape != (batch, length)):
        raise ValueError(f"mask must be bool [B, L] = ({batch}, {length}) (True = real token), got "
                         f"{mask.dtype} {tuple(mask.shape)}")
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise ValueError(f"attn_mask must be bool (True = may attend) or a float bias, got {attn_mask.dtype}")
        if tuple(attn_mask.shape[-2:]) != (length, length) or attn_mask.dim() not in (2, 3, 4):
            raise ValueError(f"attn_mask must be [L, L], [B, L, L] or [B, H, L, L] with L={length}, got "
                             f"{tuple(attn_mask.shape)}")
    if s.edge_attr is not None:
        if s.edge_index is None:
            raise ValueError("edge_attr [E, C] needs an edge_index [2, E]")
        if s.edge_attr.dim() != 2 or s.edge_attr.shape[0] != s.edge_index.shape[1]:
            raise ValueError(f"edge_attr must be [E={s.edge_index.shape[1]}, C], got {tuple(s.edge_attr.shape)}")


def _plan_linear(s: Structure, options: PlanOptions, heads: int) -> AttentionPlan:
    if s.described or s.attn_mask is not None or s.edge_index is not None:
        raise ValueError("the 'linear' kernel supports only a padding mask; use kernel='sdpa' for windows, "
                         "causal, attn_mask or graph structure")
    return AttentionPlan("linear", kernel_mask=_key(s), dead=_query_dead(s), **_common(s, options, heads))


def _plan_dense(s: Structure, options: PlanOptions, heads: int) -> AttentionPlan:
    """A given ``attn_mask``, the ``math`` kernel or a forced ``dense`` path: one prepared mask."""
    struct = s.dense()
    kernel_mask = combine_masks(None if struct is None else struct[None, None],
                                None if s.attn_mask is None else as_4d(s.attn_mask))
    kernel_mask = combine_masks(kernel_mask, _key(s))
    dead = _query_dead(s)
    if s.attn_mask is not None:  # a given structure may leave rows with nothing to attend to
        rows = dead_rows(kernel_mask)
        kernel_mask = revive_dead_rows(kernel_mask, rows)
        dead = rows if dead is None else dead | rows
    path = "math" if options.kernel == "math" else ("dense" if kernel_mask is not None else "none")
    return AttentionPlan(path, kernel_mask=kernel_mask, dead=dead, **_common(s, options, heads))


def _plan_described(s: Structure, options: PlanOptions, heads: int) -> AttentionPlan:
    """Windows, grid windows, causal (with padding and global tokens): flex, band, causal, or the dense mask."""
    traced, forced, common, dead = tracing(), options.path, _common(s, options, heads), _query_dead(s)
    if options.flex and not traced and forced in (None, "flex"):
        from seqattn.core.flex import flex_available, flex_block_mask, structure_mask_mod

        if flex_available(s.device) or forced == "flex":
            mod = structure_mask_mod(s.length, num_global=s.num_global, window=s.window, grid=s.grid,
                                     grid_window=s.grid_window, causal=s.causal, mask=s.mask)
            return AttentionPlan("flex", block_mask=flex_block_mask(mod, s.batch, s.length, s.device), dead=dead,
                                 **common)
    band, reason = (None, TRACED) if traced else (None, None) if forced not in (None, "band") else \
        _band(s, forced == "band")
    if band is not None:
        return AttentionPlan("band", band=band, dead=dead, pairs=band.pairs, **common)
    only_causal = s.causal and s.window is None and s.grid_window is None and s.num_global == 0
    if only_causal and s.mask is None and forced in (None, "causal"):
        return AttentionPlan("causal", causal=True, **common)
    if only_causal and s.mask is not None and forced in (None, "causal", "varlen"):
        if traced:
            reason = TRACED
        else:
            _, prefix = _host_lengths(s.mask)
            if prefix:
                return AttentionPlan("causal", causal=True, dead=dead, **common)
            reason = "causal with padding that is not a prefix needs the mask"
    kernel_mask = combine_masks(s.dense()[None, None], _key(s))
    return AttentionPlan("dense", kernel_mask=kernel_mask, dead=dead, reason=reason, **common)


def _band(s: Structure, forced: bool) -> tuple[BandLayout | None, str | None]:
    """The band layout of a described window (or None and why not)."""
    tokens, num_global, batch, length = s.length - s.num_global, s.num_global, s.batch, s.length
    if s.window is not None and s.grid_window is not None:
        return None, "window and grid window together cannot use the band kernel"
    if s.window is not None:
        block = band_block_size(s.window)
        left, right = s.window, (0 if s.causal else s.window)
        relative = window_relative_mask(block, left, right, s.window, s.causal)
    elif s.grid_window is not None:
        height, width = s.grid
        half = s.grid_window // 2
        rows = grid_block_rows(width, half)
        block, left, right = rows * width, half * width, half * width
        relative = grid_relative_mask(rows, width, half, s.causal)
    else:
        return None, None  # causal alone: is_causal
    blocks = -(-tokens // block)
    pairs = batch * (blocks * block * (num_global + block + left + right) + num_global * length)
    if not forced:
        if length < BAND_MIN_LENGTH:
            return None, f"length {length} < {BAND_MIN_LENGTH}: one dense call is cheaper than the band kernel"
        if pairs > BAND_MAX_FRACTION * batch * length * length:
            return None, (f"the band would compute {pairs / (batch * length * length):.0%} of the dense pairs, "
                          f"above {BAND_MAX_FRACTION:.0%}")
    return band_layout(relative, block, left, right, tokens, num_global, batch, s.mask, s.device), None


def _plan_padding(s: Structure, options: PlanOptions, heads: int) -> AttentionPlan:
    """Padding only: no mask, per-length buckets (varlen), or the padding mask."""
    batch, length, forced, common = s.batch, s.length, options.path, _common(s, options, heads)
    if s.mask is None:
        return AttentionPlan("none", pairs=batch * length * length, **common)
    reason = None
    if forced in (None, "varlen") and (length >= VARLEN_MIN_LENGTH or forced == "varlen"):
        if tracing():
            reason = TRACED
        else:
            lengths, prefix = _host_lengths(s.mask)
            reason = "padding that is not a prefix cannot be split into length buckets"
            if prefix:
                layout = varlen_layout(lengths, length, s.device)
                if forced == "varlen" or layout.pairs <= VARLEN_MAX_FRACTION * batch * length * length:
                    return AttentionPlan("varlen", varlen=layout, dead=_query_dead(s), pairs=layout.pairs,
                                         allowed_pairs=sum(n * n for n in lengths), **common)
                reason = None  # the lengths are close: one padded call is the cheaper one
    return AttentionPlan("dense", kernel_mask=_key(s), dead=_query_dead(s), pairs=batch * length * length,
                         reason=reason, **common)


def _host_lengths(mask: torch.Tensor) -> tuple[list[int], bool]:
    """Per-row real-token counts and whether every row is a prefix (right padding): one host read."""
    lengths = mask.sum(1)  # [B]
    prefix = (torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths[:, None]) == mask  # [B, L]
    values = torch.cat([lengths, prefix.all().reshape(1).to(lengths.dtype)]).tolist()
    return [int(x) for x in values[:-1]], bool(values[-1])


# --------------------------------------------------------------------------- graphs


def _check_edges(s: Structure) -> None:
    edge_index, edge_bias, n = s.edge_index, s.edge_bias, s.batch * s.length
    if s.attn_mask is not None:
        raise ValueError("tokens carry both an attn_mask and an edge_index; give one structure")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    if edge_bias is not None and (edge_bias.dim() != 2 or edge_bias.shape[0] != edge_index.shape[1]):
        raise ValueError(f"edge_bias must be [E={edge_index.shape[1]}, H], got shape {tuple(edge_bias.shape)}")
    if not tracing() and edge_index.numel():  # validated once per forward (one host read)
        lo, hi, cross = torch.stack([edge_index.min(), edge_index.max(),
                                     (edge_index[0] // s.length != edge_index[1] // s.length).any().long()]).tolist()
        if lo < 0 or hi >= n:
            raise ValueError(f"edge_index values must lie in [0, B*L) = [0, {n}), got [{lo}, {hi}]")
        if cross:
            raise ValueError("edge_index has an edge between two different sequences of the batch")


def _plan_graph(s: Structure, options: PlanOptions, heads: int, dim: int) -> AttentionPlan:
    """Graph edges: the O(E) edge kernel or dense blocks (biased, dense, or math with edge features)."""
    if options.kernel not in ("sdpa", "math", "edge"):
        raise ValueError(f"graph structure needs kernel sdpa, math or edge, got kernel={options.kernel!r}")
    _check_edges(s)
    forced, edges = options.path, s.edge_index.shape[1]
    if options.kernel == "edge" or forced == "edge":
        chosen = "edge"
    elif forced in ("dense", "biased", "math"):
        chosen = "dense"
    else:
        chosen = choose_graph_path(s.batch, s.length, edges, heads, dim, options.graph_path, options.max_dense_bytes,
                                   options.dense_min_fill, s.device,
                                   edge_dim=0 if s.edge_attr is None else s.edge_attr.shape[1])
    if chosen == "edge":
        return _plan_edge(s, options, heads)
    struct = s.dense()
    extra = combine_masks(None if struct is None else struct[None, None], _key(s))
    if s.edge_attr is not None:
        return _plan_graph_features(s, options, heads, extra)
    if s.edge_bias is not None and options.kernel == "sdpa" and forced in (None, "biased"):
        return _plan_biased(s, options, heads, struct, extra)
    dense = edges_to_dense(s.edge_index, s.edge_bias, s.batch, s.length, heads, s.edge_bias.dtype
                           if s.edge_bias is not None else torch.float32)  # bool [B, L, L] | float [B, H, L, L]
    dense = combine_masks(as_4d(dense), extra)
    rows = dead_rows(dense)
    dense = revive_dead_rows(dense, rows)
    dead = _query_dead(s)
    return AttentionPlan("math" if options.kernel == "math" else "dense", kernel_mask=dense,
                         dead=rows if dead is None else rows | dead, edge_index=s.edge_index, edge_bias=s.edge_bias,
                         graph_path="dense", pairs=s.batch * s.length * s.length, allowed_pairs=int(edges),
                         **_common(s, options, heads))


def _plan_edge(s: Structure, options: PlanOptions, heads: int) -> AttentionPlan:
    if s.described:
        raise ValueError("graph attention on the edge path takes its structure from edge_index alone; window / "
                         "grid_window / causal need the dense path (graph_path='dense')")
    edge_index, edge_bias, kernel_mask = s.edge_index, s.edge_bias, None
    if s.mask is not None:
        if s.edge_attr is None:  # edges from padded sources are dropped once per forward
            keep = s.mask.reshape(s.batch * s.length).index_select(0, edge_index[0])
            edge_index = edge_index[:, keep]
            edge_bias = edge_bias[keep] if edge_bias is not None else None
        else:  # the kernel drops them with their key / value offsets
            kernel_mask = _key(s)
    return AttentionPlan("edge", edge_index=edge_index, edge_bias=edge_bias, edge_attr=s.edge_attr,
                         kernel_mask=kernel_mask, dead=_query_dead(s), graph_path="edge",
                         pairs=int(edge_index.shape[1]), allowed_pairs=int(edge_index.shape[1]),
                         **_common(s, options, heads))


def pack_edge_plan(plan: AttentionPlan) -> tuple[torch.Tensor, AttentionPlan] | None:
    """An ``edge`` plan over a padded batch -> the same attention over its real tokens only:
    ``(tokens [T], packed)``, ``tokens`` the flattened ``b·L + l`` positions of the ``T`` real tokens in
    order, ``packed`` an ``edge`` plan for one sequence of ``T`` tokens (``[1, T]``), its edges renumbered and
    those that touch padding dropped (with their ``edge_bias`` / ``edge_attr`` rows). A layer run on
    ``x.reshape(B·L, D)[tokens]`` under ``packed`` gives the padded layer's rows of the real tokens: the edge
    kernel's per-edge arithmetic does not depend on the layout, and the projections and feed-forward skip
    the padding (molecule batches are ~2.3x padded). None when the plan is not ``edge``, has no padding
    mask or nothing is padded. One host read (the real-token count)."""
    if plan.path != "edge" or plan.mask is None or plan.edge_index is None:
        return None
    flat = plan.mask.reshape(-1)  # [B·L]
    tokens = flat.nonzero().squeeze(1)  # [T]
    count = tokens.numel()
    if count == flat.numel():
        return None
    position = torch.full((flat.numel(),), -1, dtype=torch.long, device=flat.device)
    position[tokens] = torch.arange(count, device=flat.device)
    edge_index = position[plan.edge_index]  # [2, E]
    keep = (edge_index >= 0).all(0)  # [E]: edges between real tokens
    edge_index = edge_index[:, keep]
    edge_bias = None if plan.edge_bias is None else plan.edge_bias[keep]
    edge_attr = None if plan.edge_attr is None else plan.edge_attr[keep]
    edges = int(edge_index.shape[1])
    packed = AttentionPlan("edge", kernel=plan.kernel, batch=1, length=count, heads=plan.heads,
                           edge_index=edge_index, edge_bias=edge_bias, edge_attr=edge_attr, graph_path="edge",
                           pairs=edges, allowed_pairs=edges, structure=dict(plan.structure))
    return tokens, packed


def _plan_graph_features(s: Structure, options: PlanOptions, heads: int, extra) -> AttentionPlan:
    """Dense blocks with per-pair edge features: the math kernel with ``[B, L, L, C]`` features."""
    dense = edges_to_dense(s.edge_index, s.edge_bias, s.batch, s.length, heads, s.dtype)  # differentiable bias
    kernel_mask = combine_masks(as_4d(dense), extra)  # math revives and zeroes its dead rows itself
    return AttentionPlan("math", kernel_mask=kernel_mask, edge_index=s.edge_index, edge_bias=s.edge_bias,
                         edge_attr=edge_attr_to_dense(s.edge_index, s.edge_attr, s.batch, s.length),
                         graph_path="dense", pairs=s.batch * s.length * s.length,
                         allowed_pairs=int(s.edge_index.shape[1]), **_common(s, options, heads))


def _plan_biased(s: Structure, options: PlanOptions, heads: int, struct, extra) -> AttentionPlan:
    batch, length, edge_index, edge_bias = s.batch, s.length, s.edge_index, s.edge_bias
    src, dst = edge_index
    hh = torch.arange(heads, device=edge_index.device)
    flat = (((dst // length)[:, None] * heads + hh[None]) * length + (dst % length)[:, None]) * length \
        + (src % length)[:, None]  # [E, H] into [B, H, L, L]
    if struct is None:  # the graph and key padding only: built at the edges, two passes over [B, H, L, L]
        dense, rows = _biased_mask(edge_index, edge_bias.detach(), flat, batch, length, heads, s.mask)
    else:
        dense = edges_to_dense(edge_index, edge_bias.detach(), batch, length, heads, edge_bias.dtype)
        dense = combine_masks(dense, extra)  # [B, H, L, L]
        rows = dead_rows(dense)
        dense = revive_dead_rows(dense, rows)
    dead = _query_dead(s)
    common = _common(s, options, heads)
    common["structure"] = dict(common["structure"], extra_mask=extra)
    return AttentionPlan("biased", kernel_mask=dense, dead=rows if dead is None else rows | dead,
                         edge_index=edge_index, edge_bias=edge_bias, flat=flat, graph_path="dense",
                         pairs=batch * length * length, allowed_pairs=int(edge_index.shape[1]), **common)


def _biased_mask(edge_index: torch.Tensor, bias: torch.Tensor, flat: torch.Tensor, batch: int, length: int,
                 heads: int, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The biased path's float mask ``[B, H, L, L]`` (the bias on the edges, ``-inf`` elsewhere and
    on edges from padded keys, dead rows 0) and its dead rows ``[B, H, L, 1]``, from the ``E`` edges
    alone: the values are set at ``flat [E, H]`` and the dead rows counted per query and head, so
    the full tensor is written twice (fill, revive) instead of scanned and copied per step.
    Equals ``revive_dead_rows(combine_masks(edges_to_dense(...), key padding))``."""
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


# --------------------------------------------------------------------------- one layer, no planner


def plan_layer(batch: int, length: int, key_length: int, *, heads: int, kernel: str = "sdpa",
               mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None,
               edge_index: torch.Tensor | None = None, edge_bias: torch.Tensor | None = None,
               edge_attr: torch.Tensor | None = None, need_weights: bool = False) -> AttentionPlan:
    """The trivial plan of one attention call with its masks as given (``MultiHeadAttention`` without
    a plan): ``mask [B, S]`` key padding, ``attn_mask`` ending in ``[L, S]`` (cross-attention: S != L),
    combined by :func:`~seqattn.core.masks.build_attention_mask`; ``edge_index`` / ``edge_bias`` for
    ``kernel='edge'``; ``edge_attr`` per edge (``edge``) or dense ``[B, L, S, C]``. The kernel of each case:
    ``edge`` and ``linear`` as asked; ``math`` for ``kernel='math'``, edge features or ``need_weights``;
    else the fused kernel (``dense`` / ``none``) with its dead rows zeroed."""
    check_kernel(kernel)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool [B, S] (True = real token), got dtype {mask.dtype}")
        if mask.shape != (batch, key_length):
            raise ValueError(f"mask must be [B, S] = ({batch}, {key_length}), got {tuple(mask.shape)}")
    if attn_mask is not None and tuple(attn_mask.shape[-2:]) != (length, key_length):
        raise ValueError(f"attn_mask must end in (L, S) = ({length}, {key_length}), got {tuple(attn_mask.shape)}")
    kernel_mask = build_attention_mask(mask, attn_mask)  # None | [B|1, H|1, L|1, S]
    common = dict(kernel=kernel, batch=batch, length=length, key_length=key_length, heads=heads,
                  kernel_mask=kernel_mask, edge_attr=edge_attr)
    if kernel == "edge":
        if edge_index is None:
            raise ValueError("kernel='edge' needs an edge_index [2, E]")
        return AttentionPlan("edge", edge_index=edge_index, edge_bias=edge_bias, graph_path="edge", **common)
    if edge_index is not None:
        raise ValueError(f"edge_index is only used by kernel='edge', got kernel={kernel!r}")
    if kernel == "linear":
        if edge_attr is not None:
            raise ValueError("the 'linear' kernel takes no per-pair key / value offsets (edge_attr)")
        return AttentionPlan("linear", **common)
    if kernel == "math" or need_weights or edge_attr is not None:
        return AttentionPlan("math", **common)
    if kernel_mask is None:
        return AttentionPlan("none", **common)
    dead = dead_rows(kernel_mask)  # [.., L, 1] (no host read: revived and zeroed whether or not there are any)
    common["kernel_mask"] = revive_dead_rows(kernel_mask, dead)
    return AttentionPlan("dense", dead=dead, **common)

