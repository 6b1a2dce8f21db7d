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


