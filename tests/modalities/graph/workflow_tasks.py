"""The graph tasks' workflow declarations (see :mod:`tests.workflow_task`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import DictConfig

from tests.workflow_task import FileSource, Task


def _molecule_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A SMILES CSV of six molecules (no targets)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "molecules.csv"
    path.write_text("smiles\nCCO\nc1ccccc1O\nCC(=O)Nc1ccc(O)cc1\nC\nN#Cc1ccccc1\nOC(=O)c1ccccc1C(=O)O\n")
    return path


def _social_inputs(cfg: DictConfig, folder: Path) -> Path:
    """The built-in karate club's node CSV (predict reads the edges from the run's data config)."""
    from hydra.utils import instantiate

    nodes, _ = instantiate(cfg.data).graph_files()
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(nodes, folder / "nodes.csv"))


def _molecule_files(tmp_path: Path) -> FileSource:
    (tmp_path / "mol.csv").write_text("smiles,y\n" + "".join(f"{'C' * (i + 1)}O,{i}\n" for i in range(12)))
    return [f"data.path={tmp_path / 'mol.csv'}", "data.target_columns=[y]"], "csv", "nci_tpsa"


def _social_files(tmp_path: Path) -> FileSource:
    (tmp_path / "nodes.csv").write_text("id,f,label\n" + "".join(f"n{i},{i},{'ab'[i % 2]}\n" for i in range(12)))
    (tmp_path / "edges.csv").write_text("source,target\n" + "".join(f"n{i},n{(i + 1) % 12}\n" for i in range(12)))
    return [f"data.nodes={tmp_path / 'nodes.csv'}", f"data.edges={tmp_path / 'edges.csv'}"], "csv", "karate"


TASKS = {
    "molecule": Task(
        overrides=["task=molecule", "data.limit=400", "data.batch_size=32", "adapter.positional=random_walk",
                   "model.dim=32", "model.depth=2", "trainer.max_epochs=4"],
        predict_inputs=_molecule_inputs,
        file_source=_molecule_files,
        exportable=False,
    ),
    "social": Task(
        overrides=["task=social", "model.dim=32", "model.depth=2", "trainer.max_epochs=20"],
        predict_inputs=_social_inputs,
        file_source=_social_files,
        exportable=False,
        resume_overrides=("trainer.max_epochs=12",),  # one full-graph step per epoch: kill between epochs
        # known gap: resumed karate runs end with different weights (randomness not yet captured; see
        # tasks/social/README.md); resuming itself works
        exact_resume=False,
    ),
}


def _smiles_list(tmp_path: Path) -> FileSource:
    (tmp_path / "mol.smi").write_text("".join(f"{'C' * (i + 1)}O\n" for i in range(12)))
    return [f"data.path={tmp_path / 'mol.smi'}"], "csv", "nci_tpsa"


TASKS["molecule_pretrain"] = Task(
    overrides=["task=molecule_pretrain", "data.limit=400", "data.batch_size=32", "adapter.positional=random_walk",
               "model.dim=32", "model.depth=2", "trainer.max_epochs=3"],
    predict_inputs=_molecule_inputs,
    file_source=_smiles_list,
    exportable=False,
    predicts=False,
)


def _social_pretrain_files(tmp_path: Path) -> FileSource:
    """The node and edge CSVs of task=social (labels, if any, unread) selecting the csv source."""
    overrides, source, _ = _social_files(tmp_path)
    return overrides, source, "sbm"


TASKS["social_pretrain"] = Task(
    overrides=["task=social_pretrain", "model.dim=32", "model.depth=2", "trainer.max_epochs=10"],
    predict_inputs=_social_inputs,
    file_source=_social_pretrain_files,
    exportable=False,
    resume_overrides=("trainer.max_epochs=12",),  # one full-graph step per epoch: kill between epochs
    exact_resume=False,  # as task=social (see there)
    predicts=False,
)
