"""ImageDataModule: built-in shapes, image folders and CSVs the tests write (with an unreadable
file), padding of mixed sizes, the offline error of public datasets, and the predict protocol."""

import logging
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch
from PIL import Image

from seqattn.modalities.image.data import ImageDataModule, collate_images
from seqattn.modalities.image.readers import fit_image, load_image
from seqattn.objectives.predictions import Prediction, prediction_rows


def _write_png(path: Path, h: int, w: int, colour=(255, 0, 0), mode="RGB") -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(abs(hash(str(path))) % 2**32)
    if mode == "L":
        pixels = rng.integers(0, 256, (h, w), dtype=np.uint8)
    else:
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        pixels[0, 0] = colour
    Image.fromarray(pixels, mode=mode).save(path)
    return pixels


def _folder(root: Path, per_class: int = 6, broken: bool = True) -> Path:
    for label in ("cat", "dog"):
        for i in range(per_class):
            _write_png(root / label / f"{i}.png", 6 + i % 3, 8)
    if broken:
        (root / "dog" / "broken.png").write_bytes(b"this is not a PNG")
    return root


def test_shapes_batches():
    dm = ImageDataModule(shapes={"n_train": 20, "n_val": 10, "n_test": 10}, batch_size=8)
    assert dm.label_names == ["circle", "square", "triangle", "cross", "ring"] and dm.num_classes == 5
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].shape == (8, 3, 16, 16) and batch["pixel_mask"].all()
    assert batch["labels"].shape == (8,) and len(batch["ids"]) == 8


def test_folder_with_an_unreadable_file_is_an_error_that_names_it(tmp_path):
    root = _folder(tmp_path / "imgs")
    dm = ImageDataModule(source="folder", path=str(root), image_size=8)
    with pytest.raises(ValueError, match=r"1 of 13 image file\(s\) cannot be read:\n.*broken\.png") as err:
        dm.setup()
    assert "on_bad_file=skip" in str(err.value)


def test_folder_skip_counts_and_logs_the_unreadable_file(tmp_path, caplog):
    root = _folder(tmp_path / "imgs")
    (root / ".DS_Store").write_bytes(b"junk")  # hidden files are ignored, and said so
    dm = ImageDataModule(source="folder", path=str(root), image_size=8, on_bad_file="skip", augment={"shift": 0},
                         val_fraction=0.2, test_fraction=0.2)
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.image"):
        dm.setup()
    assert [Path(p).name for p, _ in dm.skipped] == ["broken.png"]
    assert "skipped 1 of 13 unreadable" in caplog.text and "broken.png" in caplog.text
    assert "ignored 1 file(s)" in caplog.text
    assert dm.label_names == ["cat", "dog"]
    assert sum(len(d) for d in dm.datasets.values()) == 12
    batch = next(iter(dm.train_dataloader()))
    assert batch["images"].shape[1:] == (3, 8, 8) and batch["pixel_mask"].all()


def test_csv_path_label_split(tmp_path):
    rows = ["path,label,split"]
    for i in range(4):
        for label in ("a", "b"):
            split = ["train", "train", "val", "test"][i]
            _write_png(tmp_path / "img" / f"{label}{i}.png", 5, 5)
            rows.append(f"img/{label}{i}.png,{label},{split}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    dm = ImageDataModule(source="csv", path=str(tmp_path / "labels.csv"), image_size=5)
    dm.setup()
    assert dm.label_names == ["a", "b"]
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 4, "val": 2, "test": 2}
    assert sorted(dm.datasets["test"].ids) == ["img/a3.png", "img/b3.png"]
    image = dm.datasets["test"].images[dm.datasets["test"].ids.index("img/a3.png")]
    torch.testing.assert_close(image, load_image(tmp_path / "img" / "a3.png"))


def test_csv_errors_name_file_and_line(tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("path,label\nimg/x.png,a\n,b\n")
    with pytest.raises(ValueError, match=r"bad\.csv:3: empty"):
        ImageDataModule(source="csv", path=str(csv)).setup()
    csv.write_text("file,label\nx.png,a\n")
    with pytest.raises(ValueError, match=r"missing \['path'\]"):
        ImageDataModule(source="csv", path=str(csv)).setup()
    csv.write_text("path,label\nmissing.png,a\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2: cannot read image .*missing\.png"):
        ImageDataModule(source="csv", path=str(csv)).setup()


def test_mixed_sizes_pad_and_resize(tmp_path):
    image = torch.rand(3, 4, 10)
    padded, mask = fit_image(image, (8, 8), "pad")  # wider than 8: shrunk to 3×8 (aspect kept), then padded
    assert padded.shape == (3, 8, 8) and mask.sum() == 3 * 8 and mask[:3].all() and padded[:, 3:].abs().sum() == 0
    resized, mask = fit_image(image, (8, 8), "resize")
    assert resized.shape == (3, 8, 8) and mask.all()
    kept, mask = fit_image(image, (8, 8), "none")
    assert kept.shape == (3, 4, 10)
    batch = collate_images([{"image": torch.rand(3, 4, 10), "pixel_mask": torch.ones(4, 10, dtype=torch.bool),
                             "label": 0, "id": "a"},
                            {"image": torch.rand(3, 6, 3), "pixel_mask": torch.ones(6, 3, dtype=torch.bool),
                             "label": 1, "id": "b"}])
    assert batch["images"].shape == (2, 3, 6, 10)
    assert batch["pixel_mask"].sum(dim=(1, 2)).tolist() == [40, 18]
    assert not batch["pixel_mask"][0, 4:].any() and not batch["pixel_mask"][1, :, 3:].any()


def test_grayscale_files_become_rgb(tmp_path):
    pixels = _write_png(tmp_path / "g.png", 4, 5, mode="L")
    image = load_image(tmp_path / "g.png")
    assert image.shape == (3, 4, 5)
    torch.testing.assert_close(image[1], torch.from_numpy(pixels).float() / 255)


@pytest.mark.parametrize("name", ["cifar10", "mnist"])
def test_public_dataset_offline_is_a_clear_error(tmp_path, name, monkeypatch):
    dm = ImageDataModule(source=name, data_dir=str(tmp_path), download=False)
    with pytest.raises(ValueError, match=r"download disabled.*Place .* by hand"):
        dm.prepare_data()

    def no_network(*args, **kwargs):
        raise URLError("network is unreachable")

    import torchvision.datasets.cifar as cifar
    import torchvision.datasets.mnist as mnist

    monkeypatch.setattr(cifar, "download_and_extract_archive", no_network)
    monkeypatch.setattr(mnist, "download_and_extract_archive", no_network)
    expected = "cifar-10-python.tar.gz" if name == "cifar10" else r"MNIST/raw/train-images-idx3-ubyte.gz"
    with pytest.raises(ValueError, match=rf"(?s)download failed.*{expected}"):
        ImageDataModule(source=name, data_dir=str(tmp_path), download=True).setup()


def test_predict_loader_needs_no_setup_and_keeps_ids(tmp_path):
    root = tmp_path / "in"
    _write_png(root / "b.png", 10, 6)
    _write_png(root / "sub" / "a.jpg", 16, 16)
    (root / "notes.txt").write_text("not an image: not listed")
    dm = ImageDataModule(source="folder", path="/nonexistent", image_size=8, resize="pad")
    batches = list(dm.predict_loader(root, batch_size=1))
    assert [b["ids"] for b in batches] == [["b.png"], ["sub/a.jpg"]]
    assert batches[0]["images"].shape == (1, 3, 8, 8) and batches[0]["pixel_mask"].sum() == 8 * 5
    assert "labels" not in batches[0]
    single = next(iter(dm.predict_loader(root / "b.png")))
    assert single["ids"] == ["b.png"]
    (root / "c.png").write_bytes(b"broken")
    assert len(list(dm.predict_loader(root))) == 1 and dm.predict_errors[0][0].endswith("c.png")  # skipped, listed
    dm.on_error = "stop"
    with pytest.raises(ValueError, match=r"c\.png"):
        dm.predict_loader(root)
    probs = torch.tensor([[0.2, 0.8], [0.9, 0.1]])
    rows = prediction_rows(Prediction("label", probs.argmax(-1), probs, names=["cat", "dog"]),
                           dm.describe({"ids": ["x", "y"]}))
    assert rows[0] == {"id": "x", "label": "dog", "prob": pytest.approx(0.8),
                       "probs": {"cat": pytest.approx(0.2), "dog": pytest.approx(0.8)}}
    assert rows[1]["label"] == "cat"


def test_bad_arguments():
    with pytest.raises(ValueError, match="source"):
        ImageDataModule(source="imagenet")
    with pytest.raises(ValueError, match="needs path"):
        ImageDataModule(source="folder")
    with pytest.raises(ValueError, match="resize"):
        ImageDataModule(resize="crop")
    with pytest.raises(ValueError, match="on_bad_file"):
        ImageDataModule(on_bad_file="ignore")
    with pytest.raises(ValueError, match="square"):
        ImageDataModule(image_size=[16, 32])


def test_the_image_size_and_patch_come_from_the_files_and_shifts_keep_the_mask(tmp_path):
    from seqattn.modalities.image.adapter import ImageAdapter
    from seqattn.modalities.image.data import Augment

    for cls in ("a", "b"):
        for i in range(4):
            _write_png(tmp_path / "img" / cls / f"{i}.png", 8, 8)
    _write_png(tmp_path / "img" / "a" / "odd.png", 10, 6)  # another size: resized to the common one
    dm = ImageDataModule(path=str(tmp_path / "img"), val_fraction=0.25, test_fraction=0.25, augment={"shift": 0.125})
    dm.setup()
    assert dm.image_size == (8, 8) and dm.spec().sizes == {"image_size": [8, 8]}
    adapter = ImageAdapter(8, mode="patches", patch_size="auto", image_size=dm.spec().sizes["image_size"])
    assert adapter.patch == 1  # an 8×8 image: one token per pixel
    assert ImageAdapter(8, mode="patches", patch_size="auto", image_size=32).patch == 4
    fresh = ImageDataModule(path="/somewhere/else")  # a checkpoint's data config: image_size null
    fresh.for_prediction(dm.spec())
    assert fresh.image_size == (8, 8)
    torch.manual_seed(0)
    image, mask = torch.rand(3, 8, 8), torch.ones(8, 8, dtype=torch.bool)
    shifted, moved = Augment(shift=0.25)(image, mask)
    dy, dx = torch.nonzero(moved).min(0).values.tolist()  # where the real area starts now
    assert moved.sum() < 64 and torch.equal(shifted * moved, shifted)  # no pixel outside the moved mask
    assert dm.datasets["train"].augment is not None and dm.datasets["test"].augment is None  # training only
