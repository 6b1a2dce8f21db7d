"""End to end: ``python -m seqattn.run task=image`` on tiny built-in shapes learns, writes its figures,
and its checkpoint predicts the same batched as one image at a time."""

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from PIL import Image

from seqattn.objectives import SequenceClassification
from seqattn.objectives.predictions import prediction_rows
from seqattn.run import train
from tests.workflows import accuracy_from_confusion, checkpoint_accuracy, majority_accuracy

DATA = [
    "task=image",
    "data.shapes.classes=[triangle,ring]",
    "data.shapes.n_train=1600", "data.shapes.n_val=100", "data.shapes.n_test=200",
    "data.batch_size=32",
    "adapter.mode=patches", "adapter.patch_size=2",
    "trainer.max_epochs=10",
    "data.augment.shift=0",  # 10 short epochs: random shifts (a real-data default) make the metric noisy (0.74-0.91)
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.early_stopping=null",
]
TINY = DATA + ["model.dim=32", "model.depth=2", "model.heads=2"]


def _predict_rows(model, datamodule, source, batch_size):
    rows = []
    for i, batch in enumerate(datamodule.predict_loader(source, batch_size=batch_size)):
        with torch.no_grad():
            output = model.predict_step(batch, i)
        rows += prediction_rows(output, datamodule.describe(batch))
    return rows


def test_image_recipe_learns_writes_figures_and_predicts(compose_cfg, tmp_path):
    cfg = compose_cfg(TINY)
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    assert metrics["encoder"] == "Encoder"
    assert metrics["test/acc"] > 0.75, metrics["test/acc"]  # two balanced classes: chance is 0.5
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["labels"] == ["triangle", "ring"] and sum(map(sum, saved["confusion_matrix"])) == 200
    assert (out / "confusion_matrix.png").stat().st_size > 5_000
    assert (out / "attention_map.png").stat().st_size > 10_000

    # predict protocol: a datamodule from the checkpoint's data config, no prepare_data()/setup()
    model = SequenceClassification.load_from_checkpoint(out / "checkpoints" / "best.ckpt", map_location="cpu")
    model.eval()
    datamodule = instantiate(model.run_config["data"])
    images = tmp_path / "to_predict"
    test_batch = next(iter(instantiate(cfg.data).test_dataloader()))
    images.mkdir()
    for i in range(5):  # test images as PNG files, one of another size (resized like in training)
        array = (test_batch["images"][i].permute(1, 2, 0).numpy() * 255).round().astype("uint8")
        image = Image.fromarray(array)
        (image.resize((24, 20)) if i == 4 else image).save(images / f"img{i}.png")
    batched = _predict_rows(model, datamodule, images, batch_size=4)
    one_by_one = [_predict_rows(model, datamodule, images / f"img{i}.png", batch_size=1)[0] for i in range(5)]
    assert [r["id"] for r in batched] == [f"img{i}.png" for i in range(5)]
    for a, b in zip(batched, one_by_one):
        assert a["label"] == b["label"] and a["prob"] == pytest.approx(b["prob"], abs=1e-5)
        assert sum(a["probs"].values()) == pytest.approx(1.0, abs=1e-5)
    # the files hold the test images as uint8 (PNG is lossless): the rows are the model's own predictions
    quantised = (test_batch["images"][:4] * 255).round() / 255
    with torch.no_grad():
        probs = model(dict(images=quantised, pixel_mask=test_batch["pixel_mask"][:4]))["logits"].softmax(-1)
    for row, p in zip(batched[:4], probs):
        assert row["label"] == model.labels[int(p.argmax())] and row["prob"] == pytest.approx(float(p.max()), abs=1e-4)


def test_cnn_and_local_window_run_through_the_same_recipe(compose_cfg):
    cfg = compose_cfg(DATA + ["model=cnn", "model.dim=32", "model.depth=2", "trainer.max_epochs=2"], run="cnn")
    metrics = train(cfg)
    assert metrics["encoder"] == "ConvEncoder" and Path(metrics["figure"]).is_file()
    datamodule = instantiate(cfg.data)  # the same test images for both runs
    majority = majority_accuracy(datamodule)
    print("cnn test accuracy", metrics["test/acc"], "majority", majority)
    assert metrics["test/acc"] > majority + 0.05  # it learned
    assert metrics["test/acc"] == pytest.approx(checkpoint_accuracy(metrics["best_checkpoint"], datamodule), abs=1e-6)
    metrics = train(compose_cfg(TINY + ["adapter.window=3", "head.pooling=cls", "trainer.max_epochs=2"],
                                run="local"))
    assert metrics["encoder"] == "Encoder"
    # two epochs of a local window learn little: the tested network is the checkpoint's, with its window
    assert metrics["test/acc"] == pytest.approx(checkpoint_accuracy(metrics["best_checkpoint"], datamodule), abs=1e-6)
    assert metrics["test/acc"] == pytest.approx(accuracy_from_confusion(metrics["confusion_matrix"]), abs=1e-6)


def test_learned_2d_positions_by_config_take_the_grid_from_the_data(compose_cfg):
    from seqattn.run import build_objective

    cfg = compose_cfg(["task=image", "adapter.positional=learned2d", "data.image_size=[16,16]",
                       "adapter.mode=patches", "adapter.patch_size=4"])
    datamodule = instantiate(cfg.data, shapes={"n_train": 4, "n_val": 4, "n_test": 4})
    datamodule.setup()
    net = build_objective(cfg, datamodule).net  # the image size reaches the adapter in the data's spec
    assert net.adapter.grid == (4, 4)
    batch = next(iter(datamodule.test_dataloader()))
    assert net(batch)["logits"].shape == (4, 5)
    with pytest.raises(ValueError, match=r"4×4 token grid, got a 8×8 grid"):
        net({"images": torch.rand(1, 3, 32, 32), "pixel_mask": None})
