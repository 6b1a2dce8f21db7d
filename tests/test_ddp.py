"""Scale-out: `trainer=ddp` (2 CPU processes, gloo) and `trainer.precision=bf16-mixed`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import seqattn
from seqattn.run import train
from seqattn.training.checkpoint import build_model
from tests.workflows import QUIET, TASKS, WORKFLOW_TASKS, compose, workflow_data_dir  # noqa: F401

REPO = Path(seqattn.__file__).resolve().parents[1]


def _seqattn_run(args: list[str], cwd: Path) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HYDRA_FULL_ERROR="1")
    proc = subprocess.run([sys.executable, "-m", "seqattn.run", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_ddp_on_two_cpu_processes_writes_one_run_directory(task, tmp_path):
    common = TASKS[task].overrides + QUIET + ["trainer.max_epochs=1", "+trainer.limit_train_batches=4",
                                              f"paths.data_dir={tmp_path / 'data'}"]
    _seqattn_run(common + [f"hydra.run.dir={tmp_path / 'single'}"], tmp_path)
    out = _seqattn_run(common + ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                                 f"hydra.run.dir={tmp_path / 'ddp'}"], tmp_path)
    assert "world_size: 2" in out or "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in out, out[-3000:]
    # one run directory (no per-rank copies, nothing under ./outputs) with one set of artefacts
    made = {p.name for p in tmp_path.iterdir()}  # data/ only for tasks that cache their built-in data
    assert {"ddp", "single"} <= made <= {"data", "ddp", "single"}, made
    ddp = tmp_path / "ddp"
    assert (ddp / "config.yaml").is_file() and (ddp / "checkpoints" / "last.ckpt").is_file()
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert not (ddp / ".hydra" / "train_ddp_process_1").exists()
    single = json.loads((tmp_path / "single" / "metrics.json").read_text())
    multi = json.loads((ddp / "metrics.json").read_text())
    assert sorted(multi) == sorted(single)  # same metrics, same shapes
    # the DDP run's test metrics are over the whole test split (synchronised across the two processes):
    # scoring its best checkpoint in one process gives the same numbers
    import lightning as L
    from hydra.utils import instantiate

    model = build_model(ddp / "checkpoints" / "best.ckpt")  # what seqattn.load builds (a pretraining one too)
    datamodule = instantiate(model.run_config["data"], _convert_="all")
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    scored = trainer.test(model, datamodule=datamodule, verbose=False)[0]
    for key, value in multi.items():
        if key.startswith("test/") and value is not None:
            assert value == pytest.approx(scored[key], rel=1e-4, abs=1e-5), key
    if "confusion_matrix" in multi:
        assert sum(map(sum, multi["confusion_matrix"])) == sum(map(sum, single["confusion_matrix"]))


@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_bf16_mixed_precision_runs_on_cpu(task, tmp_path, workflow_data_dir):
    """A bf16-mixed run trains and tests; its test metrics agree with scoring the same checkpoint in fp32."""
    import lightning as L
    from hydra.utils import instantiate

    cfg = compose(TASKS[task].overrides + QUIET + ["trainer.max_epochs=1", "+trainer.limit_train_batches=3",
                                                   "trainer.precision=bf16-mixed"], tmp_path / "bf16",
                  workflow_data_dir)
    metrics = train(cfg)
    model = build_model(metrics["best_checkpoint"])
    datamodule = instantiate(cfg.data)
    fp32 = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                     precision="32-true").test(model, datamodule=datamodule, verbose=False)[0]
    assert metrics["test/loss"] == pytest.approx(fp32["test/loss"], rel=0.05)
    for key in ("test/acc", "test/f1"):
        if key in metrics:
            assert metrics[key] == pytest.approx(fp32[key], abs=0.05), key


def test_slurm_launcher_config_takes_its_shape_from_the_trainer(tmp_path):
    """conf/hydra/launcher/slurm.yaml composes (nothing is submitted): one task per device and node."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason='the optional extra: pip install "seqattn[cluster]" (hydra-submitit-launcher)')
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from seqattn.run import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=["hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4",
                                                 "trainer.num_nodes=2"], return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher["nodes"], launcher["tasks_per_node"], launcher["gpus_per_node"]) == (2, 4, 4)
    assert cfg.trainer.strategy == "ddp"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        single = hydra_compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    assert OmegaConf.to_container(single.hydra.launcher, resolve=True)["nodes"] == 1


@pytest.mark.slow
def test_a_time_budget_under_ddp_ends_every_process_at_the_same_epoch(tmp_path):
    """``budget.seconds`` decides on rank 0's clock and broadcasts the epochs; the broadcast must pair up with the
    epoch's metric synchronisation, which rank 0 alone may have started (EpochSummary): it hung before."""
    common = TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=3", "+trainer.limit_train_batches=4",
                                                    "budget.seconds=0.001", f"paths.data_dir={tmp_path / 'data'}"]
    _seqattn_run(common + ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                           f"hydra.run.dir={tmp_path / 'ddp'}"], tmp_path)
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["epochs"] == 1  # the budget was spent in the first epoch: both processes stopped after it
    assert metrics["time_budget"].startswith("budget.seconds=0.001: 1 epochs (the plan's 3 epochs)")
