"""Shared pieces of the workflow tests (predict, fine-tune, resume, sweeps, DDP, export).

Every workflow test is parametrized over ``WORKFLOW_TASKS``: every ``conf/task/<task>.yaml``
(:func:`seqattn.configs.task_names`). What a tiny run of a task is, and how to write a few of its
predict inputs, is declared beside the modality's tests, in ``tests/modalities/<m>/workflow_tasks.py``
(``TASKS = {"<task>": Task(...)}``, see :mod:`tests.workflow_task`), found here by walking
``tests/modalities/``. A task without a declaration fails its workflow tests, saying what to add.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from omegaconf import DictConfig

from seqattn.configs import task_names
from tests.workflow_task import Task

QUIET = [
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.early_stopping=null",
    "plot=false",
]
MODALITY_TESTS = Path(__file__).resolve().parent / "modalities"


class Declared(dict):
    """task -> :class:`Task`; a task with no declaration is a ``KeyError`` saying where to declare it."""

    def __missing__(self, task: str) -> Task:
        raise KeyError(f"task {task!r} (conf/task/{task}.yaml) declares no workflow run: add "
                       f"TASKS = {{{task!r}: Task(...)}} to tests/modalities/<modality>/workflow_tasks.py")


def declared_tasks(folder: Path = MODALITY_TESTS) -> Declared:
    """Every ``TASKS`` of ``<folder>/<m>/workflow_tasks.py``; ``ValueError`` when two folders declare a task."""
    found, where = Declared(), {}
    for path in sorted(folder.glob("*/workflow_tasks.py")):
        module = importlib.import_module(f"tests.modalities.{path.parent.name}.workflow_tasks")
        for task, spec in module.TASKS.items():
            if task in found:
                raise ValueError(f"task {task!r} is declared in {where[task]} and in {path}")
            found[task], where[task] = spec, path
    return found


TASKS = declared_tasks()
WORKFLOW_TASKS = task_names()  # every task of conf/task/, declared or not
PREDICT_TASKS = [name for name in WORKFLOW_TASKS if name not in TASKS or TASKS[name].predicts]
EXPORT_TASKS = [name for name in PREDICT_TASKS if name not in TASKS or TASKS[name].exportable]
# predicting tasks whose adapter export refuses (graphs)
UNEXPORTABLE_TASKS = [name for name in PREDICT_TASKS if name not in EXPORT_TASKS]
EXACT_RESUME_TASKS = [name for name in WORKFLOW_TASKS if name not in TASKS or TASKS[name].exact_resume]
FILE_SOURCE_TASKS = [name for name in WORKFLOW_TASKS if name not in TASKS or TASKS[name].file_source]


def compose(overrides: list[str], output_dir: Path, data_dir: Path) -> DictConfig:
    """The config ``python -m seqattn.run <overrides>`` would build, writing into ``output_dir``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from seqattn.configs import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        cfg.paths.data_dir = str(data_dir)
        del cfg.hydra
    return cfg


@dataclass
class TinyRun:
    task: str
    cfg: DictConfig
    metrics: dict[str, Any]
    output_dir: Path

    @property
    def best(self) -> Path:
        return self.output_dir / "checkpoints" / "best.ckpt"


@pytest.fixture(scope="session")
def workflow_data_dir(tmp_path_factory) -> Path:
    """One data dir for the session: built-in corpora are generated once."""
    return tmp_path_factory.mktemp("workflow_data")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, workflow_data_dir) -> Callable[[str], TinyRun]:
    """``tiny_run(task)`` -> a trained tiny run of ``task`` (trained once per session)."""
    from seqattn.run import train

    cache: dict[str, TinyRun] = {}

    def get(task: str) -> TinyRun:
        if task not in cache:
            out = tmp_path_factory.mktemp(f"tiny_{task}")
            cfg = compose(TASKS[task].overrides + QUIET, out, workflow_data_dir)
            metrics = train(cfg)
            assert json.loads((out / "metrics.json").read_text())["task"] == task
            cache[task] = TinyRun(task, cfg, metrics, out)
        return cache[task]

    return get


def assert_rows_close(got: Any, want: Any, atol: float = 1e-4, where: str = "rows") -> None:
    """Rows equal: same keys, strings and ints equal, floats within ``atol`` (recursively)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, sorted(got), sorted(want))
        for k in want:
            assert_rows_close(got[k], want[k], atol, f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_rows_close(g, w, atol, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=atol), (where, got, want)
    else:
        assert got == want, (where, got, want)


def macro_f1_from_confusion(matrix) -> float:
    """Macro-F1 computed by hand from a confusion matrix (rows true, columns predicted): the mean over
    classes that occur (as truth or prediction) of 2·TP / (2·TP + FP + FN) -- torchmetrics' definition."""
    import torch

    m = torch.as_tensor(matrix, dtype=torch.float64)
    tp = m.diagonal()
    fp, fn = m.sum(0) - tp, m.sum(1) - tp
    present = (tp + fp + fn) > 0
    f1 = 2 * tp / (2 * tp + fp + fn).clamp_min(1e-12)
    return float(f1[present].mean())


def accuracy_from_confusion(matrix) -> float:
    import torch

    m = torch.as_tensor(matrix, dtype=torch.float64)
    return float(m.diagonal().sum() / m.sum())


def majority_accuracy(datamodule, stage: str = "test") -> float:
    """The accuracy of always answering the commonest label of ``stage`` (a chance baseline computed
    from the data: labels ``>= 0`` of its batches)."""
    datamodule.setup(stage)
    loader = getattr(datamodule, f"{stage}_dataloader")()
    counts = torch.zeros(datamodule.num_classes)
    for batch in loader:
        labels = batch["labels"][batch["labels"] >= 0]
        counts += torch.bincount(labels.flatten(), minlength=datamodule.num_classes)
    return float(counts.max() / counts.sum())


def checkpoint_accuracy(checkpoint: str | Path, datamodule, stage: str = "test") -> float:
    """The accuracy of ``checkpoint``'s network on ``stage``'s batches, counted here (argmax of the
    logits against labels ``>= 0``): what the run's ``<stage>/acc`` must equal."""
    from seqattn.training.checkpoint import build_model

    model = build_model(checkpoint)
    datamodule.setup(stage)
    right = total = 0
    with torch.no_grad():
        for batch in getattr(datamodule, f"{stage}_dataloader")():
            labels = batch["labels"]
            keep = labels >= 0
            right += int((model.net(batch)["logits"].argmax(-1)[keep] == labels[keep]).sum())
            total += int(keep.sum())
    return right / total
