"""End to end: `task=image_pretrain` learns to restore hidden patches of unlabelled images, its checkpoint
refuses to predict, and `task=image init_from=<it>` starts from its adapter and encoder with a new head."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

import seqattn
from seqattn.run import build_objective, finetune_options, train
from seqattn.training.checkpoint import read_checkpoint
from tests.pretrain_checks import assert_starts_from_pretraining

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null",
         "plot=false", "cpu_threads=1"]
SMALL = ["data.shapes.n_train=600", "data.shapes.n_val=64", "data.shapes.n_test=64", "data.batch_size=32",
         "model.dim=32", "model.depth=2", "model.heads=2", *QUIET]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from tests.workflows import compose

    out = tmp_path_factory.mktemp("pretrain")
    cfg = compose(["task=image_pretrain", *SMALL, "trainer.max_epochs=6", "objective.optimizer.lr=5e-3"],
                  out / "run", out / "data")
    return train(cfg), out


@pytest.mark.slow
def test_pretraining_lowers_the_hidden_patches_loss_and_refuses_to_predict(pretrained):
    metrics, _ = pretrained
    with open(Path(metrics["output_dir"]) / "csv" / "metrics.csv", newline="") as f:
        val = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert len(val) >= 6 and val[-1] < 0.9 * val[0] and val[-1] < min(val[:3]), val  # the hidden patches' loss falls
    checkpoint = read_checkpoint(metrics["best_checkpoint"])
    assert checkpoint["seqattn_config"]["task_name"] == "image_pretrain"
    assert checkpoint["hyper_parameters"]["spec"]["sizes"]["image_size"] == [16, 16]
    assert checkpoint["state_dict"]["net.head.net.1.weight"].shape[0] == 12  # 2×2 patches of 3 channels
    with pytest.raises(ValueError, match=r"pretraining checkpoint.*nothing to predict with.*init_from="):
        seqattn.load(metrics["best_checkpoint"])


@pytest.mark.slow
def test_fine_tuning_starts_from_the_pretrained_adapter_and_encoder_with_a_new_head(pretrained, tmp_path, caplog):
    from tests.workflows import compose

    metrics, out = pretrained
    ckpt = metrics["best_checkpoint"]
    cfg = compose(["task=image", *SMALL, "budget.steps=null", "trainer.max_epochs=1", f"init_from={ckpt}"],
                  tmp_path / "ft", out / "data")
    datamodule = instantiate(cfg.data)
    datamodule.setup("fit")
    assert_starts_from_pretraining(build_objective(cfg, datamodule), finetune_options(cfg), caplog,
                                   must_load=("net.adapter.proj.",))
    assert 0.0 <= train(cfg)["test/acc"] <= 1.0  # and it trains


def test_an_unlabelled_image_folder_is_read_without_class_folders(compose_cfg, tmp_path):
    from PIL import Image

    (tmp_path / "img" / "deeper").mkdir(parents=True)
    for i in range(10):
        size = (8, 8) if i < 8 else (12, 6)
        Image.fromarray((np.random.default_rng(i).random((*size, 3)) * 255).astype("uint8")).save(
            tmp_path / "img" / ("deeper" if i % 3 == 0 else "") / f"{i}.png")
    cfg = compose_cfg(["task=image_pretrain", f"data.path={tmp_path / 'img'}", "data.val_fraction=0.2",
                       "data.test_fraction=0.2"])
    data = instantiate(cfg.data)
    data.setup("fit")
    assert data.source == "folder" and data.split_sizes() == {"train": 6, "val": 2, "test": 2}
    assert data.image_size == (8, 8)  # the most common size
    batch = next(iter(data.train_dataloader()))
    assert "labels" not in batch and batch["images"].shape[1:] == (3, 8, 8)
    assert data.spec().labels is None and data.spec().sizes["image_size"] == [8, 8]
    (tmp_path / "list.csv").write_text("path,label\nimg/0.png,a\n")
    with pytest.raises(Exception, match="image pretraining reads a folder"):  # hydra wraps the ValueError
        instantiate(compose_cfg(["task=image_pretrain", f"data.path={tmp_path / 'list.csv'}"]).data)
