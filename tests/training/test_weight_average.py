"""``callbacks.weight_average`` (seqattn.training.averaging.WeightAverage): validation, best.ckpt and the end of
training hold the exponential moving average of the weights; training itself and last.ckpt's weights are the
trained ones."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

from seqattn.training.averaging import WeightAverage
from seqattn.training.callbacks import BestCheckpoint, LastCheckpoint


class _Recorded(BoringModel):
    """4 training steps per epoch; keeps the weights before training, after every optimizer step and the ones
    every validation saw; logs a validation score that improves until epoch 1 and then gets worse."""

    def __init__(self) -> None:
        super().__init__()
        self.trained: list[dict[str, torch.Tensor]] = []
        self.validated: dict[int, dict[str, torch.Tensor]] = {}

    def _weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.named_parameters()}

    def on_train_start(self) -> None:
        self.trained = [self._weights()]

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.trained.append(self._weights())

    def validation_step(self, batch, batch_idx):
        self.validated[self.global_step] = self._weights()
        self.log("score", [3.0, 1.0, 2.0][self.current_epoch])
        return super().validation_step(batch, batch_idx)

    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 16), batch_size=4)

    def val_dataloader(self):
        return DataLoader(RandomDataset(32, 4), batch_size=4)


def _fit(tmp_path, average: WeightAverage | None):
    L.seed_everything(0)
    model = _Recorded()
    callbacks = [BestCheckpoint(dirpath=tmp_path, filename="best", monitor="score", mode="min", save_top_k=1,
                                save_weights_only=True), LastCheckpoint(dirpath=tmp_path)]
    if average is not None:
        callbacks.insert(0, average)
    trainer = L.Trainer(max_epochs=3, callbacks=callbacks, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=1, default_root_dir=tmp_path)
    trainer.fit(model)
    return model


def _ema(trajectory: list[dict[str, torch.Tensor]], decay) -> list[dict[str, torch.Tensor]]:
    """The average after each step, written out: a_0 = the initial weights, a_t = a_{t-1} + (1 - d_t)(w_t - a_{t-1})."""
    out = [trajectory[0]]
    for t, w in enumerate(trajectory[1:], start=1):
        d = decay(t)
        out.append({k: out[-1][k] + (1 - d) * (w[k] - out[-1][k]) for k in w})
    return out


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k])


@pytest.mark.parametrize("warmup", [False, True])
def test_validation_best_ckpt_and_the_end_hold_the_average_and_training_is_unchanged(tmp_path, warmup):
    plain = _fit(tmp_path / "plain", None)
    model = _fit(tmp_path / "ema", WeightAverage(decay=0.9, warmup=warmup))
    assert len(model.trained) == 13  # the initial weights + 3 epochs x 4 steps
    # training follows the same trajectory as without the callback (the trained weights come back after validation)
    for a, b in zip(plain.trained, model.trained, strict=True):
        _close(a, b)
    decay = (lambda t: min(0.9, (1 + t) / (10 + t))) if warmup else (lambda t: 0.9)
    ema = _ema(model.trained, decay)
    for step in (4, 8, 12):  # every epoch's validation scored the average, not the trained weights
        _close(model.validated[step], ema[step])
        assert not torch.allclose(model.validated[step]["layer.weight"], model.trained[step]["layer.weight"])
    # the best epoch (1: step 8) is written with the average then
    best = torch.load(tmp_path / "ema" / "best.ckpt", weights_only=True)
    assert best["global_step"] == 8
    _close({k: best["state_dict"][k] for k in ema[8]}, ema[8])
    # last.ckpt (resume) holds the trained weights, and the average in the callback's state
    last = torch.load(tmp_path / "ema" / "last.ckpt", weights_only=False)
    _close({k: last["state_dict"][k] for k in ema[12]}, model.trained[12])
    state = next(v for k, v in last["callbacks"].items() if "WeightAverage" in k)
    for name, value in zip(state["names"], state["average"], strict=True):
        torch.testing.assert_close(value, ema[12][name])
    # the module ends holding the average
    _close(dict((k, v.detach()) for k, v in model.named_parameters()), ema[12])


def test_decay_zero_is_off_and_bad_decays_raise(tmp_path):
    plain = _fit(tmp_path / "plain", None)
    model = _fit(tmp_path / "off", WeightAverage(decay=0.0))
    for step in (4, 8, 12):
        _close(model.validated[step], plain.validated[step])
    assert WeightAverage(0.999).decay_at(1) == pytest.approx(2 / 11)
    assert WeightAverage(0.999).decay_at(10_000) == 0.999
    assert WeightAverage(0.999, warmup=False).decay_at(1) == 0.999
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="decay must lie in"):
            WeightAverage(bad)


def test_a_resumed_fit_continues_the_average_and_the_trained_weights(tmp_path):
    """Resuming from last.ckpt (trained weights + the callback's average) ends where one uninterrupted fit ends."""

    def fit(folder, epochs, ckpt_path=None):
        L.seed_everything(0)
        model = _Recorded()
        average = WeightAverage(decay=0.9)
        trainer = L.Trainer(max_epochs=epochs, callbacks=[average, LastCheckpoint(dirpath=folder)], logger=False,
                            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                            default_root_dir=folder)
        trainer.fit(model, ckpt_path=ckpt_path)
        return model, average

    whole, whole_average = fit(tmp_path / "whole", 3)
    fit(tmp_path / "part", 2)
    resumed, resumed_average = fit(tmp_path / "resumed", 3, ckpt_path=tmp_path / "part" / "last.ckpt")
    assert resumed_average._updates == whole_average._updates == 12
    _close(dict(resumed.named_parameters()), dict(whole.named_parameters()))  # both end holding the average
    _close(resumed.trained[-1], whole.trained[-1])  # and trained to the same weights
