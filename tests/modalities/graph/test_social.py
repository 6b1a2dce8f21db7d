"""Social-network data: CSV readers, the stratified node split, full-graph and neighbour-sampled batches."""

import logging

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.graph.sampling import EgoNeighborSampler, ego_batch
from seqattn.modalities.graph.social import SocialDataModule
from seqattn.modalities.graph.social_files import read_edge_csv, read_node_csv


def _write(path, text):
    path.write_text(text)
    return path


def _small_graph(tmp_path, split=True):
    nodes = "id,age,score,label" + (",split" if split else "") + "\n"
    rows = [("a", 1, 0.5, "x", "train"), ("b", 2, 0.1, "y", "train"), ("c", 3, 0.2, "x", "val"),
            ("d", 4, 0.3, "y", "test"), ("e", 5, 0.4, "", "")]
    for r in rows:
        nodes += ",".join(map(str, r if split else r[:4])) + "\n"
    edges = "source,target,weight\na,b,1.0\nb,c,2\nc,d,0.5\nd,a,1\n"
    return _write(tmp_path / "nodes.csv", nodes), _write(tmp_path / "edges.csv", edges)


# ---------------------------------------------------------------------------------------------
# karate split


def test_karate_split_is_deterministic_stratified_and_covers_every_node(tmp_path):
    dm = SocialDataModule(source="karate", data_dir=str(tmp_path), seed=0)
    dm.prepare_data()
    dm.setup()
    g = dm.graph
    assert g.num_nodes == 34 and g.edge_index.shape[1] == 156  # 78 friendships, both directions
    assert dm.label_names == ["c0", "c1", "c2", "c3"]
    parts = {s: g.nodes_of(s) for s in ("train", "val", "test")}
    together = torch.cat(list(parts.values()))
    assert sorted(together.tolist()) == list(range(34))  # disjoint and complete (every karate node is labeled)
    sizes = torch.bincount(g.y, minlength=4)
    for c in range(4):  # each class is split in the configured proportions
        n = int(sizes[c])
        assert int((g.y[parts["test"]] == c).sum()) == max(round(0.3 * n), 1)
        assert int((g.y[parts["val"]] == c).sum()) == max(round(0.2 * n), 1)
        assert int((g.y[parts["train"]] == c).sum()) >= 2

    again = SocialDataModule(source="karate", data_dir=str(tmp_path), seed=0)
    again.setup()
    assert torch.equal(again.graph.split, g.split)
    other = SocialDataModule(source="karate", data_dir=str(tmp_path), seed=1)
    other.setup()
    assert not torch.equal(other.graph.split, g.split)


def test_full_graph_loaders_carry_only_their_stage_labels(tmp_path):
    dm = SocialDataModule(source="karate", data_dir=str(tmp_path), steps_per_epoch=3)
    dm.setup()
    seen = {}
    for stage, loader in (("train", dm.train_dataloader()), ("val", dm.val_dataloader()),
                          ("test", dm.test_dataloader())):
        batches = list(loader)
        assert len(batches) == (3 if stage == "train" else 1)
        batch = batches[0]
        assert batch["x"].shape == (1, 34, 34) and batch["mask"].all()
        labeled = torch.nonzero(batch["labels"][0] != IGNORE_INDEX).squeeze(1)
        assert torch.equal(labeled, dm.graph.nodes_of(stage))
        assert torch.equal(batch["labels"][0, labeled], dm.graph.y[labeled])
        seen[stage] = set(labeled.tolist())
    assert not (seen["train"] & seen["val"]) and not (seen["train"] & seen["test"]) and not (seen["val"] & seen["test"])


def test_the_datamodule_split_is_stratified_keeps_unlabeled_nodes_out_and_rejects_bad_fractions(tmp_path):
    """Through SocialDataModule (no split column): 10 nodes of class x, 10 of y, 3 unlabeled; val 0.2, test
    0.3 per class: 2 + 3 of each class, the rest (5 each) train; unlabeled nodes in no split. (Seed 1: a
    split at random, not by class, gives other counts there.)"""
    labels = ["x"] * 10 + ["y"] * 10 + [""] * 3
    nodes = _write(tmp_path / "n.csv", "id,f,label\n" + "".join(f"n{i},{i},{lab}\n" for i, lab in enumerate(labels)))
    edges = _write(tmp_path / "e.csv", "source,target\n" + "".join(f"n{i},n{(i + 1) % 23}\n" for i in range(23)))

    def dm(**kw):
        return SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges), data_dir=str(tmp_path),
                                split_column=None, **{"val_fraction": 0.2, "test_fraction": 0.3, "seed": 1, **kw})

    data = dm()
    data.setup()
    g = data.graph
    parts = {s: set(g.nodes_of(s).tolist()) for s in ("train", "val", "test")}
    assert not (parts["train"] & parts["val"]) and not (parts["train"] & parts["test"]) and not (parts["val"] & parts["test"])
    assert set().union(*parts.values()) == set(range(20))  # every labeled node, no unlabeled one (20, 21, 22)
    for name, per_class in (("train", 5), ("val", 2), ("test", 3)):
        ids = torch.tensor(sorted(parts[name]))
        assert torch.bincount(g.y[ids], minlength=2).tolist() == [per_class, per_class], name
    again = dm()
    again.setup()
    assert torch.equal(again.graph.split, g.split)
    with pytest.raises(ValueError, match="test_fraction"):
        dm(test_fraction=1.0).setup()
    with pytest.raises(ValueError, match="must be < 1"):
        dm(val_fraction=0.5, test_fraction=0.5).setup()


# ---------------------------------------------------------------------------------------------
# custom CSVs


def test_custom_csvs_with_split_column_and_edge_weights(tmp_path):
    nodes, edges = _small_graph(tmp_path)
    dm = SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges), data_dir=str(tmp_path))
    dm.setup()
    g = dm.graph
    assert g.ids == ["a", "b", "c", "d", "e"]
    assert g.x.shape == (5, 2) and g.x[2].tolist() == [3.0, pytest.approx(0.2)]
    assert dm.label_names == ["x", "y"]
    assert g.y.tolist() == [0, 1, 0, 1, IGNORE_INDEX]  # e is unlabeled
    assert [g.nodes_of(s).tolist() for s in ("train", "val", "test")] == [[0, 1], [2], [3]]
    assert g.edge_index.shape == (2, 8)  # 4 edges, undirected
    pairs = {(int(a), int(b)): float(w) for (a, b), w in zip(g.edge_index.t(), g.edge_attr[:, 0])}
    assert pairs[(1, 2)] == pairs[(2, 1)] == 2.0
    assert dm.spec().sizes == {"node_features": 2, "edge_features": 1}


def test_row_normalised_features_divide_each_node_by_its_sum(tmp_path):
    """``data.normalize_features=row``: node c (age 3, score 0.2) becomes (3 / 3.2, 0.2 / 3.2)."""
    nodes, edges = _small_graph(tmp_path)
    dm = SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges), data_dir=str(tmp_path),
                          normalize_features="row")
    dm.setup()
    want = torch.tensor([[1, 0.5], [2, 0.1], [3, 0.2], [4, 0.3], [5, 0.4]])
    torch.testing.assert_close(dm.graph.x, want / want.sum(1, keepdim=True))


def test_custom_csvs_without_split_are_split_by_seed_and_columns_are_configurable(tmp_path):
    nodes = _write(tmp_path / "people.csv", "person,f1,community\n" + "".join(
        f"p{i},{i % 3},{'ab'[i % 2]}\n" for i in range(20)))
    edges = _write(tmp_path / "follows.csv", "from,to\n" + "".join(f"p{i},p{(i + 1) % 20}\n" for i in range(20)))
    dm = SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges), id_column="person",
                          label_column="community", split_column=None, source_column="from", target_column="to",
                          undirected=False, val_fraction=0.2, test_fraction=0.2, seed=5)
    dm.setup()
    g = dm.graph
    assert g.edge_index.shape == (2, 20) and g.edge_attr is None
    assert [g.nodes_of(s).numel() for s in ("train", "val", "test")] == [12, 4, 4]


def test_malformed_rows_name_file_and_line(tmp_path):
    bad_feature = _write(tmp_path / "n1.csv", "id,f,label\na,1.0,x\nb,oops,y\n")
    with pytest.raises(ValueError, match=r"n1\.csv:3: column 'f' must be a number, got 'oops'"):
        read_node_csv(bad_feature)
    extra = _write(tmp_path / "n2.csv", "id,f,label\na,1.0,x\nb,2.0,y,zzz\n")
    with pytest.raises(ValueError, match=r"n2\.csv:3: expected 3 fields \(id, f, label\), got 4"):
        read_node_csv(extra)
    short = _write(tmp_path / "n3.csv", "id,f,label\na,1.0\n")
    with pytest.raises(ValueError, match=r"n3\.csv:2: expected 3 fields .*, got 2"):
        read_node_csv(short)
    repeat = _write(tmp_path / "n4.csv", "id,f\na,1\na,2\n")
    with pytest.raises(ValueError, match=r"n4\.csv:3: node id 'a' repeats \(first at .*n4\.csv:2\)"):
        read_node_csv(repeat)
    split = _write(tmp_path / "n5.csv", "id,f,label,split\na,1,x,training\nb,2,y,holdout\n")
    with pytest.raises(ValueError, match=r"n5\.csv:3: split 'holdout'"):
        read_node_csv(split)
    table = read_node_csv(_write(tmp_path / "ok.csv", "id,f\na,1\nb,2\n"))
    bad_weight = _write(tmp_path / "e1.csv", "source,target,weight\na,b,1\nb,a,heavy\n")
    with pytest.raises(ValueError, match=r"e1\.csv:3: column 'weight' must be a number, got 'heavy'"):
        read_edge_csv(bad_weight, table.index)
    with pytest.raises(ValueError, match=r"missing \['node'\]"):
        read_node_csv(table_path := tmp_path / "ok.csv", id_column="node")
    assert table_path.is_file()


def test_unknown_node_ids_in_edges_are_reported_not_dropped(tmp_path, caplog):
    nodes, _ = _small_graph(tmp_path)
    edges = _write(tmp_path / "edges_bad.csv", "source,target\na,b\nb,zed\nq,a\nc,d\n")
    with pytest.raises(ValueError, match=r"2 edge\(s\) name nodes missing.*edges_bad\.csv:3: unknown node id 'zed'"
                                         r".*edges_bad\.csv:4: unknown node id 'q'"):
        SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges)).setup()
    dm = SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges), unknown_nodes="skip")
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.graph"):
        dm.setup()
    assert "left out 2 edge(s)" in caplog.text and "edges_bad.csv:3" in caplog.text
    assert dm.graph.edge_index.shape[1] == 4  # a-b and c-d, both directions


def test_labels_outside_the_training_set_and_missing_splits_are_errors(tmp_path):
    nodes = _write(tmp_path / "n.csv", "id,f,label,split\na,1,x,train\nb,2,z,test\n")
    edges = _write(tmp_path / "e.csv", "source,target\na,b\n")
    with pytest.raises(ValueError, match=r"n\.csv:3: label 'z' in the test split is not in the label set \['x'\]"):
        SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges)).setup()
    nodes = _write(tmp_path / "n2.csv", "id,f,label,split\na,1,x,train\nb,2,x,\n")
    with pytest.raises(ValueError, match=r"n2\.csv:3: no split, but other labeled nodes have one"):
        SocialDataModule(source="csv", nodes=str(nodes), edges=str(edges)).setup()
    with pytest.raises(ValueError, match="needs nodes="):
        SocialDataModule(source="csv", nodes=str(nodes))
    with pytest.raises(ValueError, match="num_neighbors"):
        SocialDataModule(num_neighbors=[5, 0])


# ---------------------------------------------------------------------------------------------
# neighbour sampling


def _ring_of_cliques(n_cliques=6, size=5):
    edges = []
    for c in range(n_cliques):
        base = c * size
        edges += [(base + i, base + j) for i in range(size) for j in range(size) if i != j]
        nxt = ((c + 1) % n_cliques) * size
        edges += [(base, nxt), (nxt, base)]
    n = n_cliques * size
    return Data(x=torch.randn(n, 3), y=torch.arange(n) % 4, edge_index=torch.tensor(edges).t(), num_nodes=n)


def test_neighbor_loader_batches_label_only_their_seed_nodes(tmp_path):
    dm = SocialDataModule(source="sbm", data_dir=str(tmp_path), mode="sampled", num_neighbors=[4, 3],
                          batch_size=16, sbm={"num_nodes": 400, "blocks": 4, "avg_degree": 8})
    dm.prepare_data()
    dm.setup()
    g = dm.graph
    train = set(g.nodes_of("train").tolist())
    seen = []
    for batch in dm.train_dataloader():
        b, n, f = batch["x"].shape
        assert f == 8 and b <= 16 and n <= 1 + 4 + 4 * 3
        labeled = batch["labels"] != IGNORE_INDEX
        assert torch.equal(labeled, batch["seed_mask"])  # exactly one label per item: its seed's
        assert labeled[:, 0].all() and not labeled[:, 1:].any()  # the seed sits at position 0
        seeds = batch["node_index"][:, 0]
        assert set(seeds.tolist()) <= train
        assert torch.equal(batch["labels"][:, 0], g.y[seeds])
        assert batch["ids"] == [g.ids[i] for i in seeds.tolist()]
        # every edge stays inside its item, between real nodes, and is an edge of the graph
        src, dst = batch["edge_index"]
        assert torch.equal(src // n, dst // n)
        assert batch["mask"].flatten()[src].all() and batch["mask"].flatten()[dst].all()
        real = set(map(tuple, g.edge_index.t().tolist()))
        glob = batch["node_index"].flatten()
        assert all((int(glob[s]), int(glob[t])) in real for s, t in zip(src, dst))
        seen += seeds.tolist()
    assert sorted(seen) == sorted(train)  # one epoch visits every training node once
    val = next(iter(dm.val_dataloader()))
    assert set(val["node_index"][:, 0].tolist()) <= set(g.nodes_of("val").tolist())


def test_sampler_takes_all_in_neighbours_with_minus_one_and_k_otherwise():
    data = _ring_of_cliques()
    sampler = EgoNeighborSampler(data, [-1, -1])
    out = sampler._sample(torch.tensor([0, 7]))
    for b, seed in enumerate((0, 7)):
        mine = out.node[out.batch == b]
        assert int(mine[0]) == seed
        into_seed = set(data.edge_index[0][data.edge_index[1] == seed].tolist())
        two_hop = set(data.edge_index[0][torch.isin(data.edge_index[1], torch.tensor(sorted(into_seed)))].tolist())
        assert set(mine.tolist()) == {seed} | into_seed | two_hop
    sampler = EgoNeighborSampler(data, [2, 1])
    out = sampler._sample(torch.tensor([0, 7, 12]))
    assert out.num_sampled_edges[0] == 3 * 2  # every node has >= 4 in-neighbours: exactly k per node
    batch = ego_batch(Data(x=data.x[out.node], y=data.y[out.node], edge_index=torch.stack([out.row, out.col]),
                           batch=out.batch, n_id=out.node, batch_size=3))
    assert batch["x"].shape[0] == 3 and batch["mask"].sum(1).max() <= 1 + 2 + 2


def test_hashed_sampling_gives_a_node_the_same_subgraph_in_any_batch():
    data = _ring_of_cliques()
    sampler = EgoNeighborSampler(data, [2, 2], hash_seed=11)
    together = sampler._sample(torch.tensor([3, 9, 14, 20]))
    alone = sampler._sample(torch.tensor([14]))
    mine = together.node[together.batch == 2]
    assert mine.tolist() == alone.node.tolist()
    random_sampler = EgoNeighborSampler(data, [2, 2])
    draws = {tuple(random_sampler._sample(torch.tensor([14])).node.tolist()) for _ in range(20)}
    assert len(draws) > 1  # without the hash, sampling is random


def test_auto_mode_switches_to_sampling_above_the_threshold(tmp_path):
    dm = SocialDataModule(source="sbm", data_dir=str(tmp_path), full_batch_max_nodes=100, batch_size=32,
                          sbm={"num_nodes": 200, "blocks": 2})
    dm.setup()
    assert dm.resolved_mode(dm.graph.num_nodes) == "sampled"
    assert isinstance(dm.train_dataloader(), NeighborLoader)
    dm.full_batch_max_nodes = 1000
    assert dm.resolved_mode(dm.graph.num_nodes) == "full"
    batch = next(iter(dm.train_dataloader()))
    assert batch["x"].shape == (1, 200, 8)


def test_sbm_is_deterministic_and_homophilous(tmp_path):
    from seqattn.modalities.graph.social_files import sbm_csv

    a = sbm_csv(tmp_path / "a", num_nodes=300, blocks=3, seed=2)
    b = sbm_csv(tmp_path / "b", num_nodes=300, blocks=3, seed=2)
    assert (a / "nodes.csv").read_text() == (b / "nodes.csv").read_text()
    assert (a / "edges.csv").read_text() == (b / "edges.csv").read_text()
    dm = SocialDataModule(source="csv", nodes=str(a / "nodes.csv"), edges=str(a / "edges.csv"))
    dm.setup()
    g = dm.graph
    same = (g.y[g.edge_index[0]] == g.y[g.edge_index[1]]).float().mean()
    assert same > 0.7  # homophily 0.8 by default
    assert np.isclose(g.edge_index.shape[1] / 300, 10, rtol=0.3)  # average degree ~10
