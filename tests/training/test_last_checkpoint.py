"""last.ckpt at epoch ends at most every ``min_seconds`` (one-step epochs would write a checkpoint per step),
always at the end of training, every epoch end with ``min_seconds=0`` (issue 20)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

from seqattn.training.callbacks import LastCheckpoint


class _Clock:
    """A fake ``time.monotonic`` that advances one second per training step."""

    now = 0.0

    def __call__(self) -> float:
        return self.now


class _OneStepEpochs(BoringModel):
    """One training batch and one validation batch per epoch (like task=social's full-graph epochs)."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock

    def training_step(self, batch, batch_idx):
        self.clock.now += 1.0
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 4), batch_size=4)

    def val_dataloader(self):
        return DataLoader(RandomDataset(32, 4), batch_size=4)


def _fit(tmp_path, monkeypatch, min_seconds: float, epochs: int = 6, **trainer_args) -> tuple[list[int], int]:
    """The global steps at which last.ckpt was written, and the global step it holds after the fit."""
    clock = _Clock()
    monkeypatch.setattr("seqattn.training.callbacks.time.monotonic", clock)
    last = LastCheckpoint(dirpath=tmp_path, min_seconds=min_seconds)
    written: list[int] = []
    save = last._save_checkpoint

    def spy(trainer, filepath):
        written.append(trainer.global_step)
        save(trainer, filepath)

    monkeypatch.setattr(last, "_save_checkpoint", spy)
    trainer = L.Trainer(max_epochs=epochs, callbacks=[last], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path, **trainer_args)
    trainer.fit(_OneStepEpochs(clock))
    return written, torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"]


def test_epoch_ends_write_at_most_every_min_seconds_and_the_final_state_always(tmp_path, monkeypatch):
    written, final = _fit(tmp_path, monkeypatch, min_seconds=2.5)
    # 1 s per one-step epoch: the first epoch end writes, the next once 2.5 s have passed (step 4), and the
    # end of training writes the final state (step 6) that the skipped epoch ends left out
    assert written == [1, 4, 6]
    assert final == 6


def test_min_seconds_zero_writes_at_every_epoch_end(tmp_path, monkeypatch):
    written, final = _fit(tmp_path, monkeypatch, min_seconds=0)
    assert written == [1, 2, 3, 4, 5, 6] and final == 6


def test_with_validation_every_other_epoch_it_writes_after_each_validation(tmp_path, monkeypatch):
    # Lightning saves after the validation then (not at the train epoch end, which may lack val metrics)
    written, final = _fit(tmp_path, monkeypatch, min_seconds=0, check_val_every_n_epoch=2)
    assert written == [2, 4, 6] and final == 6


@pytest.mark.parametrize("bad", [-1.0, None, float("nan")])
def test_a_bad_min_seconds_is_refused_with_the_value(tmp_path, bad):
    with pytest.raises(ValueError, match=rf"min_seconds must be a number of seconds >= 0.*got {bad}"):
        LastCheckpoint(dirpath=tmp_path, min_seconds=bad)
