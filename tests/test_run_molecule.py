"""End to end: `python -m seqattn.run task=molecule` on a slice of the NCI/TPSA molecules learns, writes its
artefacts, and its checkpoint predicts a user's SMILES file the same batched as one at a time."""

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from seqattn.objectives import PropertyPrediction
from seqattn.objectives.predictions import prediction_rows
from seqattn.run import train

TINY = [
    "task=molecule",
    "data.limit=700",
    "data.batch_size=32",
    "adapter.positional=random_walk",
    "model.dim=32",
    "model.depth=2",
    "trainer.max_epochs=10",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.early_stopping=null",
]


def test_molecule_recipe_beats_the_mean_baseline_and_predicts_batched_like_one_at_a_time(compose_cfg, tmp_path):
    cfg = compose_cfg(TINY)
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    assert (out / "checkpoints" / "best.ckpt").is_file()
    assert (out / "test_properties.png").stat().st_size > 20_000
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test/rmse_tpsa"] == pytest.approx(metrics["test/rmse_tpsa"])

    # the trivial baseline: predict the training mean for every test molecule
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    test_y = torch.cat([b["targets"][:, 0] for b in datamodule.test_dataloader()])
    baseline = float((test_y - datamodule.target_mean[0]).pow(2).mean().sqrt())
    assert metrics["test/baseline_rmse_tpsa"] == pytest.approx(baseline, rel=1e-4)
    assert metrics["test/rmse_tpsa"] < 0.6 * baseline, (metrics["test/rmse_tpsa"], baseline)

    # the checkpoint carries the target statistics and the data config: predict without training data
    model = PropertyPrediction.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu").eval()
    assert model.target_mean.tolist() == pytest.approx(datamodule.target_mean)
    fresh = instantiate(model.run_config["data"])  # no prepare_data() / setup()
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "OC(=O)c1ccccc1C(=O)O", "C", "N#Cc1ccccc1",
              "CN1C=NC2=C1C(=O)N(C(=O)N2C)C", "O=[N+]([O-])c1ccccc1"]
    source = tmp_path / "to_predict.csv"
    source.write_text("smiles\n" + "\n".join(smiles) + "\n")
    rows = []
    with torch.no_grad():
        for batch_size in (5, 1):
            got = []
            for i, batch in enumerate(fresh.predict_loader(source, batch_size=batch_size)):
                got += prediction_rows(model.predict_step(batch, i), fresh.describe(batch))
            rows.append(got)
    batched, single = rows
    assert [r["id"] for r in batched] == smiles == [r["smiles"] for r in single]
    for a, b in zip(batched, single):
        assert a["tpsa"] == pytest.approx(b["tpsa"], abs=1e-4)
    json.dumps(batched)  # JSON-able rows
    # the polar molecules get a larger surface than methane
    by_id = {r["id"]: r["tpsa"] for r in batched}
    assert by_id["OC(=O)c1ccccc1C(=O)O"] > by_id["C"] + 20


def test_bond_token_recipe_learns_and_its_checkpoint_predicts_bond_graphs(compose_cfg, tmp_path):
    """data.tokens=bonds through the recipe: the model reads bond tokens (widths from the data's spec), beats the
    training-mean baseline by far, and the checkpoint's data config builds bond graphs for a user's SMILES."""
    cfg = compose_cfg(TINY + ["data.tokens=bonds"])
    metrics = train(cfg)
    assert metrics["test/rmse_tpsa"] < 0.6 * metrics["test/baseline_rmse_tpsa"], metrics
    out = Path(metrics["output_dir"])
    assert (out / "test_properties.png").stat().st_size > 20_000  # the attention drawn on the bonds
    model = PropertyPrediction.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu").eval()
    fresh = instantiate(model.run_config["data"])
    assert fresh.tokens == "bonds"
    source = tmp_path / "to_predict.smi"
    source.write_text("CCO\nOC(=O)c1ccccc1C(=O)O\nC\n")
    batch = next(iter(fresh.predict_loader(source, batch_size=3)))
    assert batch["mask"].sum(1).tolist() == [2, 12, 1]  # ethanol's 2 bonds, phthalic acid's 12, methane's lone atom
    with torch.no_grad():
        rows = prediction_rows(model.predict_step(batch, 0), fresh.describe(batch))
    assert rows[1]["tpsa"] > rows[2]["tpsa"] + 20  # two carboxylic acids are far more polar than methane
