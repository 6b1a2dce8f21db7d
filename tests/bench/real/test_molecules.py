"""The molecule cases of ``python -m seqattn.bench real`` on a tiny slice of the real FreeSolv file: the
recipe runs through the user's command, the reference trains on the split that run used (reproduced from
its config.yaml and checked against its metrics), and the result renders as a table row.

Skips when the real data folder (``../shared/data``, or ``$SEQATTN_REAL_DATA``) is absent.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from seqattn.bench.real import DEFAULT_DATA, HEADER, Context
from seqattn.bench.real import molecules as mol_case


def _real_data() -> Path | None:
    """``$SEQATTN_REAL_DATA``, the suite's default, or a ``shared/data`` beside any folder above the checkout."""
    candidates = [Path(os.environ["SEQATTN_REAL_DATA"])] if os.environ.get("SEQATTN_REAL_DATA") else []
    candidates += [DEFAULT_DATA] + [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    return next((c for c in candidates if (c / "molecules" / "freesolv.csv").is_file()), None)


REAL = _real_data()
pytestmark = pytest.mark.skipif(REAL is None, reason="no real data folder (../shared/data/molecules/freesolv.csv; "
                                                     "set SEQATTN_REAL_DATA)")
TINY = ["data.limit=60", "data.batch_size=16", "model.dim=16", "model.depth=1", "model.heads=2",
        "trainer.max_epochs=2", "plot=false", "trainer.enable_model_summary=false"]
TINY_REFERENCE = mol_case.AttentiveFPSettings(hidden=16, max_epochs=2, patience=1)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """One seed of the FreeSolv case on the first 60 molecules of the real file (48 / 6 / 6)."""
    work = tmp_path_factory.mktemp("bench_real")
    lines = []
    ctx = Context(data=REAL, work=work / "freesolv", seeds=1, log=lines.append,
                  extra=[*TINY, f"paths.data_dir={work / 'cache'}"])
    return mol_case.molecule_case(ctx, "freesolv", TINY_REFERENCE), ctx, lines


def test_case_runs_recipe_and_reference_on_the_same_split(case):
    result, ctx, lines = case
    assert len(result.seqattn) == len(result.reference) == len(result.seqattn_seconds) == 1
    assert all(math.isfinite(v) and v > 0 for v in result.seqattn + result.reference)
    assert result.lower_is_better and result.reference_name == "PyG AttentiveFP"
    # the command is the user's, with the README's custom-data options
    assert result.command.startswith("python -m seqattn.run task=molecule data.path=")
    assert "freesolv.csv data.target_columns=[expt] seed=<s>" in result.command
    # the run's own test RMSE is what the table reports
    metrics = json.loads((ctx.work / "seed0" / "metrics.json").read_text())
    assert result.seqattn == [metrics["test/rmse_expt"]]
    assert "split 48/6/6" in lines[0]
    row = result.row()
    assert row.startswith("| freesolv") and row.count("|") == HEADER.splitlines()[0].count("|")


def test_reproduced_split_is_the_runs_and_a_different_one_is_refused(case, tmp_path):
    _, ctx, _ = case
    run = ctx.work / "seed0"
    splits = mol_case.recipe_splits(run, "expt")
    assert [len(splits[s]) for s in ("train", "val", "test")] == [48, 6, 6]
    smiles = [s for part in splits.values() for s, _ in part]
    assert len(set(smiles)) == len(smiles) == 60  # disjoint splits, every molecule once
    # a run whose split differs (another seed) is detected: its test baseline does not match
    other = tmp_path / "other"
    other.mkdir()
    config = (run / "config.yaml").read_text()
    assert "seed: 0" in config
    (other / "config.yaml").write_text(config.replace("seed: 0", "seed: 1"))
    (other / "metrics.json").write_text((run / "metrics.json").read_text())
    with pytest.raises(RuntimeError, match="not the run's"):
        mol_case.recipe_splits(other, "expt")


def test_attentivefp_features_follow_the_paper():
    g = mol_case.attentivefp_graph("C[C@H](N)C(=O)O")  # L-alanine
    assert g.x.shape == (6, mol_case.AFP_ATOM_FEATURES) and g.edge_attr.shape == (10, mol_case.AFP_BOND_FEATURES)
    assert g.x[1, 37] == 0 and g.x[1, 38] == 1  # the stereocentre is S
    assert g.x[:, 15].sum() == 0 and g.x[0, 1] == 1  # no "other" element; atom 0 is carbon
    with pytest.raises(ValueError, match="cannot parse"):
        mol_case.attentivefp_graph("C1CC(")


def test_attentivefp_gets_the_recipes_atom_descriptors_when_the_run_has_them(tmp_path):
    """A recipe run with ``data.atom_descriptors=true``: the reference reads the same three columns, taken from the
    run's own data (the bench imports no modality), after the paper's 39, and the table's note says so; extra
    columns of the wrong length stop with the SMILES."""
    import torch

    extra = torch.arange(18, dtype=torch.float32).view(6, 3)
    g = mol_case.attentivefp_graph("C[C@H](N)C(=O)O", extra)
    plain = mol_case.attentivefp_graph("C[C@H](N)C(=O)O")
    assert g.x.shape == (6, mol_case.AFP_ATOM_FEATURES + 3)
    assert (g.x[:, :mol_case.AFP_ATOM_FEATURES] == plain.x).all()
    assert (g.x[:, mol_case.AFP_ATOM_FEATURES:] == extra).all()
    with pytest.raises(ValueError, match=r"extra atom columns for 'CCO' must be \[3 atoms, K\], got \(2, 3\)"):
        mol_case.attentivefp_graph("CCO", extra[:2])
    ctx = Context(data=REAL, work=tmp_path / "freesolv", seeds=1, log=lambda line: None,
                  extra=[*TINY, "data.atom_descriptors=true", f"paths.data_dir={tmp_path / 'cache'}"])
    result = mol_case.molecule_case(ctx, "freesolv", TINY_REFERENCE)
    assert math.isfinite(result.reference[0]) and "data.atom_descriptors=true" in result.command
    assert "paper features + the recipe's atom descriptors" in result.notes
    given: dict = {}
    splits = mol_case.recipe_splits(ctx.work / "seed0", "expt", given)
    smiles = splits["test"][0][0]
    from rdkit import Chem
    from rdkit.Chem import Crippen

    # the columns are the run's descriptors: their logP column sums to RDKit's MolLogP
    assert given[smiles].shape[1] == 3
    assert math.isclose(float(given[smiles][:, 0].sum()), Crippen.MolLogP(Chem.MolFromSmiles(smiles)), abs_tol=1e-4)
    assert set(given) == {s for part in splits.values() for s, _ in part}
    none: dict = {}
    mol_case.recipe_splits(_plain_run(tmp_path), "expt", none)
    assert none == {}


def _plain_run(tmp_path):
    ctx = Context(data=REAL, work=tmp_path / "plain", seeds=1, log=lambda line: None,
                  extra=[*TINY, f"paths.data_dir={tmp_path / 'cache'}"])
    mol_case.molecule_case(ctx, "freesolv", TINY_REFERENCE)
    return ctx.work / "seed0"


def test_quick_mode_trains_a_tenth_of_the_steps_not_the_recipes_epoch_floor(tmp_path, monkeypatch):
    """``--quick``: FreeSolv's 514 training molecules (17 batches) get ~500 steps = 30 epochs; the recipe's
    ``budget.min_epochs`` (70, for large sets) must not raise them to 70."""
    from seqattn.run import plan_inputs
    from seqattn.training.plan import make_plan
    from tests.workflows import compose

    captured = []

    def stop(overrides, out_dir, timeout=1800):
        captured.extend(overrides)
        raise RuntimeError("captured")

    monkeypatch.setattr(mol_case, "run_recipe", stop)
    ctx = Context(data=REAL, work=tmp_path / "freesolv", seeds=1, log=lambda line: None, quick=True)
    with pytest.raises(RuntimeError, match="captured"):
        mol_case.molecule_case(ctx, "freesolv")
    cfg = compose([o for o in captured if not o.startswith(("data.path=", "seed="))], tmp_path / "run",
                  tmp_path / "data")
    budget, asked = plan_inputs(cfg)
    plan = make_plan(budget, asked, {"train": 514, "val": 64, "test": 64}, math.ceil(514 / cfg.data.batch_size))
    assert plan.max_epochs == 30 and plan.budget.steps == 500
