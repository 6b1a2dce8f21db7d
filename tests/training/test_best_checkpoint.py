"""best.ckpt written at most every ``min_seconds``: a new best found sooner waits in memory (its own copy of the
weights) until an epoch end that is due, a last.ckpt write, the end of training or an exception (issue 20)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.utils.data import DataLoader

from seqattn.training.callbacks import BestCheckpoint, LastCheckpoint


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class _Scripted(BoringModel):
    """One training step (1 s of the fake clock) and one validation batch per epoch; epoch ``e`` logs
    ``score = scores[e]``; ``fail_at`` (an epoch) raises in its training step. Keeps a copy of the weights
    each validation saw, by global step."""

    def __init__(self, clock: _Clock, scores: list[float], fail_at: int | None = None) -> None:
        super().__init__()
        self.clock, self.scores, self.fail_at = clock, scores, fail_at
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def training_step(self, batch, batch_idx):
        if self.current_epoch == self.fail_at:
            raise RuntimeError("planted failure")
        self.clock.now += 1.0
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.weights[self.global_step] = {k: v.detach().clone() for k, v in self.state_dict().items()}
        self.log("score", self.scores[self.current_epoch])
        return super().validation_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4), batch_size=4)

    def val_dataloader(self):
        return DataLoader(RandomDataset(32, 4), batch_size=4)


class _RecordingIO(TorchCheckpointIO):
    """Records ``(file name, its global step, the clock then)`` of every checkpoint written, and at each
    ``last.ckpt`` write the global step of the ``best.ckpt`` then on disk (None when there is none)."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.writes: list[tuple[str, int, float]] = []
        self.best_on_disk_at_last: list[int | None] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        self.writes.append((Path(path).name, checkpoint["global_step"], self.clock.now))
        if str(path).endswith("last.ckpt"):
            best = Path(path).parent / "best.ckpt"
            self.best_on_disk_at_last.append(torch.load(best, weights_only=True)["global_step"]
                                             if best.exists() else None)
        super().save_checkpoint(checkpoint, path, storage_options)


def _fit(tmp_path, monkeypatch, scores, min_seconds, last_seconds=None, fail_at=None):
    clock = _Clock()
    monkeypatch.setattr("seqattn.training.callbacks.time.monotonic", clock)
    best = BestCheckpoint(dirpath=tmp_path, filename="best", monitor="score", mode="min", save_top_k=1,
                          save_weights_only=True, min_seconds=min_seconds)
    callbacks = [best] if last_seconds is None else [best, LastCheckpoint(dirpath=tmp_path, min_seconds=last_seconds)]
    io = _RecordingIO(clock)
    model = _Scripted(clock, scores, fail_at)
    trainer = L.Trainer(max_epochs=len(scores), callbacks=callbacks, plugins=[io], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        default_root_dir=tmp_path)
    if fail_at is None:
        trainer.fit(model)
    else:
        with pytest.raises(RuntimeError, match="planted failure"):
            trainer.fit(model)
    return io, model, best


def _best_file(tmp_path) -> dict:
    return torch.load(tmp_path / "best.ckpt", weights_only=True)


def test_a_best_found_early_waits_and_is_written_with_its_own_weights(tmp_path, monkeypatch):
    # 1 s per epoch, min_seconds 2.5: step 1's best is written at once; steps 2 and 3 improve too soon after it
    # and wait; step 4 does not improve, but 3 s have passed: step 3's best is written then, with the weights
    # step 3 had (not step 4's, which the live parameters hold by then)
    io, model, best = _fit(tmp_path, monkeypatch, [5.0, 4.0, 3.0, 9.0, 9.0, 9.0], min_seconds=2.5)
    assert io.writes == [("best.ckpt", 1, 1.0), ("best.ckpt", 3, 4.0)]
    saved = _best_file(tmp_path)
    assert saved["global_step"] == 3 and best.best_model_score == 3.0
    for name, value in model.weights[3].items():
        torch.testing.assert_close(saved["state_dict"][name], value, rtol=0, atol=0)
    assert not torch.equal(model.weights[3]["layer.weight"], model.weights[4]["layer.weight"])
    # weights only: what test / predict / init_from read, not the optimizer (resume reads last.ckpt)
    assert "optimizer_states" not in saved and "callbacks" not in saved


def test_the_end_of_training_writes_the_best_still_waiting(tmp_path, monkeypatch):
    io, _, _ = _fit(tmp_path, monkeypatch, [5.0, 4.0, 3.0], min_seconds=100)
    assert io.writes == [("best.ckpt", 1, 1.0), ("best.ckpt", 3, 3.0)]
    assert _best_file(tmp_path)["global_step"] == 3


def test_min_seconds_zero_writes_every_new_best_at_once(tmp_path, monkeypatch):
    io, _, _ = _fit(tmp_path, monkeypatch, [5.0, 4.0, 6.0, 3.0], min_seconds=0)
    assert [(name, step) for name, step, _ in io.writes] == [("best.ckpt", 1), ("best.ckpt", 2), ("best.ckpt", 4)]


def test_a_last_checkpoint_never_names_a_best_that_is_not_on_disk(tmp_path, monkeypatch):
    # last.ckpt at every epoch end; its callback state names the best so far, so best.ckpt must hold it then
    io, _, _ = _fit(tmp_path, monkeypatch, [5.0, 4.0, 6.0, 3.0, 7.0], min_seconds=100, last_seconds=0)
    assert io.best_on_disk_at_last == [1, 2, 2, 4, 4]  # the five epoch ends (the last is the final state)
    last = torch.load(tmp_path / "last.ckpt", weights_only=False)
    states = [s for k, s in last["callbacks"].items() if k.startswith("BestCheckpoint")]
    assert states and states[0]["best_model_score"] == 3.0


def test_an_exception_writes_the_best_still_waiting(tmp_path, monkeypatch):
    io, _, _ = _fit(tmp_path, monkeypatch, [5.0, 4.0, 3.0, 2.0], min_seconds=100, fail_at=2)
    assert io.writes == [("best.ckpt", 1, 1.0), ("best.ckpt", 2, 2.0)]
    assert _best_file(tmp_path)["global_step"] == 2


@pytest.mark.parametrize("bad", [-1.0, None, float("nan")])
def test_a_bad_min_seconds_is_refused_with_the_value(tmp_path, bad):
    with pytest.raises(ValueError, match=rf"min_seconds must be a number of seconds >= 0.*got {bad}"):
        BestCheckpoint(dirpath=tmp_path, min_seconds=bad)
