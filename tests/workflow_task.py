"""What a task declares for the workflow tests (:mod:`tests.workflows`): a tiny run, its predict inputs,
user files that select its file source.

Each modality's test folder declares its tasks in ``tests/modalities/<m>/workflow_tasks.py``
(``TASKS = {"<task>": Task(...)}``); the task list itself is ``conf/task/*.yaml``, and a task
there without a declaration fails the workflow tests with a message saying what to add.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

#: ``(overrides that point the task at the files, the source they select, the built-in source's name)``
FileSource = tuple[list[str], str, str]


@dataclass(frozen=True)
class Task:
    overrides: list[str]  # a tiny run of this task (seconds on 2 CPU cores)
    predict_inputs: Callable[[DictConfig, Path], Path]  # (run config, empty folder) -> predict input
    # (empty folder) -> minimal user files selecting the file source; None: the task has none to test
    file_source: Callable[[Path], FileSource] | None
    exportable: bool = True  # seqattn.export supports its adapter (graph adapters are refused)
    resume_overrides: tuple[str, ...] = ()  # for the kill-and-resume test (after its own overrides)
    exact_resume: bool = True  # a killed and resumed run ends with bit-identical weights
    # seqattn.load(...).predict / seqattn.export serve it; False: a pretraining task, whose checkpoint has no
    # head to predict a task with (both refuse it, saying how to fine-tune)
    predicts: bool = True
