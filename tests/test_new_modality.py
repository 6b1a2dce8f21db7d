"""A fifth modality is one folder, its config files, its tests and its task README -- nothing else.

A copy of the checkout gets a new modality ``pictures``: the image modality's folder copied under the
new name (plus a structure cell of its own), its config files copied as ``conf/task/pictures.yaml``,
``conf/data/pictures.yaml``, ``conf/adapter/pictures.yaml``, its tests as ``tests/modalities/pictures/``
and ``tasks/pictures/README.md``. Without one shared file edited, the new task is composed by
``seqattn.run``, benchmarked (``bench recipes`` lists it, ``bench core`` its cell), covered by the
workflow tests, and the layout walk and the import-circle check pass over the new tree. No training.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import seqattn
from tests.test_layout import files, import_cycles, modalities, rule_violations

ROOT = Path(seqattn.__file__).resolve().parents[1]
NEW = "pictures"
CELL = "pictures_patches"
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")

#: the files the new modality adds (relative to the checkout): nothing outside them may change
ADDED = (f"seqattn/modalities/{NEW}/", f"conf/task/{NEW}.yaml", f"conf/data/{NEW}.yaml", f"conf/adapter/{NEW}.yaml",
         f"conf/task/{NEW}_pretrain.yaml", f"conf/data/{NEW}_pretrain.yaml",
         f"tests/modalities/{NEW}/", f"tasks/{NEW}/", f"tasks/{NEW}_pretrain/")

CELL_MODULE = f'''"""A structure cell of the {NEW} modality: one encoder layer's attention over image patches."""

from __future__ import annotations


def patches_step(impl, cfg, small):
    import torch

    from seqattn.core.attention import MultiHeadAttention
    from seqattn.modalities.{NEW}.adapter import ImageAdapter

    tokens = ImageAdapter(32, mode="patches", patch_size=4)(torch.rand(2, 3, 16, 16))
    layer = MultiHeadAttention(32, 2, kernel=impl)

    def step():
        layer(tokens.x.detach().requires_grad_()).sum().backward()

    return step, {{"heads": 2, "head_dim": 16}}


STRUCTURE_CELLS = {{"{CELL}": {{"impls": ("sdpa", "math"), "sizes": lambda tiny: [{{}}],
                               "describe": lambda cfg: "16x16 image, 4x4 patches", "step": patches_step,
                               "targets": lambda rows: []}}}}
'''


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _copy_renamed(src: Path, dst: Path) -> None:
    """Copy a file or folder, renaming the image modality and its task in every text."""
    for path in [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        target = dst if src.is_file() else dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text(encoding="utf-8")
        for old, new in (("seqattn.modalities.image", f"seqattn.modalities.{NEW}"), ("task=image", f"task={NEW}"),
                         ("override /data: image", f"override /data: {NEW}"),
                         ("override /adapter: image", f"override /adapter: {NEW}"),
                         ("task_name: image", f"task_name: {NEW}"), ('"image": Task(', f'"{NEW}": Task('),
                         ('"image_pretrain": Task(', f'"{NEW}_pretrain": Task(')):
            text = text.replace(old, new)
        target.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout (package, configs, the tests the workflow discovery needs) plus the new modality."""
    root = tmp_path_factory.mktemp("checkout")
    for folder in ("seqattn", "conf", "tasks"):
        shutil.copytree(ROOT / folder, root / folder, ignore=SKIP)
    (root / "tests").mkdir()
    for name in ("__init__.py", "workflows.py", "workflow_task.py", "test_layout.py"):
        shutil.copy(ROOT / "tests" / name, root / "tests" / name)
    shutil.copytree(ROOT / "tests" / "modalities", root / "tests" / "modalities", ignore=SKIP)
    before = _digest(root)
    _copy_renamed(ROOT / "seqattn" / "modalities" / "image", root / "seqattn" / "modalities" / NEW)
    (root / "seqattn" / "modalities" / NEW / "structure_cells.py").write_text(CELL_MODULE)
    for group in ("task", "data", "adapter"):
        _copy_renamed(ROOT / "conf" / group / "image.yaml", root / "conf" / group / f"{NEW}.yaml")
    for group in ("task", "data"):  # the modality's pretraining task comes with it (its workflow declaration does)
        _copy_renamed(ROOT / "conf" / group / "image_pretrain.yaml", root / "conf" / group / f"{NEW}_pretrain.yaml")
    _copy_renamed(ROOT / "tests" / "modalities" / "image", root / "tests" / "modalities" / NEW)
    _copy_renamed(ROOT / "tasks" / "image", root / "tasks" / NEW)
    _copy_renamed(ROOT / "tasks" / "image_pretrain", root / "tasks" / f"{NEW}_pretrain")
    after = _digest(root)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert changed and all(p.startswith(ADDED) for p in changed), [p for p in changed if not p.startswith(ADDED)]
    return root


PROBE = f"""
import contextlib, io, json, sys
import seqattn
from seqattn.bench import main
from seqattn.bench.recipes import TASKS as BENCHED
from seqattn.bench.structure import cells
from tests.workflows import EXPORT_TASKS, TASKS, WORKFLOW_TASKS, compose

def help_of(suite):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([suite, "--help"])
    return " ".join(out.getvalue().split())

cfg = compose(TASKS["{NEW}"].overrides, sys.argv[1], sys.argv[2])
print(json.dumps({{"file": seqattn.__file__, "benched": BENCHED, "cells": list(cells()),
                  "recipes_help": help_of("recipes"), "core_help": help_of("core"),
                  "workflow": WORKFLOW_TASKS, "declared": sorted(TASKS), "export": EXPORT_TASKS,
                  "task_name": cfg.task_name, "adapter": cfg.adapter._target_}}))
"""


@pytest.fixture(scope="module")
def probe(checkout, tmp_path_factory) -> dict:
    """What the copy says about itself, from one process started in it (``PYTHONPATH`` = the copy)."""
    out = tmp_path_factory.mktemp("probe")
    env = {**os.environ, "PYTHONPATH": str(checkout), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out / "run"), str(out / "data")], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert Path(found["file"]).is_relative_to(checkout)  # the copy ran, not this checkout
    return found


def test_the_new_task_is_benchmarked_and_its_cell_found(probe):
    assert NEW in probe["benched"] and {"image", "molecule", "social", "speech"} <= set(probe["benched"])
    # the tasks it offers (argparse wraps the long list anywhere: read it with the white space taken out)
    listed = re.search(r"from([a-z_,]+)", "".join(probe["recipes_help"].split())).group(1).strip(",").split(",")
    assert NEW in listed and listed == sorted(listed) and {"image", "molecule", "social"} <= set(listed)
    # the cells it offers: argparse may break the long comma-separated list inside a name, so white space is taken out
    assert CELL in probe["cells"] and "graph_bias" in probe["cells"] and CELL in "".join(probe["core_help"].split())


def test_the_new_task_is_covered_by_the_workflow_tests(probe):
    assert NEW in probe["workflow"] and NEW in probe["declared"] and NEW in probe["export"]
    assert probe["task_name"] == NEW and probe["adapter"] == f"seqattn.modalities.{NEW}.adapter.ImageAdapter"


def test_the_new_tree_passes_the_layout_walk(checkout):
    package = checkout / "seqattn"
    assert NEW in modalities(package)
    assert [v for p in files(package) for v in rule_violations(p, package)] == []
    assert import_cycles(package) == []


def test_every_task_of_conf_declares_its_workflow_run():
    """No task is silently left out of the workflow tests: each ``conf/task/*.yaml`` has a declaration."""
    from seqattn.configs import task_names
    from tests.workflows import TASKS, WORKFLOW_TASKS

    assert WORKFLOW_TASKS == task_names() and len(WORKFLOW_TASKS) >= 8
    assert sorted(TASKS) == WORKFLOW_TASKS
    with pytest.raises(KeyError, match="declares no workflow run: add TASKS"):
        TASKS["no_such_task"]
