"""The objective's optimizer: multi-tensor (``foreach``) updates by default, the same numbers as the loop."""

from __future__ import annotations

import torch

from seqattn.objectives import SequenceClassification
from tests.objectives.test_classification import _data, _net


def _model(optimizer: dict | None = None) -> SequenceClassification:
    torch.manual_seed(0)
    return SequenceClassification(net=_net("mean"), labels=["neg", "pos"], optimizer=optimizer)


def _train(model: SequenceClassification, steps: int = 15) -> torch.Tensor:
    optimizer = model.build_optimizer()
    torch.manual_seed(1)
    batch = _data()
    for _ in range(steps):
        loss = model.loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


ADAMW = {"_target_": "torch.optim.AdamW", "lr": 1e-2, "weight_decay": 0.01}


def test_adamw_gets_foreach_unless_the_config_chooses():
    assert _model(ADAMW).build_optimizer().defaults["foreach"] is True
    assert _model({**ADAMW, "foreach": False}).build_optimizer().defaults["foreach"] is False
    fused = _model({**ADAMW, "fused": True}).build_optimizer().defaults
    assert fused["fused"] is True and fused["foreach"] is None
    assert _model(None).build_optimizer().defaults["foreach"] is True  # the objective's own default (AdamW)
    # an optimizer without a foreach argument is built as configured
    sparse = _model({"_target_": "torch.optim.SparseAdam", "lr": 0.1}).build_optimizer()
    assert "foreach" not in sparse.defaults


def test_foreach_learns_exactly_what_the_loop_learns():
    """Weight decay on some groups and not others (parameter_groups): bit for bit the same weights."""
    assert torch.equal(_train(_model(ADAMW)), _train(_model({**ADAMW, "foreach": False})))
