"""Graphs (molecules, social networks) -> Tokens with graph-masked attention.

A graph is a set of node vectors plus edges; self-attention over a graph is attention
restricted to its edges. Each node attends to itself and to the nodes within ``hops``
hops; edge features (and the hop distance) become a per-head additive attention bias.

Letters: b batch (graphs), n nodes per graph (padded), f node features, g edge features,
h heads, d model width, e edges (directed, over the flattened batch), k positional width.

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
                                 :func:`graph_positional_encoding` and padded with zeros

:func:`collate_graphs` builds exactly this batch from a list of per-graph dicts
(``x [n, F]``, ``edge_index [2, e]`` with local node ids, optional ``edge_attr [e, G]``,
``pe [n, K]``; any other key is collected into a list, or stacked when it is a tensor of the
same shape in every item).

Two attention paths give the same result (tests prove it, values and gradients):

- ``dense``: the batch as padded ``[B, N, N]`` blocks; structure and bias go into a float
  ``attn_mask [B, H, N, N]`` (``-inf`` off the graph, the bias on edges) or a bool ``[B, N, N]``
  when there is no bias; the encoder runs its dense kernel (``sdpa``).
- ``edge``: ``Tokens.edge_index`` (with self-loops and k-hop edges) and ``Tokens.edge_bias [E', H]``;
  the encoder runs the O(E) ``edge`` kernel.

``kernel="auto"`` picks by size: ``edge`` when the dense blocks would be sparse
(edges / (B·N²) below ``dense_min_fill``) or would not fit ``max_dense_bytes``. Before
either path allocates, its memory is estimated (:func:`estimate_attention_bytes`) and a
``ValueError`` names the estimate when it cannot fit.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from seqattn.core.tokens import Tokens

KERNEL_CHOICES = ("auto", "dense", "edge")
GRAPH_POSITIONALS = ("none", "laplacian", "random_walk")


# ----------------------------------------------------------------------------------------------
# positional encodings, computed once per graph (in the dataset, not per step)
# ----------------------------------------------------------------------------------------------
def _check_graph(edge_index: torch.Tensor, num_nodes: int) -> None:
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"edge_index values must lie in [0, num_nodes={num_nodes}), got "
                         f"[{int(edge_index.min())}, {int(edge_index.max())}]")


def _sym_adjacency(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Symmetric 0/1 adjacency without self-loops as a coalesced sparse ``[n, n]`` float64 tensor."""
    src, dst = edge_index.long()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    rows, cols = torch.cat([src, dst]), torch.cat([dst, src])
    adj = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(rows.numel(), dtype=torch.float64),
                                  (num_nodes, num_nodes), check_invariants=False).coalesce()
    return torch.sparse_coo_tensor(adj.indices(), torch.ones_like(adj.values()), adj.shape,
                                   check_invariants=False).coalesce()


def laplacian_pe(edge_index: torch.Tensor, num_nodes: int, k: int, dense_limit: int = 4096) -> torch.Tensor:
    """Laplacian eigenvector encoding ``[n, k]`` of one graph.

    The eigenvectors of the symmetric normalised Laplacian ``I - D^-1/2 A D^-1/2`` (edges taken
    as undirected) with the ``k`` smallest non-trivial eigenvalues; columns beyond ``n - 1`` are
    zero. The sign of an eigenvector is arbitrary: :class:`GraphAdapter` flips signs at random in
    training. Dense ``eigh`` up to ``dense_limit`` nodes, sparse LOBPCG above.
    """
    _check_graph(edge_index, num_nodes)
    if k <= 0:
        raise ValueError(f"k (pe_dim) must be positive, got {k}")
    out = torch.zeros(num_nodes, k)
    if num_nodes <= 1:
        return out
    adj = _sym_adjacency(edge_index, num_nodes)
    deg = torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, adj.indices()[0], adj.values())
    inv_sqrt = deg.clamp_min(1.0).rsqrt() * (deg > 0)
    r, c = adj.indices()
    vals = adj.values() * inv_sqrt[r] * inv_sqrt[c]  # D^-1/2 A D^-1/2
    if num_nodes <= dense_limit:
        lap = torch.eye(num_nodes, dtype=torch.float64)
        lap[r, c] -= vals
        _, vecs = torch.linalg.eigh(lap)  # ascending eigenvalues
        vecs = vecs[:, 1: k + 1]
    else:
        want = min(k + 1, num_nodes // 3)
        # the smallest eigenvalues of L are the largest of I + D^-1/2 A D^-1/2 (spectrum in [0, 2])
        idx = torch.cat([torch.stack([r, c]), torch.arange(num_nodes).repeat(2, 1)], dim=1)
        op = torch.sparse_coo_tensor(idx, torch.cat([vals, torch.ones(num_nodes, dtype=torch.float64)]),
                                     (num_nodes, num_nodes), check_invariants=False).coalesce()
        gen = torch.Generator().manual_seed(0)
        x0 = torch.randn(num_nodes, want, dtype=torch.float64, generator=gen)
        _, vecs = torch.lobpcg(op, k=want, X=x0, largest=True)
        vecs = vecs[:, 1:]
    # a deterministic sign: the entry of largest magnitude is positive
    pivot = vecs.gather(0, vecs.abs().argmax(0, keepdim=True))
    vecs = vecs * torch.where(pivot < 0, -1.0, 1.0)
    out[:, : vecs.shape[1]] = vecs.float()
    return out


def random_walk_pe(edge_index: torch.Tensor, num_nodes: int, k: int) -> torch.Tensor:
    """Random-walk encoding ``[n, k]``: column ``t`` is the probability of returning to the node
    after ``t + 1`` steps of a uniform random walk (diagonal of ``(D^-1 A)^(t+1)``, edges undirected).

    Permutation-equivariant and sign-free. Sparse matrix powers: O(k · nnz) for sparse graphs.
    """
    _check_graph(edge_index, num_nodes)
    if k <= 0:
        raise ValueError(f"k (pe_dim) must be positive, got {k}")
    out = torch.zeros(num_nodes, k)
    if num_nodes == 0:
        return out
    adj = _sym_adjacency(edge_index, num_nodes)
    r, c = adj.indices()
    deg = torch.zeros(num_nodes, dtype=torch.float64).index_add_(0, r, adj.values())
    walk = torch.sparse_coo_tensor(adj.indices(), adj.values() / deg[r].clamp_min(1.0), adj.shape,
                                   check_invariants=False).coalesce()
    if num_nodes <= 2048:
        walk_d = walk.to_dense()
        power = walk_d
        for t in range(k):
            out[:, t] = power.diagonal().float()
            power = power @ walk_d
        return out
    power = walk
    for t in range(k):
        idx, vals = power.indices(), power.values()
        on_diag = idx[0] == idx[1]
        out[idx[0, on_diag], t] = vals[on_diag].float()
        if t + 1 < k:
            with warnings.catch_warnings():  # torch warns that its sparse support is beta
                warnings.simplefilter("ignore", UserWarning)
                power = torch.sparse.mm(power, walk).coalesce()
    return out


def graph_positional_encoding(kind: str, edge_index: torch.Tensor, num_nodes: int, k: int) -> torch.Tensor | None:
    """``[n, k]`` encoding of one graph for ``kind`` in ``none | laplacian | random_walk`` (None for none)."""
    if kind not in GRAPH_POSITIONALS:
        raise ValueError(f"unknown graph positional encoding {kind!r}; expected one of {GRAPH_POSITIONALS}")
    if kind == "none":
        return None
    if kind == "laplacian":
        return laplacian_pe(edge_index, num_nodes, k)
    return random_walk_pe(edge_index, num_nodes, k)


# ----------------------------------------------------------------------------------------------
# batching
# ----------------------------------------------------------------------------------------------
def collate_graphs(graphs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pad a list of graphs into the adapter's batch (see the module docstring).

    Each item: ``x [n, F]``, ``edge_index [2, e]`` (local ids), optional ``edge_attr [e, G]``,
    optional ``pe [n, K]``; other keys: tensors of equal shape are stacked (``targets [T]`` ->
    ``[B, T]``), anything else is kept as a list (``ids``).
    """
    if not graphs:
        raise ValueError("collate_graphs got an empty list")
    sizes = [int(g["x"].shape[0]) for g in graphs]
    b, n = len(graphs), max(max(sizes), 1)
    feat = graphs[0]["x"].shape[1]
    x = graphs[0]["x"].new_zeros(b, n, feat)
    mask = torch.zeros(b, n, dtype=torch.bool)
    edges, attrs = [], []
    for i, (g, size) in enumerate(zip(graphs, sizes)):
        x[i, :size] = g["x"]
        mask[i, :size] = True
        ei = g["edge_index"].long()
        if ei.numel() and (int(ei.min()) < 0 or int(ei.max()) >= size):
            raise ValueError(f"graph {i} of the batch has edge ids outside [0, {size})")
        edges.append(ei + i * n)
        if "edge_attr" in g:
            attrs.append(g["edge_attr"])
    batch: dict[str, Any] = {"x": x, "mask": mask, "edge_index": torch.cat(edges, dim=1)}
    if attrs:
        if len(attrs) != b:
            raise ValueError("edge_attr is given for some graphs of the batch but not for all")
        batch["edge_attr"] = torch.cat(attrs, dim=0)
    if "pe" in graphs[0]:
        pe = graphs[0]["pe"].new_zeros(b, n, graphs[0]["pe"].shape[1])
        for i, (g, size) in enumerate(zip(graphs, sizes)):
            pe[i, :size] = g["pe"]
        batch["pe"] = pe
    for key in graphs[0]:
        if key in ("x", "edge_index", "edge_attr", "pe"):
            continue
        values = [g[key] for g in graphs]
        if all(isinstance(v, torch.Tensor) and v.shape == values[0].shape for v in values):
            batch[key] = torch.stack(values)
        else:
            batch[key] = values
    return batch


# ----------------------------------------------------------------------------------------------
# structure: self-loops, k hops, memory estimate
# ----------------------------------------------------------------------------------------------
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


def estimate_attention_bytes(path: str, batch: int, nodes: int, edges: int, heads: int, dim: int,
                             element_size: int = 4) -> int:
    """Bytes one attention layer needs for its scores, mask and gathered messages (forward + saved
    for backward), an estimate to refuse a run before it allocates.

    ``dense``: mask, scores and weights ``[B, H, N, N]`` (3 x). ``edge``: per edge and head a score,
    exp, weight and gradient (4 x), plus gathered q, k, v rows ``[E, D]`` (3 x) and the message.
    """
    if path == "dense":
        return 3 * batch * heads * nodes * nodes * element_size
    if path == "edge":
        return edges * (4 * heads + 4 * dim) * element_size
    raise ValueError(f"path must be 'dense' or 'edge', got {path!r}")


def available_memory_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` (CUDA: ``mem_get_info``; CPU: MemAvailable of /proc/meminfo), or None."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if hasattr(os, "sysconf"):
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            return None
    return None


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


# ----------------------------------------------------------------------------------------------
# the adapter
# ----------------------------------------------------------------------------------------------
class GraphAdapter(nn.Module):
    """Padded graph batch -> :class:`Tokens` whose attention follows the graph.

    Not exportable (``seqattn.export`` refuses it): the attention structure (k-hop edges, dense or
    edge path) is built per batch in Python, which a trace or ``torch.export`` would freeze.

    Args:
        dim: model width D.
        node_features: F, width of ``x``.
        edge_features: G, width of ``edge_attr`` (0 = no edge features; ``edge_attr`` is not read).
        heads: attention heads of the encoder (the bias is per head); must equal ``model.heads``.
        hops: each node attends to itself and the nodes within ``hops`` hops.
        kernel: ``auto`` | ``dense`` | ``edge`` (see the module docstring).
        positional: ``none`` | ``laplacian`` | ``random_walk``: ``pe [B, N, pe_dim]`` is read and
            projected into the node vectors; laplacian signs are flipped at random in training.
        pe_dim: K, width of ``pe``.
        distance_bias: a learned per-head bias for each hop distance (0 = self, 1..hops); starts at 0.
        max_dense_bytes: the dense path's memory cap (see :func:`estimate_attention_bytes`):
            ``auto`` does not pick dense above it, ``dense`` raises ``ValueError`` above it.
        dense_min_fill: ``auto`` picks dense when the graph edges fill at least this fraction of
            the ``B·N²`` dense blocks (``python -m seqattn.bench graph``: 128 molecules, fill 0.08 -> dense/edge
            time 1.04x, fill 0.23 (3 hops) -> 0.85x).
        dropout: dropout on the node vectors.
    """

    def __init__(
        self,
        dim: int,
        node_features: int,
        edge_features: int = 0,
        heads: int = 4,
        hops: int = 1,
        kernel: str = "auto",
        positional: str = "none",
        pe_dim: int = 8,
        distance_bias: bool = True,
        max_dense_bytes: int = 2**30,
        dense_min_fill: float = 0.15,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if dim <= 0 or node_features <= 0 or heads <= 0:
            raise ValueError(f"dim, node_features and heads must be positive, got dim={dim}, "
                             f"node_features={node_features}, heads={heads}")
        if edge_features < 0:
            raise ValueError(f"edge_features must be >= 0, got {edge_features}")
        if hops < 1:
            raise ValueError(f"hops must be >= 1, got {hops}")
        if kernel not in KERNEL_CHOICES:
            raise ValueError(f"kernel={kernel!r} is not one of {KERNEL_CHOICES}")
        if positional not in GRAPH_POSITIONALS:
            raise ValueError(f"positional={positional!r} is not one of {GRAPH_POSITIONALS}")
        if positional != "none" and pe_dim <= 0:
            raise ValueError(f"pe_dim must be positive with positional={positional!r}, got {pe_dim}")
        self.dim, self.heads, self.hops, self.kernel = dim, heads, hops, kernel
        self.node_features, self.edge_features = node_features, edge_features
        self.positional, self.pe_dim = positional, pe_dim
        self.max_dense_bytes, self.dense_min_fill = int(max_dense_bytes), float(dense_min_fill)
        self.node_proj = nn.Linear(node_features, dim)
        self.pe_proj = nn.Linear(pe_dim, dim) if positional != "none" else None
        self.edge_proj = nn.Linear(edge_features, heads) if edge_features else None
        self.distance = nn.Embedding(hops + 1, heads) if distance_bias else None
        if self.distance is not None:
            nn.init.zeros_(self.distance.weight)
        self.dropout = nn.Dropout(dropout)
        inputs = ["x", "mask", "edge_index"]
        if edge_features:
            inputs.append("edge_attr")
        if positional != "none":
            inputs.append("pe")
        self.inputs = tuple(inputs)

    exportable = False  # see the class docstring

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

    # -- path choice ----------------------------------------------------------------------------
    def choose_path(self, batch: int, nodes: int, edges: int, device: torch.device | None = None) -> str:
        """``dense`` or ``edge`` for a batch of ``batch`` graphs padded to ``nodes`` with ``edges``
        attention edges (self-loops and hops included). Raises ``ValueError`` when the chosen path's
        memory estimate cannot fit (before anything is allocated)."""
        device = torch.device("cpu") if device is None else device
        dense_bytes = estimate_attention_bytes("dense", batch, nodes, edges, self.heads, self.dim)
        edge_bytes = estimate_attention_bytes("edge", batch, nodes, edges, self.heads, self.dim)
        if self.kernel == "dense":
            if dense_bytes > self.max_dense_bytes:
                raise ValueError(
                    f"kernel='dense' needs about {_gib(dense_bytes)} per attention layer for {batch} graph(s) "
                    f"padded to {nodes} nodes and {self.heads} heads, above max_dense_bytes="
                    f"{self.max_dense_bytes} ({_gib(self.max_dense_bytes)}); use kernel='edge' (O(E)) or 'auto', "
                    "or smaller batches")
            path, need = "dense", dense_bytes
        elif self.kernel == "edge":
            path, need = "edge", edge_bytes
        else:
            fill = edges / max(1, batch * nodes * nodes)
            dense_ok = dense_bytes <= self.max_dense_bytes
            path = "dense" if dense_ok and fill >= self.dense_min_fill else "edge"
            need = dense_bytes if path == "dense" else edge_bytes
        free = available_memory_bytes(device)
        if free is not None and need > free:
            raise ValueError(
                f"graph attention ({path} path) needs about {_gib(need)} per layer for {batch} graph(s), "
                f"{nodes} padded nodes, {edges} attention edges, {self.heads} heads, width {self.dim}; only "
                f"{_gib(free)} is available on {device}. Use smaller batches, fewer hops, or neighbour sampling")
        return path

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
        -> ``Tokens(x [B, N, D], mask, attn_mask [B, H|1, N, N] | edge_index [2, E'] + edge_bias [E', H])``.

        ``Tokens.extra``: ``graph_path`` (``dense`` | ``edge``) and ``graph_edges`` (``[2, E']``, the
        attention edges of both paths, for plots).
        """
        self._check(x, mask, edge_index, edge_attr, pe)
        b, n, _ = x.shape
        h = self.node_proj(x)  # [B, N, D]
        if self.pe_proj is not None:
            pe = pe.to(h.dtype)
            if self.positional == "laplacian" and self.training:
                sign = torch.randint(0, 2, (b, 1, self.pe_dim), device=pe.device).to(pe.dtype) * 2 - 1
                pe = pe * sign  # [B, N, K], a random sign per graph and eigenvector
            h = h + self.pe_proj(pe)
        h = self.dropout(h.masked_fill(~mask.unsqueeze(-1), 0.0))  # [B, N, D]

        edges, distance, position = k_hop_edges(edge_index, mask, self.hops)  # [2, E'], [E'], [E]
        bias = None  # [E', H]
        if self.distance is not None:
            bias = self.distance(distance)  # [E', H]
        if self.edge_proj is not None:
            per_edge = self.edge_proj(edge_attr.to(h.dtype))  # [E, H]
            extra = torch.zeros(edges.shape[1], self.heads, dtype=h.dtype, device=h.device).index_add(
                0, position, per_edge)  # [E', H] (multi-edges add up)
            bias = extra if bias is None else bias + extra
        path = self.choose_path(b, n, edges.shape[1], h.device)
        info = {"graph_path": path, "graph_edges": edges}
        if path == "edge":
            return Tokens(x=h, mask=mask, edge_index=edges, edge_bias=bias, extra=info)
        src, dst = edges
        gb, qi, kj = dst // n, dst % n, src % n
        if bias is None:
            adj = torch.zeros(b, n, n, dtype=torch.bool, device=h.device)
            adj[gb, qi, kj] = True  # [B, N, N]
            return Tokens(x=h, mask=mask, attn_mask=adj, extra=info)
        heads = torch.arange(self.heads, device=h.device)
        flat = (((gb[:, None] * self.heads + heads[None]) * n + qi[:, None]) * n + kj[:, None])  # [E', H]
        dense = torch.full((b * self.heads * n * n,), float("-inf"), dtype=h.dtype, device=h.device)
        dense = dense.index_put((flat.flatten(),), bias.flatten().to(h.dtype))  # differentiable; bf16 under autocast
        return Tokens(x=h, mask=mask, attn_mask=dense.view(b, self.heads, n, n), extra=info)

    def extra_repr(self) -> str:
        return (f"hops={self.hops}, kernel={self.kernel!r}, positional={self.positional!r}, "
                f"edge_features={self.edge_features}, heads={self.heads}")
