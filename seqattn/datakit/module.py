"""The one DataModule base every task's data derives from.

:class:`TaskDataModule` owns what every task's data has in common:

- the shared constructor arguments (``batch_size``, ``num_workers``, ``seed``, ``data_dir``,
  ``val_fraction`` / ``test_fraction``, ``limit``, ``train_fraction``, ``labels``, ``encoding``), checked once;
- the label set: from the training split unless given (:meth:`set_labels`), with a clear error for
  a label in val/test that training never saw, or a training set with one class only;
- the loaders over ``self.datasets[split]`` with ``self.collate`` (training shuffled by a generator
  seeded with ``seed``; with ``bucket_by_length``, in batches of similar lengths);
- the spec the model is built from (:meth:`spec`, a :class:`~seqattn.datakit.spec.DataSpec`);
- the predict protocol: :meth:`predict_loader` (batches of a user's unlabeled inputs) and
  :meth:`describe` (what each item of such a batch is, as :class:`~seqattn.datakit.items.Item`).

A subclass reads its data in ``setup()`` into ``self.datasets`` and sets ``collate``.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, SequentialSampler

from seqattn.datakit.buckets import LengthBucketSampler
from seqattn.datakit.files import resolve_data_dir
from seqattn.datakit.items import Item
from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import check_fractions
from seqattn.labels import SPLITS, case_collisions, label_name

log = logging.getLogger("seqattn.datakit")


ON_ERROR = ("skip", "stop")
#: the end of an unreadable-input error raised while predicting (``on_error=stop``): the predict option
PREDICT_SKIP_HINT = "predict with on_error=skip (the default) to predict the readable ones and list the others"


class _Skipped:
    """A prediction item that could not be read: where it is and why."""

    def __init__(self, where: str, reason: str) -> None:
        self.where, self.reason = where, reason


class SkipBadItems(Dataset):
    """Wraps a prediction dataset: an item whose reading raises ``ValueError`` (an unreadable file, a
    clip shorter than one window) becomes a record of the failure instead of stopping the run."""

    def __init__(self, dataset: Dataset, where: Callable[[int], str] | None = None) -> None:
        self.dataset, self.where = dataset, where

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        try:
            return self.dataset[index]
        except ValueError as err:
            return _Skipped(self.where(index) if self.where else f"item {index}", str(err))


def collate_skipping(collate: Callable[[list[Any]], dict[str, Any]]) -> Callable[[list[Any]], dict[str, Any]]:
    """``collate`` over the readable items; the failures ride along as ``batch["skipped"]`` =
    ``[(where, reason), ...]`` (a batch of only failures has no other keys)."""

    def wrapped(items: list[Any]) -> dict[str, Any]:
        good = [it for it in items if not isinstance(it, _Skipped)]
        skipped = [(it.where, it.reason) for it in items if isinstance(it, _Skipped)]
        batch = collate(good) if good else {}
        if skipped:
            batch["skipped"] = skipped
        return batch

    return wrapped


class SeededItems(RandomSampler):
    """A shuffling sampler that hands out ``(index, seed)``: the seed, drawn from the same generator as
    the permutation, is what the item draws its randomness from (a training augmentation). The
    shuffling generator is checkpointed (:mod:`seqattn.training.resume`), so a run resumed mid-epoch
    redraws the same order *and* the same augmentations. For datasets with ``seeded_items = True``."""

    def __iter__(self):
        n = len(self.data_source)
        order = torch.randperm(n, generator=self.generator).tolist()
        seeds = torch.randint(0, 2**62, (n,), generator=self.generator).tolist()
        yield from zip(order, seeds)


class ListDataset(Dataset):
    """A list of prepared items."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]


class TaskDataModule(L.LightningDataModule):
    """Shared base of the task DataModules (see the module docstring).

    Args:
        batch_size: items per batch (positive).
        num_workers: DataLoader worker processes.
        seed: seeds the split and the training shuffle.
        data_dir: cache of built-in / downloaded data (None: ``$SEQATTN_DATA_DIR`` or ``~/.cache/seqattn``).
        val_fraction, test_fraction: split fractions when the data has no split of its own.
        limit: at most this many items per split (quick runs), or None.
        train_fraction: keep this share of the training split only (val and test untouched), a sample of
            ``round(train_fraction * n)`` items (at least 1) chosen by ``seed`` and kept in file order:
            few-label runs (learning curves, fine-tuning from a pretrained checkpoint). 1.0: all.
        labels: the label set in index order; None = the labels of the training split, sorted.
        encoding: text encoding of the user's files (UTF-8 with or without BOM by default).
        bucket_by_length: training batches of similar lengths (:class:`~seqattn.datakit.buckets.LengthBucketSampler`:
            shuffled pools of ``bucket_batches`` batches sorted by :meth:`item_length`); exact mid-epoch
            resume still holds. Needs a subclass that defines :meth:`item_length`.
        bucket_batches: batches per sorted pool.
    """

    collate: Callable[[list[Any]], dict[str, Any]]
    #: what the labels are called in messages ("labels", "tags", "classes")
    label_kind = "labels"
    #: True where the labels are tokens of a text (transcript characters or words): kept as written,
    #: with no numeric naming (:func:`~seqattn.labels.label_name`) and no warning about labels that
    #: differ only in case (``A`` / ``a`` are two characters)
    tokens_as_written = False

    def __init__(
        self,
        *,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        data_dir: str | Path | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        limit: int | None = None,
        labels: Sequence[str] | None = None,
        encoding: str = "utf-8",
        bucket_by_length: bool = False,
        bucket_batches: int = 50,
        train_fraction: float = 1.0,
    ) -> None:
        super().__init__()
        if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)) \
                or not 0.0 < float(train_fraction) <= 1.0:
            raise ValueError(f"train_fraction={train_fraction!r} must be a number in (0, 1] (the share of the "
                             "training items to keep; 1 = all)")
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers must be an int >= 0, got {num_workers!r}")
        if limit is not None and (not isinstance(limit, int) or limit <= 0):
            raise ValueError(f"limit must be a positive number of items per split or None, got {limit!r}")
        check_fractions(val_fraction, test_fraction)
        if labels is not None:
            # the naming the readers use (1.0 -> "1"), unless the labels are a text's tokens
            labels = [str(x) if self.tokens_as_written else label_name(x) for x in labels]
            dup = sorted({x for x in labels if labels.count(x) > 1})
            if dup:
                raise ValueError(f"labels lists {dup} more than once: {labels}")
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, int(seed)
        self.data_dir = resolve_data_dir(data_dir)
        self.val_fraction, self.test_fraction = float(val_fraction), float(test_fraction)
        self.limit = limit
        self.train_fraction = float(train_fraction)
        self.encoding = encoding
        if not isinstance(bucket_batches, int) or bucket_batches < 1:
            raise ValueError(f"bucket_batches must be a positive int, got {bucket_batches!r}")
        self.bucket_by_length, self.bucket_batches = bool(bucket_by_length), bucket_batches
        self._lengths: dict[int, list[int]] = {}
        self._labels: list[str] | None = list(labels) if labels is not None else None
        self.datasets: dict[str, Dataset] = {}
        #: prediction: ``skip`` (default) predicts every readable item and lists the others in
        #: ``predict_errors``; ``stop`` raises at the first bad one. Set by ``seqattn.predict``.
        self.on_error = "skip"
        self.predict_errors: list[tuple[str, str]] = []

    # -- labels ---------------------------------------------------------------------------------
    @property
    def label_names(self) -> list[str]:
        if self._labels is None:
            raise RuntimeError("label_names are known after setup() (they come from the training split)")
        return list(self._labels)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def set_labels(self, splits: Mapping[str, Iterable[tuple[str, str]]], min_classes: int = 2,
                   source: str = "the training data") -> list[str]:
        """Fix the label set from ``splits`` = ``{split: [(label, "file:line"), ...]}``.

        Without ``labels`` given, the set is the training split's labels, sorted. Every label of
        every split must be in it (else ``ValueError`` at the first offending line), and it must
        have at least ``min_classes`` labels (a classifier of one class learns nothing). Labels that
        differ only in case (``Neg`` / ``neg``) in the training split stay separate classes, with a
        warning naming them, their counts and a line of each (unless ``tokens_as_written``).
        """
        seen = {s: list(v) for s, v in splits.items()}
        if not self.tokens_as_written:
            self._warn_case_collisions(seen, source)
        if self._labels is None:
            train = sorted({lab for lab, _ in seen.get("train", [])})
            self._labels = train
        known = set(self._labels)
        for name in SPLITS:
            unknown = Counter(lab for lab, _ in seen.get(name, []) if lab not in known)
            if unknown:
                label = next(iter(unknown))
                at = next(w for lab, w in seen[name] if lab == label)
                kind = self.label_kind[:-1] if self.label_kind.endswith("s") else self.label_kind
                raise ValueError(f"{at}: {kind} {label!r} in the {name} split is not in the label set {self._labels} "
                                 f"(from the training split unless data.labels is set; unknown: {dict(unknown)}); add "
                                 "training examples of it, or set data.labels to the full set")
        if len(self._labels) < min_classes:
            counts = Counter(lab for lab, _ in seen.get("train", []))
            raise ValueError(f"{source} has {len(self._labels)} distinct {self.label_kind} {self._labels} "
                             f"({dict(counts)} examples) in the training split; a model needs at least {min_classes} "
                             f"to learn to tell them apart: check the label column and the split")
        return list(self._labels)

    def _warn_case_collisions(self, seen: Mapping[str, list[tuple[str, str]]], source: str) -> None:
        counts = Counter(lab for lab, _ in seen.get("train", []))
        first: dict[str, str] = {}
        for lab, where in seen.get("train", []):
            first.setdefault(lab, where)
        for group in case_collisions(counts):
            shown = ", ".join(f"{lab!r}: {n} (e.g. {first[lab]})" for lab, n in group.items())
            log.warning("%s: %s that differ only in case are kept as separate classes (training examples: %s); if "
                        "they mean one class, write them the same way in the data", source, self.label_kind, shown)

    def subsample_train(self, items: list[Any]) -> list[Any]:
        """``train_fraction``: a seeded sample of the training items, in their order (logged with the counts).
        Subclasses may override it (e.g. stratified by label); it is applied to the training split only."""
        if self.train_fraction >= 1.0 or not items:
            return items
        n = max(1, round(self.train_fraction * len(items)))
        keep = sorted(random.Random(self.seed).sample(range(len(items)), n))
        log.info("train_fraction=%g: using %d of %d training items (seed %d); val and test untouched",
                 self.train_fraction, n, len(items), self.seed)
        return [items[i] for i in keep]

    def cap(self, splits: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """``train_fraction`` (:meth:`subsample_train`, the training split only), then ``limit``: at most that
        many items per split (logged)."""
        if "train" in splits and self.train_fraction < 1.0:
            splits = {**splits, "train": self.subsample_train(list(splits["train"]))}
        if self.limit is None:
            return splits
        out = {}
        for name, items in splits.items():
            if len(items) > self.limit:
                log.info("limit=%d: using %d of %d %s items", self.limit, self.limit, len(items), name)
            out[name] = items[: self.limit]
        return out

    # -- what the model needs -------------------------------------------------------------------
    def spec(self) -> DataSpec:
        """What the model is built from (after ``setup()``). Default: the label set."""
        return DataSpec(num_outputs=self.num_classes, labels=self.label_names)

    def longest(self) -> dict[str, tuple[int, str]]:
        """Per split, the longest item in tokens as the adapter makes them and where it is
        (``{"test": (141, "file:line")}``), so a length limit of the model is checked before training.
        Empty when the data does not know (default)."""
        return {}

    def split_sizes(self) -> dict[str, int]:
        """Items per split (after ``setup()``)."""
        return {name: len(self.datasets[name]) if name in self.datasets else 0 for name in SPLITS}

    # -- loaders --------------------------------------------------------------------------------
    def item_length(self, dataset: Dataset, index: int) -> int:
        """Length (tokens, frames) of item ``index`` of ``dataset``, for ``bucket_by_length``."""
        raise ValueError(f"bucket_by_length=true needs item lengths, which {type(self).__name__} does not define "
                         "(item_length); set data.bucket_by_length=false")

    def item_lengths(self, dataset: Dataset) -> list[int]:
        """:meth:`item_length` of every item (computed once per dataset)."""
        key = id(dataset)
        if key not in self._lengths:
            self._lengths[key] = [int(self.item_length(dataset, i)) for i in range(len(dataset))]
        return self._lengths[key]

    def loader(self, dataset: Dataset, shuffle: bool = False, batch_size: int | None = None,
               collate: Callable | None = None, by_length: bool = False) -> DataLoader:
        """``dataset``'s loader: shuffled (seeded) or in order; with ``bucket_by_length``, shuffled batches of
        similar lengths, and with ``by_length`` too an unshuffled loader's batches sorted by length (fixed)."""
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        batch_size = batch_size or self.batch_size
        common = dict(num_workers=self.num_workers, collate_fn=collate or self.collate,
                      persistent_workers=self.num_workers > 0)
        if by_length and not shuffle and self.bucket_by_length and len(dataset):
            sampler = LengthBucketSampler(SequentialSampler(dataset), batch_size, False,
                                          lengths=self.item_lengths(dataset),
                                          bucket_batches=-(-len(dataset) // batch_size), shuffle=False)
            return DataLoader(dataset, batch_sampler=sampler, **common)
        if shuffle and self.bucket_by_length:
            sampler = LengthBucketSampler(RandomSampler(dataset, generator=generator), batch_size, False,
                                          lengths=self.item_lengths(dataset), bucket_batches=self.bucket_batches,
                                          generator=generator)
            return DataLoader(dataset, batch_sampler=sampler, generator=generator, **common)
        if shuffle and getattr(dataset, "seeded_items", False):  # per-item seeds for augmentation (exact resume)
            return DataLoader(dataset, batch_size=batch_size, sampler=SeededItems(dataset, generator=generator),
                              generator=generator, **common)
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator, **common)

    def split_loader(self, split: str, shuffle: bool = False) -> DataLoader:
        """The loader of ``split``. With ``bucket_by_length``, the validation split comes in batches of
        similar lengths too, shortest first, in a fixed order (:class:`LengthBucketSampler` with one pool and
        ``shuffle=False``): it is evaluated every epoch, and its metrics are sums over items, so only the
        padding changes (UD LinES dev at batch 64: 24,162 positions instead of 67,464 for its 21,637 words).
        Test and prediction keep the file's order (figures read the first test batch; predictions are
        written in order)."""
        if not self.datasets:
            self.setup()
        if split not in self.datasets:
            raise ValueError(f"no {split} split (splits: {sorted(self.datasets)})")
        return self.loader(self.datasets[split], shuffle, by_length=split == "val")

    def train_dataloader(self) -> DataLoader:
        return self.split_loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.split_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.split_loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self.split_loader("test")

    # -- predict protocol -----------------------------------------------------------------------
    def predict_batches(self, dataset: Dataset, batch_size: int | None = None,
                        where: Callable[[int], str] | None = None, collate: Callable | None = None) -> DataLoader:
        """The loader of a prediction dataset: in order; with ``on_error="skip"`` an unreadable item is
        recorded (``batch["skipped"]``) instead of stopping (see :class:`SkipBadItems`)."""
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error={self.on_error!r} is not one of {ON_ERROR}")
        collate = collate or self.collate
        if self.on_error == "skip":
            dataset, collate = SkipBadItems(dataset, where), collate_skipping(collate)
        return self.loader(dataset, shuffle=False, batch_size=batch_size, collate=collate)

    def record_skipped(self, bad: Iterable[tuple[str, str]]) -> None:
        """Inputs left out while reading a prediction source (``on_error="skip"``): kept for the report."""
        self.predict_errors.extend(bad)

    def record_malformed(self, path: Path, bad: list[tuple[str, str]], read: int, unit: str, items: str) -> None:
        """Record the malformed ``bad`` lines of one prediction file and log their count beside the
        ``read`` items kept (``unit``: "line(s)", "row(s)"; ``items``: "sentence(s)", ...)."""
        self.record_skipped(bad)
        if bad:
            log.warning("%s: left out %d malformed %s (on_error=skip), read %d %s", path, len(bad), unit, read, items)

    def export_preprocessing(self) -> dict[str, Any]:
        """How this module turns a user's raw input into the model's inputs (text: the tokenizer; images:
        the size and resize rule), for an exported model's sidecar JSON. Default: nothing to say."""
        return {}

    def for_prediction(self, spec: DataSpec | None) -> None:
        """Before predicting with a trained model: take what the training data decided and a fresh
        DataModule cannot know (e.g. the image size found in the training images) from the model's spec.
        Default: nothing."""

    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of a user's unlabeled inputs read from ``source`` (a file or folder in the task's
        predict format). Needs no ``setup()``: what it needs comes from this module's config."""
        raise NotImplementedError(f"{type(self).__name__} does not read prediction inputs")

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """What each item of ``batch`` is (one :class:`Item` per item). Default: its id."""
        return [Item(id=str(i)) for i in batch["ids"]]
