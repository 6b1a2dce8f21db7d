"""Molecules with missing targets (issue 21): masked, and now counted per target and split in the log."""

import logging

from seqattn.modalities.graph.molecule_data import MoleculeDataModule


def test_missing_targets_are_counted_per_target_and_split(tmp_path, caplog):
    path = tmp_path / "mols.csv"
    path.write_text("smiles,logS,active,split\n"
                    "CCO,0.5,1,train\nCCCO,,0,train\nCCCCO,,1,train\nc1ccccc1,-1.6,,train\nCCN,0.1,0,train\n"
                    "CCCN,,1,val\nCC(=O)O,0.3,0,val\nOc1ccccc1,0.2,1,test\n")
    dm = MoleculeDataModule(path=str(path), target_columns=["logS", "active"],
                            target_kinds=["regression", "classification"], split_column="split", cache=False,
                            data_dir=str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.graph"):
        dm.setup()
    assert dm.missing_targets() == {"logS": {"train": 2, "val": 1}, "active": {"train": 1}}
    assert ("molecules without a label, masked out of that target's loss and metrics: 'logS': 2 of 5 train, "
            "1 of 2 val; 'active': 1 of 5 train") in caplog.text


def test_no_missing_target_no_line(tmp_path, caplog):
    path = tmp_path / "mols.csv"
    path.write_text("smiles,y\n" + "".join(f"{'C' * (i + 1)}O,{i}\n" for i in range(10)))
    dm = MoleculeDataModule(path=str(path), target_columns=["y"], cache=False, data_dir=str(tmp_path / "cache"))
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.graph"):
        dm.setup()
    assert dm.missing_targets() == {} and "without a label" not in caplog.text
