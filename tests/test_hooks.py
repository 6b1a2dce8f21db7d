"""Every hook an objective or a figure reads is declared in ``seqattn.model.protocols``, with its default.

The objectives, the figure code (``seqattn/viz``, ``modalities/<m>/viz.py``) and the distillation entry
point read a part's or a trained model's hooks through the declarations (``augmented_inputs``,
``head_pooling``, :class:`TrainedModel`, ``network_of``), never by probing with ``getattr``.
"""

from __future__ import annotations

import ast

import pytest
from torch import nn

from seqattn.model.protocols import (ADAPTER_HOOKS, HEAD_HOOKS, AdapterBase, TrainedModel, augmented_inputs,
                                     head_pooling, network_of)
from seqattn.objectives import SequenceClassification, SequenceLabeling
from seqattn.objectives.distill import Distillation
from tests.objectives.test_labeling import NET
from tests.test_layout import PACKAGE, planted_tree

#: hook names a probe must not look up: the parts' hooks and what a trained model declares
HOOKS = set(ADAPTER_HOOKS) | set(HEAD_HOOKS) | set(TrainedModel.__annotations__)
READERS = sorted([*(PACKAGE / "objectives").glob("*.py"), *(PACKAGE / "viz").glob("*.py"),
                  *(PACKAGE / "modalities").glob("*/viz.py"), PACKAGE / "training" / "distill.py"])


def probes(path, package=PACKAGE) -> list[str]:
    """``getattr`` / ``hasattr`` calls of a file (under ``package``) that look up a declared hook by name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in HOOKS):
            found.append(f"{path.relative_to(package)}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return found


@pytest.mark.parametrize("path", READERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_objectives_and_figures_read_hooks_through_the_declarations(path):
    assert probes(path) == []


def test_the_probe_finder_sees_a_planted_probe(tmp_path):
    planted = "viz/_planted_probe.py"
    package = planted_tree(tmp_path, {planted: "def f(model):\n    return getattr(model, 'confusion_matrix', None)\n"})
    assert probes(package / planted, package) == [f"{planted}:2 getattr(..., 'confusion_matrix')"]


def test_the_declared_defaults():
    class Plain(nn.Module):  # a part that does not derive from the bases
        pass

    assert AdapterBase.augmented_inputs is None and augmented_inputs(Plain()) is None
    assert head_pooling(Plain()) is None
    objective = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    assert isinstance(objective, TrainedModel) and objective.confusion_matrix is None
    assert network_of(objective) is objective.net and network_of(objective.net) is objective.net
    assert not isinstance(objective.net, TrainedModel)
    assert head_pooling(objective.net.head) is None  # a per-token head


def test_a_distillation_teacher_is_read_through_its_declared_network():
    pooled = dict(NET, head={"_target_": "seqattn.model.heads.PooledHead", "dim": NET["encoder"]["dim"],
                             "num_outputs": 3, "pooling": "mean"})
    teacher = SequenceClassification(net=pooled, labels=["a", "b", "c"])
    assert head_pooling(teacher.net.head) == "mean"
    from_objective, from_network = Distillation(teacher), Distillation(teacher.net)
    assert from_objective.net is teacher.net and from_network.net is teacher.net
    assert from_objective.labels == ["a", "b", "c"] and from_network.labels is None
    with pytest.raises(ValueError, match="predicts 3 classes, the student 2"):
        from_network.check_labels(None, 2)
