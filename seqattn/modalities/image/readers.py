"""Reading images: files, folders of class folders, CSVs, and bringing images to one size.

- :func:`read_image_folder`: ``root/<class>/<image>`` (class names = sub-folder names, sorted);
- :func:`read_image_csv`: ``path,label[,split]`` (paths relative to the CSV's folder);
- :func:`load_images`: read and fit every image; unreadable files are never dropped silently
  (``on_bad_file="error"`` stops with the list, ``"skip"`` skips them, counted and listed);
- :func:`fit_image`: ``resize`` | ``pad`` | ``none`` (see :class:`~seqattn.modalities.image.data.ImageDataModule`).

Letters: c channels, h/w rows/columns.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from seqattn.datakit.files import read_table
from seqattn.labels import SPLIT_ALIASES, LabelNames, is_missing, split_name

log = logging.getLogger("seqattn.modalities.image")

RESIZE = ("resize", "pad", "none")
BAD_FILE = ("error", "skip")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
_SHOWN = 20  # unreadable files listed in a message


def size_2d(size: int | Sequence[int]) -> tuple[int, int]:
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


def read_image_folder(root: str | Path, option: str = "data.path") -> list[dict[str, Any]]:
    """``root/<class>/<image>`` -> items ``{path, label, id, split: None, speaker: None, where}``.

    Every non-hidden file inside a class folder is an item, whatever its suffix, so a broken or
    misnamed file is reported when it is read, never skipped here. Hidden files (``.DS_Store``) and
    files directly in ``root`` are ignored and counted in a warning. Files in nested sub-folders
    (``cat/persian/1.png``) take their top folder's class, as torchvision's ``ImageFolder`` does, and
    are counted in a warning; when the top folders are all split names (``train/``, ``test/``: a
    ``root`` one level too high) it is an error. Class folders without files make no class and are
    named in a warning. Class names go through :func:`~seqattn.labels.label_name`. ``option`` names
    the setting that gave ``root`` (for messages).
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise ValueError(f"image folder {root} ({option}) {what}; expected a folder {root}/<class>/<image files> "
                         "or a CSV file of path,label")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(f"image folder {root} has no class sub-folders (expected {root}/<class>/<image files>)")
    items, ignored, nested, empty, names = [], [], [], [], LabelNames()
    for name in classes:
        before = len(items)
        for path in sorted((root / name).rglob("*")):
            if not path.is_file():
                continue
            parts = path.relative_to(root).parts
            if any(part.startswith(".") for part in parts):
                ignored.append(path)
                continue
            if len(parts) > 2:
                nested.append(path)
            ident = str(path.relative_to(root))
            items.append({"path": str(path), "label": names(name), "id": ident, "split": None, "where": str(path)})
        if len(items) == before:
            empty.append(name)
    ignored += [p for p in root.iterdir() if p.is_file()]
    if ignored:
        log.warning("ignored %d file(s) in %s that are hidden or not inside a class folder: %s", len(ignored), root,
                    [str(p) for p in ignored[:_SHOWN]])
    if not items:
        raise ValueError(f"image folder {root} has class folders {classes} but no files in them")
    _check_nested(root, [c for c in classes if c not in empty], nested, option)
    if empty:
        log.warning("%s: %d class folder(s) hold no files and make no class: %s", root, len(empty), empty)
    names.log(log, root)
    return items


def _check_nested(root: Path, classes: Sequence[str], nested: Sequence[Path], option: str) -> None:
    """Nested files take their top folder's class (counted in a warning), unless the top folders are
    split names: then ``root`` is one level too high and the classes would be the splits."""
    if not nested:
        return
    if classes and all(c.lower() in SPLIT_ALIASES for c in classes):
        raise ValueError(f"image folder {root} ({option}): its class folders {list(classes)} are split names and "
                         f"hold sub-folders (e.g. {nested[0].relative_to(root)}), so the classes would be the splits; "
                         f"give {option}={root / classes[0]} (the folder of class folders), or a CSV of "
                         "path,label,split")
    examples = [str(p.relative_to(root)) for p in nested[:5]]
    log.warning("%s: %d image file(s) lie in nested sub-folders and take their top folder's class (e.g. %s -> %r)%s",
                root, len(nested), examples[0], nested[0].relative_to(root).parts[0],
                f"; more: {examples[1:]}" if len(examples) > 1 else "")


def read_image_csv(path: str | Path, path_column: str = "path", label_column: str = "label",
                   split_column: str = "split", encoding: str = "utf-8") -> list[dict[str, Any]]:
    """A CSV of ``path,label[,split]`` -> items (paths relative to the CSV's folder).

    A row without a path or label raises ``ValueError`` naming ``file:line``; the same image listed
    twice is an error naming both lines (with two labels it would train on a contradiction).
    """
    table = read_table(path, "csv", encoding, [path_column, label_column], "image CSV",
                       hint="set data.csv_columns={path: ..., label: ...}")
    items, first, names = [], {}, LabelNames()
    for line, row in table.rows:
        where = table.where(line)
        if is_missing(row.get(path_column)) or is_missing(row.get(label_column)):
            raise ValueError(f"{where}: empty {path_column!r} or {label_column!r} in row {row}")
        image = (table.path.parent / row[path_column]).expanduser()
        key = str(image.resolve())
        if key in first:
            raise ValueError(f"{where}: image {row[path_column]!r} is listed again (first at {first[key]}); each image "
                             "once, with one label")
        first[key] = where
        items.append({"path": str(image), "label": names(row[label_column]), "id": row[path_column],
                      "split": split_name(row.get(split_column), where), "where": where})
    if not items:
        raise ValueError(f"image CSV {table.path} has no rows")
    names.log(log, table.path)
    return items


def common_size(items: Sequence[Mapping[str, Any]], sample: int = 2000) -> tuple[int, int]:
    """The most common ``(H, W)`` among the images of ``items`` (read from the file headers; at most
    ``sample`` files, evenly spread). Unreadable files are left to :func:`load_images` to report."""
    from collections import Counter

    from PIL import Image

    step = max(1, len(items) // sample)
    sizes: Counter = Counter()
    for item in list(items)[::step]:
        try:
            with Image.open(item["path"]) as image:
                w, h = image.size
        except Exception:  # noqa: BLE001 -- reported with its file by load_images
            continue
        sizes[(int(h), int(w))] += 1
    if not sizes:  # nothing readable: load_images lists every file with its reason
        return (16, 16)
    return sizes.most_common(1)[0][0]


def load_images(items: Sequence[Mapping[str, Any]], size: tuple[int, int], resize: str, on_bad_file: str,
                hint: str = "set data.on_bad_file=skip to train without them",
                ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[Mapping[str, Any]], list[tuple[str, str]]]:
    """Read and fit every item's image. Returns ``(images [(image, mask)], kept items, bad [(path, reason)])``;
    with ``on_bad_file="error"`` any bad file raises one ``ValueError`` counting and listing them, ending
    with ``hint`` (the calling command's option)."""
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
                             f"fix or remove them, or {hint}")
        log.warning("skipped %d of %d unreadable image file(s) (on_bad_file=skip):\n%s%s", len(bad), len(items),
                    listing, more)
    return loaded, kept, bad


