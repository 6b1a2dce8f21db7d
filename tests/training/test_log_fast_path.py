"""seqattn.training.log_fast_path: Lightning's ``self.log`` skips its per-call walk of a stored result
only when nothing would move, and logs the same values."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate
from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection
from torchmetrics.classification import MulticlassAccuracy

from seqattn.training import log_fast_path


@pytest.fixture
def restore():
    was = log_fast_path.installed()
    yield
    log_fast_path.install() if was else log_fast_path.uninstall()


def _epoch(values: list[float]) -> tuple[dict, _ResultCollection]:
    """Log a loss (mean over batches weighted by size) and an accuracy metric per step; the epoch's values."""
    rc = _ResultCollection(training=True)
    acc = MulticlassAccuracy(num_classes=3)
    for i, v in enumerate(values):
        acc.update(torch.tensor([i % 3, 1]), torch.tensor([1, 1]))
        rc.log("training_step", "loss", torch.tensor(v), on_step=True, on_epoch=True, batch_size=i + 1)
        rc.log("training_step", "acc", acc, on_step=False, on_epoch=True, batch_size=2)
    return rc.metrics(on_step=False)["callback"], rc


def test_the_fast_path_logs_what_lightning_logs(restore):
    values = [1.0, 0.5, 2.0, 0.25]
    log_fast_path.uninstall()
    slow, _ = _epoch(values)
    assert log_fast_path.install() and log_fast_path.installed()
    fast, _ = _epoch(values)
    assert slow.keys() == fast.keys() == {"loss", "loss_epoch", "acc"}
    want = sum(v * (i + 1) for i, v in enumerate(values)) / sum(range(1, len(values) + 1))
    assert float(fast["loss_epoch"]) == pytest.approx(want) and float(slow["loss_epoch"]) == pytest.approx(want)
    acc = MulticlassAccuracy(num_classes=3)  # the metric's own value over the same updates
    for i in range(len(values)):
        acc.update(torch.tensor([i % 3, 1]), torch.tensor([1, 1]))
    assert float(fast["acc"]) == float(slow["acc"]) == float(acc.compute())


def test_it_skips_the_walk_only_when_nothing_would_move(restore, monkeypatch):
    calls = []
    original = log_fast_path._ORIGINAL
    monkeypatch.setattr(log_fast_path, "_ORIGINAL", lambda self, *a, **k: calls.append((a, k)) or original(self, *a, **k))
    log_fast_path.install()
    _, rc = _epoch([1.0, 2.0, 3.0])
    first = len(calls)
    assert first <= 1  # at most the metric-valued result's first call (no value stored yet) walks
    rc["training_step.loss"].to(torch.device("cpu"))
    rc["training_step.loss"].to("cpu")
    assert len(calls) == first  # on the device already: no walk
    rc["training_step.loss"].to(torch.float64)  # a dtype: Lightning's own path
    rc["training_step.loss"].to(device="cpu")  # keyword arguments: Lightning's own path
    assert len(calls) == first + 2


def test_a_result_on_another_device_still_moves(restore):
    """A value on another device (here ``meta``) moves the stored result there, as Lightning does."""
    log_fast_path.install()
    rc = _ResultCollection(training=True)
    rc.log("training_step", "loss", torch.tensor(1.0), on_step=True, on_epoch=True, batch_size=2)
    assert rc["training_step.loss"].value.device.type == "cpu"
    rc["training_step.loss"].to(torch.device("meta"))
    assert rc["training_step.loss"].value.device.type == "meta"
    assert rc["training_step.loss"].cumulated_batch_size.device.type == "meta"
    result = rc["training_step.loss"]  # every stored tensor counts: the value alone on the device is not enough
    result.cumulated_batch_size = torch.tensor(2)
    result.to("meta")
    assert result.value.device.type == result.cumulated_batch_size.device.type == "meta"


def test_a_run_installs_it(restore, tmp_path, compose_cfg):
    from seqattn.run import build_trainer, plan_run

    log_fast_path.uninstall()
    cfg = compose_cfg(["task=social"])  # karate: a graph that ships with PyG
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    build_trainer(cfg, plan_run(cfg, datamodule), tmp_path)
    assert log_fast_path.installed()
