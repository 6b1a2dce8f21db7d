"""Masked-atom / masked-node pretraining on graphs (:class:`GraphAdapter`'s ``token_targets`` /
``mask_tokens`` hooks, :class:`SmilesDataModule`): targets from the clean batch, padding never hidden,
a hidden atom loses its features and keeps its bonds and its positional encoding."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from seqattn.modalities.graph.adapter import GraphAdapter
from seqattn.modalities.graph.molecule_data import NODE_TYPES, SmilesDataModule, collate_unlabelled_molecules
from seqattn.modalities.graph.molecules import ATOM_FEATURES, BOND_FEATURES, ELEMENTS, featurize_records
from seqattn.model.protocols import mask_tokens, token_target_layout, token_targets
from seqattn.objectives.masked import MaskedModelling

pytest.importorskip("rdkit")

SMILES = ["CCO", "c1ccccc1N", "OC(=O)CCl", "CS"]
ELEMENT_IDS = [[0, 0, 2], [0, 0, 0, 0, 0, 0, 1], [2, 0, 2, 0, 5], [0, 3]]  # C N O S F Cl ...


def _batch(positional: str = "none") -> dict:
    records = [{"smiles": s, "targets": [], "id": s, "where": f"test:{i}"} for i, s in enumerate(SMILES)]
    graphs, _ = featurize_records(records, positional=positional, pe_dim=4)
    return collate_unlabelled_molecules(graphs)


def _adapter(positional: str = "none", **kwargs) -> GraphAdapter:
    torch.manual_seed(0)
    return GraphAdapter(dim=16, node_features=ATOM_FEATURES, edge_features=BOND_FEATURES, heads=2,
                        positional=positional, pe_dim=4, node_types=NODE_TYPES, **kwargs)


def _objective(positional: str = "none", ratio: float = 0.3) -> MaskedModelling:
    torch.manual_seed(0)
    net = {"_target_": "seqattn.model.network.SequenceModel",
           "adapter": {"_target_": "seqattn.modalities.graph.adapter.GraphAdapter", "dim": 16,
                       "node_features": ATOM_FEATURES, "edge_features": BOND_FEATURES, "heads": 2,
                       "positional": positional, "pe_dim": 4, "node_types": NODE_TYPES},
           "encoder": {"_target_": "seqattn.core.Encoder", "dim": 16, "depth": 2, "heads": 2, "dropout": 0.0,
                       "positional": "none"},
           "head": {"_target_": "seqattn.model.heads.TokenHead", "dim": 16}}
    return MaskedModelling(net=net, mask_ratio=ratio, optimizer={"_target_": "torch.optim.Adam", "lr": 3e-3})


def test_atom_targets_are_the_elements_of_the_clean_batch_and_padding_is_never_maskable():
    batch = _batch()
    adapter = _adapter(feature_dropout=0.9).train()  # dropout changes the input, never the target
    assert ELEMENTS[:4] == ("C", "N", "O", "S") and ELEMENTS[5] == "Cl"
    targets = token_targets(adapter, batch)
    assert targets.kind == "class" and targets.size == NODE_TYPES == len(ELEMENTS) + 1
    assert token_target_layout(adapter) == targets.layout
    for row, ids in enumerate(ELEMENT_IDS):
        assert targets.values[row, : len(ids)].tolist() == ids
    torch.testing.assert_close(targets.maskable, batch["mask"], rtol=0, atol=0)  # real atoms only
    assert not bool(targets.maskable[0, 3:].any())  # CCO's padding rows

    objective = _objective(ratio=1.0).train()  # every real atom hidden: none of padding
    out = objective(batch)
    assert torch.equal(out["hide"], batch["mask"])
    assert out["targets"].values[0, :3].tolist() == [0, 0, 2]


def test_a_hidden_atom_loses_its_features_but_keeps_its_bonds_and_position():
    batch = _batch("random_walk")
    objective = _objective("random_walk").eval()
    hide = torch.zeros_like(batch["mask"])
    hide[1, 6] = True  # aniline's nitrogen
    out = objective(batch, hide=hide)

    other = dict(batch, x=batch["x"].clone())  # the hidden atom's features changed: N -> O, and its degree
    other["x"][1, 6] = 0.0
    other["x"][1, 6, 2] = other["x"][1, 6, len(ELEMENTS) + 1 + 3] = 1.0
    torch.testing.assert_close(objective(other, hide=hide)["logits"], out["logits"])  # nothing of them reaches any atom

    moved = dict(batch, pe=batch["pe"].clone())  # its positional encoding changed: its own prediction changes
    moved["pe"][1, 6] += 1.0
    assert not torch.allclose(objective(moved, hide=hide)["logits"][1, 6], out["logits"][1, 6])

    adapter = objective.net.adapter
    tokens = adapter(**{k: batch[k] for k in adapter.inputs})
    masked = mask_tokens(adapter, tokens, hide, objective.mask_vector)
    position = adapter.pe_proj(batch["pe"].float())  # [B, N, D]
    torch.testing.assert_close(masked.x[1, 6], objective.mask_vector + position[1, 6])
    torch.testing.assert_close(masked.x[~hide], tokens.x[~hide], rtol=0, atol=0)
    assert torch.equal(masked.edge_index, tokens.edge_index) and torch.equal(masked.edge_bias, tokens.edge_bias)


def test_node_features_are_the_regression_target_without_node_types_or_which_are_present():
    batch = _batch()
    adapter = GraphAdapter(dim=16, node_features=ATOM_FEATURES, edge_features=BOND_FEATURES, heads=2)
    targets = token_targets(adapter, batch)
    assert targets.kind == "regression" and targets.size == ATOM_FEATURES
    torch.testing.assert_close(targets.values[batch["mask"]], batch["x"][batch["mask"]], rtol=0, atol=0)
    scaled = dict(batch, x=batch["x"] * 0.25)  # e.g. row-normalised bag-of-words: presence is still presence
    present = token_targets(GraphAdapter(dim=16, node_features=ATOM_FEATURES, heads=2, node_target="present"), scaled)
    assert present.kind == "binary" and present.size == ATOM_FEATURES
    assert torch.equal(present.values[batch["mask"]], (batch["x"][batch["mask"]] != 0).float())
    with pytest.raises(ValueError, match="node_target='words' is not one of"):
        GraphAdapter(dim=16, node_features=3, node_target="words")
    broken = dict(batch, x=batch["x"].clone())
    broken["x"][0, 0, 1] = 1.0  # two elements at once
    with pytest.raises(ValueError, match="first 18 columns must be one-hot.*1 node"):
        token_targets(_adapter(), broken)
    with pytest.raises(ValueError, match="node_types must be an int in \\[0, node_features=3\\]"):
        GraphAdapter(dim=16, node_features=3, node_types=5)


def test_unlabelled_smiles_come_from_a_smiles_list_or_a_csv_without_targets(compose_cfg, tmp_path):
    (tmp_path / "m.smi").write_text("# my molecules\n" + "".join(f"{'C' * (i + 1)}O mol{i}\n" for i in range(20)))
    (tmp_path / "m.csv").write_text("name,smiles,other\n" + "".join(f"m{i},{'C' * (i + 1)}N,x\n" for i in range(20)))
    for path in (tmp_path / "m.smi", tmp_path / "m.csv"):
        cfg = compose_cfg(["task=molecule_pretrain", f"data.path={path}", "data.val_fraction=0.2",
                           "data.test_fraction=0.2", f"data.data_dir={tmp_path / 'cache'}"])
        data = instantiate(cfg.data)
        assert isinstance(data, SmilesDataModule) and data.source == "csv"
        data.setup("fit")
        assert sum(data.split_sizes().values()) == 20
        batch = next(iter(data.train_dataloader()))
        assert "targets" not in batch and batch["x"].shape[-1] == ATOM_FEATURES
        spec = data.spec()
        assert spec.sizes["node_types"] == NODE_TYPES == spec.num_outputs and spec.labels is None


# --- one graph, feature targets, propagate > 0 (task=social_pretrain) ---------------------------------------------
F_WORDS = 12


def _word_graph(n: int = 9, seed: int = 0) -> dict:
    """One graph of ``n`` nodes (a ring plus chords) with sparse 0/1 features, as a full-graph batch."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(1, n, F_WORDS, generator=g) < 0.3).float()
    x[0, :, 0] = 1.0  # no empty row
    src = torch.arange(n)
    edges = torch.cat([torch.stack([src, (src + 1) % n]), torch.stack([src[::3], (src[::3] + 4) % n])], 1)
    edges = torch.cat([edges, edges.flip(0)], 1)
    return {"x": x, "mask": torch.ones(1, n, dtype=torch.bool), "edge_index": edges}


def _word_objective(propagate: int = 2, ratio: float = 0.4, **adapter) -> MaskedModelling:
    torch.manual_seed(0)
    adapter = {"node_features": F_WORDS, "node_target": "present", **adapter}
    net = {"_target_": "seqattn.model.network.SequenceModel",
           "adapter": {"_target_": "seqattn.modalities.graph.adapter.GraphAdapter", "dim": 16,
                       "heads": 2, "propagate": propagate, **adapter},
           "encoder": {"_target_": "seqattn.core.Encoder", "dim": 16, "depth": 2, "heads": 2, "dropout": 0.0,
                       "positional": "none", "output_propagation": 3},
           "head": {"_target_": "seqattn.model.heads.TokenHead", "dim": 16}}
    return MaskedModelling(net=net, mask_ratio=ratio, optimizer={"_target_": "torch.optim.Adam", "lr": 1e-2})


def test_with_graph_averages_a_hidden_nodes_features_reach_no_node_and_its_token_is_the_mask_vector():
    """propagate=2: every node reads its neighbours' 1- and 2-step feature averages, which hold a hidden node's
    features; they are averaged without it, so nothing of them reaches any prediction."""
    batch = _word_graph()
    objective = _word_objective().eval()
    hide = torch.zeros_like(batch["mask"])
    hide[0, [2, 6]] = True
    out = objective(batch, hide=hide)
    other = dict(batch, x=batch["x"].clone())
    other["x"][0, [2, 6]] = 1.0 - other["x"][0, [2, 6]]  # the hidden nodes' words changed
    torch.testing.assert_close(objective(other, hide=hide)["logits"], out["logits"])
    shown = dict(batch, x=batch["x"].clone())
    shown["x"][0, 3] = 1.0 - shown["x"][0, 3]  # an unhidden neighbour's words do reach its neighbours (control)
    assert not torch.allclose(objective(shown, hide=hide)["logits"][0, 2], out["logits"][0, 2])

    adapter = objective.net.adapter
    tokens = adapter(**{k: batch[k] for k in adapter.inputs})
    masked = mask_tokens(adapter, tokens, hide, objective.mask_vector)
    assert torch.equal(masked.x[hide], objective.mask_vector.expand(2, 16))  # the encoder sees the mask vector
    assert not torch.allclose(masked.x[0, 1], tokens.x[0, 1])  # node 1's averages no longer hold node 2
    cleared = adapter(**{**{k: batch[k] for k in adapter.inputs}, "x": batch["x"].masked_fill(hide[..., None], 0)})
    torch.testing.assert_close(masked.x[~hide], cleared.x[~hide], rtol=0, atol=0)
    assert torch.equal(masked.edge_index, tokens.edge_index)  # its edges stay


def test_word_targets_come_from_the_clean_batch_and_only_the_batchs_seed_nodes_are_hidden():
    batch = _word_graph()
    clean = batch["x"].clone()
    seeds = torch.zeros_like(batch["mask"])
    seeds[0, 1:6] = True  # e.g. the training share of the nodes
    objective = _word_objective(ratio=1.0).train()
    out = objective(dict(batch, seed_mask=seeds))
    assert torch.equal(out["hide"], seeds)  # every seed node, no other
    assert out["targets"].kind == "binary" and torch.equal(out["targets"].maskable, seeds)
    assert torch.equal(out["targets"].values[seeds], (clean[seeds] != 0).float())  # the hidden nodes' own words
    assert torch.equal(batch["x"], clean)  # the batch is not edited
    logits = out["logits"].detach().requires_grad_(True)
    objective.loss({**out, "logits": logits}, batch).backward()
    assert logits.grad[~seeds].abs().sum() == 0 and logits.grad[seeds].abs().sum(-1).gt(0).all()
    with pytest.raises(ValueError, match="seed_mask must be \\[B, N\\] = \\(1, 9\\) bool"):
        objective(dict(batch, seed_mask=seeds.long()))


def test_hidden_words_loss_falls_on_a_graph_whose_words_follow_their_neighbours():
    """Two communities with their own words: a hidden node's words are predictable from its neighbours'."""
    g = torch.Generator().manual_seed(0)
    n = 40
    group = torch.arange(n) % 2
    words = torch.zeros(n, F_WORDS)
    for i in range(n):
        pool = torch.arange(6) + 6 * int(group[i])
        words[i, pool[torch.rand(6, generator=g) < 0.6]] = 1.0
    src, dst = torch.randint(0, n, (2, 400), generator=g)
    keep = (group[src] == group[dst]) & (src != dst)
    edges = torch.stack([src[keep], dst[keep]])
    edges = torch.unique(torch.cat([edges, edges.flip(0)], 1), dim=1)
    batch = {"x": words[None], "mask": torch.ones(1, n, dtype=torch.bool), "edge_index": edges}
    objective = _word_objective(ratio=0.3)
    optimizer = torch.optim.Adam(objective.parameters(), lr=1e-2)
    objective.eval()
    with torch.no_grad():
        before = float(objective.loss(objective(batch), batch))
    objective.train()
    for _ in range(60):
        loss = objective.loss(objective(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    objective.eval()
    with torch.no_grad():
        after = float(objective.loss(objective(batch), batch))
    assert after < 0.6 * before, (before, after)


def test_an_unlabelled_graph_scores_disjoint_node_shares_and_never_padding(tmp_path, compose_cfg):
    """task=social_pretrain's data: a node CSV without a label column; every stage sees every node and edge and
    scores its own random share of the nodes (seed_mask); sampled ego subgraphs score their seed, never padding."""
    from seqattn.labels import IGNORE_INDEX
    from seqattn.modalities.graph.social_pretrain import UnlabelledGraphDataModule

    n = 50
    nodes, edges = tmp_path / "nodes.csv", tmp_path / "edges.csv"
    nodes.write_text("id,a,b\n" + "".join(f"n{i},{i % 3},{(i * 7) % 5}\n" for i in range(n)))
    edges.write_text("source,target\n" + "".join(f"n{i},n{(i + 1) % n}\nn{i},n{(i * 3) % n}\n" for i in range(n)))
    cfg = compose_cfg(["task=social_pretrain", f"data.nodes={nodes}", f"data.edges={edges}"])
    data = instantiate(cfg.data)
    assert isinstance(data, UnlabelledGraphDataModule) and data.source == "csv"
    data.setup("fit")
    assert data.split_sizes() == {"train": 40, "val": 5, "test": 5}
    shares = {}
    for stage, loader in (("train", data.train_dataloader()), ("val", data.val_dataloader()),
                          ("test", data.test_dataloader())):
        (batch,) = list(loader)
        assert batch["x"].shape == (1, n, 2) and batch["edge_index"].shape[1] > 0  # the whole graph
        assert bool((batch["labels"] == IGNORE_INDEX).all())
        shares[stage] = set(torch.nonzero(batch["seed_mask"][0]).flatten().tolist())
    assert sum(len(s) for s in shares.values()) == n and len(set.union(*shares.values())) == n  # disjoint, all
    assert data.spec().sizes["node_features"] == 2 and data.spec().labels is None
    assert instantiate(compose_cfg(["task=social_pretrain"]).data).source == "sbm"  # the built-in default

    sampled = instantiate(compose_cfg(["task=social_pretrain", f"data.nodes={nodes}", f"data.edges={edges}",
                                       "data.mode=sampled", "data.batch_size=8", "data.num_neighbors=[3,2]"]).data)
    sampled.setup("fit")
    batch = next(iter(sampled.val_dataloader()))
    assert not bool(batch["mask"].all())  # padded ego subgraphs
    objective = _word_objective(propagate=1, ratio=1.0, node_features=2, node_target="features").eval()
    out = objective(batch)
    assert torch.equal(out["hide"], batch["seed_mask"] & batch["mask"]) and not bool((out["hide"] & ~batch["mask"]).any())
    assert int(out["hide"].sum()) == batch["mask"].shape[0]  # one seed per subgraph


def test_split_evaluation_hides_what_one_process_hides_and_the_shares_add_up_to_its_loss(tmp_path, compose_cfg,
                                                                                          monkeypatch):
    """Under DDP each process gets the whole graph and scores its share of the test nodes (score_mask): the
    nodes hidden, hence every process's input, are the one-process ones, and the shares' losses weighted by
    their node counts give the one-process loss (CI caught a DDP test loss that differed when each process
    hid only its own share)."""
    from seqattn.modalities.graph import social

    n = 60
    nodes, edges = tmp_path / "nodes.csv", tmp_path / "edges.csv"
    nodes.write_text("id,a,b\n" + "".join(f"n{i},{i % 3},{(i * 7) % 5}\n" for i in range(n)))
    edges.write_text("source,target\n" + "".join(f"n{i},n{(i + 1) % n}\nn{i},n{(i * 3) % n}\n" for i in range(n)))
    data = instantiate(compose_cfg(["task=social_pretrain", f"data.nodes={nodes}", f"data.edges={edges}",
                                    "data.test_fraction=0.3"]).data)
    data.setup("fit")
    objective = _word_objective(propagate=1, ratio=0.5, node_features=2, node_target="features").eval()
    (whole,) = list(data.test_dataloader())
    monkeypatch.setattr(social, "_world_size", lambda: 2)
    parts = list(data.test_dataloader())
    assert len(parts) == 2
    with torch.no_grad():
        one = objective(whole)
        outs = [objective(part) for part in parts]
    for part, out in zip(parts, outs):
        assert torch.equal(out["hide"], one["hide"])  # the same hidden nodes in every process
        assert torch.equal(out["scored"], one["hide"] & part["score_mask"])
    assert torch.equal(outs[0]["scored"] | outs[1]["scored"], one["hide"])  # disjoint shares, all of them
    weights = [objective.loss_weight(out, part) for out, part in zip(outs, parts)]
    assert min(weights) > 0 and sum(weights) == objective.loss_weight(one, whole)
    shared = sum(w * float(objective.loss(out, part)) for w, out, part in zip(weights, outs, parts)) / sum(weights)
    assert shared == pytest.approx(float(objective.loss(one, whole)), rel=1e-6)
    with pytest.raises(ValueError, match="score_mask must be \\[B, L\\] = \\(1, 60\\) bool"):
        objective(dict(whole, score_mask=torch.ones(1, 5, dtype=torch.bool)))
