"""Graph positional encodings, computed once per graph (in the dataset, not per step).

- :func:`laplacian_pe`: eigenvectors of the normalised Laplacian (signs flipped at random in training);
- :func:`random_walk_pe`: return probabilities of random walks (sign-free).

Letters: n nodes, k encoding width.
"""

from __future__ import annotations

import warnings

import torch

GRAPH_POSITIONALS = ("none", "laplacian", "random_walk")


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


