"""End to end: `task=molecule_pretrain` learns hidden atoms' elements on unlabelled molecules, and
`task=molecule init_from=<it>` starts from its adapter and encoder with a new property head."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from hydra.utils import instantiate

import seqattn

from seqattn.run import build_objective, finetune_options, train
from seqattn.training.checkpoint import read_checkpoint
from tests.pretrain_checks import assert_starts_from_pretraining

pytest.importorskip("rdkit")

QUIET = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=false", "callbacks.early_stopping=null",
         "plot=false", "cpu_threads=1"]
SMALL = ["data.limit=600", "data.batch_size=32", "adapter.positional=random_walk", "model.dim=32", "model.depth=2",
         "model.heads=2", *QUIET]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from tests.workflows import compose

    out = tmp_path_factory.mktemp("pretrain")
    cfg = compose(["task=molecule_pretrain", *SMALL, "trainer.max_epochs=5", "objective.mask_ratio=0.3"],
                  out / "run", out / "data")
    return train(cfg), out


def _objective(cfg):
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return build_objective(cfg, datamodule), datamodule


@pytest.mark.slow
def test_pretraining_lowers_the_hidden_atoms_loss(pretrained):
    metrics, _ = pretrained
    with open(Path(metrics["output_dir"]) / "csv" / "metrics.csv", newline="") as f:
        val = [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert len(val) >= 5 and val[-1] < val[0] - 0.1, val
    assert 0.0 < metrics["test/acc"] <= 1.0
    checkpoint = read_checkpoint(metrics["best_checkpoint"])
    spec = checkpoint["hyper_parameters"]["spec"]
    assert spec["sizes"]["node_types"] == 18 and spec["labels"] is None
    assert checkpoint["state_dict"]["net.head.net.1.weight"].shape[0] == 18  # a head over the elements
    with pytest.raises(ValueError, match=r"pretraining checkpoint.*nothing to predict with.*init_from="):
        seqattn.load(metrics["best_checkpoint"])


@pytest.mark.slow
def test_fine_tuning_a_property_starts_from_the_pretrained_adapter_and_encoder_with_a_new_head(pretrained, tmp_path,
                                                                                               caplog):
    from tests.workflows import compose

    metrics, out = pretrained
    ckpt = metrics["best_checkpoint"]
    cfg = compose(["task=molecule", *SMALL, "budget.steps=null", "trainer.max_epochs=1", f"init_from={ckpt}"],
                  tmp_path / "ft", out / "data")
    model, data = _objective(cfg)
    summary = assert_starts_from_pretraining(model, finetune_options(cfg), caplog, must_load=("net.adapter.pe_proj.",))
    assert summary["loaded"] > 20
    spec = model.hparams["spec"]  # the labelled task's targets and statistics, not the pretraining's
    spec = spec if isinstance(spec, dict) else spec.to_dict()
    assert spec["labels"] == ["tpsa"] and spec["target_mean"] == pytest.approx(data.target_mean)
