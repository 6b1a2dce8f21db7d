"""GraphAdapter: dense and edge paths agree, permutation invariances, PyG TransformerConv, k hops, memory."""

from __future__ import annotations

import pytest
import torch

from seqattn.core import Encoder, MultiHeadAttention, Tokens, prepend_global_token
from seqattn.core import graph_cost
from seqattn.core.graph_cost import choose_graph_path, edge_attr_to_dense, edges_to_dense
from seqattn.modalities.graph.adapter import GraphAdapter, k_hop_edges
from seqattn.modalities.graph.batching import collate_graphs
from seqattn.modalities.graph.positional import graph_positional_encoding, laplacian_pe, random_walk_pe
from seqattn.model.heads import PooledHead, TokenHead
from seqattn.model.network import SequenceModel

F_NODE, F_EDGE, DIM, HEADS = 5, 3, 16, 4


def random_graph(n: int, p: float = 0.3, seed: int = 0, pe: str = "none", pe_dim: int = 4) -> dict:
    """An undirected random graph (both directions) with node and edge features."""
    g = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.rand(n, n, generator=g) < p, diagonal=1)
    src, dst = upper.nonzero(as_tuple=True)
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    attr = torch.randn(src.numel(), F_EDGE, generator=g)
    item = {"x": torch.randn(n, F_NODE, generator=g), "edge_index": edge_index,
            "edge_attr": torch.cat([attr, attr]), "targets": torch.randn(2, generator=g)}
    if pe != "none":
        item["pe"] = graph_positional_encoding(pe, edge_index, n, pe_dim)
    return item


def batch_of(sizes=(7, 4, 9, 6), pe: str = "none") -> dict:
    return collate_graphs([random_graph(n, seed=i, pe=pe) for i, n in enumerate(sizes)])


def make_model(kernel: str, pooled: bool, global_token: bool, edge_features: int = F_EDGE, hops: int = 1,
               positional: str = "none", pooling: str = "mean", edge_channels: int = 0) -> SequenceModel:
    adapter = GraphAdapter(DIM, F_NODE, edge_features, heads=HEADS, hops=hops, positional=positional, pe_dim=4,
                           edge_channels=edge_channels)
    with torch.no_grad():  # a non-zero distance bias so that both bias sources are exercised
        adapter.distance.weight.normal_()
    encoder = Encoder(DIM, depth=2, heads=HEADS, dropout=0.0, positional="none", graph_path=kernel,
                      edge_dim=edge_channels)
    head = PooledHead(DIM, 3, pooling=pooling) if pooled else TokenHead(DIM, 3)
    return SequenceModel(adapter, encoder, head, global_token=global_token)


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("edge_features", [0, F_EDGE])
@pytest.mark.parametrize("global_token", [False, True])
@pytest.mark.parametrize("hops", [1, 2])
@pytest.mark.parametrize("edge_channels", [0, 6])
def test_dense_and_edge_paths_agree_in_values_and_gradients(edge_features, global_token, hops, edge_channels):
    batch = batch_of()
    dense = make_model("dense", pooled=True, global_token=global_token, edge_features=edge_features, hops=hops,
                       pooling="cls" if global_token else "mean", edge_channels=edge_channels)
    edge = make_model("edge", pooled=True, global_token=global_token, edge_features=edge_features, hops=hops,
                      pooling="cls" if global_token else "mean", edge_channels=edge_channels)
    edge.load_state_dict(dense.state_dict())
    out_d, out_e = dense(batch)["logits"], edge(batch)["logits"]
    assert dense.encoder.last_graph_path == "dense" and edge.encoder.last_graph_path == "edge"
    torch.testing.assert_close(out_e, out_d, rtol=1e-5, atol=1e-5)
    (out_d ** 2).sum().backward()
    (out_e ** 2).sum().backward()
    gd, ge = grads(dense), grads(edge)
    assert gd.keys() == ge.keys() and "adapter.distance.weight" in gd
    if edge_features:
        assert gd["adapter.edge_proj.weight"].abs().sum() > 0
    if edge_channels:  # the key / value offsets are used on both paths
        for name in ("adapter.edge_embed.weight", "encoder.layers.0.attn.edge_k_proj.weight",
                     "encoder.layers.0.attn.edge_v_proj.weight"):
            assert gd[name].abs().sum() > 0, name
    for key in gd:
        torch.testing.assert_close(ge[key], gd[key], rtol=1e-4, atol=1e-5, msg=key)


def test_node_outputs_match_between_paths_and_padding_is_ignored():
    batch = batch_of()
    dense = make_model("dense", pooled=False, global_token=True)
    edge = make_model("edge", pooled=False, global_token=True)
    edge.load_state_dict(dense.state_dict())
    out_d, out_e = dense(batch), edge(batch)
    mask = out_d["mask"]
    torch.testing.assert_close(out_e["logits"][mask], out_d["logits"][mask], rtol=1e-5, atol=1e-5)
    # one graph alone gives the same node outputs as inside the padded batch
    alone = collate_graphs([random_graph(4, seed=1)])
    dense.eval()
    torch.testing.assert_close(dense(alone)["logits"][0], dense(batch)["logits"][1, :4], rtol=1e-5, atol=1e-5)


def _permute(item: dict, perm: torch.Tensor) -> dict:
    """Node ``perm[i]`` of the original becomes node ``i``."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    out = dict(item, x=item["x"][perm], edge_index=inv[item["edge_index"]])
    if "pe" in item:
        out["pe"] = item["pe"][perm]
    return out


@pytest.mark.parametrize("kernel", ["dense", "edge"])
def test_permuting_nodes_permutes_node_outputs_and_keeps_graph_outputs(kernel):
    graphs = [random_graph(n, seed=i, pe="random_walk") for i, n in enumerate((8, 6, 9))]
    perms = [torch.randperm(g["x"].shape[0]) for g in graphs]
    batch = collate_graphs(graphs)
    permuted = collate_graphs([_permute(g, p) for g, p in zip(graphs, perms)])

    nodes = make_model(kernel, pooled=False, global_token=False, hops=2, positional="random_walk").eval()
    a, b = nodes(batch)["logits"], nodes(permuted)["logits"]
    for i, p in enumerate(perms):
        torch.testing.assert_close(b[i, : p.numel()], a[i, p], rtol=1e-5, atol=1e-5)

    for pooling, global_token in (("mean", False), ("cls", True)):
        pooled = make_model(kernel, pooled=True, global_token=global_token, hops=2, positional="random_walk",
                            pooling=pooling).eval()
        torch.testing.assert_close(pooled(permuted)["logits"], pooled(batch)["logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", ["dense", "edge"])
def test_one_attention_layer_equals_pyg_transformer_conv(kernel):
    """The reference nobody here wrote: TransformerConv(root_weight=False, concat) on the adapter's edges."""
    from torch_geometric.nn import TransformerConv

    batch = batch_of()
    adapter = GraphAdapter(DIM, F_NODE, 0, heads=HEADS, distance_bias=False)
    tokens = adapter(batch["x"], batch["mask"], batch["edge_index"])
    b, n = tokens.mask.shape
    attn = MultiHeadAttention(DIM, HEADS)
    conv = TransformerConv(DIM, DIM // HEADS, heads=HEADS, concat=True, root_weight=False)
    with torch.no_grad():
        for mine, theirs in ((attn.q_proj, conv.lin_query), (attn.k_proj, conv.lin_key), (attn.v_proj, conv.lin_value)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
        attn.out_proj.weight.copy_(torch.eye(DIM))  # TransformerConv has no output projection
        attn.out_proj.bias.zero_()
    x = tokens.x.detach().clone().requires_grad_(True)
    if kernel == "edge":
        ours = attn(x, tokens.mask, edge_index=tokens.edge_index, kernel="edge")  # [B, N, D]
    else:
        dense = edges_to_dense(tokens.edge_index, None, b, n, HEADS, x.dtype)  # [B, N, N]
        ours = attn(x, tokens.mask, dense, kernel="sdpa")
    edges = tokens.edge_index
    flat = x.reshape(-1, DIM)
    theirs = conv(flat, edges).view_as(ours)
    mask = tokens.mask
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-5, atol=1e-5)
    g_ours, = torch.autograd.grad(ours[mask].square().sum(), x)
    g_theirs, = torch.autograd.grad(theirs[mask].square().sum(), x)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["dense", "edge"])
def test_edge_keys_and_values_equal_pyg_transformer_conv_with_edge_dim(kernel):
    """Edge features in keys and values: TransformerConv(edge_dim=C) adds lin_edge(e) to key and value;
    ours has two projections (edge_k_proj, edge_v_proj): given both its weight, the layers agree."""
    from torch_geometric.nn import TransformerConv

    batch = batch_of()
    channels = 5
    adapter = GraphAdapter(DIM, F_NODE, F_EDGE, heads=HEADS, distance_bias=False, edge_channels=channels)
    tokens = adapter(batch["x"], batch["mask"], batch["edge_index"], batch["edge_attr"])
    assert tokens.edge_attr.shape == (tokens.edge_index.shape[1], channels)
    b, n = tokens.mask.shape
    attn = MultiHeadAttention(DIM, HEADS, edge_dim=channels)
    conv = TransformerConv(DIM, DIM // HEADS, heads=HEADS, concat=True, root_weight=False, edge_dim=channels)
    with torch.no_grad():
        for mine, theirs in ((attn.q_proj, conv.lin_query), (attn.k_proj, conv.lin_key), (attn.v_proj, conv.lin_value)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
        attn.edge_v_proj.weight.copy_(attn.edge_k_proj.weight)
        conv.lin_edge.weight.copy_(attn.edge_k_proj.weight)
        attn.out_proj.weight.copy_(torch.eye(DIM))
        attn.out_proj.bias.zero_()
    x = tokens.x.detach().clone().requires_grad_(True)
    e = tokens.edge_attr.detach().clone().requires_grad_(True)
    if kernel == "edge":
        ours = attn(x, tokens.mask, edge_index=tokens.edge_index, kernel="edge", edge_attr=e)
    else:
        dense = edges_to_dense(tokens.edge_index, None, b, n, HEADS, x.dtype)
        ours = attn(x, tokens.mask, dense, kernel="sdpa", edge_attr=edge_attr_to_dense(tokens.edge_index, e, b, n))
    theirs = conv(x.reshape(-1, DIM), tokens.edge_index, e).view_as(ours)
    mask = tokens.mask
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=1e-5, atol=1e-5)
    g_ours = torch.autograd.grad(ours[mask].square().sum(), (x, e))
    g_theirs = torch.autograd.grad(theirs[mask].square().sum(), (x, e))
    for a, c in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-5)
    # without its features the layer is the plain one
    plain = attn(x, tokens.mask, edge_index=tokens.edge_index, kernel="edge")
    assert not torch.allclose(plain[mask], ours[mask], atol=1e-3)


def test_edge_features_bad_inputs_are_named():
    batch = batch_of()
    adapter = GraphAdapter(DIM, F_NODE, F_EDGE, heads=HEADS, edge_channels=4)
    tokens = adapter(batch["x"], batch["mask"], batch["edge_index"], batch["edge_attr"])
    with pytest.raises(ValueError, match="edge_dim=0"):
        Encoder(DIM, depth=1, heads=HEADS, positional="none")(tokens)
    with pytest.raises(ValueError, match=r"C=edge_dim=3"):
        Encoder(DIM, depth=1, heads=HEADS, positional="none", edge_dim=3)(tokens)
    with pytest.raises(ValueError, match="edge_attr must be"):
        Tokens(x=tokens.x, edge_index=tokens.edge_index, edge_attr=tokens.edge_attr[:-1])
    with pytest.raises(ValueError, match="linear"):
        Encoder(DIM, depth=1, heads=HEADS, positional="none", kernel="linear", edge_dim=4)
    with_global = prepend_global_token(tokens, torch.zeros(DIM))
    e = tokens.edge_attr.shape[0]
    assert torch.equal(with_global.edge_attr[:e], tokens.edge_attr) and not with_global.edge_attr[e:].any()


def _reach_reference(n: int, edge_index: torch.Tensor, hops: int) -> torch.Tensor:
    """``[n, n]`` hop distance (target, source) by breadth-first search; -1 = unreachable within hops."""
    dist = torch.full((n, n), -1)
    nbrs = {t: [] for t in range(n)}
    for s, t in edge_index.t().tolist():
        nbrs[t].append(s)  # t attends to s: walk backwards from the target
    for t in range(n):
        dist[t, t] = 0
        frontier = [t]
        for d in range(1, hops + 1):
            nxt = []
            for u in frontier:
                for s in nbrs[u]:
                    if dist[t, s] < 0:
                        dist[t, s] = d
                        nxt.append(s)
            frontier = nxt
    return dist


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_k_hop_edges_and_dense_mask_match_breadth_first_search(hops):
    g = torch.Generator().manual_seed(3)
    n = 10
    edge_index = (torch.rand(n, n, generator=g) < 0.15).nonzero().t().flip(0)  # directed, [2, E]
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    mask = torch.ones(1, n, dtype=torch.bool)
    edges, distance, position = k_hop_edges(edge_index, mask, hops)
    ref = _reach_reference(n, edge_index, hops)
    got = torch.full((n, n), -1)
    got[edges[1], edges[0]] = distance
    assert torch.equal(got, ref)
    assert torch.equal(edges[:, position], edge_index)  # each input edge found where it landed

    adapter = GraphAdapter(DIM, F_NODE, heads=HEADS, hops=hops)
    tokens = adapter(torch.randn(1, n, F_NODE), mask, edge_index)
    dense = edges_to_dense(tokens.edge_index, tokens.edge_bias, 1, n, HEADS, torch.float32)  # [1, H, n, n]
    assert torch.equal(torch.isfinite(dense[0, 0]), ref >= 0)


def test_k_hops_on_a_path_and_self_loops_only_for_real_nodes():
    batch = collate_graphs([{"x": torch.randn(5, F_NODE), "edge_index": torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4],
                                                                                     [1, 0, 2, 1, 3, 2, 4, 3]])},
                            {"x": torch.randn(2, F_NODE), "edge_index": torch.zeros(2, 0, dtype=torch.long)}])
    edges, distance, _ = k_hop_edges(batch["edge_index"], batch["mask"], hops=2)
    seen = {(int(s), int(t)): int(d) for (s, t), d in zip(edges.t(), distance)}
    assert {s for (s, t) in seen if t == 0} == {0, 1, 2}
    assert {s for (s, t) in seen if t == 2} == {0, 1, 2, 3, 4}
    assert seen[(4, 2)] == 2 and seen[(3, 2)] == 1 and seen[(2, 2)] == 0
    assert {t for (s, t) in seen if t >= 5} == {5, 6}  # the second graph: its two self-loops, no padding
    assert seen[(5, 5)] == 0 and seen[(6, 6)] == 0 and len([1 for (s, t) in seen if t >= 5]) == 2


def _encoder(**kwargs) -> Encoder:
    return Encoder(DIM, depth=1, heads=HEADS, dropout=0.0, positional="none", **kwargs)


def test_dense_memory_estimate_error_before_allocating(monkeypatch):
    batch = batch_of()
    tokens = GraphAdapter(DIM, F_NODE, heads=HEADS)(batch["x"], batch["mask"], batch["edge_index"])
    with pytest.raises(ValueError, match=r"graph_path='dense' needs about .* max_dense_bytes=1000"):
        _encoder(graph_path="dense", max_dense_bytes=1000)(tokens)
    auto = _encoder(graph_path="auto", max_dense_bytes=1000, dense_min_fill=0.0)
    auto(tokens)
    assert auto.last_graph_path == "edge"
    roomy = _encoder(graph_path="auto", dense_min_fill=0.0)
    roomy(tokens)
    assert roomy.last_graph_path == "dense"
    # 100k nodes and 1M edges as one dense block would need terabytes: auto goes to the edge kernel
    assert choose_graph_path(1, 100_000, 1_100_000, heads=4, dim=64) == "edge"
    # a graph whose attention cannot fit the free memory is refused before the allocation
    # (small batches are not checked: reading the free memory at every step cost ~1 % of a molecule step)
    monkeypatch.setattr(graph_cost, "available_memory_bytes", lambda device: 10_000)
    _encoder(graph_path="edge")(tokens)
    monkeypatch.setattr(graph_cost, "FREE_MEMORY_CHECK_FROM", 1_000)
    with pytest.raises(ValueError, match="is available on cpu"):
        _encoder(graph_path="edge")(tokens)
    monkeypatch.setattr(graph_cost, "FREE_MEMORY_CHECK_FROM", 64 * 2**20)
    with pytest.raises(ValueError, match="is available on cpu"):  # a large graph: checked at the default
        choose_graph_path(1, 100_000, 1_100_000, heads=4, dim=64)


def test_auto_prefers_edge_for_sparse_blocks_and_dense_for_full_ones():
    assert choose_graph_path(128, 25, 128 * 80, HEADS, DIM, dense_min_fill=0.15) == "edge"  # ~3 edges per atom
    assert choose_graph_path(8, 10, 8 * 100, HEADS, DIM, dense_min_fill=0.15) == "dense"  # complete graphs


def test_auto_at_the_measured_crossover_and_at_the_default():
    """With the measured crossover (graph_cost.MEASURED_CROSSOVER_FILL, the graph_fill cell) molecules padded to
    ~24 atoms (fill ~0.09) go dense and to 64 atoms (fill ~0.04) the edge kernel; the default threshold
    (0.15) sends both to the edge kernel."""
    from seqattn.core import graph_cost
    from seqattn.modalities.graph.structure_cells import molecule_like_graphs

    assert graph_cost.MEASURED_CROSSOVER_FILL < 0.088 < graph_cost.DENSE_MIN_FILL
    for nodes, want in ((24, "dense"), (64, "edge")):
        mask, edges = molecule_like_graphs(32, nodes)
        fill = graph_cost.MEASURED_CROSSOVER_FILL
        assert choose_graph_path(32, nodes, edges.shape[1], HEADS, DIM, dense_min_fill=fill) == want, nodes
        assert choose_graph_path(32, nodes, edges.shape[1], HEADS, DIM) == "edge", nodes
        tokens = Tokens(x=torch.randn(32, nodes, DIM), mask=mask, edge_index=edges,
                        edge_bias=torch.randn(edges.shape[1], HEADS))
        enc = _encoder(graph_path="auto", dense_min_fill=fill)
        enc(tokens)
        assert enc.last_graph_path == want


def test_the_removed_adapter_kernel_names_the_encoder_knob():
    """The graph path is one knob, the encoder's (model.graph_path): adapter.kernel only accepts None."""
    with pytest.raises(ValueError, match=r"adapter.kernel='edge' was removed.*model.graph_path=edge"):
        GraphAdapter(DIM, F_NODE, heads=HEADS, kernel="edge")
    assert not hasattr(Tokens, "graph_path") and "graph_path" not in Tokens.__dataclass_fields__


def test_bad_graph_inputs_are_named():
    batch = batch_of()
    adapter = GraphAdapter(DIM, F_NODE, F_EDGE, heads=HEADS)
    cross = batch["edge_index"].clone()
    cross[0, 0] = cross[1, 0] + batch["mask"].shape[1]  # source in the next graph
    with pytest.raises(ValueError, match="different graphs"):
        adapter(batch["x"], batch["mask"], cross, batch["edge_attr"])
    with pytest.raises(ValueError, match="edge_attr must be"):
        adapter(batch["x"], batch["mask"], batch["edge_index"], None)
    pad = torch.tensor([[0], [8]])  # node 8 of graph 0 (7 nodes) is padding
    with pytest.raises(ValueError, match="padding node"):
        adapter(batch["x"], batch["mask"], pad, torch.zeros(1, F_EDGE))
    with pytest.raises(ValueError, match="kernel='sparse'"):
        GraphAdapter(DIM, F_NODE, kernel="sparse")
    with pytest.raises(ValueError, match="pe must be"):
        GraphAdapter(DIM, F_NODE, positional="laplacian", pe_dim=4)(batch["x"], batch["mask"], batch["edge_index"])


def test_laplacian_pe_are_eigenvectors_and_signs_flip_in_training():
    n = 12
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    ring = torch.cat([ring, ring.flip(0)], dim=1)
    pe = laplacian_pe(ring, n, 4).double()  # [n, 4]
    lap = torch.eye(n, dtype=torch.float64)
    lap[ring[1], ring[0]] -= 0.5  # degree 2 everywhere
    vals = (pe * (lap @ pe)).sum(0)
    torch.testing.assert_close(lap @ pe, pe * vals, atol=1e-5, rtol=0)  # L v = λ v
    torch.testing.assert_close(pe.t() @ pe, torch.eye(4, dtype=torch.float64), atol=1e-5, rtol=0)
    assert vals.min() > 1e-3  # the trivial (constant) eigenvector is left out
    # the sparse solver for large graphs finds the same eigenvalues
    sparse = laplacian_pe(ring, n, 2, dense_limit=0).double()
    sparse_vals = (sparse * (lap @ sparse)).sum(0)
    torch.testing.assert_close(sparse_vals.sort().values, vals[:2].sort().values, atol=1e-4, rtol=0)

    item = {"x": torch.randn(n, F_NODE), "edge_index": ring, "pe": pe.float()}
    batch = collate_graphs([item])
    adapter = GraphAdapter(DIM, F_NODE, heads=HEADS, positional="laplacian", pe_dim=4)
    adapter.eval()
    a = adapter(batch["x"], batch["mask"], batch["edge_index"], pe=batch["pe"]).x
    assert torch.equal(a, adapter(batch["x"], batch["mask"], batch["edge_index"], pe=batch["pe"]).x)
    adapter.train()
    outs = {tuple(adapter(batch["x"], batch["mask"], batch["edge_index"], pe=batch["pe"]).x[0, 0].tolist())
            for _ in range(8)}
    assert len(outs) > 1  # random sign flips reach the node vectors


def test_random_walk_pe_on_small_graphs():
    square = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 0], [1, 0, 2, 1, 3, 2, 0, 3]])
    pe = random_walk_pe(square, 4, 4)
    torch.testing.assert_close(pe, torch.tensor([[0.0, 0.5, 0.0, 0.5]]).expand(4, 4))
    star = torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]])
    pe = random_walk_pe(star, 4, 2)
    torch.testing.assert_close(pe[:, 1], torch.tensor([1.0, 1 / 3, 1 / 3, 1 / 3]))
    # the sparse path for large graphs gives the same numbers
    g = torch.Generator().manual_seed(0)
    big = torch.randint(0, 2500, (2, 9000), generator=g)
    big = big[:, big[0] != big[1]]
    dense_pe = random_walk_pe(big[:, :3000] % 300, 300, 3)
    assert dense_pe.shape == (300, 3)
    sparse_pe = random_walk_pe(big, 2500, 3)
    adj = torch.zeros(2500, 2500, dtype=torch.float64)
    adj[big[0], big[1]] = 1
    adj = ((adj + adj.t()) > 0).double()
    walk = adj / adj.sum(1, keepdim=True).clamp_min(1)
    torch.testing.assert_close(sparse_pe[:, 2], (walk @ walk @ walk).diagonal().float(), atol=1e-6, rtol=1e-5)


def test_global_token_pads_edge_bias_with_zeros():
    batch = batch_of()
    adapter = GraphAdapter(DIM, F_NODE, F_EDGE, heads=HEADS)
    tokens = adapter(batch["x"], batch["mask"], batch["edge_index"], batch["edge_attr"])
    with_global = prepend_global_token(tokens, torch.zeros(DIM))
    added = with_global.extra["global_edges"]
    assert with_global.edge_bias.shape == (tokens.edge_bias.shape[0] + added, HEADS)
    assert torch.equal(with_global.edge_bias[: tokens.edge_bias.shape[0]], tokens.edge_bias)
    assert not with_global.edge_bias[tokens.edge_bias.shape[0]:].any()
    with pytest.raises(ValueError, match="edge_bias must be"):
        Tokens(x=tokens.x, edge_index=tokens.edge_index, edge_bias=tokens.edge_bias[:-1])


def test_collate_graphs_pads_and_offsets():
    a = {"x": torch.ones(2, 3), "edge_index": torch.tensor([[0], [1]]), "ids": "a", "targets": torch.tensor([1.0])}
    b = {"x": torch.ones(3, 3), "edge_index": torch.tensor([[2], [0]]), "ids": "b", "targets": torch.tensor([2.0])}
    batch = collate_graphs([a, b])
    assert batch["x"].shape == (2, 3, 3) and batch["mask"].tolist() == [[True, True, False], [True, True, True]]
    assert batch["edge_index"].tolist() == [[0, 5], [1, 3]]
    assert batch["ids"] == ["a", "b"] and batch["targets"].tolist() == [[1.0], [2.0]]


def test_propagated_features_equal_gcn_normalised_powers_of_the_adjacency():
    """``smoothed_features`` = [x, Âx, Â²x] with PyG's ``gcn_norm`` (self-loops, symmetric), per graph of a
    padded batch; padding nodes stay zero; the adapter's projection reads all of them."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    from seqattn.modalities.graph.adapter import GraphAdapter, smoothed_features

    torch.manual_seed(0)
    sizes, n, f = [5, 3], 5, 4
    x = torch.randn(2, n, f)
    mask = torch.arange(n)[None, :] < torch.tensor(sizes)[:, None]
    x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
    local = [torch.tensor([[0, 1, 1, 2, 3, 4, 0, 4], [1, 0, 2, 1, 4, 3, 4, 0]]), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])]
    edge_index = torch.cat([e + i * n for i, e in enumerate(local)], dim=1)
    got = smoothed_features(x, mask, edge_index, 2)
    assert got.shape == (2, n, 3 * f)
    for i, (size, e) in enumerate(zip(sizes, local)):
        ei, w = gcn_norm(e, num_nodes=size, add_self_loops=True)
        a = torch.zeros(size, size).index_put_((ei[1], ei[0]), w, accumulate=True)  # row = target
        want = torch.cat([x[i, :size], a @ x[i, :size], a @ a @ x[i, :size]], dim=1)
        torch.testing.assert_close(got[i, :size], want)
    assert not got[1, 3:].any()
    adapter = GraphAdapter(dim=8, node_features=f, heads=2, propagate=2)
    assert adapter.node_proj.in_features == 3 * f
    assert adapter(x, mask, edge_index).x.shape == (2, n, 8)
    # the adapter projects first and propagates D-wide vectors (Horner): the same tokens as projecting the
    # F·3 smoothed features, for every step count
    for steps in (1, 2, 3):
        adapter = GraphAdapter(dim=8, node_features=f, heads=2, propagate=steps).eval()
        want = adapter.node_proj(smoothed_features(x, mask, edge_index, steps)).masked_fill(~mask.unsqueeze(-1), 0.0)
        torch.testing.assert_close(adapter(x, mask, edge_index).x, want)
    with pytest.raises(ValueError, match="propagate"):
        GraphAdapter(dim=8, node_features=f, propagate=-1)


def test_mean_propagation_projects_the_mean_of_the_gcn_powers():
    """``propagate_mode=mean`` (GRAND's mixed-order propagation): ``node_proj`` reads F inputs and the tokens are
    ``node_proj(mean(x, Âx, …, Â^k x))``, per graph of a padded batch (Â checked against PyG above); padding stays
    zero; k = 0 is the plain projection. A bad mode raises naming the choices."""
    from seqattn.modalities.graph.adapter import GraphAdapter, smoothed_features

    torch.manual_seed(0)
    sizes, n, f = [5, 3], 5, 4
    mask = torch.arange(n)[None, :] < torch.tensor(sizes)[:, None]
    x = torch.randn(2, n, f).masked_fill(~mask.unsqueeze(-1), 0.0)
    local = [torch.tensor([[0, 1, 1, 2, 3, 4, 0, 4], [1, 0, 2, 1, 4, 3, 4, 0]]), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])]
    edge_index = torch.cat([e + i * n for i, e in enumerate(local)], dim=1)
    for steps in (0, 1, 3, 8):
        adapter = GraphAdapter(dim=8, node_features=f, heads=2, propagate=steps, propagate_mode="mean").eval()
        assert adapter.node_proj.in_features == f
        hops = smoothed_features(x, mask, edge_index, steps).view(2, n, steps + 1, f)
        want = adapter.node_proj(hops.mean(2)).masked_fill(~mask.unsqueeze(-1), 0.0)
        torch.testing.assert_close(adapter(x, mask, edge_index).x, want)
    with pytest.raises(ValueError, match="propagate_mode='sum'.*concat"):
        GraphAdapter(dim=8, node_features=f, propagate=2, propagate_mode="sum")


def test_attention_propagation_weighs_each_node_s_hops_by_attention():
    """``propagate_mode=attention`` (NAGphormer's hop readout): hop tokens ``t_j = (Â^j x) W_j`` with ``W_j`` the
    j-th block of ``node_proj`` (as ``concat``), and ``t_0 + Σ_{j≥1} softmax_j(hop_score([t_0, t_j])) t_j`` per node,
    checked by hand against the GCN powers (Â checked against PyG above) with a non-zero score; with a zero score
    every hop weighs 1/k. Padding stays zero; bad settings raise."""
    from seqattn.modalities.graph.adapter import GraphAdapter, smoothed_features

    torch.manual_seed(0)
    sizes, n, f, d = [5, 3], 5, 4, 8
    mask = torch.arange(n)[None, :] < torch.tensor(sizes)[:, None]
    x = torch.randn(2, n, f).masked_fill(~mask.unsqueeze(-1), 0.0)
    local = [torch.tensor([[0, 1, 1, 2, 3, 4, 0, 4], [1, 0, 2, 1, 4, 3, 4, 0]]), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])]
    edge_index = torch.cat([e + i * n for i, e in enumerate(local)], dim=1)
    for steps in (1, 2, 3):
        adapter = GraphAdapter(dim=d, node_features=f, heads=2, propagate=steps, propagate_mode="attention").eval()
        assert adapter.node_proj.in_features == f * (steps + 1) and adapter.hop_score.in_features == 2 * d
        with torch.no_grad():
            adapter.hop_score.weight.normal_(0.0, 1.0)
        hops = smoothed_features(x, mask, edge_index, steps).view(2, n, steps + 1, f)  # [B, N, k+1, F]
        blocks = adapter.node_proj.weight.view(d, steps + 1, f)  # [D, k+1, F]: W_j
        tokens = torch.einsum("bnjf,djf->bnjd", hops, blocks)  # [B, N, k+1, D]
        own = tokens[:, :, :1].expand(-1, -1, steps, -1)
        weight = torch.softmax(adapter.hop_score(torch.cat([own, tokens[:, :, 1:]], -1)).squeeze(-1), -1)
        want = tokens[:, :, 0] + (weight.unsqueeze(-1) * tokens[:, :, 1:]).sum(2) + adapter.node_proj.bias
        got = adapter(x, mask, edge_index).x
        torch.testing.assert_close(got, want.masked_fill(~mask.unsqueeze(-1), 0.0))
        with torch.no_grad():
            adapter.hop_score.weight.zero_()
        even = tokens[:, :, 0] + tokens[:, :, 1:].mean(2) + adapter.node_proj.bias
        torch.testing.assert_close(adapter(x, mask, edge_index).x, even.masked_fill(~mask.unsqueeze(-1), 0.0))
    with pytest.raises(ValueError, match="attention.*propagate >= 1"):
        GraphAdapter(dim=d, node_features=f, propagate=0, propagate_mode="attention")


def test_node_dropout_drops_whole_nodes_before_the_propagation_in_training_only():
    """``adapter.node_dropout=p`` (GRAND's DropNode): in training each node's whole feature row is zeroed or
    scaled by 1/(1-p), and the propagation then averages what is left: the tokens equal the eval projection of
    ``x`` with those rows changed, for one scale vector per step. Eval drops nothing; p outside [0, 1) raises."""
    from seqattn.modalities.graph.adapter import GraphAdapter, smoothed_features

    torch.manual_seed(0)
    n, f, p = 400, 3, 0.5
    x = torch.randn(1, n, f) + 3.0
    mask = torch.ones(1, n, dtype=torch.bool)
    ring = torch.arange(n)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % n]), torch.cat([(ring + 1) % n, ring])])
    adapter = GraphAdapter(dim=8, node_features=f, heads=1, propagate=2, propagate_mode="mean", node_dropout=p,
                           distance_bias=False)
    with torch.no_grad():
        got = adapter.train()(x, mask, edge_index).x[0]  # [N, D]
        # recover the row scales: with propagation each token mixes its neighbours, so solve for the scales
        # from the projection of each hop's mean with a scale per node, exactly as the docstring says
        proj = adapter.node_proj
        basis = x[0] @ proj.weight.t()  # [N, D], the projection of each node's own features, no bias
        step = smoothed_features(torch.eye(n).unsqueeze(0), mask, edge_index, 2).view(n, 3, n).mean(1)  # [N, N]
        scales = torch.linalg.lstsq((step.unsqueeze(-1) * basis.unsqueeze(0)).permute(0, 2, 1).reshape(-1, n),
                                    (got - proj.bias).reshape(-1)).solution  # [N]
    torch.testing.assert_close(scales, scales.round(), atol=1e-3, rtol=0)  # 0 or 1/(1-p) = 2, nothing between
    assert set(scales.round().tolist()) == {0.0, 2.0}
    assert 0.4 < float((scales.round() == 0).float().mean()) < 0.6  # about p of the nodes are dropped
    plain = GraphAdapter(dim=8, node_features=f, heads=1, propagate=2, propagate_mode="mean", distance_bias=False)
    plain.load_state_dict(adapter.state_dict())
    torch.testing.assert_close(adapter.eval()(x, mask, edge_index).x, plain.eval()(x, mask, edge_index).x)
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="node_dropout"):
            GraphAdapter(dim=8, node_features=f, node_dropout=bad)


def test_feature_dropout_drops_raw_node_features_in_training_only():
    """``adapter.feature_dropout=p``: in training, each raw feature is zeroed (the rest scaled by 1/(1-p))
    before the projection, so the tokens equal the projection of the dropped features; in eval, none."""
    from seqattn.core.dropout import dropout
    from seqattn.modalities.graph.adapter import GraphAdapter

    torch.manual_seed(0)
    n, f = 6, 5
    x = torch.randn(1, n, f) + 3.0  # no feature is 0 by chance
    mask = torch.ones(1, n, dtype=torch.bool)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    adapter = GraphAdapter(dim=8, node_features=f, heads=1, feature_dropout=0.5, distance_bias=False)
    plain = GraphAdapter(dim=8, node_features=f, heads=1, distance_bias=False)
    plain.load_state_dict(adapter.state_dict())
    torch.testing.assert_close(adapter.eval()(x, mask, edge_index).x, plain.eval()(x, mask, edge_index).x)
    adapter.train()
    torch.manual_seed(1)
    got = adapter(x, mask, edge_index).x
    torch.manual_seed(1)
    dropped = dropout(x, 0.5)  # the same draw: what the projection read
    zero = dropped == 0
    assert 0 < zero.sum() < zero.numel()
    torch.testing.assert_close(dropped[~zero], x[~zero] * 2.0)
    torch.testing.assert_close(got, plain.eval()(dropped, mask, edge_index).x)


@pytest.mark.parametrize("propagate", [0, 2])
def test_sparse_node_features_take_the_sparse_product_with_the_same_tokens_and_dropout(propagate, monkeypatch):
    """Bag-of-words features (mostly zeros) are projected as a sparse matrix: the same tokens as the dense
    projection in eval; in training each non-zero feature is dropped or scaled by 1/(1-p), zeros stay zero."""
    from seqattn.modalities.graph import adapter as graph_adapter
    from seqattn.modalities.graph.adapter import GraphAdapter

    monkeypatch.setattr(graph_adapter, "SPARSE_FEATURES_MIN", 0)  # this small input too
    used = []
    sparse_mm = torch.sparse.mm
    monkeypatch.setattr(torch.sparse, "mm", lambda *a: used.append(1) or sparse_mm(*a))
    torch.manual_seed(0)
    n, f = 12, 40
    x = torch.zeros(1, n, f)
    x[0, torch.arange(n), torch.arange(n) * 3] = 1.0 + torch.rand(n)  # one non-zero per node: 2.5 % fill
    mask = torch.ones(1, n, dtype=torch.bool)
    edge_index = torch.tensor([[i for i in range(n - 1)] + [i + 1 for i in range(n - 1)],
                               [i + 1 for i in range(n - 1)] + [i for i in range(n - 1)]])
    adapter = GraphAdapter(dim=8, node_features=f, heads=1, feature_dropout=0.5, propagate=propagate,
                           distance_bias=False).eval()
    dense = graph_adapter.smoothed_features(x, mask, edge_index, propagate) if propagate else x
    torch.testing.assert_close(adapter(x, mask, edge_index).x, adapter.node_proj(dense))
    assert used  # the sparse product ran
    if propagate:
        return
    adapter.train()
    torch.manual_seed(3)
    got = adapter(x, mask, edge_index).x[0]  # [N, D]: each token is bias, or bias + 2 · its feature's column
    bias, cols = adapter.node_proj.bias, adapter.node_proj.weight[:, torch.arange(n) * 3].t() * x[0, torch.arange(n), torch.arange(n) * 3, None]
    kept = torch.isclose(got, bias + 2 * cols, atol=1e-5).all(1)
    gone = torch.isclose(got, bias.expand_as(got), atol=1e-5).all(1)
    assert bool((kept | gone).all()) and 0 < int(kept.sum()) < n


def test_sparse_feature_entries_are_remembered_for_the_same_unchanged_tensor_only(monkeypatch):
    """The non-zeros of a full graph's features are found once and reused while the same tensor comes back
    unchanged; an in-place change (version counter), another tensor with other values, and inference tensors
    are read anew; mostly non-zero features are 'not sparse'."""
    from seqattn.modalities.graph import adapter as graph_adapter

    x = torch.zeros(1, 6, 20)
    x[0, :, 0] = torch.arange(1.0, 7.0)
    flat = x.reshape(6, 20)
    calls = []
    nonzero = torch.nonzero
    monkeypatch.setattr(torch, "nonzero", lambda t: calls.append(1) or nonzero(t))
    idx, values = graph_adapter.sparse_entries(x, flat)
    torch.testing.assert_close(values, torch.arange(1.0, 7.0))
    assert graph_adapter.sparse_entries(x, x.reshape(6, 20))[1] is values and len(calls) == 1  # remembered
    x[0, 2, 5] = 9.0  # in place: read again
    idx2, values2 = graph_adapter.sparse_entries(x, flat)
    assert len(calls) == 2 and idx2.shape[0] == 7 and 9.0 in values2.tolist()
    other = x.clone()
    other[0, 0, 0] = -1.0
    other[0, 1, 0] = -2.0  # now at x's version (2): only its identity tells them apart
    assert other._version == x._version
    assert graph_adapter.sparse_entries(other, other.reshape(6, 20))[1][0] == -1.0 and len(calls) == 3
    with torch.inference_mode():
        frozen = x.clone()
    graph_adapter.sparse_entries(frozen, frozen.reshape(6, 20))
    graph_adapter.sparse_entries(frozen, frozen.reshape(6, 20))
    assert len(calls) == 5  # never remembered
    full = torch.ones(1, 6, 20)
    assert graph_adapter.sparse_entries(full, full.reshape(6, 20)) == (None, None)


def test_sparse_node_features_under_bf16_autocast(monkeypatch):
    """bf16-mixed (autocast) runs the sparse feature product at fp32 (torch's sparse product takes no bf16 on CUDA):
    the same tokens as outside autocast."""
    from seqattn.modalities.graph import adapter as graph_adapter
    from seqattn.modalities.graph.adapter import GraphAdapter

    monkeypatch.setattr(graph_adapter, "SPARSE_FEATURES_MIN", 0)
    n, f = 12, 40
    x = torch.zeros(1, n, f)
    x[0, torch.arange(n), torch.arange(n) * 3] = 1.0
    mask = torch.ones(1, n, dtype=torch.bool)
    edge_index = torch.tensor([list(range(n - 1)), list(range(1, n))])
    adapter = GraphAdapter(dim=8, node_features=f, heads=1, distance_bias=False).eval()  # no hops: no other product
    want = adapter(x, mask, edge_index).x
    calls = []
    autocast = torch.autocast

    class Spy(autocast):
        def __init__(self, device_type, *args, **kwargs):
            calls.append(kwargs.get("enabled", True))
            super().__init__(device_type, *args, **kwargs)

    monkeypatch.setattr(torch, "autocast", Spy)
    with autocast("cpu", dtype=torch.bfloat16):
        got = adapter(x, mask, edge_index).x
    assert False in calls  # the sparse product ran with autocast off
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
