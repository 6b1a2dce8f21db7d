"""One label per clip (``task=speech_cls``): spoken words, keywords, speaker identification.

Sources: ``synthetic`` (the built-in spoken-word corpus, :mod:`seqattn.modalities.audio.words`) or
``manifest`` (your files: CSV / JSONL ``path,label[,speaker][,split]``, see
:func:`~seqattn.modalities.audio.manifest.read_clip_manifest`); giving ``manifest=`` selects it.

Splits, in this order:

1. the manifest's ``split_column`` (default ``split``) when it has one (every line or none);
2. ``label_column == speaker_column`` (speaker identification): the clips of each speaker are
   split stratified by label, so every speaker is in every split;
3. speakers given on every line: by speaker, so val and test speakers are unseen in training;
4. otherwise by clip at random. All seeded (``seed``), fractions ``val_fraction`` / ``test_fraction``.

``val_speakers`` then makes validation speaker-held-out: every train or val clip of those speakers
becomes a val clip, and the val clips of every other speaker go back to training (nothing is dropped;
the log says how many moved). Use it when the test speakers are unseen (a manifest with speakers held
out): validation by takes of the training speakers cannot choose settings for voices never heard.

``train_fraction < 1`` keeps a seeded, label-stratified share of the training clips (learning
curves, distillation onto a small labeled subset); val and test stay whole.

Batches: ``waveform [B, T]`` zero-padded, ``lengths [B]`` long, ``labels [B]`` long (not in
prediction batches), ``groups {"speaker": [B] long}`` (index into ``spec().groups["speaker"]``,
-1 = no speaker; the objective reports the test accuracy per speaker), ``ids``.

Letters: b batch, t samples.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.utils.data import DataLoader

from seqattn.datakit.items import Item
from seqattn.datakit.module import TaskDataModule
from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import split, split_indices
from seqattn.labels import is_missing, split_name
from seqattn.modalities.audio.data import CachedAudioDataset, audio_predict_loader, resampled_length, warn_short
from seqattn.modalities.audio.features import ms_to_samples
from seqattn.modalities.audio.manifest import read_clip_manifest, resolve_source
from seqattn.modalities.audio.words import generate_words_corpus

log = logging.getLogger("seqattn.modalities.audio.clips")

GROUP = "speaker"


class ClipDataset(CachedAudioDataset):
    """Clips with one label each: ``__getitem__`` -> ``dict(waveform [T] float32, label int, id str,
    group int)`` (``group``: the speaker's index, -1 = none). Audio is read once and kept in memory."""

    def __init__(self, items: Sequence[Mapping[str, Any]], label_names: Sequence[str], sample_rate: int,
                 speakers: Sequence[str] = ()) -> None:
        super().__init__(items, sample_rate)
        self.label_to_index = {name: i for i, name in enumerate(label_names)}
        self.speaker_to_index = {name: i for i, name in enumerate(speakers)}

    def label(self, item: Mapping[str, Any]) -> int | None:
        """The item's class index."""
        return self.label_to_index[item["label"]]

    def example(self, item: Mapping[str, Any], waveform: torch.Tensor) -> dict[str, Any]:
        return {"waveform": waveform, "label": self.label(item), "id": item["id"],
                "group": self.speaker_to_index.get(item.get("speaker"), -1)}


def collate_clips(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Dataset items -> ``dict(waveform [B, T_max] zero-padded, lengths [B] long, ids, labels [B] long
    (when the items have labels), groups {"speaker": [B] long} (when they have speakers))``."""
    lengths = torch.tensor([b["waveform"].numel() for b in batch], dtype=torch.long)  # [B]
    waveform = torch.zeros(len(batch), int(lengths.max()))  # [B, T_max]
    for i, b in enumerate(batch):
        waveform[i, : lengths[i]] = b["waveform"]
    out: dict[str, Any] = {"waveform": waveform, "lengths": lengths, "ids": [b["id"] for b in batch]}
    if all(b.get("label") is not None for b in batch):
        out["labels"] = torch.tensor([b["label"] for b in batch], dtype=torch.long)  # [B]
    if all("group" in b for b in batch):
        out["groups"] = {GROUP: torch.tensor([b["group"] for b in batch], dtype=torch.long)}  # [B]
    return out


class ClipDataModule(TaskDataModule):
    """Utterance classification data: the built-in spoken-word corpus or a user manifest.

    Args (besides :class:`~seqattn.datakit.module.TaskDataModule`'s):
        source: ``synthetic`` | ``manifest``; a ``manifest`` path selects ``manifest``.
        manifest: a ``.csv`` / ``.jsonl`` manifest ``path,label[,speaker][,split]``.
        label_column: the column holding each clip's label (``speaker``: speaker identification).
        speaker_column: the column naming the speaker (None: no speakers).
        split_column: the column with each clip's split (None: ignore it and split by seed).
        val_speakers: speakers whose clips form the val split, none of them in training (see the
            module docstring); None: the split above as it is.
        train_fraction: keep this label-stratified share of the training clips (seeded).
        sample_rate, win_ms: audio rate and the analysis window (clips shorter than one window are
            skipped and counted).
        synth: arguments of :func:`~seqattn.modalities.audio.words.generate_words_corpus`.
    """

    collate = staticmethod(collate_clips)

    def __init__(
        self,
        source: str | None = None,
        data_dir: str | None = None,
        manifest: str | None = None,
        label_column: str = "label",
        speaker_column: str | None = "speaker",
        split_column: str | None = "split",
        val_speakers: Sequence[str] | None = None,
        labels: Sequence[str] | None = None,
        train_fraction: float = 1.0,
        sample_rate: int = 16000,
        win_ms: float = 25.0,
        batch_size: int = 32,
        num_workers: int = 0,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        seed: int = 0,
        synth: Mapping[str, Any] | None = None,
        limit: int | None = None,
        encoding: str = "utf-8",
    ) -> None:
        source = resolve_source(source, manifest)
        if not 0.0 < float(train_fraction) <= 1.0:
            raise ValueError(f"train_fraction={train_fraction!r} must be in (0, 1]")
        if not label_column:
            raise ValueError("label_column must name the manifest column with each clip's label")
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, limit=limit, labels=labels,
                         encoding=encoding, train_fraction=train_fraction)
        self.source, self.manifest = source, manifest
        self.label_column, self.speaker_column, self.split_column = label_column, speaker_column, split_column
        if isinstance(val_speakers, str):
            val_speakers = [val_speakers]
        self.val_speakers = [str(v) for v in val_speakers] if val_speakers else []
        if self.val_speakers and (not speaker_column or label_column == speaker_column):
            raise ValueError(f"val_speakers={self.val_speakers} needs speakers that are not the label: "
                             f"speaker_column={speaker_column!r}, label_column={label_column!r}")
        self.sample_rate = int(sample_rate)
        self.win = ms_to_samples(win_ms, sample_rate)
        if self.win <= 0:
            raise ValueError(f"win_ms={win_ms} must be at least one sample")
        self.synth = dict(synth or {})
        self.speakers: list[str] = []
        self.split_method: str | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def manifest_path(self) -> Path:
        if self.source == "synthetic":
            return generate_words_corpus(self.data_dir, **self.synth)
        return Path(self.manifest).expanduser()

    def prepare_data(self) -> None:
        if self.source == "synthetic":
            generate_words_corpus(self.data_dir, **self.synth)

    def read_items(self, path: Path) -> list[dict[str, Any]]:
        """The manifest's clips with ``label``, ``speaker`` (from ``speaker_column``) and ``split``
        (from ``split_column``) set; ``file:line`` errors."""
        items = read_clip_manifest(path, self.label_column, self.encoding)
        for it in items:
            raw = it["raw"]
            speaker = raw.get(self.speaker_column) if self.speaker_column else None
            it["speaker"] = None if is_missing(speaker) else str(speaker).strip()
            it["split"] = split_name(raw.get(self.split_column), it["where"]) if self.split_column else None
        return items

    def _split(self, items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        has_split = any(it["split"] is not None for it in items)
        speaker_id = self.label_column == self.speaker_column
        has_speakers = all(it["speaker"] is not None for it in items)
        if has_split:
            self.split_method = f"given ({self.split_column} column)"
        elif speaker_id:
            self.split_method = "clips of each speaker, stratified by label"
        elif has_speakers:
            self.split_method = "by speaker (val and test speakers unseen in training)"
        else:
            self.split_method = "by clip at random" + (" (some lines have no speaker)" if any(
                it["speaker"] for it in items) else "")
        splits = split(items, self.val_fraction, self.test_fraction, self.seed, given=lambda it: it["split"],
                       group=None if speaker_id or not has_speakers else (lambda it: it["speaker"]),
                       stratify=(lambda it: it["label"]) if speaker_id else None,
                       where=lambda it: it["where"], what="clips")
        return self._speakers_to_val(splits) if self.val_speakers else splits

    def _speakers_to_val(self, splits: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        """``splits`` with val = every train/val clip of ``val_speakers`` and the other speakers' val clips
        back in train; ``ValueError`` for a speaker the manifest lacks or one with test clips."""
        wanted = set(self.val_speakers)
        pool = splits["train"] + splits["val"]
        known = {it["speaker"] for it in pool if it["speaker"]}
        tested = {it["speaker"] for it in splits["test"] if it["speaker"]}
        if wanted & tested:
            raise ValueError(f"val_speakers {sorted(wanted & tested)} have test clips: a validation speaker must not "
                             f"be tested; the test speakers are {sorted(tested)}")
        if wanted - known:
            raise ValueError(f"val_speakers {sorted(wanted - known)} have no train or val clip in {self.manifest}; "
                             f"the speakers there are {sorted(known)}")
        val = [it for it in pool if it["speaker"] in wanted]
        train = [it for it in pool if it["speaker"] not in wanted]
        if not train:
            raise ValueError(f"val_speakers={sorted(wanted)} leave no training clips: they are every speaker "
                             f"outside test ({sorted(known)})")
        to_val = sum(it["speaker"] in wanted for it in splits["train"])
        to_train = sum(it["speaker"] not in wanted for it in splits["val"])
        log.info("val_speakers %s: %d of their training clips moved to val, %d val clips of other speakers moved "
                 "to training", sorted(wanted), to_val, to_train)
        self.split_method += f"; validation speakers {', '.join(sorted(wanted))} (unseen in training)"
        return {**splits, "train": train, "val": val}

    def subsample_train(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.train_fraction >= 1.0 or not items:
            return items
        # stratified: each label keeps its share (test_fraction = 1 - train_fraction)
        idx = split_indices(len(items), 0.0, 1.0 - self.train_fraction, self.seed,
                            strata=[it["label"] for it in items])
        kept = [items[i] for i in sorted(idx["train"])]
        log.info("train_fraction=%.3f: %d of %d training clips", self.train_fraction, len(kept), len(items))
        return kept

    def _drop_short(self, name: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept, short = [], []
        for it in items:
            if resampled_length(it, self.sample_rate)[0] < self.win:
                short.append(it["where"])
            else:
                kept.append(it)
        warn_short(short, name, self.win, what="clip")
        return kept

    def _read_splits(self) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
        """The manifest (or folder) and its clips by split: split, clips shorter than one window dropped
        (counted), capped by ``limit``; ``ValueError`` naming the file when no training clip is left."""
        path = self.manifest_path()
        splits = self._split(self.read_items(path))
        splits = self.cap({name: self._drop_short(name, items) for name, items in splits.items()})
        if not splits["train"]:
            raise ValueError(f"{path}: no training clips")
        return path, splits

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path, splits = self._read_splits()
        try:
            self.set_labels({name: [(it["label"], it["where"]) for it in items] for name, items in splits.items()},
                            source=str(path))
        except ValueError as err:
            if self.label_column == self.speaker_column and self.split_method.startswith("given"):
                raise ValueError(f"{err}. Speaker identification needs every speaker in training: set "
                                 f"data.split_column=null to split each speaker's clips instead") from None
            raise
        self.speakers = sorted({it["speaker"] for items in splits.values() for it in items if it["speaker"]})
        for name, items in splits.items():
            if not items:
                log.warning("the %s split of %s is empty", name, path)
            self.datasets[name] = ClipDataset(items, self._labels, self.sample_rate, self.speakers)
        sizes = {n: len(d) for n, d in self.datasets.items()}
        counts = Counter(it["label"] for it in splits["train"])
        log.info("clips from %s (split %s): %s, %d classes, %d speakers; training clips per class %d..%d", path,
                 self.split_method, sizes, len(self._labels), len(self.speakers), min(counts.values()),
                 max(counts.values()))

    def spec(self) -> DataSpec:
        """The label set and the speakers (test accuracy per speaker)."""
        return DataSpec(num_outputs=self.num_classes, labels=self.label_names,
                        groups={GROUP: self.speakers} if self.speakers else {})

    # -- predict protocol -----------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of unlabelled clips: an audio file, a folder of audio files (recursive) or a
        manifest (labels ignored). Batches: ``waveform [B, T]``, ``lengths [B]``, ``ids``. Needs no
        ``setup()``."""
        return audio_predict_loader(self, source, batch_size, collate=collate_clips)

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """Per clip: its id and ``duration_s`` (rows add ``label``, ``prob`` and ``probs``)."""
        return [Item(id=ident, fields={"duration_s": round(n / self.sample_rate, 5)})
                for ident, n in zip(batch["ids"], batch["lengths"].tolist())]


class UnlabelledClipDataset(ClipDataset):
    """Clips without labels (pretraining): items as :class:`ClipDataset`'s with ``label`` None."""

    def __init__(self, items: Sequence[Mapping[str, Any]], sample_rate: int, speakers: Sequence[str] = ()) -> None:
        super().__init__(items, (), sample_rate, speakers)

    def label(self, item: Mapping[str, Any]) -> None:
        return None


class UnlabelledClipDataModule(ClipDataModule):
    """Unlabelled clips, for masked-frame pretraining (``task=speech_pretrain``).

    ``source=synthetic``: the built-in spoken-word corpus of ``task=speech_cls`` (its word labels
    unused; the same splits, test speakers unseen). ``manifest``: your clips, either a folder of audio
    files (searched recursively, ``.wav``, ``.flac``, ...) or a CSV / JSONL manifest with a ``path``
    column (any label column ignored; ``speaker`` and ``split`` columns used as in ``speech_cls``).
    Without given splits: by speaker when every clip names one, else by clip at random.

    Batches: ``waveform [B, T]``, ``lengths [B]``, ``ids`` (and ``groups`` when speakers are known);
    never ``labels``. The spec has no labels (``num_outputs`` 1: the pretraining head is sized by the
    adapter's frame features, not by the data).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.label_column = None  # never read; not speaker identification: split by speaker or by clip
        if self.train_fraction < 1.0:
            raise ValueError(f"train_fraction={self.train_fraction} is for labelled clips: pretraining reads every "
                             "unlabelled clip (keep 1.0)")

    def read_items(self, path: Path) -> list[dict[str, Any]]:
        """A folder of audio files or a manifest (labels ignored) -> items with ``speaker`` and ``split``."""
        if self.source == "synthetic" or not Path(path).is_dir():
            from seqattn.modalities.audio.manifest import read_manifest

            items = read_manifest(path, self.encoding, require_segments=False)
        else:
            from seqattn.modalities.audio.manifest import read_audio_list

            items = [dict(it, raw={}) for it in read_audio_list(path, self.encoding)]
        for it in items:
            raw = it.get("raw") or {}
            speaker = raw.get(self.speaker_column) if self.speaker_column else None
            it["speaker"] = None if is_missing(speaker) else str(speaker).strip()
            it["split"] = split_name(raw.get(self.split_column), it["where"]) if self.split_column else None
            it["label"] = None
        return items

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path, splits = self._read_splits()
        self._labels = []
        self.speakers = sorted({it["speaker"] for items in splits.values() for it in items if it["speaker"]})
        for name, items in splits.items():
            if not items:
                log.warning("the %s split of %s is empty", name, path)
            self.datasets[name] = UnlabelledClipDataset(items, self.sample_rate, self.speakers)
        log.info("unlabelled clips from %s (split %s): %s, %d speakers", path, self.split_method,
                 {n: len(d) for n, d in self.datasets.items()}, len(self.speakers))

    def spec(self) -> DataSpec:
        """No labels; the speakers, when known."""
        return DataSpec(num_outputs=1, labels=None, groups={GROUP: self.speakers} if self.speakers else {})

    def subset_names(self) -> tuple[str, ...]:
        return ()
