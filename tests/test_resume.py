"""Resume after a crash: `python -m seqattn.run resume=PATH_TO_RUN`, atomic checkpoints, exact mid-epoch resume."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import seqattn
from seqattn.training.callbacks import AtomicCheckpointIO, ExactResume
from seqattn.training.resume import ResumableDataLoader, RunFolder, continue_curves, make_resumable, resume_config
from tests.workflows import EXACT_RESUME_TASKS, QUIET, TASKS, compose, workflow_data_dir  # noqa: F401

REPO = Path(seqattn.__file__).resolve().parents[1]


def _loader(seed: int = 0) -> DataLoader:
    return DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(seed))


def _epoch(loader, n=None):
    """The batches of one pass (or its first ``n``, drawing no more than ``n``)."""
    return [batch.tolist() for batch in itertools.islice(iter(loader), n)]


def test_resumable_loader_continues_mid_epoch_with_the_same_order():
    reference = make_resumable(_loader())
    assert isinstance(reference, ResumableDataLoader)
    epochs = [_epoch(reference) for _ in range(3)]
    assert epochs[1] != epochs[2]  # shuffled anew each epoch

    first = make_resumable(_loader())
    _epoch(first)
    assert _epoch(first, n=2) == epochs[1][:2]
    state = torch.load(_saved(first.state_dict()), weights_only=True)
    assert state["handed_out"] == 2

    resumed = make_resumable(_loader(seed=123))  # a new process: fresh generator
    resumed.load_state_dict(state)
    assert _epoch(resumed) == epochs[1][2:]  # the rest of epoch 1, no batch replayed
    assert _epoch(resumed) == epochs[2]

    at_end = make_resumable(_loader(seed=7))
    at_end.load_state_dict(resumed.state_dict())  # saved at an epoch end -> the next epoch starts
    assert _epoch(at_end) == _epoch(reference)  # epoch 3 of both


def _saved(obj):
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_rng_state_round_trips_through_a_weights_only_checkpoint():
    callback = ExactResume()
    state = torch.load(_saved(callback.state_dict()), weights_only=True)
    expected = (torch.rand(3), np.random.rand(2), random.random())
    torch.rand(5), np.random.rand(5), random.random()
    callback.load_state_dict(state)  # restored at the first training batch after resuming
    callback.on_train_batch_start(None, None, None, 0)
    got = (torch.rand(3), np.random.rand(2), random.random())
    torch.testing.assert_close(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert got[2] == expected[2]


def test_a_crash_while_saving_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(4)}, "global_step": 1}, path)

    def crash(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip file")  # some bytes reach the disk, then the process dies
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(4)}, "global_step": 2}, path)
    monkeypatch.undo()
    previous = torch.load(path, weights_only=True)
    assert previous["global_step"] == 1 and previous["state_dict"]["w"].sum() == 4
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]  # no temporary file left behind


def test_resume_config_reuses_the_run_and_checks_it(tmp_path):
    with pytest.raises(ValueError, match="no config.yaml"):
        resume_config(tmp_path)
    (tmp_path / "config.yaml").write_text("seed: 3\npaths: {output_dir: elsewhere}\ntrainer: {max_epochs: 2}\n"
                                          "budget: {steps: 100}\n")
    with pytest.raises(ValueError, match="no checkpoints/last.ckpt"):
        resume_config(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    cfg = resume_config(tmp_path, ["trainer.max_epochs=5"])
    assert cfg.paths.output_dir == str(tmp_path.resolve()) and cfg.trainer.max_epochs == 5 and cfg.seed == 3
    assert cfg.ckpt_path == str(tmp_path.resolve() / "checkpoints" / "last.ckpt")
    assert cfg.budget.steps == 100  # the saved config as composed; the plan is read from run_plan.json


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder`` -> (mtime in ns, sha256)."""
    import hashlib

    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _strings(value) -> list[str]:
    """Every string in plain containers (dict keys too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_resumed_csv_logger_keeps_the_rows_before_the_checkpoint_and_appends(tmp_path):
    """A run killed after its checkpoint at step 5: rows of steps 0..4 stay as written; the row of step 5 (logged
    after the checkpoint, logged again by the resumed run) and a line the kill cut are dropped; new rows follow."""
    import warnings

    from lightning.pytorch.loggers import CSVLogger

    folder = tmp_path / "csv"
    folder.mkdir()
    rows = [f"0,{step},0.{step}1\r\n" for step in range(6)]
    cut = "0,1"  # of "0,12,0.121": would read as a row of step 1
    (folder / "metrics.csv").write_bytes(("epoch,step,train/loss_step\r\n" + "".join(rows) + cut).encode())
    torch.save({"global_step": 5}, tmp_path / "last.ckpt")
    logger = CSVLogger(tmp_path, name="csv", version="")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        continue_curves([logger], tmp_path / "last.ckpt")
        logger.log_metrics({"train/loss_step": 0.5, "epoch": 0}, step=5)
        logger.log_metrics({"val/loss": 1.5, "epoch": 0}, step=5)  # a new column: the file is rewritten under it
        logger.save()
    assert not [w for w in caught if "Experiment logs directory" in str(w.message)]
    assert _curve_rows(tmp_path) == [{"epoch": "0", "step": str(step), "train/loss_step": f"0.{step}1"} for step in
                                     range(5)] + [{"epoch": "0", "step": "5", "train/loss_step": "0.5"},
                                                  {"epoch": "0", "step": "5", "val/loss": "1.5"}]

    (folder / "metrics.csv").write_text("epoch,step,train/loss_step\n0,0,0.1\n0,x,0.2\n")
    with pytest.raises(ValueError, match=r"metrics.csv:3: step 'x'"):
        continue_curves([CSVLogger(tmp_path, name="csv", version="")], tmp_path / "last.ckpt")


def test_the_curve_logger_writes_lightnings_rows_every_flush_seconds_and_at_the_end(tmp_path, monkeypatch):
    """CurveLogger holds rows between writes: the first at once, then after flush_seconds, on flush() and at
    finalize; the file ends as Lightning's CSVLogger writes it. flush_seconds=0 writes at every save."""
    from lightning.pytorch.loggers import CSVLogger

    from seqattn.training import resume, throttle

    now = [100.0]
    monkeypatch.setattr(throttle.time, "monotonic", lambda: now[0])
    rows = [({"train/loss_step": 0.5 - step / 10, "epoch": 0}, step) for step in range(4)] + [
        ({"val/loss": 1.5, "epoch": 0}, 3)]  # a new column: the file is rewritten under it

    def lines(root):
        path = root / "csv" / "metrics.csv"
        return path.read_text().splitlines() if path.exists() else []

    plain = CSVLogger(tmp_path / "plain", name="csv", version="")
    for metrics, step in rows:
        plain.log_metrics(metrics, step)
        plain.save()
    plain.finalize("success")

    logger = resume.CurveLogger(tmp_path / "held", name="csv", version="", flush_seconds=5.0)
    logger.log_hyperparams({"lr": 0.1})  # the trainer's first save() comes with no rows: it starts no clock
    logger.save()
    written = []
    for (metrics, step), advance in zip(rows, (0.0, 1.0, 5.0, 1.0, 1.0)):
        now[0] += advance
        logger.log_metrics(metrics, step)
        logger.save()  # what the trainer calls after every log_metrics
        written.append(len(lines(tmp_path / "held")) - 1)  # data rows on disk (header left out)
    assert written == [1, 1, 3, 3, 3]  # the first at once; 6 s later the two held; the rest held
    logger.flush()
    assert lines(tmp_path / "held") == lines(tmp_path / "plain")
    logger.log_metrics({"val/loss": 1.25, "epoch": 1}, 4)
    logger.finalize("failed")  # a failed run keeps its rows too
    plain.log_metrics({"val/loss": 1.25, "epoch": 1}, 4)
    plain.finalize("success")
    assert lines(tmp_path / "held") == lines(tmp_path / "plain") and len(lines(tmp_path / "plain")) == 7

    every = resume.CurveLogger(tmp_path / "every", name="csv", version="", flush_seconds=0)
    for count, (metrics, step) in enumerate(rows, 1):
        every.log_metrics(metrics, step)
        every.save()
        assert len(lines(tmp_path / "every")) - 1 == count  # no time passed: written at every save
    assert lines(tmp_path / "every") == lines(tmp_path / "plain")[:-1]
    with pytest.raises(ValueError, match="flush_seconds must be a number of seconds >= 0 .* got -1"):
        resume.CurveLogger(tmp_path, flush_seconds=-1)


def test_a_kill_while_a_new_column_rewrites_the_curves_loses_no_row(tmp_path, monkeypatch, workflow_data_dir):
    """A metric logged for the first time makes the CSV writer rewrite metrics.csv under the new header; a run
    killed in that rewrite must still have every row written before it (Lightning's writer truncates first)."""
    import csv

    from seqattn.training.resume import AtomicCurveWriter

    writer = AtomicCurveWriter(str(tmp_path / "csv"))
    for step in range(3):
        writer.log_metrics({"train/loss_step": 0.1 * step, "epoch": 0}, step=step)
        writer.save()
    before = (tmp_path / "csv" / "metrics.csv").read_text()
    writer.log_metrics({"val/loss": 1.5, "epoch": 0}, step=3)  # a new column: the whole file is rewritten

    def killed(self, rows):
        raise KeyboardInterrupt("killed mid-rewrite")

    with monkeypatch.context() as patch:
        patch.setattr(csv.DictWriter, "writerows", killed)
        with pytest.raises(KeyboardInterrupt):
            writer.save()
    assert (tmp_path / "csv" / "metrics.csv").read_text() == before  # every row still there

    whole = tmp_path / "whole"  # not killed: the rewrite gives every row under the new header
    writer = AtomicCurveWriter(str(whole / "csv"))
    for step in range(3):
        writer.log_metrics({"train/loss_step": 0.5, "epoch": 0}, step=step)
        writer.save()
    writer.log_metrics({"val/loss": 1.5, "epoch": 0}, step=3)
    writer.save()
    rows = _curve_rows(whole)
    assert [r["step"] for r in rows] == ["0", "1", "2", "3"] and rows[-1]["val/loss"] == "1.5"
    assert all(r["train/loss_step"] == "0.5" for r in rows[:3]) and not list((whole / "csv").glob("*.tmp"))

    # a run's CSV logger writes through it (here: the first validation columns rewrite the file)
    from seqattn.run import train

    rewrites = []
    original = AtomicCurveWriter._rewrite_with_new_header
    monkeypatch.setattr(AtomicCurveWriter, "_rewrite_with_new_header",
                        lambda self, names: (rewrites.append(names), original(self, names)))
    train(compose(["task=social", "model.dim=16", "model.depth=1", "trainer.max_epochs=1", "logger=csv", *QUIET],
                  tmp_path / "run", workflow_data_dir))
    assert rewrites and (tmp_path / "run" / "csv" / "metrics.csv").is_file()


def _curve_rows(run_dir: Path) -> list[dict[str, str]]:
    """The rows of a run's ``csv/metrics.csv``, each with its filled cells only."""
    import csv

    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]


def test_resuming_a_copied_run_folder_writes_only_into_the_copy(tmp_path, workflow_data_dir):
    """`cp -r a b; seqattn.run resume=b trainer.max_epochs=2`: a's files stay byte-identical and untouched;
    b's checkpoints, metrics.json, run plan, config.yaml and curves are b's own, at epoch 2."""
    import shutil

    from lightning.pytorch.callbacks import ModelCheckpoint

    from seqattn.run import run, train

    original, copy = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    train(compose(["task=social", "model.dim=16", "model.depth=1", "trainer.max_epochs=1", *QUIET], original,
                  workflow_data_dir))
    shutil.copytree(original, copy)
    before = _files(original)
    curves = _curve_rows(copy)
    # one full-graph step per epoch: the finished run's last.ckpt is its state after that one step
    assert torch.load(copy / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 1

    # what `python -m seqattn.run resume=b trainer.max_epochs=2` runs (the overrides as Hydra gives them)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(compose([f"resume={copy}", "trainer.max_epochs=2"], tmp_path / "hydra_run", workflow_data_dir))
    # its own checkpoints are there on purpose: no "Checkpoint directory ... exists and is not empty"
    assert not [w for w in caught if "exists and is not empty" in str(w.message)]

    assert _files(original) == before  # not a byte, not an mtime of the original changed
    metrics = json.loads((copy / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["output_dir"] == str(copy)
    assert metrics["best_checkpoint"] == str(copy / "checkpoints" / "best.ckpt")
    assert json.loads((copy / "run_plan.json").read_text())["max_epochs"] == 2
    last = torch.load(copy / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2 and last["seqattn_run_dir"] == str(copy)
    assert str(original) not in (copy / "config.yaml").read_text()
    assert not [s for s in _strings(last["callbacks"]) if str(original) in s]
    # the curves continue: epoch 0's rows as they were, epoch 1's after them, no (epoch, step, metric) twice;
    # the finished run's test row (logged at the checkpoint's step) is dropped, its values are in metrics.previous.json
    resumed = _curve_rows(copy)
    assert resumed[:2] == [row for row in curves if row["epoch"] == "0"] and len(curves) == 3
    assert [row["epoch"] for row in resumed] == ["0", "0", "1", "1", "2"] and "test/acc" in resumed[-1]
    _curve_cells(copy)  # no (epoch, step, metric) twice

    # the callback states saved in the original's checkpoint: moved into the copy before a callback reads them,
    # so the best checkpoint's score is restored (same folder) and its path is the copy's; a checkpoint written
    # before it recorded its folder: the folder of the run config it carries
    for recorded in (True, False):
        state = torch.load(original / "checkpoints" / "last.ckpt", weights_only=True)
        if not recorded:
            assert state.pop("seqattn_run_dir") == str(original)
        RunFolder(copy).on_load_checkpoint(None, None, state)
        best = ModelCheckpoint(dirpath=copy / "checkpoints", filename="best", monitor="val/loss")
        best.load_state_dict(next(v for k, v in state["callbacks"].items() if "val/loss" in k))
        assert best.best_model_path == str(copy / "checkpoints" / "best.ckpt") and best.best_model_score is not None
        assert not [s for s in _strings(state["callbacks"]) if str(original) in s]


def test_a_resumed_auto_run_keeps_the_thread_count_it_started_with(tmp_path, workflow_data_dir):
    """cpu_threads=auto decides from the load at start; a resumed run must not decide again (another count
    changes the last bits of its sums): it keeps the count in its run_plan.json, and says so."""
    from seqattn.run import run, train

    before = torch.get_num_threads()
    run_dir = tmp_path / "run"
    try:
        train(compose(["task=social", "model.dim=16", "model.depth=1", "trainer.max_epochs=1", *QUIET], run_dir,
                      workflow_data_dir))
        plan_file = run_dir / "run_plan.json"
        plan = json.loads(plan_file.read_text())
        assert plan["threads"]["setting"] == "auto" and plan["threads"]["threads"] == 1  # a tiny network: 1
        plan["threads"]["threads"] = 3  # as if the first part had started on a free 4-core machine
        plan_file.write_text(json.dumps(plan))
        run(compose([f"resume={run_dir}", "trainer.max_epochs=2"], tmp_path / "hydra_run", workflow_data_dir))
        threads = json.loads(plan_file.read_text())["threads"]
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert threads == plan["threads"]  # the recorded choice, as it was
    assert json.loads((run_dir / "metrics.json").read_text())["epochs"] == 2


def _run(args: list[str], cwd: Path, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HYDRA_FULL_ERROR="1")
    return subprocess.Popen([sys.executable, "-m", "seqattn.run", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("task", EXACT_RESUME_TASKS)
def test_a_run_killed_mid_epoch_resumes_to_the_same_weights_and_metrics(task, tmp_path):
    """SIGKILL after the first mid-epoch checkpoint, `resume=` the run: the final weights and test
    metrics equal those of an uninterrupted run with the same seed (CPU, deterministic)."""
    args = TASKS[task].overrides + QUIET + [
        "trainer.max_epochs=3", "callbacks.last_checkpoint.every_n_steps=3", f"paths.data_dir={tmp_path / 'data'}",
        "trainer.log_every_n_steps=1",  # curve rows before the kill
        "cpu_threads=1",  # exact equality: cpu_threads=auto may pick another count under another load (float sums differ)
        *TASKS[task].resume_overrides]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    _finish(_run(args + [f"hydra.run.dir={whole}"], tmp_path))

    proc = _run(args + [f"hydra.run.dir={killed}"], tmp_path)
    last = killed / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 240
    while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()  # SIGKILL: no cleanup, no final checkpoint
    out, _ = proc.communicate()
    assert last.exists(), f"the run ended (exit {proc.returncode}) before its first checkpoint:\n{out[-3000:]}"
    state = torch.load(last, map_location="cpu", weights_only=True)
    loader_state = state["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    killed_at = state["global_step"]
    assert not (killed / "metrics.json").exists()

    out = _finish(_run([f"resume={killed}", f"hydra.run.dir={tmp_path / 'resume_logs'}"], tmp_path))
    assert f"{killed}" in out

    final_whole = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=True)
    final_resumed = torch.load(last, weights_only=True)
    assert final_resumed["global_step"] == final_whole["global_step"] > killed_at
    per_epoch = final_whole["global_step"] // (final_whole["epoch"] + 1)
    if per_epoch > 1:  # social's karate club is one full-graph batch per epoch: killed between epochs there
        assert killed_at % per_epoch != 0, (killed_at, per_epoch)  # killed mid-epoch, not at an epoch end
        assert loader_state["handed_out"] == killed_at % per_epoch
    for name, value in final_whole["state_dict"].items():
        torch.testing.assert_close(final_resumed["state_dict"][name], value, rtol=0, atol=0, msg=name)
    metrics_whole = json.loads((whole / "metrics.json").read_text())
    metrics_resumed = json.loads((killed / "metrics.json").read_text())
    test_keys = [k for k in metrics_whole if k.startswith("test/")]
    assert test_keys and {k: metrics_resumed[k] for k in test_keys} == {k: metrics_whole[k] for k in test_keys}
    # the curves: every (epoch, step, metric) of the uninterrupted run, once, with its value; the epoch means of
    # training metrics in the epoch killed in are over its resumed part only (Lightning does not checkpoint them)
    curves_whole, curves_resumed = _curve_cells(whole), _curve_cells(killed)
    # Lightning writes a checkpoint in on_train_batch_end, before it logs that batch's row (step killed_at - 1): a
    # kill between the two loses that one row, which the resumed run (starting at the next batch) cannot log again
    # (documented in seqattn.training.resume); no other cell may be missing, none may be new
    missing, extra = curves_whole.keys() - curves_resumed.keys(), curves_resumed.keys() - curves_whole.keys()
    assert not extra and all(cell[1] == str(killed_at - 1) for cell in missing), (sorted(missing), sorted(extra))
    killed_epoch = str(killed_at // per_epoch)
    assert {cell: v for cell, v in curves_resumed.items() if cell[0] != killed_epoch or _step_or_val(cell[2])} == {
        cell: v for cell, v in curves_whole.items() if (cell[0] != killed_epoch or _step_or_val(cell[2]))
        and cell not in missing}


def _step_or_val(metric: str) -> bool:
    """Whether a metric is a per-step or validation/test value (not an epoch mean of training)."""
    return metric.endswith("_step") or not metric.startswith("train/")


def _curve_cells(run_dir: Path) -> dict[tuple[str, str, str], str]:
    """``(epoch, step, metric) -> value`` of a run's ``csv/metrics.csv``; a cell filled twice fails."""
    cells = [((row["epoch"], row["step"], key), value) for row in _curve_rows(run_dir) for key, value in row.items()
             if key not in ("epoch", "step")]
    assert len(dict(cells)) == len(cells), "a metric logged twice at one step"
    return dict(cells)
