"""``budget.seconds`` (issue 20, item 4): a run shortened to a time budget, its schedule shortened with it so the
learning rate still reaches its floor at the last epoch; bad values and schedules that cannot be shortened refused."""

from __future__ import annotations

import json
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

from seqattn.objectives.schedules import set_schedule_length, warmup_cosine
from seqattn.run import train
from seqattn.training.time_budget import TimeBudget, check_seconds
from tests.workflows import QUIET, TASKS, compose

LR, FLOOR = 0.1, 0.05  # the optimizer's lr and warmup_cosine's min_lr_ratio


def _factors(scheduler, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0] / LR)
        scheduler.optimizer.step()
        scheduler.step()
    return out


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)


def test_a_schedule_shortened_mid_run_follows_the_schedule_of_the_new_length_and_keeps_it_in_its_state():
    long, short = warmup_cosine(_optimizer(), total_steps=200), warmup_cosine(_optimizer(), total_steps=60)
    _factors(long, 2)
    _factors(short, 2)  # both inside the warm-up of the short schedule (3 steps)
    set_schedule_length(long, 60)
    assert _factors(long, 70) == pytest.approx(_factors(short, 70))  # the warm-up follows the length too
    assert long.get_last_lr()[0] == pytest.approx(LR * FLOOR)  # ended at the floor, and stays there
    fresh = warmup_cosine(_optimizer(), total_steps=200)
    fresh.load_state_dict(long.state_dict())  # the length travels in checkpoints (resume)
    assert fresh.lr_lambdas[0].total_steps == 60
    with pytest.raises(ValueError, match="total_steps must be positive, got 0"):
        set_schedule_length(long, 0)
    with pytest.raises(ValueError, match="StepLR cannot change its length"):
        set_schedule_length(torch.optim.lr_scheduler.StepLR(_optimizer(), 5), 60)


class _Clock:
    """A fake ``time.monotonic``: one second per training step."""

    now = 0.0

    def __call__(self) -> float:
        return self.now


class _Timed(BoringModel):
    """``batches`` training batches per epoch, each taking one second of the fake clock; warmup_cosine per step."""

    def __init__(self, clock: _Clock, batches: int, scheduler: str = "warmup_cosine", warmup: float = 0.0) -> None:
        super().__init__()
        self.clock, self.batches, self.scheduler, self.warmup = clock, batches, scheduler, warmup
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        self.clock.now += 1.0 + (self.warmup if self.current_epoch == 0 and batch_idx == 0 else 0.0)
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4 * self.batches), batch_size=4)

    def val_dataloader(self):
        return DataLoader(RandomDataset(32, 4), batch_size=4)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=LR)
        if self.scheduler == "step_lr":
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 5)}
        steps = self.trainer.estimated_stepping_batches  # inf (or -1) without an epoch or batch limit: any length
        scheduler = warmup_cosine(optimizer, total_steps=int(steps) if math.isfinite(steps) and steps > 0 else 1000)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _fit(tmp_path, monkeypatch, batches: int, seconds: float | None, epochs: int = 20, spent: float | None = None,
         **model_args):
    clock = _Clock()
    monkeypatch.setattr("seqattn.training.time_budget.time.monotonic", clock)
    callbacks = [TimeBudget(seconds)] if seconds is not None else []
    if spent is not None:  # as a resumed run's checkpoint restores it
        callbacks[0].load_state_dict({"elapsed": spent})
    trainer = L.Trainer(max_epochs=epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0,
                        default_root_dir=tmp_path)
    model = _Timed(clock, batches, **model_args)
    trainer.fit(model)
    return trainer, model, callbacks


def test_the_run_ends_when_the_budget_runs_out_with_the_learning_rate_at_its_floor(tmp_path, monkeypatch):
    trainer, model, (budget,) = _fit(tmp_path, monkeypatch, batches=4, seconds=10)
    # 4 s per epoch: after epoch 1, 6 s left fit one more epoch; after epoch 2, 2 s left fit none
    assert trainer.current_epoch == 2 and len(model.lrs) == 8 and trainer.max_epochs == 2  # the epoch lines say 1/2, 2/2
    assert model.lrs[-1] == pytest.approx(LR * (FLOOR + (1 - FLOOR) * 0.5 * (1 + math.cos(math.pi * 6 / 7))))
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr()[0] == pytest.approx(LR * FLOOR)  # ended there
    assert budget.message == ("budget.seconds=10: 2 epochs (the plan's 20 epochs) in 8.0 s of training loop; "
                              "the schedule shortened to 2 epochs")
    # a resumed run continues the budget: 6 s spent before leave room for one epoch of 4 s
    trainer, model, (budget,) = _fit(tmp_path, monkeypatch, batches=4, seconds=10, spent=6.0)
    assert trainer.current_epoch == 1 and budget.state_dict() == {"elapsed": 10.0}
    # without the budget: the plan's 20 epochs, and the same learning rates would have been far from the floor
    trainer, model, _ = _fit(tmp_path, monkeypatch, batches=4, seconds=None)
    assert trainer.current_epoch == 20 and model.lrs[7] > 0.9 * LR


def test_a_slow_first_epoch_is_not_counted_as_the_pace_of_the_others(tmp_path, monkeypatch):
    # the first epoch 10 s (6 s of one-time set-up), the others 4 s: after epoch 2 the pace is 4 s, so 30 s fit 6
    # epochs (26 s of training would be spent stopping at 5, as a mean with the first epoch in it plans: 7, 6, 5.5 s)
    trainer, model, (budget,) = _fit(tmp_path, monkeypatch, batches=4, seconds=30, warmup=6.0)
    assert trainer.current_epoch == 6 and budget.epochs == 6 and len(model.lrs) == 24
    assert budget.message.startswith("budget.seconds=30: 6 epochs (the plan's 20 epochs) in 30.0 s")


def test_without_an_epoch_limit_the_budget_alone_ends_the_run(tmp_path, monkeypatch, caplog):
    with caplog.at_level("INFO", logger="seqattn.train"):
        trainer, model, (budget,) = _fit(tmp_path, monkeypatch, batches=4, seconds=10, epochs=-1)
    assert trainer.current_epoch == 2 and budget.message.startswith("budget.seconds=10: 2 epochs (no epoch limit) in")
    assert "~4.00 s per epoch -> 2 epochs (no epoch limit; the learning-rate schedule shortened" in caplog.text


def test_a_budget_longer_than_the_plan_does_not_lengthen_it(tmp_path, monkeypatch):
    trainer, model, (budget,) = _fit(tmp_path, monkeypatch, batches=4, seconds=1000, epochs=3)
    assert trainer.current_epoch == 3 and budget.epochs == 3
    assert budget.message.endswith("in 12.0 s of training loop; the budget did not shorten it")


def test_a_long_first_epoch_is_measured_after_the_probe_steps(tmp_path, monkeypatch):
    # 60 batches of 1 s: after 20 steps the budget of 125 s fits 2 epochs of 60 s, counted from the epoch's start
    # (from now, 105 s, it would be one), so the schedule is 120 steps long from step 21 on, instead of the plan's
    # 600 (the plan's warm-up alone would be 30 steps)
    trainer, model, (budget,) = _fit(tmp_path, monkeypatch, batches=60, seconds=125, epochs=10)
    assert trainer.current_epoch == 2 and len(model.lrs) == 120
    assert model.lrs[25] == pytest.approx(LR * (FLOOR + (1 - FLOOR) * 0.5 * (1 + math.cos(math.pi * 19 / 114))))


class _Endless(torch.utils.data.IterableDataset):
    def __iter__(self):
        while True:
            yield torch.randn(32)


def test_an_endless_training_loader_is_refused_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(_Timed, "train_dataloader", lambda self: DataLoader(_Endless(), batch_size=4))
    with pytest.raises(ValueError, match="budget.seconds=10 needs a training loader with a length"):
        _fit(tmp_path, monkeypatch, batches=4, seconds=10, epochs=2)


def test_a_schedule_that_cannot_be_shortened_is_refused_and_bad_values_are_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"budget.seconds=10: the learning-rate schedule StepLR \(stepped per epoch\) "
                                         "cannot be shortened"):
        _fit(tmp_path, monkeypatch, batches=4, seconds=10, scheduler="step_lr")
    assert check_seconds(None) is None and check_seconds(30) == 30.0
    for bad in (0, -5, float("nan"), float("inf"), "30", True):
        with pytest.raises(ValueError, match=r"budget.seconds=.* must be a positive number of seconds"):
            check_seconds(bad)


def test_a_recipe_run_with_a_time_budget_says_what_it_ran(tmp_path):
    """Through ``seqattn.run``: a budget spent in the first epoch stops the run after it (of the 3 planned), and
    metrics.json says so; a bad value is an error before any data is read."""
    data = tmp_path / "data"
    metrics = train(compose(TASKS["text_cls"].overrides + QUIET + ["trainer.max_epochs=3", "budget.seconds=0.001"],
                            tmp_path / "run", data))
    assert metrics["epochs"] == 1
    assert metrics["time_budget"].startswith("budget.seconds=0.001: 1 epochs (the plan's 3 epochs) in ")
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["time_budget"] == metrics["time_budget"]
    with pytest.raises(ValueError, match=r"budget.seconds=-1 must be a positive number"):
        train(compose(TASKS["text_cls"].overrides + QUIET + ["budget.seconds=-1"], tmp_path / "bad", tmp_path / "none"))
    assert not (tmp_path / "none").exists()
