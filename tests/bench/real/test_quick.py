"""``python -m seqattn.bench real --quick``: the flag reaches every case through the Context, the graph cases
then run fewer seeds and fewer epochs on both sides and say so, and the table is titled as quick. Nothing is
trained here (the cases' runners are replaced by recorders); no real data needed."""

from __future__ import annotations

import argparse

import pytest

import seqattn.bench.real as real
from seqattn.bench.real import Context, Result
from seqattn.bench.real import cora as cora_case


def _args(tmp_path, *extra):
    parser = argparse.ArgumentParser()
    real.add_arguments(parser)
    return parser.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "work"), *extra])


def _dummy(ctx):
    return Result("d", "m", False, [0.5], [0.5], "ref", [1.0], [1.0], "cmd", notes="QUICK: x" if ctx.quick else "")


@pytest.mark.parametrize("quick", [False, True])
def test_quick_flag_reaches_every_case_and_titles_the_table(tmp_path, monkeypatch, capsys, quick):
    seen = {}
    for name, module in real.CASES.items():
        mod = __import__(f"seqattn.bench.real.{module}", fromlist=["x"])

        def case(ctx, name=name):
            seen[name] = ctx.quick
            return _dummy(ctx)

        monkeypatch.setattr(mod, f"case_{name}", case)
    assert real.run(_args(tmp_path, *(["--quick"] if quick else []))) == 0
    assert seen == {name: quick for name in real.CASES}
    out = capsys.readouterr().out
    assert (real.QUICK_TITLE in out) == quick
    assert ("QUICK" in out) == quick


def _record(monkeypatch):
    calls = {}

    def compare(ctx, label, overrides, seeds, reference, reference_name):
        calls.update(overrides=overrides, seeds=seeds, reference=reference)
        return [0.8] * seeds, [1.0] * seeds, [0.8] * seeds, [1.0] * seeds

    epochs = []
    monkeypatch.setattr(cora_case, "compare_seeds", compare)
    monkeypatch.setattr(cora_case, "train_reference", lambda data, kind, seed, epochs_=None, **kw: epochs.append(kw.get("epochs")) or 0.5)
    monkeypatch.setattr(cora_case, "_planetoid", lambda ctx: object())
    return calls, epochs


@pytest.mark.parametrize("case", ["cora", "karate4"])
def test_graph_cases_shorten_both_sides_only_when_quick(tmp_path, monkeypatch, case):
    calls, epochs = _record(monkeypatch)
    full_seeds = {"cora": cora_case.CORA_SEEDS, "karate4": cora_case.KARATE_SEEDS}[case]
    seeds, quick_epochs = cora_case.QUICK[case]
    for quick in (False, True):
        epochs.clear()
        ctx = Context(data=tmp_path, work=tmp_path / f"w{quick}", seeds=None, log=lambda m: None, quick=quick)
        result = getattr(cora_case, f"case_{case}")(ctx)
        calls["reference"](0)  # the reference of one seed, as compare_seeds would call it
        short = f"trainer.max_epochs={quick_epochs}"
        if quick:
            assert calls["seeds"] == seeds < full_seeds
            assert short in calls["overrides"] and short in result.command
            assert result.notes.startswith("QUICK") and epochs[-1] == quick_epochs
        else:
            assert calls["seeds"] == full_seeds
            assert not any(o.startswith("trainer.max_epochs") for o in calls["overrides"])
            assert "QUICK" not in result.notes and epochs[-1] in (None, 200)


def test_fsdd_shortens_both_sides_only_when_quick(tmp_path, monkeypatch):
    """``--quick`` gives FSDD's two manifests 1 seed and ``QUICK_EPOCHS`` epochs on the recipe and the CNN (it ran
    in full before: 3 seeds x 2 manifests x 20 epochs), and the notes say so."""
    from seqattn.bench.real import fsdd as fsdd_case

    (tmp_path / "fsdd").mkdir()
    for name in fsdd_case.SPLITS:
        (tmp_path / "fsdd" / name).write_text("path,label,speaker,split\n")
    calls = []

    def compare(ctx, label, overrides, seeds, reference, reference_name):
        calls.append((overrides, seeds, ctx.quick))
        return [0.8] * seeds, [1.0] * seeds, [0.8] * seeds, [1.0] * seeds

    recipes = []
    monkeypatch.setattr(fsdd_case, "compare_seeds", compare)
    monkeypatch.setattr(fsdd_case, "recipe_reference", lambda ctx, overrides, name: recipes.append(overrides))
    short = f"trainer.max_epochs={fsdd_case.QUICK_EPOCHS}"
    for quick in (False, True):
        calls.clear(), recipes.clear()
        ctx = Context(data=tmp_path, work=tmp_path / f"w{quick}", seeds=None, log=lambda m: None, quick=quick)
        result = fsdd_case.case_fsdd(ctx)
        assert len(calls) == len(recipes) == len(fsdd_case.SPLITS)
        for (overrides, seeds, sub_quick), reference in zip(calls, recipes):
            assert sub_quick == quick
            assert seeds == (1 if quick else fsdd_case.SEEDS)
            assert (short in overrides) == quick and (short in reference) == quick
        assert result.notes.startswith("QUICK") == quick and (short in result.command) == quick
