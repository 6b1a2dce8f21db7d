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


def test_node_features_are_the_regression_target_without_node_types_and_propagation_is_refused():
    batch = _batch()
    adapter = GraphAdapter(dim=16, node_features=ATOM_FEATURES, edge_features=BOND_FEATURES, heads=2)
    targets = token_targets(adapter, batch)
    assert targets.kind == "regression" and targets.size == ATOM_FEATURES
    torch.testing.assert_close(targets.values[batch["mask"]], batch["x"][batch["mask"]], rtol=0, atol=0)
    with pytest.raises(ValueError, match="propagate=2.*hidden node's own features.*propagate=0"):
        token_targets(GraphAdapter(dim=16, node_features=ATOM_FEATURES, heads=2, propagate=2), batch)
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
