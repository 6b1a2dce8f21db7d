"""Options of ``python -m seqattn.bench real`` that need no data: ``--set`` overrides reach every recipe run."""

from __future__ import annotations

import argparse

from seqattn.bench import real
from seqattn.bench.real import Result
from seqattn.bench.real import molecules as mol_case


def _args(tmp_path, *argv):
    parser = argparse.ArgumentParser()
    real.add_arguments(parser)
    return parser.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "work"), "--cases", "freesolv",
                              *argv])


def test_set_overrides_reach_the_case_and_bad_ones_are_refused(tmp_path, monkeypatch, capsys):
    seen = []

    def fake_case(ctx):
        seen.append(list(ctx.extra))
        return Result("freesolv", "test RMSE", True, [1.0], [1.0], "ref", [1.0], [1.0], "cmd")

    monkeypatch.setattr(mol_case, "case_freesolv", fake_case)
    assert real.run(_args(tmp_path, "--set", "head.pooling=gru", "--set", "cpu_threads=1")) == 0
    assert seen == [["head.pooling=gru", "cpu_threads=1"]]
    assert real.run(_args(tmp_path, "--set", "head.pooling")) == 2
    assert "--set takes KEY=VALUE, got ['head.pooling']" in capsys.readouterr().err
    assert len(seen) == 1  # nothing ran


def test_first_seed_runs_the_later_seeds_on_both_sides(tmp_path, monkeypatch, capsys):
    """``--first-seed 2 --seeds 2`` runs seeds 2 and 3 for the recipe and the reference (to add seeds to an earlier
    run), and the notes say which; a negative value and the pretraining cases are refused."""
    (tmp_path / "molecules").mkdir()
    (tmp_path / "molecules" / "freesolv.csv").write_text("smiles,expt\nC,1.0\n")
    recipe_seeds, reference_seeds = [], []

    def fake_recipe(overrides, out_dir, timeout=1800):
        recipe_seeds.append(int(next(o for o in overrides if o.startswith("seed="))[5:]))
        return {"test/rmse_expt": 1.0, "epochs": 1}, 1.0

    monkeypatch.setattr(mol_case, "run_recipe", fake_recipe)
    monkeypatch.setattr(mol_case, "recipe_splits",
                        lambda run_dir, target, extra=None: {"train": [], "val": [], "test": []})
    monkeypatch.setattr(mol_case, "train_attentivefp",
                        lambda splits, seed, settings=None, extra=None: reference_seeds.append(seed)
                        or {"test_rmse": 1.0, "seconds": 1.0, "best_epoch": 1, "epochs": 1})
    monkeypatch.setattr(real, "startup_seconds", lambda modules, rounds=2: 0.0)
    real_results = []
    original = Result.row
    monkeypatch.setattr(Result, "row", lambda self: real_results.append(self) or original(self))
    assert real.run(_args(tmp_path, "--first-seed", "2", "--seeds", "2")) == 0
    assert recipe_seeds == [2, 3] and reference_seeds == [2, 3]
    assert "seeds 2..3" in real_results[0].notes
    assert real.run(_args(tmp_path, "--first-seed", "-1")) == 2
    assert "--first-seed must be >= 0, got -1" in capsys.readouterr().err
    parser = argparse.ArgumentParser()
    real.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path), "--cases", "freesolv_pretrain", "--first-seed", "1"])
    assert real.run(args) == 2
    assert "not supported for ['freesolv_pretrain']" in capsys.readouterr().err
    assert recipe_seeds == [2, 3]  # nothing more ran


def test_compare_seeds_starts_at_the_first_seed(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(real, "run_recipe", lambda overrides, out_dir, timeout=1800: ran.append(out_dir.name)
                        or ({"test/acc": 0.5}, 1.0))
    ctx = real.Context(data=tmp_path, work=tmp_path, seeds=None, log=lambda msg: None, first_seed=3)
    ours, _, ref, _ = real.compare_seeds(ctx, "x", [], 2, lambda seed: float(seed), "ref")
    assert ran == ["seqattn_3", "seqattn_4"] and ref == [3.0, 4.0] and ours == [0.5, 0.5]


def test_karates_second_reference_runs_the_same_later_seeds(tmp_path, monkeypatch):
    """karate4's GCN (not timed, outside compare_seeds) trains on the seeds the recipe and GAT ran."""
    from seqattn.bench.real import cora as cora_case

    gcn_seeds = []
    monkeypatch.setattr(cora_case, "compare_seeds", lambda ctx, label, overrides, seeds, reference, name: (
        [0.8] * len(ctx.seed_list(seeds)),) * 4)
    monkeypatch.setattr(cora_case, "train_reference", lambda data, kind, seed, **kw: gcn_seeds.append((kind, seed)) or 0.5)
    monkeypatch.setattr(cora_case, "_planetoid", lambda ctx: object())
    ctx = real.Context(data=tmp_path, work=tmp_path, seeds=2, log=lambda msg: None, first_seed=2)
    cora_case.case_karate4(ctx)
    assert gcn_seeds == [("gcn", 2), ("gcn", 3)]


def test_a_sub_context_keeps_every_setting_and_times_its_own_runs(tmp_path):
    """A case with one row per manifest gives each row ``ctx.sub(folder)``: the seeds, quick mode, first seed and
    overrides of the case, its own folder, and an empty list of timed runs (a row's breakdown is its own)."""
    ctx = real.Context(data=tmp_path, work=tmp_path / "w", seeds=2, log=print, extra=["a=1"], quick=True, first_seed=3)
    ctx.runs.append(({}, 1.0))
    sub = ctx.sub(tmp_path / "w" / "row")
    settings = (sub.data, sub.seeds, sub.log, sub.extra, sub.quick, sub.first_seed)
    assert settings == (tmp_path, 2, print, ["a=1"], True, 3)
    assert sub.work == tmp_path / "w" / "row" and sub.runs == [] and ctx.runs == [({}, 1.0)]
