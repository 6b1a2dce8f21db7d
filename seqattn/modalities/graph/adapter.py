"""Graphs (molecules, social networks) -> Tokens with graph-masked attention.

A graph is a set of node vectors plus edges; self-attention over a graph is attention
restricted to its edges. Each node attends to itself and to the nodes within ``hops``
hops; edge features (and the hop distance) become a per-head additive attention bias.

Letters: b batch (graphs), n nodes per graph (padded), f node features, g edge features,
h heads, d model width, e edges (directed, over the flattened batch), k positional width.

The adapter emits structure only: ``Tokens.edge_index`` (self-loops and k-hop edges) and
``Tokens.edge_bias [E', H]``; the encoder plans the attention path (dense blocks or the O(E)
edge kernel, :mod:`seqattn.core.graph_cost`), since that is a property of attention, not of graphs.

Batch interface (the keys :class:`GraphAdapter` reads, ``GraphAdapter.inputs``)::

    x           [B, N, F] float  padded node features (F = node_features); padding rows are ignored
    mask        [B, N]    bool   True = real node
    edge_index  [2, E]    long   directed edges over flattened positions b * N + n (the ``Tokens``
                                 convention): row 0 source, row 1 target; the target attends to
                                 the source. Give both directions for an undirected graph. Self-loops
                                 are added by the adapter (do not include them); both ends of an edge
                                 must be real nodes of the same graph.
    edge_attr   [E, G]    float  features of edge e (only read when edge_features > 0)
    pe          [B, N, K] float  positional encoding per node, K = pe_dim (only read when
                                 positional != "none"); computed ONCE per graph in the dataset with
                                 :func:`~seqattn.modalities.graph.positional.graph_positional_encoding` and padded with zeros

:func:`~seqattn.modalities.graph.batching.collate_graphs` builds exactly this batch from a list of per-graph dicts
(``x [n, F]``, ``edge_index [2, e]`` with local node ids, optional ``edge_attr [e, G]``,
``pe [n, K]``; any other key is collected into a list, or stacked when it is a tensor of the
same shape in every item).

The encoder turns this structure into a dense ``[B, H, N, N]`` mask or runs the ``edge`` kernel
(``model.graph_path``: ``auto`` | ``dense`` | ``edge``); both give the same result (tests prove it,
values and gradients).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from seqattn.core.dropout import Dropout, dropout
from seqattn.core.graph_cost import GRAPH_PATHS
from seqattn.core.propagation import gcn_operator
from seqattn.core.structure_cache import TensorMemo
from seqattn.core.tokens import Tokens
from seqattn.model.protocols import AdapterBase, TargetLayout, TokenTargets, replace_rows
from seqattn.modalities.graph.positional import GRAPH_POSITIONALS



#: the k-hop edges of the last few graphs (a full-graph run's training and evaluation items)
K_HOP_EDGES = TensorMemo()


def k_hop_edges(edge_index: torch.Tensor, mask: torch.Tensor, hops: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Edges within ``hops`` hops, with self-loops, over the flattened padded batch.

    Args:
        edge_index: ``[2, E]`` over flattened ``b * N + n`` (source, target).
        mask: ``[B, N]`` bool real nodes (self-loops only for real nodes).
        hops: ``k >= 1``: target ``t`` may attend to source ``s`` iff a directed path ``s -> t``
            of at most ``k`` edges exists.

    Returns:
        ``(edges [2, E'], distance [E'] long (0 = self), position [E] long)``: the edges sorted by
        (target, source), the hop distance of each, and where each input edge landed in ``edges``.
    """
    if hops < 1:
        raise ValueError(f"hops must be >= 1, got {hops}")
    n_total = mask.numel()
    device = edge_index.device
    src, dst = edge_index[0], edge_index[1]
    # breadth-first search backwards from every target, all targets at once:
    # a pair (t, u) at distance d extends to (t, s) for every edge s -> u
    order = torch.argsort(dst, stable=True)
    src_by_dst = src.index_select(0, order)  # sources grouped by their target
    in_deg = torch.bincount(dst, minlength=n_total)  # [N_total]
    ptr = torch.cumsum(in_deg, 0) - in_deg  # first incoming edge of each node
    nodes = torch.nonzero(mask.flatten(), as_tuple=False).squeeze(1)  # [N_real]
    seen = nodes * n_total + nodes  # linear id target * n_total + source; sorted
    ids, dists = [seen], [torch.zeros(nodes.numel(), dtype=torch.long, device=device)]
    front_t, front_u = nodes, nodes
    for d in range(1, hops + 1):
        counts = in_deg.index_select(0, front_u)  # [P]
        total = int(counts.sum())
        if total == 0:
            break
        rep_t = torch.repeat_interleave(front_t, counts)  # [P']
        first = torch.repeat_interleave(ptr.index_select(0, front_u), counts)
        offset = torch.arange(total, device=device) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        new_s = src_by_dst.index_select(0, first + offset)
        cand = torch.unique(rep_t * n_total + new_s)  # sorted
        fresh = cand[~torch.isin(cand, seen)]
        if fresh.numel() == 0:
            break
        ids.append(fresh)
        dists.append(torch.full((fresh.numel(),), d, dtype=torch.long, device=device))
        seen = torch.cat([seen, fresh]).sort().values
        front_t, front_u = fresh // n_total, fresh % n_total
    all_ids, all_d = torch.cat(ids), torch.cat(dists)
    uniq, order = torch.sort(all_ids)  # every id appears once (BFS keeps the shortest distance)
    distance = all_d.index_select(0, order)
    edges = torch.stack([uniq % n_total, uniq // n_total])  # [2, E'] (source, target)
    position = torch.searchsorted(uniq, dst * n_total + src)  # where input edges landed
    return edges, distance, position


# ----------------------------------------------------------------------------------------------
# the adapter
# ----------------------------------------------------------------------------------------------
def smoothed_features(x: torch.Tensor, mask: torch.Tensor, edge_index: torch.Tensor, steps: int) -> torch.Tensor:
    """``x [B, N, F]`` -> ``[B, N, F·(steps+1)]``: the features and their 1..``steps``-step averages over the
    graph, ``Â^k x`` with ``Â = D^-1/2 (A + I) D^-1/2`` (GCN's normalisation; SGC's features), from the
    input edges ``edge_index [2, E]`` over flattened ``b * N + i`` (messages go source -> target) plus a
    self-loop per real node. Padding nodes stay zero. Each node then sees how its neighbourhood looks,
    not only its own features: what lets few labelled nodes label their communities."""
    b, n, f = x.shape
    flat = x.reshape(b * n, f)
    step = gcn_operator(mask, edge_index, flat.dtype)
    out, h = [flat], flat
    for _ in range(steps):
        h = step(h)  # [B·N, F]
        out.append(h)
    return torch.cat(out, dim=1).reshape(b, n, f * (steps + 1))


#: below this fraction of non-zero node features (bag-of-words rows: Cora 1.3 %), the projection reads them as a
#: sparse matrix: its cost follows the non-zeros, and dropout draws one number per non-zero, not per feature
SPARSE_FEATURES_BELOW = 0.1
#: ... and only for inputs of at least this many features (nodes x width): small batches (molecules, karate)
#: stay on the dense product, which is faster there and needs no count of the non-zeros
SPARSE_FEATURES_MIN = 2**20


#: the non-zeros of the last few feature matrices (see sparse_entries)
SPARSE_ENTRIES = TensorMemo()


def sparse_entries(x: torch.Tensor, flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(indices [nnz, 2], values [nnz])`` of the non-zeros of ``flat [B·N, F]`` (a view of ``x``), or
    ``(None, None)`` when at least :data:`SPARSE_FEATURES_BELOW` of it is non-zero.

    Remembered for the same ``x`` (:data:`SPARSE_ENTRIES`, :class:`~seqattn.core.structure_cache.TensorMemo`: the
    same tensor object, unchanged since): a full-graph run feeds the same feature matrix every step (its
    training and evaluation items each their own), and finding its non-zeros costs more than the sparse product
    saves (Cora: ~10 ms per forward on this CPU)."""
    layout = (tuple(x.shape), x.stride(), x.dtype, x.device)

    def find() -> tuple[torch.Tensor | None, torch.Tensor | None]:
        nonzero = torch.nonzero(flat)  # [nnz, 2]
        if nonzero.shape[0] < SPARSE_FEATURES_BELOW * flat.numel():
            return nonzero, flat[nonzero[:, 0], nonzero[:, 1]]
        return None, None

    return SPARSE_ENTRIES((x,), layout, find)


def project_smoothed(x: torch.Tensor, mask: torch.Tensor, edge_index: torch.Tensor, steps: int,
                     proj: nn.Linear, feature_dropout: float = 0.0, mode: str = "concat",
                     node_dropout: float = 0.0, hop_score: nn.Linear | None = None) -> torch.Tensor:
    """``proj(smoothed_features(dropout(x), ...))`` -> ``[B, N, D]`` without forming the ``F·(steps+1)`` features.

    ``proj`` is ``Linear(F·(steps+1), D)`` and ``Â`` commutes with it, so ``[x, Âx, …, Â^k x] W =
    x W_0 + Â(x W_1 + Â(… + Â x W_k))`` (Horner): ``D``-wide vectors are propagated instead of ``F``-wide ones
    (Cora: 64 instead of 1,433). Same parameters, the same function up to float rounding. ``feature_dropout``
    (training only: pass 0 in eval) drops raw features before all of it. Sparse features (fewer than
    :data:`SPARSE_FEATURES_BELOW` non-zero, at least :data:`SPARSE_FEATURES_MIN` values, no gradient wanted for
    ``x``) go through a sparse product: a
    zero feature stays zero under dropout, so dropping the non-zeros only is the same distribution.

    ``mode="mean"``: ``proj`` is ``Linear(F, D)`` and the result is ``proj.bias + (1/(k+1)) Σ_{j≤k} Â^j x W``,
    the mixed-order average of GRAND (Feng et al. 2020): one weight for every hop instead of one per hop.
    ``node_dropout`` (training only: pass 0 in eval) is GRAND's DropNode: each node's whole feature row is
    zeroed with that probability and the others are scaled by ``1/(1-p)``, before the propagation, so a
    dropped node's neighbours see its features gone too.

    ``mode="attention"``: ``proj`` as for ``concat``; each hop is a token ``t_j = Â^j x W_j`` (``[B·N, k+1, D]``)
    and a node weighs its hops by attention (NAGphormer's readout, Chen et al. 2023):
    ``t_0 + Σ_{j≥1} softmax_j(hop_score([t_0, t_j])) t_j``; ``concat`` is the same sum with every weight 1.
    ``hop_score`` is ``Linear(2·D, 1)``."""
    if mode not in PROPAGATE_MODES:
        raise ValueError(f"mode={mode!r} is not one of {PROPAGATE_MODES}")
    if mode == "attention" and (steps < 1 or hop_score is None):
        raise ValueError(f"mode='attention' weighs hops 1..k: it needs steps >= 1 (got {steps}) and a hop_score "
                         "Linear(2·D, 1)")
    b, n, f = x.shape
    d = proj.out_features
    flat = x.reshape(b * n, f)
    hops_in_weight = 1 if mode == "mean" else steps + 1
    if proj.in_features != f * hops_in_weight:
        raise ValueError(f"proj reads {proj.in_features} inputs; mode={mode!r} with {steps} steps of {f} features "
                         f"needs {f * hops_in_weight}")
    weight = proj.weight.view(d, hops_in_weight, f).permute(2, 1, 0).reshape(f, hops_in_weight * d)  # [F, (k+1)·D]
    nonzero = None
    if not flat.requires_grad and flat.numel() >= SPARSE_FEATURES_MIN:
        nonzero, values = sparse_entries(x, flat)  # None, None: not sparse enough
    if nonzero is not None:
        if feature_dropout:
            values = dropout(values, feature_dropout)
        sparse = torch.sparse_coo_tensor(nonzero.t(), values, (b * n, f), is_coalesced=True,
                                         check_invariants=False)
        with torch.autocast(flat.device.type, enabled=False):  # bf16-mixed: the sparse product takes no bf16
            parts = torch.sparse.mm(sparse, weight.to(values.dtype))  # [B·N, (k+1)·D]
    else:
        if feature_dropout:
            flat = dropout(flat, feature_dropout)
        parts = flat @ weight  # [B·N, (k+1)·D]
    if node_dropout:  # (s ⊙ x) W = s ⊙ (x W): a row scale commutes with the projection
        keep = torch.rand(b * n, 1, device=parts.device) >= node_dropout  # [B·N, 1]
        parts = parts * keep.to(parts.dtype) / (1.0 - node_dropout)
    step = gcn_operator(mask, edge_index, flat.dtype) if steps else None
    if mode == "mean":
        out, h = parts, parts  # [B·N, D]
        for _ in range(steps):
            h = step(h)
            out = out + h
        out = out / (steps + 1)
    elif mode == "attention":
        parts = parts.view(b * n, steps + 1, d)  # [B·N, k+1, D]: hop j reads W_j
        hops, rest = [parts[:, 0]], parts[:, 1:].reshape(b * n, steps * d)
        for _ in range(steps):
            rest = step(rest)  # [B·N, (k-j+1)·D]: hops j..k, each one more step along
            hops.append(rest[:, :d])
            rest = rest[:, d:]
        tokens = torch.stack(hops, dim=1)  # [B·N, k+1, D]: t_j = Â^j x W_j
        own = tokens[:, :1].expand(-1, steps, -1)  # [B·N, k, D]
        weight = torch.softmax(hop_score(torch.cat([own, tokens[:, 1:]], dim=-1)).squeeze(-1), dim=-1)  # [B·N, k]
        out = tokens[:, 0] + torch.einsum("nk,nkd->nd", weight, tokens[:, 1:])  # [B·N, D]
    else:
        parts = parts.view(b * n, steps + 1, d)  # [B·N, k+1, D]: step k reads W_k
        out = parts[:, steps]
        for k in range(steps - 1, -1, -1):
            out = step.add_product(parts[:, k], out)  # [B·N, D]: parts_k + Â out
    if proj.bias is not None:
        out = out + proj.bias
    return out.reshape(b, n, d)


#: how ``propagate`` hops enter the projection: each hop its own weight (concatenated, SIGN / SGC) or one weight
#: for their mean (GRAND's mixed-order propagation)
PROPAGATE_MODES = ("concat", "mean", "attention")

#: what masked pretraining predicts of a node without node types (``GraphAdapter(node_target=...)``)
NODE_TARGETS = ("features", "present")


class GraphAdapter(AdapterBase):
    """Padded graph batch -> :class:`Tokens` whose attention follows the graph.

    Not exportable (``seqattn.export`` refuses it): the attention structure (k-hop edges) is built
    per batch in Python, which a trace or ``torch.export`` would freeze.

    Args:
        dim: model width D.
        node_features: F, width of ``x`` (from the data's spec: ``sizes.node_features``).
        edge_features: G, width of ``edge_attr`` (spec ``sizes.edge_features``; 0 = no edge features).
        heads: attention heads of the encoder (the bias is per head); must equal ``model.heads``.
        hops: each node attends to itself and the nodes within ``hops`` hops.
        positional: ``none`` | ``laplacian`` | ``random_walk``: ``pe [B, N, pe_dim]`` is read and
            projected into the node vectors; laplacian signs are flipped at random in training. The data
            computes it (its ``positional`` follows this one; :meth:`check_spec` checks they agree).
        pe_dim: K, width of ``pe``.
        distance_bias: a learned per-head bias for each hop distance (0 = self, 1..hops); starts at 0.
        edge_channels: C > 0: also emit ``Tokens.edge_attr [E', C]``, a learned embedding of each attention
            edge's features and hop distance, which every attention layer projects into key and value
            offsets (the encoder's ``edge_dim`` must equal C; the task config ties them). Then the bond
            features reach the messages, not only the attention weights. 0 = attention bias only.
        dropout: dropout on the node vectors.
        feature_dropout: dropout on the raw node features before their projection (training only; GAT
            drops 60% of a citation graph's bag-of-words inputs).
        propagate: ``k > 0``: the node features are concatenated with their ``1..k``-step GCN-normalised
            graph averages before the projection (:func:`smoothed_features`); ``node_proj`` then reads
            ``F·(k+1)`` inputs. Helps when few nodes are labelled and features say little alone.
        propagate_mode: ``concat`` (above) or ``mean``: one projection of the mean of ``x, Âx, …, Â^k x``
            (GRAND's mixed-order propagation: ``node_proj`` reads ``F`` inputs, deep ``k`` costs no parameters),
            or ``attention``: each hop ``Â^j x W_j`` a token, weighed per node by attention over the hops
            (NAGphormer's readout; :func:`project_smoothed`), ``hop_score`` a ``Linear(2·dim, 1)``.
        node_dropout: GRAND's DropNode (training only): each node's whole feature row is dropped with this
            probability (the rest scaled by ``1/(1-p)``) before the propagation, so its neighbours lose it too.
        node_types: T > 0: the first T columns of ``x`` are a one-hot node type (a molecule's element, from the
            data's spec ``sizes.node_types``); masked pretraining then predicts that type. 0: it predicts the node's
            features (``node_target``).
        node_target: what masked pretraining predicts of a node without ``node_types``: ``features`` (``x`` as
            given, regression: mean squared error) or ``present`` (which features are non-zero, a multi-label
            ``binary`` target: a bag-of-words node's words). Changes no forward pass: only the pretraining.
        kernel: removed (None only): the attention path is the encoder's ``graph_path``
            (``model.graph_path``); a value raises ``ValueError`` naming it.
    """

    spec_fields = {"node_features": "sizes.node_features", "edge_features": "sizes.edge_features",
                   "node_types": "sizes.node_types"}
    exportable = False  # see the class docstring

    def __init__(
        self,
        dim: int,
        node_features: int,
        edge_features: int = 0,
        heads: int = 4,
        hops: int = 1,
        positional: str = "none",
        pe_dim: int = 8,
        distance_bias: bool = True,
        dropout: float = 0.0,
        feature_dropout: float = 0.0,
        kernel: str | None = None,
        max_dense_bytes: int | None = None,
        dense_min_fill: float | None = None,
        edge_channels: int = 0,
        propagate: int = 0,
        propagate_mode: str = "concat",
        node_dropout: float = 0.0,
        node_types: int = 0,
        node_target: str = "features",
    ) -> None:
        super().__init__()
        if dim <= 0 or node_features is None or node_features <= 0 or heads <= 0:
            raise ValueError(f"dim, node_features and heads must be positive, got dim={dim}, "
                             f"node_features={node_features}, heads={heads}")
        if edge_features < 0:
            raise ValueError(f"edge_features must be >= 0, got {edge_features}")
        if hops < 1:
            raise ValueError(f"hops must be >= 1, got {hops}")
        if positional not in GRAPH_POSITIONALS:
            raise ValueError(f"positional={positional!r} is not one of {GRAPH_POSITIONALS}")
        if edge_channels < 0:
            raise ValueError(f"edge_channels must be >= 0, got {edge_channels}")
        if not isinstance(propagate, int) or propagate < 0:
            raise ValueError(f"propagate must be an int >= 0 (smoothing steps), got {propagate!r}")
        if propagate_mode not in PROPAGATE_MODES:
            raise ValueError(f"propagate_mode={propagate_mode!r} is not one of {PROPAGATE_MODES} (how the propagate "
                             "hops enter the projection)")
        if isinstance(node_dropout, bool) or not 0.0 <= float(node_dropout) < 1.0:
            raise ValueError(f"node_dropout must lie in [0, 1) (the probability of dropping a node's features), "
                             f"got {node_dropout!r}")
        if positional != "none" and pe_dim <= 0:
            raise ValueError(f"pe_dim must be positive with positional={positional!r}, got {pe_dim}")
        if kernel is not None and kernel != "auto":  # (conf/adapter/graph.yaml still names the key, as null)
            raise ValueError(f"adapter.kernel={kernel!r} was removed: the attention path is the encoder's; use "
                             f"model.graph_path={kernel} (one of {GRAPH_PATHS})")
        if max_dense_bytes is not None or dense_min_fill is not None:
            warnings.warn("adapter.max_dense_bytes / adapter.dense_min_fill are deprecated and ignored: they are "
                          "model.max_dense_bytes / model.dense_min_fill (the encoder plans the path)",
                          DeprecationWarning, stacklevel=2)
        self.dim, self.heads, self.hops = dim, heads, hops
        self.node_features, self.edge_features = node_features, edge_features
        self.positional, self.pe_dim = positional, pe_dim
        self.propagate, self.propagate_mode, self.node_dropout = propagate, propagate_mode, float(node_dropout)
        if not isinstance(node_types, int) or not 0 <= node_types <= node_features:
            raise ValueError(f"node_types must be an int in [0, node_features={node_features}] (the one-hot type "
                             f"columns leading x), got {node_types!r}")
        self.node_types = node_types
        if node_target not in NODE_TARGETS:
            raise ValueError(f"node_target={node_target!r} is not one of {NODE_TARGETS} (what masked pretraining "
                             "predicts of a node: its features, or which of them are present)")
        self.node_target = node_target
        self.node_proj = nn.Linear(node_features * (1 if propagate_mode == "mean" else propagate + 1), dim)
        if propagate_mode == "attention" and propagate < 1:
            raise ValueError("propagate_mode='attention' weighs the propagate hops: it needs propagate >= 1, got "
                             f"{propagate}")
        self.hop_score = nn.Linear(2 * dim, 1) if propagate_mode == "attention" else None
        self.pe_proj = nn.Linear(pe_dim, dim) if positional != "none" else None
        self.edge_proj = nn.Linear(edge_features, heads) if edge_features else None
        self.distance = nn.Embedding(hops + 1, heads) if distance_bias else None
        if self.distance is not None:
            nn.init.zeros_(self.distance.weight)
        self.edge_channels = int(edge_channels)
        # [bond features of the edge (0 for k-hop pairs and self-loops), one-hot hop distance] -> C
        self.edge_embed = nn.Linear(edge_features + hops + 1, edge_channels) if edge_channels else None
        self.dropout = Dropout(dropout)
        self.feature_dropout = Dropout(feature_dropout)
        inputs = ["x", "mask", "edge_index"]
        if edge_features:
            inputs.append("edge_attr")
        if positional != "none":
            inputs.append("pe")
        self.inputs = tuple(inputs)

    def check_spec(self, spec) -> None:
        """The data must compute the positional encoding this adapter reads (``spec.provides["pe"]``)."""
        provided = spec.provides.get("pe", "none")
        wanted = "none" if self.positional == "none" else f"{self.positional}/{self.pe_dim}"
        if provided != wanted:
            raise ValueError(f"the data computes node positional encodings {provided!r} but the adapter reads "
                             f"{wanted!r}: the graph positional encoding is set by adapter.positional / "
                             "adapter.pe_dim, and the data follows them; do not override data.positional or data.pe_dim")

    # -- checks ---------------------------------------------------------------------------------
    def _check(self, x, mask, edge_index, edge_attr, pe) -> None:
        if x.dim() != 3 or x.shape[-1] != self.node_features:
            raise ValueError(f"x must be [B, N, F={self.node_features}], got shape {tuple(x.shape)}")
        if mask is None or mask.dtype != torch.bool or mask.shape != x.shape[:2]:
            got = None if mask is None else (mask.dtype, tuple(mask.shape))
            raise ValueError(f"mask must be bool [B, N] = {tuple(x.shape[:2])} (True = real node), got {got}")
        if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype != torch.long:
            raise ValueError(f"edge_index must be long [2, E], got {edge_index.dtype} {tuple(edge_index.shape)}")
        b, n = mask.shape
        if edge_index.numel():
            lo, hi = int(edge_index.min()), int(edge_index.max())
            if lo < 0 or hi >= b * n:
                raise ValueError(f"edge_index values must lie in [0, B*N) = [0, {b * n}), got [{lo}, {hi}]")
            if bool((edge_index[0] // n != edge_index[1] // n).any()):
                raise ValueError("edge_index has an edge between two different graphs of the batch")
            if not bool(mask.flatten()[edge_index].all()):
                raise ValueError("edge_index has an edge to or from a padding node (mask False)")
        if self.edge_features:
            if edge_attr is None or edge_attr.dim() != 2 or edge_attr.shape != (edge_index.shape[1], self.edge_features):
                got = None if edge_attr is None else tuple(edge_attr.shape)
                raise ValueError(f"edge_attr must be [E={edge_index.shape[1]}, G={self.edge_features}], got {got}")
        if self.positional != "none":
            if pe is None or pe.shape != (b, n, self.pe_dim):
                got = None if pe is None else tuple(pe.shape)
                raise ValueError(f"pe must be [B, N, pe_dim] = ({b}, {n}, {self.pe_dim}) for "
                                 f"positional={self.positional!r}, got {got}")

    # -- forward --------------------------------------------------------------------------------
    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        edge_index: torch.Tensor,
        edge_attr: torch.Tensor | None = None,
        pe: torch.Tensor | None = None,
    ) -> Tokens:
        """``x [B, N, F]``, ``mask [B, N]``, ``edge_index [2, E]``, ``edge_attr [E, G]``, ``pe [B, N, K]``
        -> ``Tokens(x [B, N, D], mask, edge_index [2, E'], edge_bias [E', H] | None)``: the k-hop
        edges with self-loops (sorted by target, source) and their per-head bias (hop distance +
        projected edge features)."""
        self._check(x, mask, edge_index, edge_attr, pe)
        b, n, _ = x.shape
        node_position = None  # [B, N, D], what pe adds (kept for mask_tokens: a hidden node keeps its position)
        if self.pe_proj is not None:
            pe = pe.to(self.pe_proj.weight.dtype)
            if self.positional == "laplacian" and self.training:
                sign = torch.randint(0, 2, (b, 1, self.pe_dim), device=pe.device).to(pe.dtype) * 2 - 1
                pe = pe * sign  # [B, N, K], a random sign per graph and eigenvector
            node_position = self.pe_proj(pe)
        h = self._node_vectors(x, mask, edge_index, node_position)  # [B, N, D]

        # the same graph at every forward of a full-graph run: computed once (K_HOP_EDGES)
        edges, distance, position = K_HOP_EDGES((edge_index, mask), self.hops,
                                                lambda: k_hop_edges(edge_index, mask, self.hops))  # [2, E'], [E'], [E]
        bias = None  # [E', H]
        if self.distance is not None:
            bias = self.distance(distance)  # [E', H]
        if self.edge_proj is not None:
            per_edge = self.edge_proj(edge_attr.to(h.dtype))  # [E, H]
            extra = torch.zeros(edges.shape[1], self.heads, dtype=per_edge.dtype, device=h.device).index_add(
                0, position, per_edge)  # [E', H] (multi-edges add up)
            bias = extra if bias is None else bias + extra.to(bias.dtype)
        features = None  # [E', C]
        if self.edge_embed is not None:
            parts = [nn.functional.one_hot(distance, self.hops + 1).to(h.dtype)]  # [E', hops + 1]
            if self.edge_features:
                bond = torch.zeros(edges.shape[1], self.edge_features, dtype=h.dtype, device=h.device).index_add(
                    0, position, edge_attr.to(h.dtype))  # [E', G], zeros off the input edges
                parts.insert(0, bond)
            features = self.edge_embed(torch.cat(parts, dim=1))  # [E', C]
        extra = {"graph_edges": edges}
        if node_position is not None:
            extra["node_position"] = node_position
        if self.propagate:  # for mask_tokens: a hidden node's features must leave its neighbours' averages too
            extra["node_inputs"] = (x, mask, edge_index)
        return Tokens(x=h, mask=mask, edge_index=edges, edge_bias=bias, extra=extra, edge_attr=features)

    def _node_vectors(self, x: torch.Tensor, mask: torch.Tensor, edge_index: torch.Tensor,
                      node_position: torch.Tensor | None) -> torch.Tensor:
        """``x [B, N, F]`` -> node vectors ``[B, N, D]``: the projected features (with their ``propagate``-step
        graph averages), plus ``node_position [B, N, D]`` when given; zero on padding; dropout."""
        # = node_proj(smoothed_features(feature_dropout(x))), propagating D-wide vectors, sparse features sparse
        drop = self.feature_dropout.p if self.training else 0.0
        h = project_smoothed(x, mask, edge_index, self.propagate, self.node_proj, drop, self.propagate_mode,
                             self.node_dropout if self.training else 0.0, self.hop_score)  # [B, N, D]
        if node_position is not None:
            h = h + node_position
        return self.dropout(h.masked_fill(~mask.unsqueeze(-1), 0.0))  # [B, N, D]

    # -- masked pretraining (seqattn.objectives.masked) -----------------------------------------
    def token_target_layout(self) -> TargetLayout:
        """``("class", node_types)`` when the data declares node types (a molecule's element), else the node's
        own input features: ``("regression", node_features)`` (``node_target=features``) or
        ``("binary", node_features)`` (``node_target=present``: which features are non-zero)."""
        if self.node_types:
            return TargetLayout("class", self.node_types)
        return TargetLayout("binary" if self.node_target == "present" else "regression", self.node_features)

    def token_targets(self, batch) -> TokenTargets:
        """From the clean ``x [B, N, F]`` and ``mask [B, N]``: the node type (``values [B, N]`` long, the argmax
        of x's first ``node_types`` one-hot columns) or the node's features (``values [B, N, F]``: as the
        data gives them, normalise them there, e.g. ``data.normalize_features``; or ``x != 0`` with
        ``node_target=present``). Maskable: the real nodes, and of those only the batch's ``seed_mask [B, N]``
        when it has one (the nodes a batch scores: a split's nodes of one graph); padding never. A hidden node
        loses its features, also from its neighbours' graph averages (``propagate``), and keeps its edges
        (bonds) and its positional encoding (:meth:`mask_tokens`)."""
        x, mask = batch.get("x"), batch.get("mask")
        if not isinstance(x, torch.Tensor) or not isinstance(mask, torch.Tensor) or x.dim() != 3 \
                or mask.shape != x.shape[:2] or mask.dtype != torch.bool:
            raise ValueError(f"GraphAdapter.token_targets needs x [B, N, F] and mask [B, N] bool, got "
                             f"{tuple(getattr(x, 'shape', ()))} and {tuple(getattr(mask, 'shape', ()))}")
        seeds = batch.get("seed_mask")
        if seeds is not None:
            if not isinstance(seeds, torch.Tensor) or seeds.shape != mask.shape or seeds.dtype != torch.bool:
                raise ValueError(f"GraphAdapter.token_targets: seed_mask must be [B, N] = {tuple(mask.shape)} bool, got "
                                 f"{getattr(seeds, 'dtype', type(seeds).__name__)} {tuple(getattr(seeds, 'shape', ()))}")
            mask = mask & seeds
        if self.node_types:
            onehot = x[..., : self.node_types]  # [B, N, T]
            bad = mask & (((onehot != 0) & (onehot != 1)).any(-1) | (onehot.sum(-1) != 1))  # [B, N]
            if bool(bad.any()):
                raise ValueError(f"node_types={self.node_types}: x's first {self.node_types} columns must be one-hot "
                                 f"on every real node; {int(bad.sum())} node(s) are not")
            types = onehot.argmax(-1).masked_fill(~mask, 0)  # [B, N]
            return TokenTargets("class", types, mask, self.node_types)
        values = (x != 0).float() if self.node_target == "present" else x.float()
        values = values.masked_fill(~mask.unsqueeze(-1), 0.0)  # [B, N, F]
        return TokenTargets(self.token_target_layout().kind, values, mask, self.node_features)

    def mask_tokens(self, tokens: Tokens, hide: torch.Tensor, vector: torch.Tensor) -> Tokens:
        """Hidden nodes (``hide [B, N]``) become ``vector [D]`` plus their positional encoding's projection
        (``tokens.extra["node_position"]``, when ``positional != none``): the features are gone, the
        position in the graph stays (as do the edges and their bias). With ``propagate > 0`` every node's
        vector is recomputed from ``x`` with the hidden nodes' features zeroed (``tokens.extra["node_inputs"]``),
        so that no neighbour's graph average carries them either."""
        if self.propagate:
            inputs = tokens.extra.get("node_inputs")
            if inputs is None:
                raise ValueError(f"GraphAdapter(propagate={self.propagate}).mask_tokens needs the tokens of its own "
                                 "forward (extra['node_inputs']: the features to average without the hidden nodes)")
            x, mask, edge_index = inputs
            if hide.shape != mask.shape:
                raise ValueError(f"hide must be [B, N] = {tuple(mask.shape)}, got {tuple(hide.shape)}")
            cleared = x.masked_fill(hide.unsqueeze(-1), 0)  # [B, N, F]: the hidden nodes' features leave every average
            tokens = tokens.replace(x=self._node_vectors(cleared, mask, edge_index, tokens.extra.get("node_position")))
        out = replace_rows(tokens, hide, vector)
        position = tokens.extra.get("node_position")
        if position is None:
            return out
        x = torch.where(hide.unsqueeze(-1), out.x + position.to(out.x.dtype), out.x)  # [B, N, D]
        return out.replace(x=x)

    def extra_repr(self) -> str:
        return (f"hops={self.hops}, propagate={self.propagate}, propagate_mode={self.propagate_mode!r}, "
                f"node_dropout={self.node_dropout}, positional={self.positional!r}, "
                f"node_target={self.node_target!r}, "
                f"edge_features={self.edge_features}, "
                f"heads={self.heads}, edge_channels={self.edge_channels}")
