"""What a run does when the user's setup is off: never a silent wrong run.

A data path selects the file source; a run without validation examples trains for its epochs and
says so; a monitor that cannot be computed is an error with the fix; a user mistake is one message
and exit status 2; metrics.json stays valid JSON; resume= of a finished run does not re-train it.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

import seqattn
from seqattn.run import _finite_metrics, train
from seqattn.training.callbacks import MonitorGuard
from tests.workflows import FILE_SOURCE_TASKS, QUIET, TASKS, compose

REPO = Path(seqattn.__file__).resolve().parents[1]
KEEP_STOPPING = [q for q in QUIET if "early_stopping" not in q]  # quiet, with the recipe's early stopping


# ---------------------------------------------------------------------------------------------
# a path selects the file source, for every task


@pytest.mark.parametrize("task", FILE_SOURCE_TASKS)
def test_giving_a_data_path_selects_the_file_source(task, tmp_path):
    overrides, source, builtin = TASKS[task].file_source(tmp_path)  # declared in tests/modalities/<m>/workflow_tasks.py
    cfg = compose([f"task={task}", *overrides] + QUIET, tmp_path / "run", tmp_path / "data")
    datamodule = instantiate(cfg.data)
    assert datamodule.source == source
    datamodule.setup("fit")  # reads the user's files, not the built-in data
    assert sum(datamodule.split_sizes().values()) > 0
    # the built-in source named explicitly next to a path is a contradiction, not a silent choice
    cfg = compose([f"task={task}", *overrides, f"data.source={builtin}"] + QUIET, tmp_path / "run2", tmp_path / "data")
    with pytest.raises(Exception, match="would ignore") as err:  # hydra wraps it; the cause is the ValueError
        instantiate(cfg.data)
    assert isinstance(err.value.__cause__ or err.value, ValueError)


# ---------------------------------------------------------------------------------------------
# validation: absent, explicit, NaN


def _karate_with_four_labels(tmp_path: Path) -> Path:
    """The standard few-label setting: one labelled node per community, the other 30 as test, no validation."""
    cfg = compose(["task=social"] + QUIET, tmp_path / "probe", tmp_path / "data")
    nodes, _ = instantiate(cfg.data).graph_files()
    with open(nodes, newline="") as f:
        rows = list(csv.DictReader(f))
    seen: set[str] = set()
    for row in rows:
        row["split"] = "train" if row["label"] not in seen else "test"
        seen.add(row["label"])
    out = tmp_path / "karate4.csv"
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_a_run_without_validation_trains_all_its_epochs_and_keeps_the_last(tmp_path, caplog):
    nodes = _karate_with_four_labels(tmp_path)
    probe = instantiate(compose(["task=social"] + QUIET, tmp_path / "p", tmp_path / "data").data)
    edges = probe.graph_files()[1]
    cfg = compose(["task=social", f"data.nodes={nodes}", f"data.edges={edges}", "model.dim=32", "model.depth=2",
                   "trainer.max_epochs=12", "plot=false"] + KEEP_STOPPING, tmp_path / "run", tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="seqattn.run"):
        metrics = train(cfg)
    assert metrics["epochs"] == 12  # not one: nothing stopped it early
    assert "no validation examples" in metrics["selection"] and "no validation examples" in caplog.text
    best = torch.load(metrics["best_checkpoint"], weights_only=True)
    last = torch.load(Path(metrics["output_dir"]) / "checkpoints" / "last.ckpt", weights_only=True)
    assert best["global_step"] == last["global_step"] == 12  # the last epoch is the model tested
    assert metrics["test/acc"] is not None and json.loads((Path(metrics["output_dir"]) / "metrics.json").read_text())


def test_a_monitor_named_on_an_absent_split_is_an_error_with_the_fix(tmp_path):
    from hydra.core.hydra_config import HydraConfig

    nodes = _karate_with_four_labels(tmp_path)
    probe = instantiate(compose(["task=social"] + QUIET, tmp_path / "p", tmp_path / "data").data)
    overrides = ["task=social", f"data.nodes={nodes}", f"data.edges={probe.graph_files()[1]}", "objective.monitor=val/acc"]
    cfg = compose(overrides + QUIET, tmp_path / "run", tmp_path / "data")
    assert "objective.monitor=val/acc" in HydraConfig.get().overrides.task
    with pytest.raises(ValueError, match=r"objective.monitor='val/acc' but the data has no validation examples.*"
                                         r"objective.monitor=null"):
        train(cfg)
    cfg = compose(["task=social", "objective.monitor=test/acc"] + QUIET, tmp_path / "run2", tmp_path / "data")
    with pytest.raises(ValueError, match="never on the test split"):
        train(cfg)


class _Trainer:
    def __init__(self, metrics):
        self.callback_metrics, self.sanity_checking, self.current_epoch = metrics, False, 3


def test_a_nan_or_missing_monitor_stops_the_run_with_the_reason():
    guard = MonitorGuard("val/loss")
    guard.on_validation_epoch_end(_Trainer({"val/loss": torch.tensor(0.5)}), None)
    with pytest.raises(ValueError, match=r"'val/loss' is nan after epoch 3.*no labeled examples"):
        guard.on_validation_epoch_end(_Trainer({"val/loss": torch.tensor(float("nan"))}), None)
    with pytest.raises(ValueError, match=r"'val/loss' was not logged in epoch 3; logged: \['val/acc'\]"):
        guard.on_validation_epoch_end(_Trainer({"val/acc": torch.tensor(0.5)}), None)


def test_metrics_json_has_null_with_the_reason_instead_of_nan():
    out = _finite_metrics({"test/auroc_y": float("nan"), "test/rmse": 1.5, "epochs": 3},
                          {"test/auroc_y": "ROC-AUC is undefined: every labeled example of the split is 0"})
    assert out["test/auroc_y"] is None and out["test/rmse"] == 1.5
    assert out["undefined"] == {"test/auroc_y": "ROC-AUC is undefined: every labeled example of the split is 0"}
    json.dumps(out, allow_nan=False)


def test_auroc_of_a_one_class_test_split_is_null_with_the_reason(tmp_path):
    path = tmp_path / "m.csv"
    rows = [f"{'C' * (i % 6 + 1)}{'O' * (i % 3)},{i % 2},train" for i in range(30)]
    rows += [f"{'C' * (i + 2)}N,{i % 2},val" for i in range(6)]
    rows += [f"{'C' * (i + 2)}Cl,1,test" for i in range(5)]  # every test molecule is active
    path.write_text("smiles,active,split\n" + "\n".join(rows) + "\n")
    cfg = compose(["task=molecule", f"data.path={path}", "data.target_columns=[active]", "data.split_column=split",
                   "data.target_kinds=classification", "model.dim=16", "model.depth=1", "trainer.max_epochs=1",
                   "plot=false"] + QUIET, tmp_path / "run", tmp_path / "data")
    train(cfg)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert saved["test/auroc_active"] is None
    assert saved["undefined"]["test/auroc_active"] == "ROC-AUC is undefined: every labeled example of the split is 1"
    assert saved["best_val/loss"] is not None


# ---------------------------------------------------------------------------------------------
# user mistakes: one message, exit 2


def test_a_user_mistake_is_one_message_and_exit_status_2(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run([sys.executable, "-m", "seqattn.run", "task=text_cls",
                           f"data.train_path={tmp_path / 'missing.csv'}", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"seqattn.run: error: text file {tmp_path / 'missing.csv'} does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


# what a default run prints: Lightning's and PyTorch's messages a user can do nothing about are gone
NOISE = [
    "GPU available: False, used: False",  # Lightning's device lines, with no GPU or TPU to choose
    "TPU available: False",
    "Tip:",  # litlogger / litmodels advertising
    "LeafSpec",  # a deprecation inside Lightning's pytree helper
    "smaller than the logging interval",  # log_every_n_steps on a one-batch epoch
    "Total FLOPs",  # always 0: nothing is counted without an example_input_array
    "FLOPs",
    "torch.jit.script",  # PyTorch Geometric's import (social)
    "Loading `train_dataloader` to estimate",
    "Restoring states from the checkpoint path",  # the next line says it again, with the outcome
    "epoch 0/0",
    "Epoch 0/0",
    "Warning",  # any other warning with its category: a new one must be looked at, not pass unseen
]


def test_a_default_run_prints_what_a_user_needs_and_no_known_noise(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", "seqattn.run", "task=social", "trainer.max_epochs=1", "plot=false",
                           f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'data'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed[-3000:]
    assert [noise for noise in NOISE if noise in printed] == [], printed
    for kept in ("run plan: max_epochs=1", "attention: graph", "epoch 1/1 train/loss_epoch=", "Epoch 1/1",
                 "Trainable params", "`Trainer.fit` stopped: `max_epochs=1` reached.",
                 f"Loaded model weights from the checkpoint at {tmp_path / 'run' / 'checkpoints' / 'best.ckpt'}",
                 "test/acc"):
        assert kept in printed, (kept, printed)
    # where the run's time went (bench real's breakdown): start-up counted from the process start, which took at
    # least the imports (seconds), then the fit and the test
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert 1.0 < metrics["startup_seconds"] < 300 and metrics["fit_seconds"] >= 0 and metrics["test_seconds"] >= 0


# ---------------------------------------------------------------------------------------------
# resume, last.ckpt, the epoch line


def test_resume_of_a_finished_run_trains_nothing_and_keeps_its_metrics(tmp_path):
    from seqattn.run import run

    cfg = compose(TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=2"], tmp_path / "run", tmp_path / "data")
    train(cfg)
    metrics = tmp_path / "run" / "metrics.json"
    before = metrics.read_text()
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    stamp = last.stat().st_mtime_ns
    again = compose(TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=2", f"resume={tmp_path / 'run'}"],
                    tmp_path / "ignored", tmp_path / "data")
    assert run(again) is None
    assert metrics.read_text() == before and last.stat().st_mtime_ns == stamp  # nothing re-trained or rewritten
    longer = compose(TASKS["text_cls"].overrides + QUIET + [f"resume={tmp_path / 'run'}", "trainer.max_epochs=3"],
                     tmp_path / "ignored", tmp_path / "data")
    run(longer)
    assert (tmp_path / "run" / "metrics.previous.json").read_text() == before
    assert json.loads(metrics.read_text())["epochs"] == 3


def test_last_checkpoint_holds_the_final_steps_between_two_step_saves(tmp_path):
    cfg = compose(TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=1", "test=false", "plot=false",
                                                         "callbacks.last_checkpoint.every_n_steps=5"],
                  tmp_path / "run", tmp_path / "data")
    train(cfg)  # 400 sentences / 32 = 13 steps: saves at 5 and 10 and at the epoch end
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 13


def test_the_epoch_line_shows_this_epochs_training_loss(tmp_path, caplog):
    cfg = compose(TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=2", "test=false", "plot=false"],
                  tmp_path / "run", tmp_path / "data")
    with caplog.at_level(logging.INFO, logger="seqattn.train"):
        train(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["1/2", "2/2"]  # counted from 1, as the progress bar counts them
    with open(tmp_path / "run" / "csv" / "metrics.csv", newline="") as f:
        logged = [r for r in csv.DictReader(f) if r.get("train/loss_epoch")]
    for line, row in zip(lines, logged):
        shown = float(line.split("train/loss_epoch=")[1].split()[0])
        assert shown == pytest.approx(float(row["train/loss_epoch"]), abs=1e-4)


def test_a_step_budget_sets_the_epochs_and_patience_from_the_data(tmp_path):
    from seqattn.run import plan_run

    cfg = compose(TASKS["text_cls"].overrides + KEEP_STOPPING + ["budget.steps=100", "budget.patience=0.5"],
                  tmp_path / "run", tmp_path / "data")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    batches = len(datamodule.train_dataloader())  # 400 sentences / 32
    plan = plan_run(cfg, datamodule)
    assert "trainer.max_epochs=8" in plan.budget_message and batches == 13
    assert plan.max_epochs == 8 and plan.patience == 5  # ceil(100 / 13); max(5, 4)
    assert cfg.trainer.max_epochs == 3 and cfg.callbacks.early_stopping.patience == 8  # the config is not edited
    small = compose(TASKS["text_cls"].overrides + KEEP_STOPPING + ["budget.steps=100", "data.synth.n_train=64"],
                    tmp_path / "run2", tmp_path / "data")
    datamodule = instantiate(small.data)
    datamodule.setup("fit")
    assert plan_run(small, datamodule).max_epochs == 50  # 2 batches per epoch: a small set trains more epochs
    # a value given on the command line wins over the plan for that value
    given = compose(TASKS["text_cls"].overrides + KEEP_STOPPING + ["budget.steps=100", "trainer.max_epochs=3"],
                    tmp_path / "run3", tmp_path / "data")
    datamodule = instantiate(given.data)
    datamodule.setup("fit")
    plan = plan_run(given, datamodule, given=lambda key: key == "trainer.max_epochs")
    assert plan.max_epochs == 3 and "trainer.max_epochs=3 (given)" in plan.budget_message
    assert plan.patience == 5  # max(min_patience 5, 0.2 * 8)
