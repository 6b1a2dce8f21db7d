"""Image classification data: built-in shapes, an image folder, a CSV, or CIFAR-10 / MNIST.

Sources (``ImageDataModule(source=...)``; giving ``path`` without a source selects ``folder`` for a
folder and ``csv`` for a file):

- ``shapes`` (default): :mod:`seqattn.modalities.image.shapes`, generated in memory from a seed, offline.
- ``folder``: ``path`` is a folder with one sub-folder per class::

      my_images/cat/001.png
      my_images/dog/a.jpg

  (the class names are the sub-folder names, sorted).
- ``csv``: ``path`` is a CSV with a header and columns ``path,label[,split]`` (image paths relative
  to the CSV's folder; ``split`` = train/val/test on every row or on none)::

      path,label
      img/001.png,cat
      img/002.png,dog

- ``cifar10`` / ``mnist``: torchvision's classes, downloaded into ``<data_dir>/torchvision``;
  offline, a ``ValueError`` names the files to place there by hand.

Unreadable images (not an image, truncated, missing) are never dropped silently: by default
(``on_bad_file="error"``) loading stops with a ``ValueError`` that counts and lists them;
with ``on_bad_file="skip"`` they are skipped, counted and listed in a warning, and kept in
``datamodule.skipped`` as ``(path, reason)``.

Images of different sizes (``resize``): ``resize`` scales every image to ``image_size``;
``pad`` shrinks an image larger than ``image_size`` (keeping its aspect ratio) and pads it
bottom/right to ``image_size``; ``none`` keeps the sizes as they are and pads each batch to its
largest image. ``pixel_mask`` marks the padding (False), so it never reaches a real pixel.

Batches: ``images [B, 3, H, W]`` float in [0, 1], ``pixel_mask [B, H, W]`` bool (True = real pixel),
``labels [B]`` long (absent in prediction batches), ``ids`` list[str].

Letters: b batch, c channels, h/w rows/columns.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.error import URLError

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from seqattn.datakit.module import PREDICT_SKIP_HINT, TaskDataModule
from seqattn.datakit.splits import split
from seqattn.datakit.spec import DataSpec
from seqattn.modalities.image.readers import (
    BAD_FILE,
    RESIZE,
    common_size,
    fit_image,
    list_image_files,
    load_images,
    read_image_csv,
    read_image_folder,
    size_2d,
)
from seqattn.modalities.image.shapes import SHAPES, generate_shapes

log = logging.getLogger("seqattn.modalities.image")

SOURCES = ("shapes", "folder", "csv", "cifar10", "mnist")


# ---------------------------------------------------------------------------------------------
# dataset and collate


class ImageDataset(Dataset):
    """In-memory images. ``__getitem__`` -> ``dict(image [3, H, W], pixel_mask [H, W], label int | None, id)``."""

    def __init__(self, images: Sequence[torch.Tensor], masks: Sequence[torch.Tensor],
                 labels: Sequence[int] | None, ids: Sequence[str]) -> None:
        if len(images) != len(masks) or len(images) != len(ids) or labels is not None and len(labels) != len(ids):
            raise ValueError("images, masks, labels and ids must have the same length")
        self.images, self.masks, self.ids = list(images), list(masks), list(ids)
        self.labels = None if labels is None else [int(v) for v in labels]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        """``key``: an index, or ``(index, seed)`` from :class:`seqattn.datakit.module.SeededItems`
        (the seed drives this item's augmentation)."""
        index, seed = key if isinstance(key, tuple) else (key, None)
        image, mask = self.images[index], self.masks[index]
        if self.augment is not None:
            generator = torch.Generator().manual_seed(seed) if seed is not None else None
            image, mask = self.augment(image, mask, generator)
        return {"image": image, "pixel_mask": mask,
                "label": None if self.labels is None else self.labels[index], "id": self.ids[index]}

    augment: "Augment | None" = None

    @property
    def seeded_items(self) -> bool:
        """Augmented items draw from a per-item seed (exact resume), see :class:`SeededItems`."""
        return self.augment is not None


#: ``augment.shift`` when not given, for images from files and torchvision (digits: 0.958 -> 0.972)
DEFAULT_SHIFT = 0.125


class Augment:
    """Label-preserving training augmentation of one image: a random shift by up to ``shift`` of its
    side (the image moves, its pixel mask with it, zeros come in at the border) and, with ``flip``, a
    random horizontal flip (off by default: a flip changes digits and letters). Draws from the given
    generator (the training loader seeds one per item, so an exactly resumed run draws the same
    shifts), else from torch's global one."""

    def __init__(self, shift: float = 0.0, flip: bool = False) -> None:
        if not 0.0 <= shift < 0.5:
            raise ValueError(f"augment.shift={shift} must be a fraction of the image side in [0, 0.5)")
        self.shift, self.flip = float(shift), bool(flip)

    def __call__(self, image: torch.Tensor, mask: torch.Tensor,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``image [C, H, W]``, ``mask [H, W]`` -> the same shapes, moved (and maybe flipped)."""
        _, h, w = image.shape
        if self.flip and bool(torch.rand((), generator=generator) < 0.5):
            image, mask = image.flip(-1), mask.flip(-1)
        dy_max, dx_max = int(round(self.shift * h)), int(round(self.shift * w))
        if dy_max or dx_max:
            dy = int(torch.randint(-dy_max, dy_max + 1, (), generator=generator))
            dx = int(torch.randint(-dx_max, dx_max + 1, (), generator=generator))
            image, mask = _translate(image, dy, dx), _translate(mask, dy, dx)
        return image, mask


def _translate(x: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """``[..., H, W]`` moved by ``(dy, dx)`` pixels, zeros (False) coming in."""
    out = torch.zeros_like(x)
    h, w = x.shape[-2:]
    ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
    xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
    out[..., yd, xd] = x[..., ys, xs]
    return out


def collate_images(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Items -> ``dict(images [B, 3, H_max, W_max] zero-padded, pixel_mask [B, H_max, W_max],
    labels [B] (when the items have labels), ids)``."""
    h = max(b["image"].shape[1] for b in batch)
    w = max(b["image"].shape[2] for b in batch)
    images = torch.zeros(len(batch), batch[0]["image"].shape[0], h, w)  # [B, C, H, W]
    pixel_mask = torch.zeros(len(batch), h, w, dtype=torch.bool)  # [B, H, W]
    for i, b in enumerate(batch):
        _, bh, bw = b["image"].shape
        images[i, :, :bh, :bw] = b["image"]
        pixel_mask[i, :bh, :bw] = b["pixel_mask"]
    out = {"images": images, "pixel_mask": pixel_mask, "ids": [b["id"] for b in batch]}
    if all(b.get("label") is not None for b in batch):
        out["labels"] = torch.tensor([b["label"] for b in batch], dtype=torch.long)  # [B]
    return out


# ---------------------------------------------------------------------------------------------
# public datasets


def _torchvision(name: str, root: Path, train: bool, download: bool):
    """torchvision's CIFAR10 / MNIST; a failed or disabled download -> ValueError naming the files."""
    import torchvision.datasets as tvd

    cls = {"cifar10": tvd.CIFAR10, "mnist": tvd.MNIST}[name]
    if name == "cifar10":
        by_hand = f"{cls.url} (md5 {cls.tgz_md5}) as {root / cls.filename}"
    else:
        by_hand = ", ".join(f"{cls.mirrors[0]}{f} as {root / 'MNIST' / 'raw' / f}" for f, _ in cls.resources)
    try:
        return cls(str(root), train=train, download=download)
    except (RuntimeError, OSError, URLError) as err:
        reason = "download disabled (data.download=false)" if not download else f"download failed: {err}"
        raise ValueError(f"{name} is not in {root} and could not be fetched ({reason}). Offline? Place "
                         f"{by_hand} by hand, then run again.") from err


def _public_arrays(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """torchvision dataset -> ``(images uint8 [N, 3, H, W], labels [N])`` without PIL round trips."""
    data = dataset.data
    data = torch.as_tensor(np.asarray(data))
    if data.dim() == 3:  # MNIST [N, H, W] grayscale -> RGB
        data = data[:, None].expand(-1, 3, -1, -1)
    else:  # CIFAR [N, H, W, 3]
        data = data.permute(0, 3, 1, 2)
    return data, torch.as_tensor(np.asarray(dataset.targets), dtype=torch.long)


# ---------------------------------------------------------------------------------------------
# DataModule


def _files_source(path: Path) -> str:
    """``folder`` | ``csv`` for a ``path`` given without a source: a folder, a file, or (not there yet:
    reported when read, naming what was looked for) by its suffix."""
    if path.is_dir():
        return "folder"
    if path.is_file() or path.suffix.lower() in (".csv", ".tsv", ".txt"):
        return "csv"
    return "folder"


class ImageDataModule(TaskDataModule):
    """Image classification data (see the module docstring for sources, formats and batches).

    Args (besides :class:`~seqattn.datakit.module.TaskDataModule`'s):
        source: ``shapes`` | ``folder`` | ``csv`` | ``cifar10`` | ``mnist``; None: ``folder`` / ``csv``
            when ``path`` is a folder / a file, else ``shapes``.
        path: the image folder or CSV (``folder`` / ``csv``).
        image_size: ``H`` or ``(H, W)`` every image is brought to (``shapes``: the generated side); None:
            16 for shapes, the dataset's own size for CIFAR-10 / MNIST, and for your files the most common
            size of the training images. The size travels in the data's spec into the model.
        resize: ``resize`` | ``pad`` | ``none`` for images of another size.
        on_bad_file: ``error`` (default) | ``skip`` for unreadable image files.
        download: let torchvision download public datasets (False: use only files already there).
        shapes: arguments of :func:`seqattn.modalities.image.shapes.generate_shapes` plus ``n_train``,
            ``n_val``, ``n_test``.
        csv_columns: ``{path, label, split}`` column names of a CSV.
        augment: training-only, label-preserving: ``{shift: fraction of the side, flip: bool}``
            (:class:`Augment`); ``shift: 0`` turns it off.
    """

    collate = staticmethod(collate_images)

    def __init__(
        self,
        source: str | None = None,
        path: str | None = None,
        data_dir: str | None = None,
        image_size: int | Sequence[int] | None = None,
        resize: str = "resize",
        on_bad_file: str = "error",
        download: bool = True,
        shapes: Mapping[str, Any] | None = None,
        csv_columns: Mapping[str, str] | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
        limit: int | None = None,
        labels: Sequence[str] | None = None,
        encoding: str = "utf-8",
        augment: Mapping[str, Any] | None = None,
    ) -> None:
        if source is None:
            source = "shapes" if not path else _files_source(Path(path).expanduser())
        if source not in SOURCES:
            raise ValueError(f"source={source!r} is not one of {SOURCES}")
        if source in ("folder", "csv") and not path:
            raise ValueError(f"source={source!r} needs path=<the image folder or CSV>")
        if source not in ("folder", "csv") and path:
            raise ValueError(f"data.path={path!r} is given but data.source={source} would ignore it; drop data.source "
                             "(a path selects folder or csv) or the path")
        if resize not in RESIZE:
            raise ValueError(f"resize must be one of {RESIZE}, got {resize!r}")
        if on_bad_file not in BAD_FILE:
            raise ValueError(f"on_bad_file must be one of {BAD_FILE}, got {on_bad_file!r}")
        shapes = dict(shapes or {})
        if source == "shapes" and labels is None:
            labels = list(shapes.get("classes") or SHAPES)
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, limit=limit, labels=labels,
                         encoding=encoding)
        self.source, self.path = source, path
        if image_size is None and source in ("shapes", "cifar10", "mnist"):
            image_size = {"shapes": 16, "cifar10": 32, "mnist": 28}[source]
        self.image_size = size_2d(image_size) if image_size is not None else None  # files: found in setup()
        augment = dict(augment or {})
        if augment.get("shift") is None:  # by data kind: real images get shifts, the built-in shapes
            # are drawn at random positions already (shifts there only slow a short run: 0.841 -> 0.732)
            augment["shift"] = 0.0 if source == "shapes" else DEFAULT_SHIFT
        unknown = set(augment) - {"shift", "flip"}
        if unknown:
            raise ValueError(f"augment has unknown option(s) {sorted(unknown)}; expected shift, flip")
        self.augment = Augment(**augment) if augment and (augment.get("shift") or augment.get("flip")) else None
        self.resize, self.on_bad_file, self.download = resize, on_bad_file, bool(download)
        self.shapes = shapes
        if source == "shapes" and self.image_size[0] != self.image_size[1]:
            raise ValueError(f"source=shapes draws square images; got image_size={self.image_size}")
        self.csv_columns = {"path": "path", "label": "label", "split": "split", **dict(csv_columns or {})}
        self.skipped: list[tuple[str, str]] = []

    # -- lifecycle ------------------------------------------------------------------------
    def prepare_data(self) -> None:
        if self.source in ("cifar10", "mnist"):
            root = self.data_dir / "torchvision"
            for train in (True, False):
                _torchvision(self.source, root, train, self.download)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if self.source == "shapes":
            self._setup_shapes()
        elif self.source in ("cifar10", "mnist"):
            self._setup_public()
        else:
            self._setup_files()
        if self.augment is not None and "train" in self.datasets:
            self.datasets["train"].augment = self.augment
        log.info("image data (%s): %s images, %d classes %s, size %s (%s)", self.source,
                 {n: len(d) for n, d in self.datasets.items()}, len(self._labels), self._labels, self.image_size,
                 self.resize)

    def _cap(self, n: int) -> int:
        return n if self.limit is None else min(n, self.limit)

    def _setup_shapes(self) -> None:
        cfg = dict(self.shapes)
        counts = {"train": cfg.pop("n_train", 6000), "val": cfg.pop("n_val", 500), "test": cfg.pop("n_test", 1000)}
        cfg.setdefault("classes", tuple(self._labels))
        cfg["classes"] = tuple(cfg["classes"])
        if "size_range" in cfg:
            cfg["size_range"] = tuple(cfg["size_range"])
        for split_name, n in counts.items():
            images, labels = generate_shapes(self._cap(int(n)), image_size=self.image_size[0], split=split_name, **cfg)
            x = torch.from_numpy(images)  # [N, 3, H, W]
            mask = torch.ones(self.image_size, dtype=torch.bool)
            self.datasets[split_name] = ImageDataset(list(x), [mask] * len(x), labels.tolist(),
                                                     [f"{split_name}/{i:05d}" for i in range(len(x))])

    def _setup_public(self) -> None:
        root = self.data_dir / "torchvision"
        train_set = _torchvision(self.source, root, True, self.download)
        test_set = _torchvision(self.source, root, False, self.download)
        self._labels = [str(c) for c in train_set.classes]
        x_train, y_train = _public_arrays(train_set)
        x_test, y_test = _public_arrays(test_set)
        parts = split(list(range(len(y_train))), self.val_fraction, 0.0, self.seed, what="training images")
        for split_name, (x, y, idx) in {"train": (x_train, y_train, parts["train"]),
                                        "val": (x_train, y_train, parts["val"]),
                                        "test": (x_test, y_test, list(range(len(y_test))))}.items():
            idx = torch.as_tensor(idx[: self._cap(len(idx))], dtype=torch.long)
            images = x[idx].float().div_(255.0)  # [N, 3, h, w]
            if images.shape[-2:] != self.image_size and self.resize != "none":
                fitted = [fit_image(img, self.image_size, self.resize) for img in images]
                imgs, masks = [f[0] for f in fitted], [f[1] for f in fitted]
            else:
                imgs, masks = list(images), [torch.ones(images.shape[-2:], dtype=torch.bool)] * len(images)
            self.datasets[split_name] = ImageDataset(imgs, masks, y[idx].tolist(),
                                                     [f"{split_name}/{int(i)}" for i in idx])

    def spec(self) -> DataSpec:
        """Classes and the training image size (``sizes.image_size = [H, W]``)."""
        return DataSpec(num_outputs=self.num_classes, labels=self.label_names,
                        sizes={"image_size": list(self.image_size)})

    def export_preprocessing(self) -> dict[str, Any]:
        """The size images are brought to, and how (``resize``), as :meth:`predict_loader` does."""
        rules = {"resize": "scale to image_size (bilinear, antialiased), every pixel real",
                 "pad": "shrink to fit image_size keeping the aspect ratio (never enlarge; bilinear, antialiased), "
                        "place top-left, zeros elsewhere (pixel_mask False there)",
                 "none": "keep the image's own size"}
        return {"image_size": list(self.image_size) if self.image_size is not None else None,
                "resize": self.resize, "resize_rule": rules[self.resize],
                "color": "RGB (grayscale, palette and alpha images converted to RGB)"}

    def for_prediction(self, spec: DataSpec | None) -> None:
        """Images to predict on are brought to the training size found in the data (``image_size: null``)."""
        if self.image_size is None and spec is not None and "image_size" in spec.sizes:
            self.image_size = size_2d(spec.sizes["image_size"])

    def _setup_files(self) -> None:
        if self.source == "folder":
            items = read_image_folder(self.path)
        else:
            cols = self.csv_columns
            items = read_image_csv(self.path, cols["path"], cols["label"], cols["split"], self.encoding)
        splits = self._load_and_split(items, labelled=True)
        self.set_labels({name: [(it["label"], it["where"]) for it, _ in part] for name, part in splits.items()},
                        source=str(self.path))
        index = {name: i for i, name in enumerate(self._labels)}
        for split_name, part in splits.items():
            self.datasets[split_name] = ImageDataset([f[0] for _, f in part], [f[1] for _, f in part],
                                                     [index[it["label"]] for it, _ in part],
                                                     [it["id"] for it, _ in part])

    def _load_and_split(self, items: list[dict[str, Any]], labelled: bool
                        ) -> dict[str, list[tuple[dict[str, Any], tuple[Any, Any]]]]:
        """Read and fit ``items`` (``image_size`` from the data when unset; unreadable files by
        ``on_bad_file``), split them (by their own ``split`` column and stratified by label when
        ``labelled``) and cap each split: ``{split: [(item, (pixels [3, H, W], pixel mask [H, W])), ...]}``.
        ``ValueError`` naming the path when no training image is left."""
        if self.image_size is None:
            self.image_size = common_size(items)
            log.info("image_size: %s, the most common size of the %d images (data.image_size to change it)",
                     self.image_size, len(items))
        loaded, items, bad = load_images(items, self.image_size, self.resize, self.on_bad_file)
        self.skipped = bad
        position = {id(it): k for k, it in enumerate(items)}
        splits = split(items, self.val_fraction, self.test_fraction, self.seed,
                       given=(lambda it: it["split"]) if labelled else None,
                       stratify=(lambda it: it["label"]) if labelled else None, where=lambda it: it["where"],
                       what="images")
        if not splits["train"]:
            raise ValueError(f"{self.path}: no training images")
        out = {}
        for split_name, part in splits.items():
            part = part[: self._cap(len(part))]
            if not part:
                log.warning("the %s split of %s is empty", split_name, self.path)
            out[split_name] = [(it, loaded[position[id(it)]]) for it in part]
        return out

    # -- predict protocol -------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of the user's images (an image file, or a folder searched recursively by suffix),
        brought to ``image_size`` by the ``resize`` rule of training: ``images``, ``pixel_mask``, ``ids``
        (paths relative to the folder). Needs neither ``prepare_data()`` nor ``setup()``;
        unreadable files follow ``on_bad_file``."""
        if self.image_size is None:
            raise ValueError("predicting needs the training image size: load the model with seqattn.load(ckpt), "
                             "or give data.image_size")
        source = Path(source).expanduser()
        files = list_image_files(source)
        base = source if source.is_dir() else source.parent
        items = [{"path": str(p), "where": str(p), "id": str(p.relative_to(base))} for p in files]
        on_bad = "skip" if self.on_error == "skip" else self.on_bad_file
        loaded, items, bad = load_images(items, self.image_size, self.resize, on_bad, hint=PREDICT_SKIP_HINT)
        self.skipped = bad
        self.record_skipped(bad)
        if not items:
            raise ValueError(f"no readable images under {source}")
        dataset = ImageDataset([f[0] for f in loaded], [f[1] for f in loaded], None, [it["id"] for it in items])
        return self.predict_batches(dataset, batch_size)


class UnlabelledImageDataModule(ImageDataModule):
    """Unlabelled images, for masked-patch pretraining (``task=image_pretrain``).

    ``source``: ``shapes`` (the built-in shapes, classes unused) | ``folder`` (``path``: every image file
    under it, searched recursively; sub-folders are allowed and mean nothing) | ``cifar10`` / ``mnist``
    (labels unused). Split at random (``val_fraction`` / ``test_fraction``, seeded); images brought to
    ``image_size`` by ``resize`` as for classification (None: the most common size).

    Batches: ``images [B, 3, H, W]``, ``pixel_mask [B, H, W]``, ``ids``; never ``labels``. The spec has
    no labels (``num_outputs`` 1: the pretraining head is sized by the adapter's patches) and carries
    ``sizes.image_size``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.source == "csv":
            raise ValueError(f"data.path={self.path!r} is a file: image pretraining reads a folder of images "
                             "(data.path=<folder>), searched recursively, without labels")

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        super().setup(stage)
        for dataset in self.datasets.values():
            dataset.labels = None  # labels unused
        self._labels = []

    def _setup_files(self) -> None:
        files = list_image_files(self.path)
        root = Path(self.path).expanduser()
        base = root if root.is_dir() else root.parent
        items = [{"path": str(p), "where": str(p), "id": str(p.relative_to(base)), "label": None, "split": None}
                 for p in files]
        self._labels = []
        for split_name, part in self._load_and_split(items, labelled=False).items():
            self.datasets[split_name] = ImageDataset([f[0] for _, f in part], [f[1] for _, f in part], None,
                                                     [it["id"] for it, _ in part])

    def spec(self) -> DataSpec:
        """No labels; the training image size (``sizes.image_size = [H, W]``)."""
        return DataSpec(num_outputs=1, labels=None, sizes={"image_size": list(self.image_size)})
