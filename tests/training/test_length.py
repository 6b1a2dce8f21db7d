"""Training length from the data size (``train_length``): epochs and patience follow the number of training items."""

import pytest
from omegaconf import OmegaConf

from seqattn.training.length import plan_length


def _cfg(batch=32, devices=1, **plan):
    plan = {"steps": 6000, "min_epochs": 20, "max_epochs": 400, "patience": 0.2, "min_patience": 10, **plan}
    return OmegaConf.create({
        "train_length": plan, "data": {"batch_size": batch},
        "trainer": {"max_epochs": 30, "devices": devices},
        "callbacks": {"early_stopping": {"_target_": "lightning.pytorch.callbacks.EarlyStopping", "patience": 8},
                      "other": None},
    })


@pytest.mark.parametrize("items, epochs, patience", [
    (514, 353, 71),      # FreeSolv's training split: 17 steps an epoch
    (3360, 58, 12),      # Lipophilicity's: 105 steps an epoch
    (100, 400, 80),      # 4 steps an epoch: capped at max_epochs
    (200_000, 20, 10),   # 6,250 steps an epoch: at least min_epochs, at least min_patience
])
def test_epochs_and_patience_follow_the_training_set(items, epochs, patience):
    cfg = _cfg()
    message = plan_length(cfg, items)
    assert cfg.trainer.max_epochs == epochs and cfg.callbacks.early_stopping.patience == patience
    assert f"{epochs} epochs" in message and f"patience {patience}" in message
    assert cfg.train_length is None  # applied once: the run's config.yaml keeps the concrete numbers


def test_devices_share_the_epoch_and_given_values_win():
    cfg = _cfg(devices=2)
    plan_length(cfg, 514)  # 9 steps an epoch on each of 2 processes
    assert cfg.trainer.max_epochs == 400
    cfg = _cfg()
    given = {"trainer.max_epochs", "callbacks.early_stopping.patience"}
    message = plan_length(cfg, 514, overridden=lambda key: key in given)
    assert cfg.trainer.max_epochs == 30 and cfg.callbacks.early_stopping.patience == 8
    assert "(given)" in message
    cfg = _cfg()
    plan_length(cfg, 514, overridden=lambda key: key == "trainer.max_epochs")
    assert cfg.trainer.max_epochs == 30 and cfg.callbacks.early_stopping.patience == 10  # 0.2 * 30 -> min 10


def test_no_plan_no_change_and_bad_plans_are_errors():
    cfg = _cfg()
    cfg.train_length = None
    assert plan_length(cfg, 514) is None and cfg.trainer.max_epochs == 30
    with pytest.raises(ValueError, match="unknown keys"):
        plan_length(_cfg(epochs=3), 514)
    with pytest.raises(ValueError, match="steps > 0"):
        plan_length(_cfg(steps=0), 514)
    with pytest.raises(ValueError, match="min_epochs <= max_epochs"):
        plan_length(_cfg(min_epochs=50, max_epochs=10), 514)
