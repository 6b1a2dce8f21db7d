"""Hydra multirun: `python -m seqattn.run -m model.heads=2,4` writes one summary table of the runs."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import seqattn
from seqattn.training.sweep import summarize
from tests.workflows import QUIET, TASKS, WORKFLOW_TASKS

REPO = Path(seqattn.__file__).resolve().parents[1]


def test_summarize_lists_each_job_with_its_overrides_and_metrics(tmp_path):
    for job, heads, acc in (("0", 2, 0.5), ("1", 4, 0.75)):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text(f"- model.heads={heads}\n- task=speech\n")
        (tmp_path / job / "metrics.json").write_text(json.dumps(
            {"task": "speech", "test/acc": acc, "epochs": 3, "confusion_matrix": [[1]], "output_dir": "x"}))
    (tmp_path / "2").mkdir()  # a job that crashed: no metrics.json
    path = summarize(tmp_path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["job"], r["model.heads"], float(r["test/acc"])) for r in rows] == [("0", "2", 0.5), ("1", "4", 0.75)]
    assert "task" not in rows[0] and "confusion_matrix" not in rows[0]
    md = (tmp_path / "summary.md").read_text()
    assert "| job | model.heads | status | test/acc | epochs |" in md and "| 1 | 4 | ok | 0.7500 | 3 |" in md
    assert "Same in every job: task=speech" in md
    assert summarize(tmp_path / "2") is None


def test_a_failed_job_is_marked_and_the_others_are_summarised(tmp_path):
    from seqattn.training.sweep import failed_jobs, record_failure

    for job, heads in (("0", 2), ("1", 4)):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text(f"- model.heads={heads}\n")
    (tmp_path / "0" / "metrics.json").write_text(json.dumps({"test/acc": 0.5, "epochs": 2}))
    try:
        raise ValueError("dim_k=7 must be divisible by heads=4")
    except ValueError as err:
        record_failure(tmp_path / "1", err)
    path = summarize(tmp_path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "ok"), ("1", "failed: ValueError: dim_k=7 must be divisible by heads=4")]
    assert rows[0]["test/acc"] == "0.5" and rows[1]["test/acc"] == ""
    assert failed_jobs(tmp_path) == ["1"]
    assert "Traceback" in json.loads((tmp_path / "1" / "failed.json").read_text())["traceback"]


@pytest.mark.slow
def test_a_sweep_with_a_failing_job_summarises_the_rest_and_exits_nonzero(tmp_path):
    sweep = tmp_path / "sweep"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HYDRA_FULL_ERROR="1")
    overrides = TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=1", f"paths.data_dir={tmp_path / 'data'}",
                                                       f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run([sys.executable, "-m", "seqattn.run", "-m", *overrides, "model.heads=2,3"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    with open(sweep / "summary.csv", newline="") as f:
        rows = {r["model.heads"]: r for r in csv.DictReader(f)}
    assert rows["2"]["status"] == "ok" and float(rows["2"]["test/acc"]) > 0
    assert rows["3"]["status"].startswith("failed: ValueError") and "divisible by heads=3" in rows["3"]["status"]


@pytest.mark.slow
@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_multirun_writes_a_summary_of_its_runs(task, tmp_path):
    sweep = tmp_path / "sweep"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HYDRA_FULL_ERROR="1")
    overrides = TASKS[task].overrides + QUIET + ["trainer.max_epochs=1", f"paths.data_dir={tmp_path / 'data'}",
                                                 f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run([sys.executable, "-m", "seqattn.run", "-m", *overrides, "model.heads=2,4"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    with open(sweep / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["model.heads"] for r in rows] == ["2", "4"]
    for row in rows:  # every task's test metrics (accuracy, RMSE, ...) are in the table
        values = [float(v) for k, v in row.items() if k.startswith("test/")]
        assert values and all(math.isfinite(v) for v in values), row
    assert (sweep / "summary.md").read_text().count("\n") >= 4
