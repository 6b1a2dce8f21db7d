"""Where a bench real run's time goes (issue 20): each seqattn run's metrics.json splits its wall into start-up,
training and test, and the table's notes give the mean breakdown and the reference's own start-up."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from seqattn.bench import real
from seqattn.bench.real import Result, breakdown, compare_seeds, startup_seconds
from seqattn.bench.real import molecules as mol_case


def test_breakdown_splits_the_mean_wall_and_says_what_is_left():
    runs = [({"startup_seconds": 6.0, "fit_seconds": 4.0, "test_seconds": 0.5}, 12.0),
            ({"startup_seconds": 8.0, "fit_seconds": 6.0, "test_seconds": 1.5}, 16.0)]
    text = breakdown(runs)
    assert text.startswith("seqattn wall 14.0 s = start-up 7.0 s")
    assert "training 5.0 s + test 1.0 s + the rest 1.0 s" in text and "mean of 2 runs" in text
    # runs written before the timings (no startup_seconds) are left out, and none at all says nothing
    assert breakdown([({"fit_seconds": 3.0}, 9.0)]) == ""
    assert "mean of 2 runs" in breakdown(runs + [({"fit_seconds": 3.0}, 9.0)])


def test_process_seconds_counts_from_the_process_start():
    code = "import time; time.sleep(0.6); from seqattn.cli import process_seconds; print(process_seconds())"
    seconds = float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    assert 0.6 <= seconds < 30


def test_startup_seconds_times_a_fresh_interpreter_and_a_missing_module_fails():
    assert startup_seconds(("json",), rounds=1) > 0
    with pytest.raises(subprocess.CalledProcessError):
        startup_seconds(("no_such_module_for_seqattn",), rounds=1)


def test_compare_seeds_records_each_recipe_run_for_the_breakdown(tmp_path, monkeypatch):
    walls = iter([10.0, 20.0])

    def fake_run(overrides, out_dir):
        return {"test/acc": 0.5, "startup_seconds": 5.0, "fit_seconds": 3.0, "test_seconds": 1.0}, next(walls)

    monkeypatch.setattr(real, "run_recipe", fake_run)
    ctx = real.Context(data=tmp_path, work=tmp_path, seeds=2, log=lambda _: None)
    compare_seeds(ctx, "x", ["task=social"], 2, lambda seed: 0.4, "ref")
    assert [w for _, w in ctx.runs] == [10.0, 20.0]
    assert "seqattn wall 15.0 s = start-up 5.0 s" in breakdown(ctx.runs)


def test_the_table_notes_carry_the_breakdown_and_the_reference_start_up(tmp_path, monkeypatch, capsys):
    def fake_case(ctx):
        ctx.runs.append(({"startup_seconds": 6.0, "fit_seconds": 4.0, "test_seconds": 1.0}, 12.0))
        return Result("freesolv", "test RMSE", True, [1.0], [1.0], "ref", [12.0], [1.0], "cmd", notes="seeds 0..0",
                      reference_imports=("json",))

    monkeypatch.setattr(mol_case, "case_freesolv", fake_case)
    monkeypatch.setattr(real, "startup_seconds", lambda modules: 2.5)
    parser = argparse.ArgumentParser()
    real.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "work"), "--cases", "freesolv"])
    assert real.run(args) == 0
    out = capsys.readouterr().out
    assert "seeds 0..0; seqattn wall 12.0 s = start-up 6.0 s" in out
    assert "the rest 1.0 s" in out
    assert '`python -c "import json"` 2.5 s before its first line' in out
