"""Padding a list of graphs into one batch of the graph adapter's interface.

Letters: b batch (graphs), n nodes per graph (padded), f node features, g edge features, k pe width.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch


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
    # every graph's rows at once: node j of graph i goes to row i * n + j of the padded [B * N] layout
    counts = torch.tensor(sizes)
    graph_of = torch.repeat_interleave(torch.arange(b), counts)  # [sum n]
    starts = torch.cumsum(counts, 0) - counts
    rows = graph_of * n + torch.arange(int(counts.sum())) - starts[graph_of]  # [sum n]
    first = graphs[0]["x"]
    x = first.new_zeros(b * n, first.shape[1])
    x[rows] = torch.cat([g["x"] for g in graphs]).to(x.dtype)
    mask = torch.zeros(b * n, dtype=torch.bool)
    mask[rows] = True
    local = [g["edge_index"].long() for g in graphs]
    edge_counts = torch.tensor([int(e.shape[1]) for e in local])
    owner = torch.repeat_interleave(torch.arange(b), edge_counts)  # [E]: the graph of each edge
    edges = torch.cat(local, dim=1)  # [2, E], local ids
    outside = ((edges < 0) | (edges >= counts[owner])).any(0)  # [E]
    if bool(outside.any()):
        i = int(owner[outside][0])
        raise ValueError(f"graph {i} of the batch has edge ids outside [0, {sizes[i]})")
    batch: dict[str, Any] = {"x": x.view(b, n, -1), "mask": mask.view(b, n), "edge_index": edges + owner * n}
    attrs = [g["edge_attr"] for g in graphs if "edge_attr" in g]
    if attrs:
        if len(attrs) != b:
            raise ValueError("edge_attr is given for some graphs of the batch but not for all")
        batch["edge_attr"] = torch.cat(attrs, dim=0)
    if "pe" in graphs[0]:
        pe = graphs[0]["pe"].new_zeros(b * n, graphs[0]["pe"].shape[1])
        pe[rows] = torch.cat([g["pe"] for g in graphs]).to(pe.dtype)
        batch["pe"] = pe.view(b, n, -1)
    for key in graphs[0]:
        if key in ("x", "edge_index", "edge_attr", "pe"):
            continue
        values = [g[key] for g in graphs]
        if all(isinstance(v, torch.Tensor) and v.shape == values[0].shape for v in values):
            batch[key] = torch.stack(values)
        else:
            batch[key] = values
    return batch


