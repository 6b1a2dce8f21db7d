"""The objective's optimizer: torch's fused update by default (multi-tensor ``foreach`` where fused is not
taken), the loop's numbers (``foreach``: to the bit; ``fused``: to rounding)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

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


class _Trainer:
    def __init__(self, precision: str) -> None:
        self.precision = precision


def test_adamw_gets_fused_unless_the_config_chooses():
    defaults = _model(ADAMW).build_optimizer().defaults
    assert defaults["fused"] is True and defaults["foreach"] is None
    assert _model(None).build_optimizer().defaults["fused"] is True  # the objective's own default (AdamW)
    chosen = _model({**ADAMW, "foreach": False}).build_optimizer().defaults
    assert chosen["foreach"] is False and not chosen["fused"]
    chosen = _model({**ADAMW, "fused": False}).build_optimizer().defaults
    assert chosen["fused"] is False and chosen["foreach"] is None
    # an optimizer that takes foreach but not fused (Adamax) gets foreach
    assert _model({"_target_": "torch.optim.Adamax", "lr": 0.1}).build_optimizer().defaults["foreach"] is True
    # an optimizer with neither argument is built as configured
    sparse = _model({"_target_": "torch.optim.SparseAdam", "lr": 0.1}).build_optimizer()
    assert "foreach" not in sparse.defaults and "fused" not in sparse.defaults


def test_mixed_precision_gets_foreach_not_fused():
    """Lightning's AMP plugin refuses gradient clipping with a fused optimizer: mixed precision keeps foreach."""
    for precision, fused in (("bf16-mixed", False), ("16-mixed", False), ("32-true", True), ("bf16-true", True)):
        model = _model(ADAMW)
        model._trainer = _Trainer(precision)
        defaults = model.build_optimizer().defaults
        assert bool(defaults["fused"]) is fused and (defaults["foreach"] is True) is (not fused), precision


def test_foreach_learns_exactly_what_the_loop_learns():
    """Weight decay on some groups and not others (parameter_groups): bit for bit the same weights."""
    assert torch.equal(_train(_model({**ADAMW, "foreach": True})), _train(_model({**ADAMW, "foreach": False})))


def test_fused_learns_what_the_loop_learns():
    """The default (fused) update, weight decay on some groups and not others: fed the same gradients for 15
    steps, it keeps the loop's weights to float rounding, and they moved. (Trained apart, the two drift: Adam's
    division by the root of tiny second moments turns rounding of ~1e-10 gradients into visible differences.)"""
    fused_model, loop_model = _model(ADAMW), _model({**ADAMW, "foreach": False})
    fused, loop = fused_model.build_optimizer(), loop_model.build_optimizer()
    assert fused.defaults["fused"] and not loop.defaults["foreach"] and not loop.defaults["fused"]
    start = torch.cat([p.detach().flatten() for p in loop_model.parameters()])
    torch.manual_seed(1)
    batch = _data()
    for _ in range(15):
        loss = loop_model.loss(loop_model(batch), batch)
        loop.zero_grad()
        loss.backward()
        for p, q in zip(fused_model.parameters(), loop_model.parameters()):
            p.grad = None if q.grad is None else q.grad.clone()
        loop.step()
        fused.step()
    after = [torch.cat([p.detach().flatten() for p in m.parameters()]) for m in (fused_model, loop_model)]
    torch.testing.assert_close(after[0], after[1], atol=1e-6, rtol=1e-5)
    assert (after[1] - start).abs().max() > 1e-2


SCHEDULE = {"_target_": "seqattn.objectives.warmup_cosine", "_partial_": True}


class _Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        data = _data(n=8)
        while True:
            yield from ({key: value[i] for key, value in data.items()} for i in range(8))


def _fit(loader, **trainer_args) -> SequenceClassification:
    model = SequenceClassification(net=_net("mean"), labels=["neg", "pos"], scheduler=SCHEDULE)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, **trainer_args)
    trainer.fit(model, loader)
    return model


def test_a_schedule_without_a_run_length_is_refused_with_what_to_set():
    """The recipes' warm-up + cosine is built for the run's length in optimizer steps; a run without one (no epoch
    limit, or an endless loader, and no step limit) is refused naming the setting, not an OverflowError."""
    data = _data(n=32)
    batches = DataLoader([{key: value[i] for key, value in data.items()} for i in range(32)], batch_size=8)
    with pytest.raises(ValueError, match=r"needs the run's length in optimizer steps, and this run has none: "
                                         r"trainer.max_epochs=-1 \(no epoch limit\) and no trainer.max_steps"):
        _fit(batches, max_epochs=-1)
    with pytest.raises(ValueError, match="the training loader is endless .* Set trainer.max_epochs=N or "
                                         "trainer.max_steps=N, or objective.scheduler=null"):
        _fit(DataLoader(_Endless(), batch_size=8), max_epochs=2)
    for loader in (batches, DataLoader(_Endless(), batch_size=8)):  # a step limit is a length
        model = _fit(loader, max_epochs=-1, max_steps=6)
        scheduler = model.trainer.lr_scheduler_configs[0].scheduler
        assert scheduler.lr_lambdas[0].total_steps == 6 and model.trainer.global_step == 6


def test_a_cpu_update_skips_the_device_graph_capture_check(monkeypatch):
    """A step of the objective's AdamW on CPU parameters asks no device question (Lightning sends torch's per-step
    graph-capture check to NVML, ~0.25 ms a step on a CUDA build without a GPU) and updates as torch's own
    optimizer does with the check; an optimizer over a parameter off the CPU keeps it."""
    import seqattn.objectives.base as base

    skip = base.skip_graph_capture_check
    asked = []
    real = torch.accelerator.current_accelerator
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: asked.append(a or k) or real(*a, **k))
    ours = _train(_model(ADAMW))
    assert asked == []
    monkeypatch.setattr(base, "skip_graph_capture_check", lambda optimizer: optimizer)
    theirs = _train(_model(ADAMW))
    assert asked, "torch's own AdamW no longer asks for the accelerator at each step: the skip has nothing to skip"
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    meta = torch.nn.Parameter(torch.zeros(2, device="meta"))
    kept = skip(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2)), meta]))
    assert "_accelerator_graph_capture_health_check" not in vars(kept)
    skipped = skip(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]))
    assert vars(skipped)["_accelerator_graph_capture_health_check"] is base._no_graph_capture_check
