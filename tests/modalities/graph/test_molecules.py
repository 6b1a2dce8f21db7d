"""Molecule data: featurisation, custom SMILES CSV (bad SMILES, missing targets), splits, cache, MoleculeNet offline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from seqattn.datakit.splits import split_indices
from seqattn.modalities.graph import molecule_data as data_mod
from seqattn.modalities.graph import molecules as mol_mod
from seqattn.modalities.graph.molecule_data import MoleculeDataModule
from seqattn.modalities.graph.molecules import (
    ATOM_FEATURES,
    BOND_FEATURES,
    DEGREES,
    ELEMENTS,
    read_smiles_table,
    smiles_to_graph,
)
from seqattn.modalities.graph.positional import graph_positional_encoding

# offsets of the one-hot groups in the atom vector
E0 = 0
D0 = E0 + len(ELEMENTS) + 1
C0 = D0 + len(DEGREES) + 1
H0 = C0 + len(mol_mod.CHARGES) + 1
Y0 = H0 + len(mol_mod.HYDROGENS) + 1  # hybridisation
S0 = Y0 + len(mol_mod.HYBRIDIZATIONS) + 1  # CIP chirality
AROM, RING = ATOM_FEATURES - 2, ATOM_FEATURES - 1


def test_atom_and_bond_features():
    g = smiles_to_graph("CC(=O)[O-]")  # acetate
    x = g["x"]
    assert x.shape == (4, ATOM_FEATURES) and torch.equal(x.sum(1), torch.full((4,), 6.0))  # 6 one-hots, no flags
    assert S0 + len(mol_mod.CHIRALITY) + 1 == AROM
    assert x[0, E0 + ELEMENTS.index("C")] == 1 and x[2, E0 + ELEMENTS.index("O")] == 1
    assert x[1, D0 + 3] == 1  # the carboxyl carbon has 3 neighbours
    assert x[0, H0 + 3] == 1  # CH3
    assert x[3, C0 + mol_mod.CHARGES.index(-1)] == 1  # O-
    assert x[0, Y0 + mol_mod.HYBRIDIZATIONS.index("SP3")] == 1 and x[1, Y0 + mol_mod.HYBRIDIZATIONS.index("SP2")] == 1
    assert x[:, S0 + len(mol_mod.CHIRALITY)].all()  # no stereocentre: "other"
    alanine = smiles_to_graph("C[C@H](N)C(=O)O")["x"], smiles_to_graph("C[C@@H](N)C(=O)O")["x"]  # L (S), D (R)
    assert alanine[0][1, S0 + mol_mod.CHIRALITY.index("S")] == 1 and alanine[1][1, S0 + mol_mod.CHIRALITY.index("R")] == 1
    assert g["edge_index"].shape == (2, 6) and g["edge_attr"].shape == (6, BOND_FEATURES)
    double = (g["edge_index"][0] == 1) & (g["edge_index"][1] == 2)
    assert g["edge_attr"][double].tolist() == [[0, 1, 0, 0, 1, 0]]  # double, conjugated, not in a ring
    # both directions of every bond, same features
    rev = {(int(s), int(t)): g["edge_attr"][k].tolist() for k, (s, t) in enumerate(g["edge_index"].t())}
    assert all(rev[(t, s)] == feat for (s, t), feat in rev.items())

    benzene = smiles_to_graph("c1ccccc1")
    assert benzene["x"][:, AROM].all() and benzene["x"][:, RING].all()
    assert (benzene["edge_attr"][:, 3] == 1).all() and (benzene["edge_attr"][:, 5] == 1).all()  # aromatic, ring
    assert smiles_to_graph("[Zr]")["x"][0, E0 + len(ELEMENTS)] == 1  # an element outside the list -> "other"
    assert smiles_to_graph("C1CC(") is None and smiles_to_graph("") is None


def _write_csv(tmp_path: Path) -> Path:
    path = tmp_path / "mols.csv"
    path.write_text(
        "name,smiles,logS,active\n"
        "ethanol,CCO,0.5,1\n"
        "benzene,c1ccccc1,-1.6,0\n"
        "broken,C1CC(,1.0,1\n"  # line 4: not a molecule
        "acid,CC(=O)O,,0\n"  # line 5: logS missing
        "phenol,Oc1ccccc1,-0.04,\n"  # line 6: active missing
        + "".join(f"m{i},{'C' * (i % 7 + 1)}O,{i / 10},{i % 2}\n" for i in range(25))
    )
    return path


def _dm(path, tmp_path, **kw) -> MoleculeDataModule:
    kw.setdefault("cache", False)
    return MoleculeDataModule(source="csv", path=str(path), target_columns=["logS", "active"],
                              target_kinds=["regression", "classification"], id_column="name",
                              data_dir=str(tmp_path / "cache"), batch_size=8, **kw)


def test_target_statistics_are_the_training_rows_mean_and_sample_std_written_out(tmp_path):
    """Standardisation uses the train split's mean and (n - 1) std, numbers worked out by hand here; val /
    test rows (far-off values) and missing labels do not enter; they reach the spec and the objective."""
    from seqattn.objectives import PropertyPrediction

    rows = [("C", 1.0, "train"), ("CC", 2.0, "train"), ("CCC", 4.0, "train"), ("CCCC", 9.0, "train"),
            ("CO", None, "train"), ("CCO", 100.0, "val"), ("CCCO", -50.0, "test")]
    path = tmp_path / "m.csv"
    path.write_text("smiles,y,split\n" + "".join(f"{m},{'' if y is None else y},{sp}\n" for m, y, sp in rows))
    dm = MoleculeDataModule(source="csv", path=str(path), target_columns=["y"], split_column="split",
                            data_dir=str(tmp_path / "cache"), cache=False, batch_size=4)
    dm.setup()
    mean, std = 4.0, math.sqrt((9 + 4 + 0 + 25) / 3)  # (1, 2, 4, 9): mean 4, squared deviations 9, 4, 0, 25
    assert dm.target_mean == [pytest.approx(mean)] and dm.target_std == [pytest.approx(std)]
    spec = dm.spec()
    assert list(spec.target_mean) == dm.target_mean and list(spec.target_std) == dm.target_std
    from tests.objectives.test_property import _net

    model = PropertyPrediction(net=_net(1), spec=spec)
    assert model.target_mean.tolist() == [pytest.approx(mean)] and model.target_std.tolist() == [pytest.approx(std)]


def test_custom_csv_bad_smiles_stops_with_file_and_line_by_default(tmp_path):
    path = _write_csv(tmp_path)
    with pytest.raises(ValueError, match=rf"1 SMILES could not be parsed[\s\S]*mols.csv:4: 'C1CC\('[\s\S]*skip_invalid"):
        _dm(path, tmp_path).setup()


def test_custom_csv_skips_and_counts_when_allowed_and_masks_missing_targets(tmp_path):
    path = _write_csv(tmp_path)
    dm = _dm(path, tmp_path, skip_invalid=True, val_fraction=0.0, test_fraction=0.0)
    dm.setup()
    assert len(dm.invalid) == 1 and dm.invalid[0].endswith("mols.csv:4: 'C1CC('")
    graphs = {g["ids"]: g for g in dm.datasets["train"].graphs}
    assert len(graphs) == 29 and "broken" not in graphs
    assert math.isnan(graphs["acid"]["targets"][0]) and graphs["acid"]["targets"][1] == 0
    assert math.isnan(graphs["phenol"]["targets"][1])
    assert dm.num_outputs == 2 and dm.label_names == ["logS", "active"]
    # training statistics ignore the missing labels; classification columns are not standardised
    ys = torch.stack([g["targets"] for g in graphs.values()])[:, 0]
    assert dm.target_mean[0] == pytest.approx(float(ys[~ys.isnan()].mean()), rel=1e-5)
    assert dm.target_mean[1] == 0.0 and dm.target_std[1] == 1.0
    spec = dm.spec()
    assert list(spec.target_kinds) == ["regression", "classification"]
    assert spec.sizes == {"node_features": ATOM_FEATURES, "edge_features": BOND_FEATURES}

    # the missing labels are masked out of the objective's loss (finite, and equal to the present-only loss)
    from seqattn.objectives import PropertyPrediction

    net = {"_target_": "seqattn.model.network.SequenceModel",
           "adapter": {"_target_": "seqattn.modalities.graph.adapter.GraphAdapter", "dim": 16, "heads": 2},
           "encoder": {"_target_": "seqattn.core.Encoder", "dim": 16, "depth": 1, "heads": 2, "positional": "none"},
           "head": {"_target_": "seqattn.model.heads.PooledHead", "dim": 16}}
    model = PropertyPrediction(net=net, spec=spec)  # sizes, targets and their statistics from the data
    assert model.net.adapter.edge_features == BOND_FEATURES and model.kinds == ["regression", "classification"]
    batch = next(iter(dm.train_dataloader()))
    assert batch["targets"].shape == (8, 2)
    full = next(b for b in dm.train_dataloader() if b["targets"].isnan().any())
    out = model(full)
    loss = model.loss(out, full)
    assert torch.isfinite(loss)
    present = ~full["targets"].isnan()
    assert present.sum() < present.numel()


def test_csv_errors_name_file_line_and_columns(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("smiles,y\nCCO,1.0\nCCN,abc\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: target 'y' = 'abc' is not a number"):
        read_smiles_table(path, "smiles", ["y"])
    with pytest.raises(ValueError, match=r"missing \['logP'\] \(header: \['smiles', 'y'\]\)"):
        read_smiles_table(path, "smiles", ["logP"])
    path.write_text("smiles,y\nCCO,2\n")
    with pytest.raises(ValueError, match="bad.csv:2: classification target 'y' must be 0 or 1"):
        read_smiles_table(path, "smiles", ["y"], ["classification"])
    with pytest.raises(ValueError, match="needs target_columns"):
        MoleculeDataModule(source="csv", path=str(path))
    with pytest.raises(ValueError, match="split='stratified'"):
        MoleculeDataModule(split="stratified")


def test_builtin_nci_tpsa_reads_the_shipped_file_and_reports_its_invalid_smiles(tmp_path):
    dm = MoleculeDataModule(data_dir=str(tmp_path), limit=300, positional="random_walk", pe_dim=4)
    dm.setup()
    sizes = {k: len(v) for k, v in dm.datasets.items()}
    assert sum(sizes.values()) == 300 and sizes["test"] == 30 and sizes["val"] == 30
    g = dm.datasets["train"][0]
    torch.testing.assert_close(g["pe"], graph_positional_encoding("random_walk", g["edge_index"], g["x"].shape[0], 4))
    assert dm.label_names == ["tpsa"] and 0 < dm.target_mean[0] < 200
    # the full file: 4,999 molecules, 8 of which RDKit rejects; for the built-in file they are skipped and counted
    records = read_smiles_table(mol_mod.nci_tpsa_path(), "smiles", ["tpsa"], header=False, names=["smiles", "tpsa"])
    assert len(records) == 4999
    with pytest.raises(ValueError, match="8 SMILES could not be parsed"):
        mol_mod.featurize_records(records[2090:4800], skip_invalid=False)


def test_graphs_and_encodings_are_cached_once(tmp_path, monkeypatch):
    path = _write_csv(tmp_path)
    first = _dm(path, tmp_path, skip_invalid=True, cache=True, positional="laplacian", pe_dim=3)
    first.setup()
    files = list((tmp_path / "cache" / "molecules").glob("*.pt"))
    assert len(files) == 1

    def boom(*args, **kwargs):
        raise AssertionError("featurised again instead of reading the cache")

    monkeypatch.setattr(data_mod, "featurize_records", boom)
    second = _dm(path, tmp_path, skip_invalid=True, cache=True, positional="laplacian", pe_dim=3)
    second.setup()
    assert second.invalid == first.invalid
    a, b = first.datasets["train"][3], second.datasets["train"][3]
    assert a["ids"] == b["ids"] and torch.equal(a["pe"], b["pe"]) and torch.equal(a["edge_index"], b["edge_index"])


def test_random_and_scaffold_splits():
    parts = split_indices(100, 0.1, 0.2, seed=3)
    assert sorted(parts["train"] + parts["val"] + parts["test"]) == list(range(100))
    assert (len(parts["val"]), len(parts["test"])) == (10, 20) and parts == split_indices(100, 0.1, 0.2, seed=3)
    scaffolds = ["a"] * 50 + ["b"] * 20 + ["c"] * 10 + [f"s{i}" for i in range(20)]
    parts = split_indices(len(scaffolds), 0.1, 0.1, seed=0, groups=scaffolds, group_order="largest_first")
    where = {i: name for name, idx in parts.items() for i in idx}
    for s in set(scaffolds):
        assert len({where[i] for i, t in enumerate(scaffolds) if t == s}) == 1  # a scaffold stays in one split
    assert len(parts["train"]) == 80 and len(parts["val"]) == 10 and len(parts["test"]) == 10


def test_scaffold_split_of_real_molecules(tmp_path):
    path = tmp_path / "s.csv"
    smiles = ["c1ccccc1C", "c1ccccc1CC", "c1ccccc1O", "C1CCCCC1N", "C1CCCCC1O", "c1ccncc1C", "CCO", "CCN",
              "c1ccc2ccccc2c1", "C1CC1C", "O=C1CCCN1", "c1ccoc1"]
    path.write_text("smiles,y\n" + "".join(f"{s},{i}\n" for i, s in enumerate(smiles)))
    dm = MoleculeDataModule(source="csv", path=str(path), target_columns=["y"], split="scaffold", cache=False,
                            val_fraction=0.2, test_fraction=0.2, data_dir=str(tmp_path))
    dm.setup()
    split_of = {g["smiles"]: name for name, ds in dm.datasets.items() for g in ds.graphs}
    assert len(split_of) == len(smiles)
    benzenes = {split_of[s] for s in smiles[:3]}
    assert len(benzenes) == 1  # the three benzene derivatives share the scaffold c1ccccc1


def test_moleculenet_offline_error_names_the_file_and_a_placed_file_works(tmp_path, monkeypatch):
    from torch_geometric.datasets import MoleculeNet

    def offline(self):
        raise OSError("network is unreachable")

    monkeypatch.setattr(MoleculeNet, "download", offline)
    root = tmp_path / "data"
    raw = root / "moleculenet" / "esol" / "raw" / "delaney-processed.csv"
    dm = MoleculeDataModule(source="moleculenet", moleculenet="esol", data_dir=str(root), cache=False)
    with pytest.raises(ValueError, match=r"could not download MoleculeNet 'esol' from https://\S+delaney-processed.csv"
                                         rf"[\s\S]*Place the file there by hand: {raw}"):
        dm.prepare_data()
    # placed by hand (same columns as the real file) -> it is read, targets from PyG's table, sha256 recorded
    raw.parent.mkdir(parents=True, exist_ok=True)
    header = "Compound ID,ESOL predicted log solubility,Minimum Degree,Molecular Weight,Number of H-Bond Donors," \
             "Number of Rings,Number of Rotatable Bonds,Polar Surface Area,measured log solubility,smiles\n"
    rows = "".join(f"m{i},0,1,46,1,0,0,20,{-i / 10},{'C' * (i % 5 + 1)}O\n" for i in range(20))
    raw.write_text(header + rows)
    dm.prepare_data()
    dm.setup()
    assert dm.label_names == ["measured log solubility"] and dm.target_kinds == ["regression"]
    assert sum(len(d) for d in dm.datasets.values()) == 20
    assert raw.with_name(raw.name + ".sha256").is_file()
    raw.write_text(header + rows[: len(rows) // 2])
    with pytest.raises(ValueError, match="does not match the expected"):
        MoleculeDataModule(source="moleculenet", moleculenet="esol", data_dir=str(root)).prepare_data()


def test_predict_loader_needs_no_setup_and_reads_csv_and_smi(tmp_path):
    csv_path = tmp_path / "in.csv"
    csv_path.write_text("smiles,other\nCCO,x\nc1ccccc1,y\n")
    smi = tmp_path / "in.smi"
    smi.write_text("CCO ethanol\nc1ccccc1\n")
    dm = MoleculeDataModule(positional="random_walk", pe_dim=4, batch_size=8)
    batch = next(iter(dm.predict_loader(csv_path)))
    assert batch["x"].shape == (2, 6, ATOM_FEATURES) and batch["pe"].shape == (2, 6, 4)
    assert "targets" not in batch and batch["ids"] == ["CCO", "c1ccccc1"]
    assert next(iter(dm.predict_loader(smi)))["ids"] == ["ethanol", "c1ccccc1"]
    bad = tmp_path / "bad.smi"
    bad.write_text("CCO\nC1CC(\n")
    # predict every readable input, list the others with the reason (seqattn.predict's on_error=skip) ...
    assert next(iter(dm.predict_loader(bad)))["ids"] == ["CCO"]
    assert len(dm.predict_errors) == 1 and dm.predict_errors[0][0].endswith("bad.smi:2")
    assert "cannot parse the SMILES 'C1CC('" in dm.predict_errors[0][1]
    dm.on_error = "stop"  # ... or stop at the first one (on_error=stop)
    with pytest.raises(ValueError, match=r"bad.smi:2: 'C1CC\('"):
        dm.predict_loader(bad)


def test_bucketed_training_batches_hold_every_molecule_once_and_pad_less(tmp_path):
    """``bucket_by_length``: training batches of molecules of similar atom counts (each molecule once an
    epoch), so the batches pad fewer atoms than shuffled ones; validation is not bucketed."""
    padded = {}
    for bucket in (False, True):
        dm = MoleculeDataModule(data_dir=str(tmp_path), limit=400, batch_size=16, bucket_by_length=bucket)
        dm.setup()
        train = dm.datasets["train"]
        ids, pads = [], 0
        for batch in dm.train_dataloader():
            ids += list(batch["smiles"])
            pads += int((~batch["mask"]).sum())
        assert sorted(ids) == sorted(g["smiles"] for g in train.graphs)
        padded[bucket] = pads
        assert dm.item_length(train, 0) == train[0]["x"].shape[0]
    assert padded[True] < 0.5 * padded[False]


def test_train_fraction_keeps_a_seeded_share_of_the_training_molecules_only(tmp_path):
    """``data.train_fraction`` (few-label fine-tunes): the val and test molecules are those of the full run,
    the training molecules a seeded sample of the full run's (file order), the target statistics theirs."""
    path = tmp_path / "m.csv"
    path.write_text("smiles,y\n" + "".join(f"{'C' * (i % 9 + 1)}{'O' * (i // 9)},{i}\n" for i in range(60)))

    def setup(**kw):
        dm = MoleculeDataModule(source="csv", path=str(path), target_columns=["y"], data_dir=str(tmp_path / "cache"),
                                batch_size=4, **kw)
        dm.setup()
        return dm, {name: [g["smiles"] for g in dm.datasets[name].graphs] for name in ("train", "val", "test")}

    full, all_parts = setup(seed=1)
    few, parts = setup(seed=1, train_fraction=0.25)
    assert (parts["val"], parts["test"]) == (all_parts["val"], all_parts["test"])  # the evaluated split: the same
    assert len(all_parts["train"]) == 48 and len(parts["train"]) == 12
    assert set(parts["train"]) < set(all_parts["train"])
    assert parts["train"] == [s for s in all_parts["train"] if s in set(parts["train"])]  # file order kept
    values = [float(g["targets"][0]) for g in few.datasets["train"].graphs]
    assert few.target_mean == [pytest.approx(sum(values) / len(values))] != full.target_mean
    assert setup(seed=1, train_fraction=0.25)[1]["train"] == parts["train"]  # deterministic by seed
    assert setup(seed=2, train_fraction=0.25)[1]["train"] != parts["train"]
    with pytest.raises(ValueError, match=r"train_fraction=1.5 must be a number in \(0, 1\]"):
        MoleculeDataModule(source="csv", path=str(path), target_columns=["y"], train_fraction=1.5)


def test_bond_graph_tokens_are_bonds_joined_at_shared_atoms():
    """tokens=bonds (the line graph): isopropanol's three bonds all meet at the central carbon, so every
    ordered pair of them is an edge whose features are that carbon's; a bond token is the sum of its two
    atoms' features and its bond features; methane's lone atom and a salt's two ions are tokens of their own."""
    g = smiles_to_graph("CC(C)O")  # atoms 0 C, 1 C (central), 2 C, 3 O; bonds 0-1, 1-2, 1-3
    b = mol_mod.bond_graph(g)
    x = g["x"]
    assert b["x"].shape == (3, ATOM_FEATURES + BOND_FEATURES)
    for token, (i, j) in enumerate([(0, 1), (1, 2), (1, 3)]):
        assert torch.equal(b["x"][token, :ATOM_FEATURES], x[i] + x[j])
        assert b["x"][token, ATOM_FEATURES:].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # single, not conjugated, no ring
    pairs = sorted(zip(*b["edge_index"].tolist()))
    assert pairs == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert all(torch.equal(row, x[1]) for row in b["edge_attr"])  # the shared atom: the central carbon

    ring = mol_mod.bond_graph(smiles_to_graph("c1ccccc1"))  # 6 bonds in a cycle: each meets two others
    assert ring["x"].shape[0] == 6 and ring["edge_index"].shape[1] == 12
    assert ring["x"][:, ATOM_FEATURES + 3].tolist() == [1.0] * 6  # aromatic bonds

    for smiles, lone in (("C", 1), ("[Na+].[Cl-]", 2)):
        g = smiles_to_graph(smiles)
        b = mol_mod.bond_graph(g)
        assert b["x"].shape[0] == lone and b["edge_index"].shape == (2, 0) and b["edge_attr"].shape == (0, ATOM_FEATURES)
        assert torch.equal(b["x"][:, :ATOM_FEATURES], 2 * g["x"]) and not b["x"][:, ATOM_FEATURES:].any()

    with pytest.raises(ValueError, match="both directions of every bond as consecutive edges"):
        mol_mod.bond_graph({**g, "x": torch.zeros(3, 4), "edge_index": torch.tensor([[0, 1], [1, 2]]),
                            "edge_attr": torch.zeros(2, BOND_FEATURES)})


def test_bond_tokens_reach_the_spec_the_cache_and_the_predict_input(tmp_path):
    """data.tokens=bonds: the spec's widths are a bond token's and a shared atom's, the cache keeps the two
    token kinds apart, predict input gets the same bond graphs, random-walk encodings are the bond graph's;
    an unknown kind or masked-atom pretraining on bonds stops with the value."""
    from seqattn.modalities.graph.molecule_data import SmilesDataModule

    path = _write_csv(tmp_path)
    atoms = _dm(path, tmp_path, skip_invalid=True, cache=True, positional="random_walk", pe_dim=4)  # same but tokens
    bonds = _dm(path, tmp_path, skip_invalid=True, cache=True, tokens="bonds", positional="random_walk", pe_dim=4)
    atoms.setup()
    bonds.setup()
    assert bonds.spec().get("sizes.node_features") == ATOM_FEATURES + BOND_FEATURES
    assert bonds.spec().get("sizes.edge_features") == ATOM_FEATURES
    assert atoms.spec().get("sizes.node_features") == ATOM_FEATURES
    assert len(list((tmp_path / "cache" / "molecules").glob("*.pt"))) == 2
    by_id = {g["ids"]: g for part in bonds.datasets.values() for g in part.graphs}
    ethanol = by_id["ethanol"]  # C-C and C-O: two bonds that share the middle carbon
    assert ethanol["x"].shape == (2, ATOM_FEATURES + BOND_FEATURES) and ethanol["edge_index"].tolist() == [[0, 1], [1, 0]]
    torch.testing.assert_close(ethanol["pe"], graph_positional_encoding("random_walk", ethanol["edge_index"], 2, 4))
    source = tmp_path / "p.smi"
    source.write_text("CCO ethanol\nc1ccccc1 benzene\n")
    batch = next(iter(bonds.predict_loader(source, batch_size=2)))
    assert batch["x"].shape == (2, 6, ATOM_FEATURES + BOND_FEATURES) and batch["mask"].sum(1).tolist() == [2, 6]
    with pytest.raises(ValueError, match="tokens='edges' is not one of"):
        _dm(path, tmp_path, tokens="edges")
    with pytest.raises(ValueError, match="masked-atom pretraining .* needs tokens=atoms, got tokens='bonds'"):
        SmilesDataModule(source="csv", path=str(path), tokens="bonds")


@pytest.mark.parametrize("smiles", ["CC(=O)Oc1ccccc1C(=O)O", "C[N+](C)(C)C", "[O-]C(=O)CC", "c1ccncc1Br", "[2H]C([2H])Cl",
                                    "O", "[Na+].[Cl-]"])
def test_atom_descriptors_fold_the_hydrogens_into_their_atoms(smiles):
    """Per heavy atom: Crippen logP, molar refractivity / 10 and Gasteiger charge with its hydrogens' added: the
    columns sum to RDKit's MolLogP, MolMR / 10 and the formal charge (Gasteiger charges conserve it)."""
    from rdkit import Chem
    from rdkit.Chem import Crippen

    mol = mol_mod.parse_smiles(smiles)
    values = torch.tensor(mol_mod.atom_descriptor_values(mol), dtype=torch.float64)
    assert values.shape == (mol.GetNumAtoms(), mol_mod.ATOM_DESCRIPTORS)
    assert math.isclose(values[:, 0].sum(), Crippen.MolLogP(mol), abs_tol=1e-6)
    assert math.isclose(values[:, 1].sum() * 10, Crippen.MolMR(mol), abs_tol=1e-6)
    assert math.isclose(values[:, 2].sum(), Chem.GetFormalCharge(mol), abs_tol=1e-6)
    assert (values[:, 2].abs() <= 1).all()


def test_atom_descriptors_reach_the_graph_the_spec_the_cache_and_the_predict_input(tmp_path):
    """data.atom_descriptors=true: 3 more columns after the one-hot features (those unchanged), the spec's width
    follows, the cache keeps the two featurisations apart, predict input gets the same columns; a non-bool stops."""
    plain, extra = smiles_to_graph("CCO"), smiles_to_graph("CCO", atom_descriptors=True)
    assert extra["x"].shape == (3, ATOM_FEATURES + mol_mod.ATOM_DESCRIPTORS)
    assert mol_mod.atom_feature_width(True) == ATOM_FEATURES + 3 and mol_mod.atom_feature_width() == ATOM_FEATURES
    torch.testing.assert_close(extra["x"][:, :ATOM_FEATURES], plain["x"])
    torch.testing.assert_close(extra["x"][:, ATOM_FEATURES:],
                               torch.tensor(mol_mod.atom_descriptor_values(mol_mod.parse_smiles("CCO"))))
    path = _write_csv(tmp_path)
    without = _dm(path, tmp_path, skip_invalid=True, cache=True)
    with_ = _dm(path, tmp_path, skip_invalid=True, cache=True, atom_descriptors=True)
    without.setup()
    with_.setup()
    assert len(list((tmp_path / "cache" / "molecules").glob("*.pt"))) == 2
    assert with_.spec().get("sizes.node_features") == ATOM_FEATURES + 3
    assert without.spec().get("sizes.node_features") == ATOM_FEATURES
    assert with_.datasets["train"][0]["x"].shape[1] == ATOM_FEATURES + 3
    source = tmp_path / "p.smi"
    source.write_text("CCO ethanol\n")
    batch = next(iter(with_.predict_loader(source, batch_size=1)))
    torch.testing.assert_close(batch["x"][0], extra["x"])
    assert with_.atom_descriptor_columns() == slice(ATOM_FEATURES, ATOM_FEATURES + 3)
    assert without.atom_descriptor_columns() is None
    bonds = _dm(path, tmp_path, skip_invalid=True, tokens="bonds", atom_descriptors=True)
    assert bonds.atom_descriptor_columns() is None  # a bond token's x holds two atoms' sum
    assert bonds.node_features == ATOM_FEATURES + 3 + BOND_FEATURES and bonds.edge_features == ATOM_FEATURES + 3
    with pytest.raises(ValueError, match="atom_descriptors must be true or false.*got 'yes'"):
        _dm(path, tmp_path, atom_descriptors="yes")
