"""The encoder stack: ``Tokens -> [B, L, D]``, modality-agnostic.

Letters: b batch, l length, d model width, h heads.

Layer (pre-norm, ``norm_first=True``)::

    x = x + Dropout(MHA(LN(x)))
    x = x + Dropout(Conv(LN(x)))      # only with conv_kernel > 0 (Conformer's convolution module)
    x = x + Dropout(FFN(LN(x)))

Post-norm (``norm_first=False``) is the original Transformer ordering.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from seqattn.core.attention import GlobalLinearAttention, MultiHeadAttention, check_heads
from seqattn.core.attention_plan import AttentionPlan
from seqattn.core.checks import tracing
from seqattn.core.conv import conv1d_positions
from seqattn.core.dropout import Dropout
from seqattn.core.graph_cost import DENSE_MIN_FILL
from seqattn.core.plan import PlanOptions, Structure, pack_edge_plan, plan_structure
from seqattn.core.positional import RelativePositionBias, build_positional
from seqattn.core.propagation import ppr_propagate
from seqattn.core.tokens import Tokens

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU}


def _layer_indices(value: Sequence[int] | int | None, depth: int, name: str, meaning: str) -> list[int]:
    """Distinct layer indices in ``[0, depth)`` from a list, one bare index (``3`` is ``[3]``) or None (``[]``);
    anything else raises ``ValueError`` naming ``name``, the value and ``meaning``."""
    if value is None:
        return []
    indices = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < depth for i in indices) or (
            len(set(indices)) != len(indices)):
        raise ValueError(f"{name} must be distinct layer indices in [0, depth={depth}) ({meaning}), got {value!r}")
    return indices


class FeedForward(nn.Sequential):
    """``[B, L, D] -> [B, L, D]``: Linear(D, mult·D), activation, dropout, Linear(mult·D, D)."""

    def __init__(self, dim: int, mult: float = 4, dropout: float = 0.0, activation: str = "gelu") -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {tuple(ACTIVATIONS)}")
        hidden = int(dim * mult)
        super().__init__(nn.Linear(dim, hidden), ACTIVATIONS[activation](), Dropout(dropout), nn.Linear(hidden, dim))


class ConvModule(nn.Module):
    """Conformer's convolution module (Gulati et al. 2020), with LayerNorm in place of BatchNorm (padded
    batches): ``x [B, L, D], mask [B, L] | None -> [B, L, D]``.

    Linear(D, 2D) -> GLU -> depthwise Conv1d over the positions (``kernel`` wide, same padding) -> LayerNorm
    -> SiLU -> Linear(D, D). Positions outside ``mask`` (padding; the encoder also leaves out global tokens)
    are zeroed before the convolution and get a zero output, so a token never reads them and its output does
    not depend on how far the batch is padded.
    """

    def __init__(self, dim: int, kernel: int) -> None:
        super().__init__()
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1 or kernel % 2 == 0:
            raise ValueError(f"conv_kernel must be an odd int >= 1 (a centred window), got {kernel!r}")
        self.inner = nn.Linear(dim, 2 * dim)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.act = nn.SiLU()
        self.outer = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = nn.functional.glu(self.inner(x), dim=-1)  # [B, L, D]
        keep = None if mask is None else mask.unsqueeze(-1).to(h.dtype)  # [B, L, 1]: 1 on real positions
        if keep is not None:
            # padding reads as zero. A product with the float mask, not masked_fill: one pass forward and one
            # backward instead of a clone and a fill each way (1.0 vs 1.5 ms, [64, 98, 64], one thread). It assumes
            # finite values at padding, as attention does (a masked key still multiplies its value by 0).
            h = h * keep
        h = conv1d_positions(self.depthwise, h)  # [B, L, D]
        out = self.outer(self.act(self.norm(h)))  # [B, L, D]
        return out if keep is None else out * keep


class EncoderLayer(nn.Module):
    """One self-attention + feed-forward block. ``forward(x [B, L, D]) -> [B, L, D]``."""

    def __init__(
        self,
        dim: int,
        heads: int,
        ff_mult: float = 4,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        norm_first: bool = True,
        kernel: str = "sdpa",
        activation: str = "gelu",
        dim_k: int | None = None,
        dim_v: int | None = None,
        edge_dim: int = 0,
        attn_scale: float | None = None,
        conv_kernel: int = 0,
        global_attention: float = 0.0,
        attn_dropout_mode: str = "weights",
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.global_attention = float(global_attention)
        self.global_attn = GlobalLinearAttention(dim) if global_attention else None
        self.conv = ConvModule(dim, conv_kernel) if conv_kernel else None
        self.norm_conv = nn.LayerNorm(dim) if conv_kernel else None
        self.drop_conv = Dropout(dropout) if conv_kernel else None
        self.attn = MultiHeadAttention(dim, heads, dim_k=dim_k, dim_v=dim_v, dropout=attn_dropout, kernel=kernel,
                                       edge_dim=edge_dim, scale=attn_scale, dropout_mode=attn_dropout_mode)
        self.ff = FeedForward(dim, ff_mult, dropout, activation)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.drop1 = Dropout(dropout)
        self.drop2 = Dropout(dropout)

    def forward(self, x, mask=None, attn_mask=None, need_weights=False, conv_mask=None, token_mask=None,
                **attn_kwargs):
        """``x [B, L, D]``, masks as in ``MultiHeadAttention`` -> ``[B, L, D]`` (and weights);
        ``conv_mask [B, L]`` (True = real token; default ``mask``) is what the convolution module reads,
        ``token_mask [B, L]`` (default ``mask``) the real tokens the global branch reads (``global_attention``)."""
        h = self.norm1(x) if self.norm_first else x
        attn = self.attn(h, mask, attn_mask, need_weights, **attn_kwargs)
        attn, weights = attn if need_weights else (attn, None)
        if self.global_attn is not None:  # (1 - w) · the planned attention + w · the global branch
            w = self.global_attention
            attn = (1.0 - w) * attn + w * self.global_attn(h, mask if token_mask is None else token_mask)
        x = x + self.drop1(attn)
        if not self.norm_first:
            x = self.norm1(x)
        if self.conv is not None:
            h = self.norm_conv(x) if self.norm_first else x
            x = x + self.drop_conv(self.conv(h, mask if conv_mask is None else conv_mask))
            if not self.norm_first:
                x = self.norm_conv(x)
        h = self.norm2(x) if self.norm_first else x
        x = x + self.drop2(self.ff(h))
        if not self.norm_first:
            x = self.norm2(x)
        return (x, weights) if need_weights else x


class Encoder(nn.Module):
    """A stack of ``depth`` self-attention layers with a positional encoding.

    Args:
        dim: model width D.
        depth: number of layers.
        heads: attention heads per layer.
        ff_mult: feed-forward hidden width as a multiple of D.
        dropout: dropout on residual branches and inside the FFN.
        norm_first: pre-norm (default) or post-norm layers.
        kernel: what the layers compute: ``sdpa`` (default: exact softmax attention, planned onto the
            fastest exact path) | ``math`` (exact, the reference kernel, always one dense mask) |
            ``linear`` (linear attention, another model: padding only) | ``edge`` (exact, always the O(E)
            edge kernel: graph structure only).
        positional: ``none`` | ``learned`` | ``sinusoidal`` | ``rotary``.
        max_len: maximum length for ``positional='learned'`` (required there).
        window: if set, local attention: each token sees only tokens within ±window (positions after
            any global tokens; planned as a blocked band kernel, not a dense mask). The one 1-D window
            knob (``model.window``); a 2-D ``k×k`` window on an image grid is ``Tokens.grid_window``
            (the image adapter's ``window``). Both together: their logical AND, as a dense mask (the
            plan's summary says so).
        attn_dropout: attention dropout (training only).
        attn_dropout_mode: ``weights`` (after the softmax) | ``keys`` (DropKey: keys dropped before it, the
            fused kernel kept; dense paths only): :class:`~seqattn.core.attention.MultiHeadAttention`.
        dim_k, dim_v: total q/k and value widths (default D).
        activation: FFN activation, ``gelu`` | ``relu`` | ``silu``.
        graph_path: for graph structure (``Tokens.edge_index``): ``auto`` | ``dense`` | ``edge``
            (see :mod:`seqattn.core.graph_cost`); the one graph path knob (``model.graph_path``).
        max_dense_bytes: the dense graph path's memory cap per layer (``auto`` picks ``edge`` above
            it, ``dense`` raises).
        dense_min_fill: ``auto`` picks dense when the edges fill at least this fraction of the
            ``B·N²`` blocks (``python -m seqattn.bench graph``).
        edge_dim: width C of per-edge features (``Tokens.edge_attr [E, C]``) that every layer projects
            into key and value offsets (:class:`~seqattn.core.attention.MultiHeadAttention`); 0 = none.
            The dense path scatters them to ``[B, L, L, C]`` (the math kernel), the edge path keeps them per edge.
        flex_attention: allow FlexAttention block masks for windows / grid windows / causal where it
            can train (CUDA); elsewhere the planned CPU paths.
        attention_path: force one path of :data:`~seqattn.core.attention_plan.PATHS` for every batch
            (tests and benchmarks); None (default) = planned.
        output_propagation: ``k > 0``: after the last layer (and its norm), ``k`` personalised-PageRank steps
            over the structure's ``edge_index`` (:func:`~seqattn.core.propagation.ppr_propagate`, APPNP's
            output step): each token's vector becomes a mix of its own and its graph neighbourhood's. Needs
            graph structure (``Tokens.edge_index``); a batch without it raises ``ValueError``. 0 = none.
        propagation_alpha: the teleport probability of ``output_propagation`` (the share of a token's own
            vector kept at every step), in ``[0, 1]``.
        relative_bias: ``M > 0``: a learned, direction-aware relative position bias
            (:class:`~seqattn.core.positional.RelativePositionBias`: one score per head and signed offset
            ``j - i`` clipped to ``±M``, shared by all layers) added to every layer's scores, besides
            ``positional``; 0 = none. The attention then runs with one dense float mask.
        attn_scale: the score scale of every layer (``None`` = ``1/√(head width)``; ``1.0`` = un-scaled,
            the sharper attention of TENER 2019).
        initial_residual: ``α`` in ``[0, 1]``: GCNII's initial residual (Chen et al. 2020): after every layer
            ``x_{l+1} = (1 - α) layer(x_l) + α x_0``, with ``x_0`` the encoder's input (after its positional
            encoding), so every layer keeps a share of the input and deep stacks do not wash it out (a graph's
            over-smoothing). With one layer it only scales the layer's update. 0 = none (default).
        conv_kernel: ``k > 0`` (odd): every layer (or those of ``conv_layers``) gains Conformer's convolution
            module after its attention (:class:`ConvModule`: a depthwise convolution ``k`` positions wide over the
            sequence), a local prior beside attention's global view; sequences only (a graph batch,
            ``edge_index``, raises); global tokens (``Tokens.num_global``, a CLS token) are left out of it. 0 =
            none (default).
        conv_layers: indices ``0 <= i < depth`` of the layers that get the convolution module (one bare index is
            one layer; ``()`` = none); None = every layer (default). Only with ``conv_kernel > 0``.
        pack_graphs: a padded graph batch planned onto the ``edge`` path (molecules) runs its layers on the
            real tokens only, ``[1, T, D]`` instead of ``[B, L, D]`` (:func:`~seqattn.core.plan.pack_edge_plan`):
            the same arithmetic for every real token, without the projections and feed-forward of the padding.
            Not when attention weights are asked for, under tracing or with rotary positions (they read the
            padded position). False = always the padded layout (tests, benchmarks).
        global_attention: ``w`` in ``[0, 1]``: every layer's attention becomes ``(1 - w)`` × the planned attention
            (a graph's masked attention) ``+ w`` × a global branch over all real tokens of the batch item
            (:class:`~seqattn.core.attention.GlobalLinearAttention`, SGFormer's simple global attention: linear in
            the length, its own three projections per layer). Batch items stay apart (a padded graph batch is not
            packed then). Returned attention weights are the planned attention's. 0 = none (default).
        unmasked_layers: indices ``0 <= i < depth`` (one bare index is one layer; None or () = none, the
            default) of layers that attend to every real token of their batch item without the batch's
            structure (graph edges with their bias and features, windows, a structure mask): padding only.
            Between masked layers they are edge-set attention's unmasked blocks (Buterez et al. 2024). A padded
            graph batch is not packed then (its items must stay apart); the ``edge`` kernel and causal batches
            refuse it.

    :meth:`plan` tells which path a batch will take without running the layers; ``last_plan`` is
    :meth:`AttentionPlan.describe` of the last forward, with its one-line ``summary``.
    """

    def __init__(
        self,
        dim: int,
        depth: int,
        heads: int,
        ff_mult: float = 4,
        dropout: float = 0.1,
        norm_first: bool = True,
        kernel: str = "sdpa",
        positional: str = "sinusoidal",
        max_len: int | None = None,
        window: int | None = None,
        attn_dropout: float = 0.0,
        dim_k: int | None = None,
        dim_v: int | None = None,
        activation: str = "gelu",
        graph_path: str = "auto",
        max_dense_bytes: int = 2**30,
        dense_min_fill: float = DENSE_MIN_FILL,
        edge_dim: int = 0,
        flex_attention: bool = False,
        attention_path: str | None = None,
        output_propagation: int = 0,
        propagation_alpha: float = 0.1,
        relative_bias: int = 0,
        attn_scale: float | None = None,
        initial_residual: float = 0.0,
        conv_kernel: int = 0,
        pack_graphs: bool = True,
        global_attention: float = 0.0,
        attn_dropout_mode: str = "weights",
        unmasked_layers: Sequence[int] | int | None = (),
        conv_layers: Sequence[int] | int | None = None,
    ) -> None:
        super().__init__()
        unmasked = _layer_indices(unmasked_layers, depth, "unmasked_layers",
                                  "the layers that attend to every real token")
        if unmasked and kernel == "edge":
            raise ValueError("unmasked_layers attend to every real token, which the 'edge' kernel (graph edges only) "
                             "cannot compute; use kernel=sdpa or math")
        self.unmasked_layers = frozenset(unmasked)
        if isinstance(global_attention, bool) or not isinstance(global_attention, (int, float)) or not (
                0.0 <= float(global_attention) <= 1.0):
            raise ValueError(f"global_attention must be a number in [0, 1] (the global branch's share of every "
                             f"layer's attention; 0 = none), got {global_attention!r}")
        self.global_attention = float(global_attention)
        if not isinstance(pack_graphs, bool):
            raise ValueError(f"pack_graphs must be true or false (run padded graph batches on their real tokens), "
                             f"got {pack_graphs!r}")
        self.pack_graphs = pack_graphs
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if isinstance(output_propagation, bool) or not isinstance(output_propagation, int) or output_propagation < 0:
            raise ValueError(f"output_propagation must be an int >= 0 (propagation steps), got {output_propagation!r}")
        if not 0.0 <= float(propagation_alpha) <= 1.0:
            raise ValueError(f"propagation_alpha must lie in [0, 1] (the teleport probability), got {propagation_alpha!r}")
        self.output_propagation, self.propagation_alpha = int(output_propagation), float(propagation_alpha)
        self.conv_kernel = int(conv_kernel)
        named = None if conv_layers is None else _layer_indices(
            conv_layers, depth, "conv_layers", "the layers with the convolution module; null = every layer")
        if named and not self.conv_kernel:
            raise ValueError(f"conv_layers={conv_layers!r} names layers for the convolution module, but conv_kernel=0 "
                             f"(no module): set conv_kernel to an odd width, e.g. 15")
        # the layers with a convolution module: those named (every layer when none are); none without a kernel
        self.conv_layers = frozenset(range(depth) if named is None else named) if self.conv_kernel else frozenset()
        if isinstance(initial_residual, bool) or not 0.0 <= float(initial_residual) <= 1.0:
            raise ValueError(f"initial_residual must lie in [0, 1] (the share of the encoder's input mixed back "
                             f"after every layer), got {initial_residual!r}")
        self.initial_residual = float(initial_residual)
        if window is not None and window < 0:
            raise ValueError(f"window must be >= 0 or None, got {window}")
        if window is not None and kernel in ("linear", "edge"):
            raise ValueError(f"window attention needs a dense kernel (sdpa or math), got kernel={kernel!r}")
        self.dim, self.window, self.kernel, self.heads = dim, window, kernel, heads
        self.norm_first = bool(norm_first)
        self.graph_path = graph_path
        self.max_dense_bytes, self.dense_min_fill = int(max_dense_bytes), float(dense_min_fill)
        self.flex_attention = bool(flex_attention)
        self.attention_path = attention_path
        _ = self.plan_options  # validates kernel, graph_path and attention_path
        self.last_graph_path: str | None = None  # the path the last graph batch took (inspection, benchmarks)
        self.last_plan: dict | None = None  # AttentionPlan.describe() of the last forward, with "summary"
        head_dim = check_heads(dim, heads, dim_k, dim_v)[0] // heads  # an uneven split is refused here, first
        self.positional_name = positional
        self.positional, self.rotary = build_positional(positional, dim, head_dim, max_len)
        if isinstance(relative_bias, bool) or not isinstance(relative_bias, int) or relative_bias < 0:
            raise ValueError(f"relative_bias must be an int >= 0 (the largest offset with its own bias; 0 = none), "
                             f"got {relative_bias!r}")
        if relative_bias and kernel in ("linear", "edge"):
            raise ValueError(f"relative_bias needs a dense kernel (sdpa or math), got kernel={kernel!r}")
        self.relative_bias = RelativePositionBias(heads, relative_bias) if relative_bias else None
        # the longest sequence the encoder accepts (a learned positional table has a fixed size), or None
        self.max_length: int | None = int(max_len) if positional == "learned" else None
        if edge_dim and kernel == "linear":
            raise ValueError("edge_dim needs an exact kernel (sdpa, math or edge); the 'linear' kernel has no pairs")
        self.edge_dim = int(edge_dim)
        self.layers = nn.ModuleList(
            EncoderLayer(dim, heads, ff_mult, dropout, attn_dropout, norm_first, kernel, activation, dim_k, dim_v,
                         edge_dim, attn_scale, conv_kernel if i in self.conv_layers else 0, self.global_attention,
                         attn_dropout_mode)
            for i in range(depth)
        )
        self.norm = nn.LayerNorm(dim) if norm_first else nn.Identity()

    @property
    def has_conv(self) -> bool:
        """Whether any layer has the convolution module (``conv_layers``, empty without a ``conv_kernel``)."""
        return bool(self.conv_layers)

    @property
    def plan_options(self) -> PlanOptions:
        """How this encoder plans (kernel, graph path, memory cap, FlexAttention, forced path)."""
        return PlanOptions(kernel=self.kernel, graph_path=self.graph_path, max_dense_bytes=self.max_dense_bytes,
                           dense_min_fill=self.dense_min_fill, flex=self.flex_attention, path=self.attention_path)

    def plan(
        self,
        x: torch.Tensor | Tokens,
        mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        edge_index: torch.Tensor | None = None,
        edge_bias: torch.Tensor | None = None,
        edge_attr: torch.Tensor | None = None,
    ) -> AttentionPlan:
        """The attention plan of a batch (what :meth:`forward` would run), without running the layers.

        Args as in :meth:`forward`: ``x [B, L, D]`` or a :class:`Tokens` (its mask and structure
        description are used; explicit arguments override them). ``plan(tokens).summary(depth)``
        is one human line, e.g. ``attention: band ±64 via the CPU flash kernel, 4 layers``.
        """
        described: dict = {}
        if isinstance(x, Tokens):
            tokens = x
            x = tokens.x
            mask = tokens.mask if mask is None else mask
            attn_mask = tokens.attn_mask if attn_mask is None else attn_mask
            edge_index = tokens.edge_index if edge_index is None else edge_index
            edge_bias = tokens.edge_bias if edge_bias is None else edge_bias
            edge_attr = tokens.edge_attr if edge_attr is None else edge_attr
            described = {"grid": tokens.grid, "grid_window": tokens.grid_window, "causal": bool(tokens.causal),
                         "num_global": int(tokens.num_global)}
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"encoder input must be [B, L, D={self.dim}], got shape {tuple(x.shape)}")
        if edge_attr is not None and edge_index is not None and (
                not self.edge_dim or edge_attr.dim() != 2 or edge_attr.shape != (edge_index.shape[1], self.edge_dim)):
            raise ValueError(f"edge_attr must be [E={edge_index.shape[1]}, C=edge_dim={self.edge_dim}] (an encoder "
                             f"with edge_dim > 0 reads it), got {tuple(edge_attr.shape)}")
        structure = Structure(x.shape[0], x.shape[1], x.device, mask=mask, attn_mask=attn_mask, window=self.window,
                              edge_index=edge_index, edge_bias=edge_bias, edge_attr=edge_attr, dtype=x.dtype,
                              **described)
        return plan_structure(structure, self.plan_options, heads=self.heads, dim=self.dim)

    def forward(
        self,
        x: torch.Tensor | Tokens,
        mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        edge_index: torch.Tensor | None = None,
        return_attention: bool | list[int] = False,
        edge_bias: torch.Tensor | None = None,
        edge_attr: torch.Tensor | None = None,
        attention_items: list[int] | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Encode.

        Args:
            x: ``[B, L, D]`` or a :class:`Tokens` (then its mask, structure description -- grid,
                grid_window, causal, num_global -- attn_mask, edge_index, edge_bias and edge_attr are used).
            mask: ``[B, L]`` bool, True = real token.
            attn_mask: structure ``[L, L]`` / ``[B, L, L]`` / ``[B, H, L, L]`` bool or float bias.
            edge_index: ``[2, E]`` graph edges over flattened ``b * L + l``; planned once per forward
                into the ``edge`` kernel or dense blocks (``graph_path``).
            return_attention: ``True`` for every layer's weights, or a list of layer indices: their
                exact weights come from the fused kernel's logsumexp or one recomputation (no
                gradient), so one plotted layer costs one layer, not a slower model.
            edge_bias: ``[E, H]`` additive score per edge and head (with ``edge_index``).
            edge_attr: ``[E, C = edge_dim]`` features per edge (with ``edge_index``), projected by every
                layer into key and value offsets.
            attention_items: the batch items whose weights are returned (default all).

        The attention of every layer is planned once per forward (:meth:`plan`): an exact kernel whose
        cost follows the allowed pairs; ``last_plan`` describes the last one. Edge features go through
        the same planner (dense ``[B, L, L, C]`` offsets through the math kernel, or per-edge offsets
        through the edge kernel, chosen as ``graph_path`` says).

        Returns:
            ``[B, L, D]`` (padded positions are zero), or ``(out, [weights [B', H, L, L], ...])``.
        """
        plan = self.plan(x, mask, attn_mask, edge_index, edge_bias, edge_attr)
        num_global = 0
        if isinstance(x, Tokens):
            mask = x.mask if mask is None else mask
            edge_index = x.edge_index if edge_index is None else edge_index
            num_global = int(x.num_global)
            x = x.x
        if self.output_propagation and edge_index is None:
            raise ValueError(f"output_propagation={self.output_propagation} propagates over graph structure, but the "
                             "batch has no edge_index (Tokens.edge_index); set output_propagation=0 for it")
        if self.has_conv and edge_index is not None:
            raise ValueError(f"conv_kernel={self.conv_kernel} convolves over positions in order, but this batch is a "
                             "graph (Tokens.edge_index): its nodes have no order; set conv_kernel=0 for it")
        plain = None  # the plan of the unmasked layers: padding only
        if self.unmasked_layers:
            if plan.structure.get("causal"):
                raise ValueError(f"unmasked_layers={sorted(self.unmasked_layers)} would let causal tokens see the "
                                 "future; set unmasked_layers=[] for a causal batch")
            plain = plan_structure(Structure(x.shape[0], x.shape[1], x.device, mask=mask, dtype=x.dtype),
                                   self.plan_options, heads=self.heads, dim=self.dim)
        if not tracing():
            self.last_plan = dict(plan.describe(), summary=plan.summary(len(self.layers)))
            if plain is not None:
                self.last_plan["summary"] += (f"; layers {sorted(self.unmasked_layers)} unmasked: "
                                              f"{plain.summary(len(self.unmasked_layers)).removeprefix('attention: ')}")
            if plan.graph_path is not None:
                self.last_graph_path = plan.graph_path
        if self.positional is not None:
            x = self.positional(x)  # [B, L, D]
        if return_attention is True:
            wanted = set(range(len(self.layers)))
        elif return_attention:
            wanted = {i % len(self.layers) for i in return_attention}
        else:
            wanted = set()
        bias = None if self.relative_bias is None else self.relative_bias(x.shape[1], dtype=x.dtype)  # [1, H, L, L]
        conv_mask = mask  # [B, L]: what the convolution modules read; global tokens (CLS) have no place in the order
        if self.has_conv and num_global:
            conv_mask = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device) if mask is None else mask.clone()
            conv_mask[:, :num_global] = False
        packed = None
        if (self.pack_graphs and not wanted and self.rotary is None and not self.global_attention
                and not self.unmasked_layers and not tracing()):
            packed = pack_edge_plan(plan)  # (tokens [T], the plan over [1, T]) or None
        if packed is not None:
            tokens, plan = packed
            b, length, width = x.shape
            if self.last_plan is not None:  # the log line says the padding is skipped
                self.last_plan["summary"] += (f", packed: {tokens.numel()} real tokens of {b}×{length} "
                                              "padded (the padding skipped)")
            x = x.reshape(b * length, width).index_select(0, tokens).unsqueeze(0)  # [1, T, D]
        weights = []
        x0 = x  # [B, L, D] (packed: [1, T, D]), what the initial residual mixes back
        for i, layer in enumerate(self.layers):
            out = layer(x, None, None, i in wanted, conv_mask=conv_mask, token_mask=mask, rotary=self.rotary,
                        plan=plain if i in self.unmasked_layers else plan, attention_items=attention_items,
                        bias=bias)
            if i in wanted:
                x, w = out
                weights.append(w)
            else:
                x = out
            if self.initial_residual:
                x = (1.0 - self.initial_residual) * x + self.initial_residual * x0  # [B, L, D]
        x = self.norm(x)
        if packed is not None:  # [1, T, D] -> [B, L, D], padding zero
            x = x.new_zeros(b * length, width).index_copy(0, tokens, x[0]).view(b, length, width)
        if self.output_propagation:
            x = ppr_propagate(x, edge_index, mask, self.output_propagation, self.propagation_alpha)  # [B, L, D]
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)  # [B, L, D], padding -> 0
        return (x, weights) if return_attention else x
