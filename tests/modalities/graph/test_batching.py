"""Padding graphs into one batch (``seqattn.modalities.graph.batching.collate_graphs``)."""

import pytest
import torch

from seqattn.modalities.graph.batching import collate_graphs


def _graphs():
    g = torch.Generator().manual_seed(0)
    out = []
    for i, size in enumerate([3, 5, 1, 4]):
        e = torch.randint(0, size, (2, 2 * size), generator=g)
        out.append({"x": torch.randn(size, 6, generator=g), "edge_index": e.int() if i == 1 else e,
                    "edge_attr": torch.randn(e.shape[1], 2, generator=g), "pe": torch.randn(size, 3, generator=g),
                    "targets": torch.tensor([float(i)]), "ids": f"g{i}"})
    return out


def test_collate_pads_each_graph_at_its_own_rows_and_offsets_its_edges():
    """Graph i's node j lands at [i, j] (x, pe, mask), its edges at i * N + local id, in order; edge features
    concatenated in order; equal-shaped tensors stacked, anything else listed (checked graph by graph)."""
    graphs = _graphs()
    batch = collate_graphs(graphs)
    n = 5
    assert batch["x"].shape == (4, n, 6) and batch["pe"].shape == (4, n, 3) and batch["mask"].shape == (4, n)
    offset, edges = 0, []
    for i, g in enumerate(graphs):
        size = g["x"].shape[0]
        torch.testing.assert_close(batch["x"][i, :size], g["x"])
        torch.testing.assert_close(batch["pe"][i, :size], g["pe"])
        assert not batch["x"][i, size:].any() and not batch["pe"][i, size:].any()
        assert batch["mask"][i].tolist() == [True] * size + [False] * (n - size)
        e = g["edge_index"].shape[1]
        torch.testing.assert_close(batch["edge_attr"][offset:offset + e], g["edge_attr"])
        edges.append(g["edge_index"].long() + i * n)
        offset += e
    assert batch["edge_index"].dtype == torch.long
    assert torch.equal(batch["edge_index"], torch.cat(edges, dim=1))
    assert batch["targets"].tolist() == [[0.0], [1.0], [2.0], [3.0]] and batch["ids"] == ["g0", "g1", "g2", "g3"]


def test_collate_names_the_graph_whose_edges_leave_it():
    graphs = _graphs()
    graphs[2]["edge_index"] = torch.tensor([[0, 1], [0, 0]])  # graph 2 has one node: id 1 is outside
    with pytest.raises(ValueError, match=r"graph 2 of the batch has edge ids outside \[0, 1\)"):
        collate_graphs(graphs)
    graphs = _graphs()
    graphs[3]["edge_index"] = torch.tensor([[0], [-1]])
    with pytest.raises(ValueError, match=r"graph 3 of the batch has edge ids outside \[0, 4\)"):
        collate_graphs(graphs)
    graphs[1]["edge_index"] = torch.tensor([[5], [0]])  # the first graph that is wrong is named
    with pytest.raises(ValueError, match=r"graph 1 of the batch has edge ids outside \[0, 5\)"):
        collate_graphs(graphs)
    graphs = _graphs()
    del graphs[1]["edge_attr"]
    with pytest.raises(ValueError, match="edge_attr is given for some graphs"):
        collate_graphs(graphs)
    with pytest.raises(ValueError, match="empty list"):
        collate_graphs([])
