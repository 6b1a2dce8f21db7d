"""Image classification data: built-in shapes, an image folder, a CSV, or CIFAR-10 / MNIST.

Sources (``ImageDataModule(source=...)``):

- ``shapes`` (default): :mod:`seqattn.data.shapes`, generated in memory from a seed, offline.
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

import csv
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.error import URLError

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from seqattn.data.audio import split_items
from seqattn.data.shapes import SHAPES, generate_shapes

log = logging.getLogger("seqattn.data.image")

SOURCES = ("shapes", "folder", "csv", "cifar10", "mnist")
RESIZE = ("resize", "pad", "none")
BAD_FILE = ("error", "skip")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
_SHOWN = 20  # unreadable files listed in a message


def _size_2d(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        size = (size, size)
    size = tuple(int(s) for s in size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"image_size must be a positive int or (height, width), got {size}")
    return size


def load_image(path: str | Path) -> torch.Tensor:
    """Read an image file as RGB ``[3, H, W]`` float32 in [0, 1] (grayscale / palette / alpha
    converted to RGB). An unreadable file raises ``ValueError`` naming it."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as image:
            rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)  # [H, W, 3]
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as err:
        raise ValueError(f"cannot read image {path}: {err}") from err
    if rgb.ndim != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ValueError(f"cannot read image {path}: empty image of shape {rgb.shape}")
    return torch.from_numpy(rgb.copy()).permute(2, 0, 1).float().div_(255.0)  # [3, H, W]


def fit_image(image: torch.Tensor, size: tuple[int, int], resize: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``image [C, h, w]`` -> ``(image [C, H', W'], pixel_mask [H', W'] bool)`` by the ``resize`` rule
    (see the module docstring); ``pad`` leaves real pixels top-left and zeros elsewhere."""
    if resize not in RESIZE:
        raise ValueError(f"resize must be one of {RESIZE}, got {resize!r}")
    _, h, w = image.shape
    target_h, target_w = size
    if resize == "none":
        return image, torch.ones(h, w, dtype=torch.bool)
    if resize == "resize":
        if (h, w) != (target_h, target_w):
            image = F.interpolate(image[None], size=(target_h, target_w), mode="bilinear", antialias=True,
                                  align_corners=False)[0].clamp_(0, 1)
        return image, torch.ones(target_h, target_w, dtype=torch.bool)
    scale = min(target_h / h, target_w / w, 1.0)  # pad: shrink to fit, never enlarge
    if scale < 1.0:
        h, w = max(1, round(h * scale)), max(1, round(w * scale))
        image = F.interpolate(image[None], size=(h, w), mode="bilinear", antialias=True,
                              align_corners=False)[0].clamp_(0, 1)
    out = image.new_zeros(image.shape[0], target_h, target_w)
    out[:, :h, :w] = image
    mask = torch.zeros(target_h, target_w, dtype=torch.bool)
    mask[:h, :w] = True
    return out, mask


def list_image_files(source: str | Path) -> list[Path]:
    """An image file, or every image file (by suffix) under a folder, recursively and sorted."""
    source = Path(source).expanduser()
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise ValueError(f"{source} is neither an image file nor a folder")
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) under {source}")
    return files


def read_image_folder(root: str | Path) -> list[dict[str, Any]]:
    """``root/<class>/<image>`` -> items ``{path, label, id, split: None, speaker: None, where}``.

    Every non-hidden file inside a class folder (any depth) is an item, whatever its suffix, so a
    broken or misnamed file is reported when it is read, never skipped here. Hidden files
    (``.DS_Store``) and files directly in ``root`` are ignored and counted in a warning.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ValueError(f"image folder {root} does not exist or is not a folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(f"image folder {root} has no class sub-folders (expected {root}/<class>/<image files>)")
    items, ignored = [], []
    for name in classes:
        for path in sorted((root / name).rglob("*")):
            if not path.is_file():
                continue
            if any(part.startswith(".") for part in path.relative_to(root).parts):
                ignored.append(path)
                continue
            ident = str(path.relative_to(root))
            items.append({"path": str(path), "label": name, "id": ident, "split": None, "speaker": None,
                          "where": str(path)})
    ignored += [p for p in root.iterdir() if p.is_file()]
    if ignored:
        log.warning("ignored %d file(s) in %s that are hidden or not inside a class folder: %s", len(ignored), root,
                    [str(p) for p in ignored[:_SHOWN]])
    if not items:
        raise ValueError(f"image folder {root} has class folders {classes} but no files in them")
    return items


def read_image_csv(path: str | Path, path_column: str = "path", label_column: str = "label",
                   split_column: str = "split") -> list[dict[str, Any]]:
    """A CSV of ``path,label[,split]`` -> items (paths relative to the CSV's folder).
    A row without a path or label raises ``ValueError`` naming ``file:line``."""
    from seqattn.data.audio import _SPLIT_ALIASES, SPLITS

    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"image CSV {path} does not exist")
    items = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {path_column, label_column} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}:1: CSV header needs columns '{path_column},{label_column}[,{split_column}]', "
                             f"missing {sorted(missing)} (header: {reader.fieldnames})")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            values = {k: (v or "").strip() for k, v in row.items() if isinstance(k, str)}
            if not any(values.values()):
                continue
            if not values.get(path_column) or not values.get(label_column):
                raise ValueError(f"{where}: empty '{path_column}' or '{label_column}' in row {row}")
            split = values.get(split_column) or None
            if split is not None:
                if split.lower() not in _SPLIT_ALIASES:
                    raise ValueError(f"{where}: split {split!r} is not one of {SPLITS}")
                split = _SPLIT_ALIASES[split.lower()]
            image = (path.parent / values[path_column]).expanduser()
            items.append({"path": str(image), "label": values[label_column], "id": values[path_column],
                          "split": split, "speaker": None, "where": where})
    if not items:
        raise ValueError(f"image CSV {path} has no rows")
    return items


def load_images(items: Sequence[Mapping[str, Any]], size: tuple[int, int], resize: str, on_bad_file: str,
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[Mapping[str, Any]], list[tuple[str, str]]]:
    """Read and fit every item's image. Returns ``(images [(image, mask)], kept items, bad [(path, reason)])``;
    with ``on_bad_file="error"`` any bad file raises one ``ValueError`` counting and listing them."""
    if on_bad_file not in BAD_FILE:
        raise ValueError(f"on_bad_file must be one of {BAD_FILE}, got {on_bad_file!r}")
    loaded, kept, bad = [], [], []
    for item in items:
        try:
            image = load_image(item["path"])
        except ValueError as err:
            bad.append((item["where"], str(err)))
            continue
        loaded.append(fit_image(image, size, resize))
        kept.append(item)
    if bad:
        listing = "\n".join(f"  {where}: {reason}" for where, reason in bad[:_SHOWN])
        more = f"\n  ... and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
        if on_bad_file == "error":
            raise ValueError(f"{len(bad)} of {len(items)} image file(s) cannot be read:\n{listing}{more}\n"
                             "fix or remove them, or set data.on_bad_file=skip to train without them")
        log.warning("skipped %d of %d unreadable image file(s) (on_bad_file=skip):\n%s%s", len(bad), len(items),
                    listing, more)
    return loaded, kept, bad


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

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.images[index], "pixel_mask": self.masks[index],
                "label": None if self.labels is None else self.labels[index], "id": self.ids[index]}


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


class ImageDataModule(L.LightningDataModule):
    """Image classification data (see the module docstring for sources, formats and batches).

    Args:
        source: ``shapes`` | ``folder`` | ``csv`` | ``cifar10`` | ``mnist``.
        path: the image folder or CSV (``folder`` / ``csv``).
        data_dir: cache folder (``<data_dir>/torchvision`` for public datasets).
        image_size: ``H`` or ``(H, W)`` every image is brought to (``shapes``: the generated side).
        resize: ``resize`` | ``pad`` | ``none`` for images of another size.
        on_bad_file: ``error`` (default) | ``skip`` for unreadable image files.
        download: let torchvision download public datasets (False: use only files already there).
        shapes: arguments of :func:`seqattn.data.shapes.generate_shapes` plus ``n_train``, ``n_val``,
            ``n_test``.
        csv_columns: ``{path, label, split}`` column names of a CSV.
        val_fraction, test_fraction, seed: random split when the data has no split of its own.
        limit: at most this many images per split (quick runs).
    """

    def __init__(
        self,
        source: str = "shapes",
        path: str | None = None,
        data_dir: str | None = "~/.cache/seqattn",
        image_size: int | Sequence[int] = 16,
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
    ) -> None:
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"source={source!r} is not one of {SOURCES}")
        if source in ("folder", "csv") and not path:
            raise ValueError(f"source={source!r} needs path=<the image folder or CSV>")
        if resize not in RESIZE:
            raise ValueError(f"resize must be one of {RESIZE}, got {resize!r}")
        if on_bad_file not in BAD_FILE:
            raise ValueError(f"on_bad_file must be one of {BAD_FILE}, got {on_bad_file!r}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if limit is not None and limit <= 0:
            raise ValueError(f"limit must be a positive number of images per split or None, got {limit}")
        if data_dir is None:
            data_dir = os.environ.get("SEQATTN_DATA_DIR", "~/.cache/seqattn")
        self.source, self.path = source, path
        self.data_dir = Path(data_dir).expanduser()
        self.image_size = _size_2d(image_size)
        self.resize, self.on_bad_file, self.download = resize, on_bad_file, bool(download)
        self.shapes = dict(shapes or {})
        if source == "shapes" and self.image_size[0] != self.image_size[1]:
            raise ValueError(f"source=shapes draws square images; got image_size={self.image_size}")
        self.csv_columns = {"path": "path", "label": "label", "split": "split", **dict(csv_columns or {})}
        self.batch_size, self.num_workers = batch_size, num_workers
        self.val_fraction, self.test_fraction, self.seed = val_fraction, test_fraction, seed
        self.limit = limit
        self._labels: list[str] | None = None
        if source == "shapes":
            self._labels = list(self.shapes.get("classes") or SHAPES)
        self.datasets: dict[str, ImageDataset] = {}
        self.skipped: list[tuple[str, str]] = []

    # -- labels ---------------------------------------------------------------------------
    @property
    def label_names(self) -> list[str]:
        if self._labels is None:
            raise RuntimeError("label_names are known after setup() (they come from the training data)")
        return list(self._labels)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

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
        for split, n in counts.items():
            images, labels = generate_shapes(self._cap(int(n)), image_size=self.image_size[0], split=split, **cfg)
            x = torch.from_numpy(images)  # [N, 3, H, W]
            mask = torch.ones(self.image_size, dtype=torch.bool)
            self.datasets[split] = ImageDataset(list(x), [mask] * len(x), labels.tolist(),
                                                [f"{split}/{i:05d}" for i in range(len(x))])

    def _setup_public(self) -> None:
        root = self.data_dir / "torchvision"
        train_set = _torchvision(self.source, root, True, self.download)
        test_set = _torchvision(self.source, root, False, self.download)
        self._labels = [str(c) for c in train_set.classes]
        x_train, y_train = _public_arrays(train_set)
        x_test, y_test = _public_arrays(test_set)
        order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(self.seed))
        n_val = int(round(self.val_fraction * len(order)))
        parts = {"train": order[n_val:], "val": order[:n_val]}
        for split, (x, y, idx) in {"train": (x_train, y_train, parts["train"]), "val": (x_train, y_train, parts["val"]),
                                   "test": (x_test, y_test, torch.arange(len(y_test)))}.items():
            idx = idx[: self._cap(len(idx))]
            images = x[idx].float().div_(255.0)  # [N, 3, h, w]
            if images.shape[-2:] != self.image_size and self.resize != "none":
                fitted = [fit_image(img, self.image_size, self.resize) for img in images]
                imgs, masks = [f[0] for f in fitted], [f[1] for f in fitted]
            else:
                imgs, masks = list(images), [torch.ones(images.shape[-2:], dtype=torch.bool)] * len(images)
            self.datasets[split] = ImageDataset(imgs, masks, y[idx].tolist(), [f"{split}/{int(i)}" for i in idx])

    def _setup_files(self) -> None:
        if self.source == "folder":
            items = read_image_folder(self.path)
        else:
            cols = self.csv_columns
            items = read_image_csv(self.path, cols["path"], cols["label"], cols["split"])
        loaded, items, bad = load_images(items, self.image_size, self.resize, self.on_bad_file)
        self.skipped = bad
        splits = split_items(items, self.val_fraction, self.test_fraction, self.seed)
        if not splits["train"]:
            raise ValueError(f"{self.path}: no training images")
        if self._labels is None:
            self._labels = sorted({it["label"] for it in splits["train"]})
        index = {name: i for i, name in enumerate(self._labels)}
        position = {id(it): k for k, it in enumerate(items)}
        for split, part in splits.items():
            unknown = sorted({it["label"] for it in part} - set(index))
            if unknown:
                raise ValueError(f"{self.path}: the {split} split has labels {unknown} that no training image has "
                                 f"(training labels: {self._labels})")
            part = part[: self._cap(len(part))]
            if not part:
                log.warning("the %s split of %s is empty", split, self.path)
            fitted = [loaded[position[id(it)]] for it in part]
            self.datasets[split] = ImageDataset([f[0] for f in fitted], [f[1] for f in fitted],
                                                [index[it["label"]] for it in part], [it["id"] for it in part])

    # -- loaders --------------------------------------------------------------------------
    def _loader(self, dataset: Dataset, shuffle: bool, batch_size: int | None = None) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        return DataLoader(dataset, batch_size=batch_size or self.batch_size, shuffle=shuffle, generator=generator,
                          num_workers=self.num_workers, collate_fn=collate_images,
                          persistent_workers=self.num_workers > 0)

    def _split(self, name: str, shuffle: bool = False) -> DataLoader:
        if not self.datasets:
            self.setup()
        return self._loader(self.datasets[name], shuffle)

    def train_dataloader(self) -> DataLoader:
        return self._split("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._split("val")

    def test_dataloader(self) -> DataLoader:
        return self._split("test")

    def predict_dataloader(self) -> DataLoader:
        return self._split("test")

    # -- predict protocol -------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of the user's images (an image file, or a folder searched recursively by suffix),
        brought to ``image_size`` by the ``resize`` rule of training: ``images``, ``pixel_mask``, ``ids``
        (paths relative to the folder). Needs neither ``prepare_data()`` nor ``setup()``;
        unreadable files follow ``on_bad_file``."""
        source = Path(source).expanduser()
        files = list_image_files(source)
        base = source if source.is_dir() else source.parent
        items = [{"path": str(p), "where": str(p), "id": str(p.relative_to(base))} for p in files]
        loaded, items, bad = load_images(items, self.image_size, self.resize, self.on_bad_file)
        self.skipped = bad
        if not items:
            raise ValueError(f"no readable images under {source}")
        dataset = ImageDataset([f[0] for f in loaded], [f[1] for f in loaded], None, [it["id"] for it in items])
        return self._loader(dataset, shuffle=False, batch_size=batch_size)

    def prediction_rows(self, batch: dict, output: dict, labels: list[str] | None) -> list[dict]:
        """One row per image: ``{"id", "label", "prob", "probs": {label: p}}`` from the objective's
        ``predict_step`` output (``pred [B]``, ``prob [B, C]``)."""
        probs = output["prob"].detach().float().cpu()  # [B, C]
        if probs.dim() != 2:
            raise ValueError(f"image classification expects prob [B, C], got shape {tuple(probs.shape)}")
        names = list(labels) if labels else [str(i) for i in range(probs.shape[1])]
        if len(names) != probs.shape[1]:
            raise ValueError(f"{len(names)} label names for {probs.shape[1]} classes")
        rows = []
        for ident, p in zip(batch["ids"], probs):
            k = int(p.argmax())
            rows.append({"id": ident, "label": names[k], "prob": float(p[k]),
                         "probs": {name: float(v) for name, v in zip(names, p)}})
        return rows
