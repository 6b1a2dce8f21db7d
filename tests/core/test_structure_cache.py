"""TensorMemo: results kept for the same tensor objects, unchanged since; and the full-graph forward that uses it
(k-hop edges, the normalised adjacency, the features' non-zeros computed once, the same outputs as computed anew)."""

from __future__ import annotations

import gc

import pytest
import torch

from seqattn.core.structure_cache import TensorMemo


def test_the_same_unchanged_tensors_and_parameters_hit_and_anything_else_computes():
    memo = TensorMemo(size=2)
    calls = []

    def compute(tag):
        return lambda: calls.append(tag) or tag

    a, b = torch.arange(4), torch.ones(3, dtype=torch.bool)
    assert memo((a, b), 1, compute("ab1")) == "ab1"
    assert memo((a, b), 1, compute("again")) == "ab1" and calls == ["ab1"]  # hit
    assert memo((a, b), 2, compute("ab2")) == "ab2"  # other parameters
    assert memo((a.clone(), b), 1, compute("copy")) == "copy"  # equal values, another object: a miss
    a.add_(1)  # in place: the version counter moves
    assert memo((a, b), 1, compute("changed")) == "changed"
    assert calls == ["ab1", "ab2", "copy", "changed"] and (memo.hits, memo.misses) == (1, 4)
    with torch.inference_mode():  # what is made in inference mode serves inference mode only
        assert memo((a, b), 1, compute("inference")) == "inference"
        assert memo((a, b), 1, compute("x")) == "inference"
    assert memo((a, b), 1, compute("y")) == "changed"  # the entry made outside inference mode, kept apart
    assert memo((b,), 3, compute("b3")) == "b3" and memo((b,), 4, compute("b4")) == "b4"  # size 2: both evicted
    assert memo((a, b), 1, compute("changed again")) == "changed again"
    with torch.inference_mode():
        frozen = torch.arange(3)
    assert memo((frozen,), 1, compute("f1")) == "f1" and memo((frozen,), 1, compute("f2")) == "f2"  # never kept
    assert len(memo) == 2
    with pytest.raises(ValueError, match="size=0"):
        TensorMemo(size=0)


def test_a_freed_tensor_is_never_matched_by_a_new_one_at_its_address():
    memo = TensorMemo()
    t = torch.arange(1000)
    memo((t,), None, lambda: "old")
    del t
    gc.collect()
    fresh = [torch.arange(1000) for _ in range(8)]  # one of them may reuse the freed memory (and id)
    assert all(memo((f,), None, lambda: "new") == "new" for f in fresh)


def test_the_results_of_freed_tensors_are_let_go():
    memo = TensorMemo()
    kept, gone = torch.arange(5), torch.arange(7)
    memo((kept,), None, lambda: "kept")
    memo((gone,), None, lambda: "gone")
    del gone
    gc.collect()
    memo((torch.arange(3),), None, lambda: "other")  # a miss drops the entry of the freed tensor
    assert [value for _, _, value in memo._entries] == ["other", "kept"]
    assert memo((kept,), None, lambda: "again") == "kept"


def _full_graph_model():
    from seqattn.core.encoder import Encoder
    from seqattn.modalities.graph.adapter import GraphAdapter

    torch.manual_seed(0)
    adapter = GraphAdapter(16, 12, heads=2, hops=2, propagate=2)
    encoder = Encoder(16, 2, 2, output_propagation=3)
    return adapter, encoder


def _graph(n=30, e=70, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(1, n, 12, generator=g) < 0.2).float()
    edge_index = torch.randint(0, n, (2, e), generator=g)
    return x, torch.ones(1, n, dtype=torch.bool), edge_index


def _clear_memos():
    from seqattn.core import propagation
    from seqattn.modalities.graph import adapter as graph_adapter

    for memo in (graph_adapter.K_HOP_EDGES, propagation.GCN_OPERATORS, graph_adapter.SPARSE_ENTRIES):
        memo.clear()


def _forward(adapter, encoder, x, mask, edge_index):
    return encoder(adapter(x, mask, edge_index))


def test_a_full_graph_forward_derives_its_structure_once_with_the_same_outputs(monkeypatch):
    from seqattn.core import propagation
    from seqattn.modalities.graph import adapter as graph_adapter

    adapter, encoder = _full_graph_model()
    x, mask, edge_index = _graph()
    counts = {"k_hop": 0, "gcn": 0}
    k_hop, gcn = graph_adapter.k_hop_edges, propagation._gcn_operator
    monkeypatch.setattr(graph_adapter, "k_hop_edges", lambda *a: counts.__setitem__("k_hop", counts["k_hop"] + 1) or k_hop(*a))
    monkeypatch.setattr(propagation, "_gcn_operator", lambda *a: counts.__setitem__("gcn", counts["gcn"] + 1) or gcn(*a))
    adapter.eval(), encoder.eval()
    first = _forward(adapter, encoder, x, mask, edge_index)
    seen = dict(counts)
    assert seen == {"k_hop": 1, "gcn": 2}  # the features' averages and the output propagation
    again = _forward(adapter, encoder, x, mask, edge_index)
    assert counts == seen  # nothing derived again
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    _clear_memos()
    torch.testing.assert_close(_forward(adapter, encoder, x, mask, edge_index), first, rtol=0, atol=0)
    # an edge changed in place: derived anew, as a fresh model computes it
    edge_index[0, :5] = (edge_index[0, :5] + 7) % x.shape[1]
    changed = _forward(adapter, encoder, x, mask, edge_index)
    _clear_memos()
    torch.testing.assert_close(changed, _forward(adapter, encoder, x, mask, edge_index), rtol=0, atol=0)
    assert not torch.equal(changed, first)


def test_structure_made_under_inference_mode_is_not_used_for_training():
    """Lightning validates under inference mode; a training step after it on the same graph still trains (autograd
    refuses to save inference tensors for backward)."""
    adapter, encoder = _full_graph_model()
    x, mask, edge_index = _graph(seed=2)
    with torch.inference_mode():
        _forward(adapter.eval(), encoder.eval(), x, mask, edge_index)
    adapter.train(), encoder.train()
    _forward(adapter, encoder, x, mask, edge_index).square().sum().backward()
    assert all(p.grad is not None for p in adapter.node_proj.parameters())
