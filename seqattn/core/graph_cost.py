"""The graph cost model: which exact graph path (dense blocks or the O(E) edge kernel) fits, and
what it will cost; plus the edge -> dense scatter helpers the dense path uses.

Letters: b batch, n nodes / tokens per sequence (padded), e edges, h heads, d width.

Graph structure arrives as ``Tokens.edge_index [2, E]`` (+ ``edge_bias [E, H]``) over flattened
positions ``b * N + n``. Two exact paths compute the same attention:

- ``dense``: the edges become a ``[B, N, N]`` bool mask (no bias) or a ``[B, H, N, N]`` float mask
  (``-inf`` off the graph, the bias on edges) for the fused dense kernel;
- ``edge``: the O(E) sparse softmax of :func:`seqattn.core.kernels.edge_attention`.

:func:`choose_graph_path` picks one (``auto``: dense when the edges fill at least
``dense_min_fill`` of the ``B·N²`` blocks and the dense path fits ``max_dense_bytes``); before
either path allocates, its memory is estimated (:func:`estimate_attention_bytes`) and a
``ValueError`` names the estimate when it cannot fit. This is a property of attention, not of
molecules or social networks: the planner (:mod:`seqattn.core.plan`) asks it once per forward.
"""

from __future__ import annotations

import os

import torch

GRAPH_PATHS = ("auto", "dense", "edge")

#: ``auto``'s default fill threshold (dense when the attention edges fill at least this fraction of ``B·N²``)
DENSE_MIN_FILL = 0.15
#: the crossover measured on this CPU (fwd+bwd of the plan and 4 layers' attention, 4 heads of width 16, learned
#: edge bias, molecule-like graphs of hops 1, one thread; ``python -m seqattn.bench core --cells graph_fill``): an
#: attention edge on the edge kernel costs ~15-20x a padded pair ``B·N²`` of the dense blocks (per layer and head
#: ~1.5-2 µs against ~0.1 µs), so dense is cheaper above a fill of ~1/17 (dense 0.65-0.67x the edge time at N=24,
#: fill 0.088; equal at N=12; 1.3-1.9x at N=64, fill 0.036). Not the default: at FreeSolv's sizes it moves some
#: batches to the other (equal up to rounding) path, which changed a 642-molecule training run's test RMSE
#: from 1.097 to 1.391 (seed 1; training is chaotic in rounding) for ~5 % of the step time, so the recipes'
#: README numbers would need re-measuring first. ``model.dense_min_fill=0.06`` applies it.
MEASURED_CROSSOVER_FILL = 0.06

#: a batch whose attention needs less than this is not checked against the free memory: reading it (CPU:
#: /proc/meminfo) cost ~0.1 ms per batch, ~1 % of a molecule training step, to guard against a shortage that
#: would already have stopped the run elsewhere
FREE_MEMORY_CHECK_FROM = 64 * 2**20


def estimate_attention_bytes(path: str, batch: int, nodes: int, edges: int, heads: int, dim: int,
                             element_size: int = 4, edge_dim: int = 0) -> int:
    """Bytes one attention layer needs for its scores, mask and gathered messages (forward + saved
    for backward), an estimate to refuse a run before it allocates.

    ``dense``: mask, scores and weights ``[B, H, N, N]`` (3 x). ``edge``: per edge and head a score,
    exp, weight and gradient (4 x), plus gathered q, k, v rows ``[E, D]`` (3 x) and the message.
    With per-pair features (``edge_dim = C > 0``): their key and value offsets, ``2 D`` per pair
    (``[B, N, N]`` pairs dense, ``E`` edge), plus the ``C`` features, twice (forward, saved).
    """
    offsets = 2 * (2 * dim + edge_dim) if edge_dim else 0
    if path == "dense":
        return (3 * batch * heads * nodes * nodes + offsets * batch * nodes * nodes) * element_size
    if path == "edge":
        return edges * (4 * heads + 4 * dim + offsets) * element_size
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


def check_graph_path(path: str) -> str:
    if path not in GRAPH_PATHS:
        raise ValueError(f"graph path {path!r} is not one of {GRAPH_PATHS}")
    return path


def choose_graph_path(batch: int, nodes: int, edges: int, heads: int, dim: int, path: str = "auto",
                      max_dense_bytes: int = 2**30, dense_min_fill: float = DENSE_MIN_FILL,
                      device: torch.device | None = None, edge_dim: int = 0) -> str:
    """``dense`` or ``edge`` for ``batch`` sequences padded to ``nodes`` with ``edges`` attention edges.

    ``auto``: dense when the edges fill at least ``dense_min_fill`` of the ``B·N²`` pairs and it fits
    ``max_dense_bytes`` (the measured crossover of the two paths' costs: :data:`MEASURED_CROSSOVER_FILL`).
    ``path="dense"`` above ``max_dense_bytes`` and any path above the device's free memory raise
    ``ValueError`` with the estimate (before anything is allocated); the free memory is read for estimates of
    at least :data:`FREE_MEMORY_CHECK_FROM` bytes.
    """
    check_graph_path(path)
    device = torch.device("cpu") if device is None else device
    dense_bytes = estimate_attention_bytes("dense", batch, nodes, edges, heads, dim, edge_dim=edge_dim)
    edge_bytes = estimate_attention_bytes("edge", batch, nodes, edges, heads, dim, edge_dim=edge_dim)
    if path == "dense":
        if dense_bytes > max_dense_bytes:
            raise ValueError(
                f"graph_path='dense' needs about {_gib(dense_bytes)} per attention layer for {batch} graph(s) "
                f"padded to {nodes} nodes and {heads} heads, above max_dense_bytes={max_dense_bytes} "
                f"({_gib(max_dense_bytes)}); use graph_path='edge' (O(E)) or 'auto', or smaller batches")
        chosen, need = "dense", dense_bytes
    elif path == "edge":
        chosen, need = "edge", edge_bytes
    else:
        fill = edges / max(1, batch * nodes * nodes)
        chosen = "dense" if dense_bytes <= max_dense_bytes and fill >= dense_min_fill else "edge"
        need = dense_bytes if chosen == "dense" else edge_bytes
    free = available_memory_bytes(device) if need >= FREE_MEMORY_CHECK_FROM else None
    if free is not None and need > free:
        raise ValueError(
            f"graph attention ({chosen} path) needs about {_gib(need)} per layer for {batch} graph(s), {nodes} "
            f"padded nodes, {edges} attention edges, {heads} heads, width {dim}; only {_gib(free)} is available on "
            f"{device}. Use smaller batches, fewer hops, or neighbour sampling")
    return chosen


def edges_to_dense(edge_index: torch.Tensor, edge_bias: torch.Tensor | None, batch: int, length: int,
                   heads: int, dtype: torch.dtype) -> torch.Tensor:
    """Edges over flattened ``b * L + l`` (row 0 source = key, row 1 target = query) -> a dense mask:
    bool ``[B, L, L]`` without a bias, else float ``[B, H, L, L]`` (``-inf`` off the graph, the
    bias on edges; differentiable in ``edge_bias``). Repeated edges: the last one's bias."""
    src, dst = edge_index
    gb, qi, kj = dst // length, dst % length, src % length
    if edge_bias is None:
        adj = torch.zeros(batch, length, length, dtype=torch.bool, device=edge_index.device)
        adj[gb, qi, kj] = True
        return adj  # [B, L, L]
    h = torch.arange(heads, device=edge_index.device)
    flat = ((gb[:, None] * heads + h[None]) * length + qi[:, None]) * length + kj[:, None]  # [E, H]
    dense = torch.full((batch * heads * length * length,), float("-inf"), dtype=dtype, device=edge_index.device)
    dense = dense.index_put((flat.flatten(),), edge_bias.flatten().to(dtype))  # differentiable
    return dense.view(batch, heads, length, length)


def edge_attr_to_dense(edge_index: torch.Tensor, edge_attr: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """Per-edge features ``[E, C]`` over flattened ``b * L + l`` -> dense ``[B, L, L, C]`` indexed
    (graph, query = target, key = source), zeros where there is no edge (differentiable in ``edge_attr``).
    Repeated edges: the last one's features (as :func:`edges_to_dense`)."""
    src, dst = edge_index
    c = edge_attr.shape[1]
    flat = dst * length + src % length  # [E]: (graph * L + query) * L + key
    dense = edge_attr.new_zeros(batch * length * length, c)
    dense = dense.index_put((flat,), edge_attr)  # differentiable
    return dense.view(batch, length, length, c)
