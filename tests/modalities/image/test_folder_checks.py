"""Image readers on folders and CSVs built to be odd (issue 21): missing folder, empty class folder,
nested sub-folders, numeric and case-differing labels."""

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from seqattn.modalities.image.data import ImageDataModule
from seqattn.modalities.image.readers import read_image_csv, read_image_folder

IMAGE_LOG = "seqattn.modalities.image"


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(path)
    return path


def test_a_missing_image_folder_names_the_folder_and_the_option(tmp_path):
    missing = tmp_path / "my_images"
    with pytest.raises(ValueError, match=rf"image folder {missing} \(data.path\) does not exist; expected a folder "):
        ImageDataModule(path=str(missing)).setup()
    with pytest.raises(ValueError, match=r"image CSV .*labels\.csv does not exist"):  # a CSV name: a missing CSV
        ImageDataModule(path=str(tmp_path / "labels.csv")).setup()


def test_an_empty_class_folder_is_named_in_a_warning(tmp_path, caplog):
    for label in ("cat", "dog"):
        _png(tmp_path / label / "0.png")
    (tmp_path / "bird").mkdir()
    with caplog.at_level(logging.WARNING, logger=IMAGE_LOG):
        items = read_image_folder(tmp_path)
    assert sorted({it["label"] for it in items}) == ["cat", "dog"]
    assert "1 class folder(s) hold no files and make no class: ['bird']" in caplog.text


def test_nested_images_take_the_top_folder_class_counted_in_a_warning(tmp_path, caplog):
    _png(tmp_path / "cat" / "0.png")
    _png(tmp_path / "cat" / "persian" / "1.png")
    _png(tmp_path / "cat" / "persian" / "2.png")
    _png(tmp_path / "dog" / "0.png")
    with caplog.at_level(logging.WARNING, logger=IMAGE_LOG):
        items = read_image_folder(tmp_path)
    assert {it["id"]: it["label"] for it in items}["cat/persian/1.png"] == "cat"
    assert "2 image file(s) lie in nested sub-folders and take their top folder's class (e.g. cat/persian/1.png -> " \
           "'cat')" in caplog.text


def test_split_named_top_folders_with_class_folders_inside_are_an_error(tmp_path):
    for split in ("train", "test"):
        for label in ("cat", "dog"):
            _png(tmp_path / split / label / "0.png")
    with pytest.raises(ValueError, match=r"class folders \['test', 'train'\] are split names .* give "
                                         rf"data.path={tmp_path}/test"):
        read_image_folder(tmp_path)


def test_csv_labels_integral_numbers_are_one_class_and_case_collisions_are_warned(tmp_path, caplog):
    rows = ["path,label"]
    for i, label in enumerate(["1", "1.0", "0", "0.0", "Up", "up", "up"]):
        _png(tmp_path / f"{i}.png")
        rows.append(f"{i}.png,{label}")
    (tmp_path / "l.csv").write_text("\n".join(rows) + "\n")
    with caplog.at_level(logging.INFO, logger=IMAGE_LOG):
        items = read_image_csv(tmp_path / "l.csv")
    assert [it["label"] for it in items] == ["1", "1", "0", "0", "Up", "up", "up"]
    assert "2 label(s) written as integral numbers are named by the integer" in caplog.text
    dm = ImageDataModule(path=str(tmp_path / "l.csv"), val_fraction=0.0, test_fraction=0.0, augment={"shift": 0})
    with caplog.at_level(logging.WARNING, logger="seqattn.datakit"):
        dm.setup()
    assert dm.label_names == ["0", "1", "Up", "up"]
    assert "'Up': 1 (e.g." in caplog.text and "'up': 2 (e.g." in caplog.text
