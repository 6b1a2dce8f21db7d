"""The image task's workflow declaration (see :mod:`tests.workflow_task`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from tests.workflow_task import FileSource, Task


def _image_inputs(cfg: DictConfig, folder: Path) -> Path:
    """A folder of five PNG files drawn by the built-in shapes generator."""
    from PIL import Image

    from seqattn.modalities.image.shapes import generate_shapes

    folder.mkdir(parents=True, exist_ok=True)
    images, _ = generate_shapes(5, image_size=16, seed=123, split="test", classes=tuple(cfg.data.shapes.classes))
    for i, image in enumerate(images):
        array = (image.transpose(1, 2, 0) * 255).round().astype("uint8")
        Image.fromarray(array).save(folder / f"shape_{i}.png")
    return folder


def _image_folder(tmp_path: Path) -> FileSource:
    """An image folder of two classes, six random 8×8 images each."""
    from PIL import Image

    for cls in ("a", "b"):
        (tmp_path / "img" / cls).mkdir(parents=True)
        for i in range(6):
            Image.fromarray((np.random.default_rng(i).random((8, 8, 3)) * 255).astype("uint8")).save(
                tmp_path / "img" / cls / f"{i}.png")
    return [f"data.path={tmp_path / 'img'}", "data.image_size=8"], "folder", "shapes"


def _unlabelled_folder(tmp_path: Path) -> FileSource:
    """A folder of ten random 8×8 images, no class sub-folders (one image in a sub-folder all the same)."""
    from PIL import Image

    (tmp_path / "img" / "more").mkdir(parents=True)
    for i in range(10):
        Image.fromarray((np.random.default_rng(i).random((8, 8, 3)) * 255).astype("uint8")).save(
            tmp_path / "img" / ("more" if i == 9 else "") / f"{i}.png")
    return [f"data.path={tmp_path / 'img'}", "data.image_size=8"], "folder", "shapes"


_SHAPES = ["data.shapes.classes=[triangle,ring]", "data.shapes.n_train=800", "data.shapes.n_val=64",
           "data.shapes.n_test=64", "data.batch_size=32", "adapter.mode=patches", "adapter.patch_size=2",
           "model.dim=32", "model.depth=2", "model.heads=2", "trainer.max_epochs=4"]

TASKS = {
    "image": Task(
        overrides=["task=image", *_SHAPES,
                   "data.augment.shift=0.125"],  # as for real images: exact resume must hold with random shifts
        predict_inputs=_image_inputs,
        file_source=_image_folder,
    ),
    # masked-patch pretraining: no head to predict with (load / export refuse its checkpoint)
    "image_pretrain": Task(overrides=["task=image_pretrain", *_SHAPES], predict_inputs=_image_inputs,
                           file_source=_unlabelled_folder, predicts=False),
}
