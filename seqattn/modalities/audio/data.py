"""Frame-labelled audio: dataset, collate and the speech DataModule (``task=speech``).

Sources: ``synthetic`` (the built-in corpus, :mod:`seqattn.modalities.audio.corpus`) or
``manifest`` (your files, :mod:`seqattn.modalities.audio.manifest`); giving ``manifest=`` selects
the manifest source.

Batches: ``waveform [B, T]`` zero-padded, ``lengths [B]``, ``labels [B, F]`` (-100 = no label),
``ids``; prediction batches lack ``labels``.

Letters: b batch, t samples, f frames.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import soundfile as sf
import torch
from torch.utils.data import DataLoader, Dataset

from seqattn.datakit.items import Item, merge_runs
from seqattn.datakit.module import TaskDataModule
from seqattn.datakit.splits import split
from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.audio.corpus import PHONES, generate_speech_corpus
from seqattn.modalities.audio.features import frame_labels, load_audio, ms_to_samples, num_frames
from seqattn.modalities.audio.manifest import check_complete_wav, read_audio_list, read_manifest, resolve_source

log = logging.getLogger("seqattn.modalities.audio")



# ---------------------------------------------------------------------------------------------
# dataset and collate


class CachedAudioDataset(Dataset):
    """Audio items read on first access (``load_audio``, resampled to ``sample_rate``) and kept in memory.

    ``__getitem__(i)`` -> ``self.example(items[i], waveform [T] float32)``, built once and cached. A file
    that cannot be read, or that is shorter than ``min_samples`` (the analysis window), is a ``ValueError``
    naming the item (its ``where``, else its ``path``). Subclasses define :meth:`example`.
    """

    def __init__(self, items: Sequence[Mapping[str, Any]], sample_rate: int, min_samples: int = 0) -> None:
        self.items = list(items)
        self.sample_rate, self.min_samples = sample_rate, min_samples
        self._cache: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index not in self._cache:
            item = self.items[index]
            where = item.get("where", item["path"])
            try:
                wav = load_audio(item["path"], self.sample_rate)  # [T]
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
            if wav.numel() < self.min_samples:
                raise ValueError(f"{where}: {wav.numel()} samples is shorter than the analysis window "
                                 f"({self.min_samples} samples)")
            self._cache[index] = self.example(item, wav)
        return self._cache[index]

    def example(self, item: Mapping[str, Any], waveform: torch.Tensor) -> dict[str, Any]:
        """One dataset example from an item and its waveform ``[T]``."""
        raise NotImplementedError(f"{type(self).__name__} must define example(item, waveform)")


class FrameLabelDataset(CachedAudioDataset):
    """Utterances with one label per frame.

    ``__getitem__`` -> ``dict(waveform [T] float32, labels [F] long, id str)`` with
    ``F = num_frames(T, win, hop)``. Audio is read on first access and kept in memory.
    """

    def __init__(
        self,
        items: Sequence[Mapping[str, Any]],
        label_names: Sequence[str],
        sample_rate: int,
        win: int,
        hop: int,
        default_label: str | None = None,
    ) -> None:
        super().__init__(items, sample_rate, min_samples=win)
        self.label_names = list(label_names)
        self.label_to_index = {name: i for i, name in enumerate(self.label_names)}
        if default_label is not None and default_label not in self.label_to_index:
            raise ValueError(f"default_label {default_label!r} is not one of the labels {self.label_names}")
        self.win, self.hop = win, hop
        self.default_label = default_label

    def example(self, item: Mapping[str, Any], waveform: torch.Tensor) -> dict[str, Any]:
        labels = frame_labels(item["segments"], waveform.numel(), self.sample_rate, self.win, self.hop,
                              self.label_to_index, self.default_label)  # [F]
        return {"waveform": waveform, "labels": labels, "id": item["id"]}


def collate_frames(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """List of dataset items -> ``dict(waveform [B, T_max] zero-padded, lengths [B] long,
    labels [B, F_max] padded with -100 (when the items have labels), ids list[str])``."""
    lengths = torch.tensor([b["waveform"].numel() for b in batch], dtype=torch.long)  # [B]
    waveform = torch.zeros(len(batch), int(lengths.max()))  # [B, T_max]
    for i, b in enumerate(batch):
        waveform[i, : lengths[i]] = b["waveform"]
    out = {"waveform": waveform, "lengths": lengths, "ids": [b["id"] for b in batch]}
    if all(b.get("labels") is not None for b in batch):
        frames = [b["labels"].numel() for b in batch]
        labels = torch.full((len(batch), max(frames)), IGNORE_INDEX, dtype=torch.long)  # [B, F_max]
        for i, b in enumerate(batch):
            labels[i, : frames[i]] = b["labels"]
        out["labels"] = labels
    return out


#: unlabelled items have the same batch layout, without labels
collate_audio = collate_frames


class AudioFileDataset(Dataset):
    """Unlabelled audio files for prediction: ``__getitem__`` -> ``dict(waveform [T] float32, id str)``."""

    def __init__(self, items: Sequence[Mapping[str, str]], sample_rate: int, win: int) -> None:
        self.items, self.sample_rate, self.win = list(items), sample_rate, win

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = self.items[index]
        wav = load_audio(item["path"], self.sample_rate)  # [T]
        if wav.numel() < self.win:
            raise ValueError(f"{item['path']}: {wav.numel()} samples is shorter than the analysis window "
                             f"({self.win} samples): nothing to label")
        return {"waveform": wav, "id": item["id"]}


def frame_spans(num_samples: int, sample_rate: int, win: int, hop: int) -> list[tuple[float, float]]:
    """The time each frame's label stands for: frame ``i`` is labelled at its centre sample
    ``c_i = i * hop + win // 2`` and covers ``c_i ± hop / 2``; the first starts at 0 and the last ends
    at the end of the audio, so runs of equal frame labels become segments that, fed back through
    :func:`~seqattn.modalities.audio.features.frame_labels`, give the same frame labels."""
    n = num_frames(num_samples, win, hop)
    spans = []
    for i in range(n):
        c = i * hop + win // 2
        start = 0.0 if i == 0 else (c - hop / 2) / sample_rate
        end = num_samples / sample_rate if i == n - 1 else (c + hop / 2) / sample_rate
        spans.append((start, end))
    return spans


def frames_to_segments(labels: Sequence[str], num_samples: int, sample_rate: int, win: int,
                       hop: int) -> list[list]:
    """Per-frame labels -> merged ``[[start_s, end_s, label], ...]`` (runs of equal labels, see
    :func:`frame_spans`)."""
    return merge_runs(list(labels), frame_spans(num_samples, sample_rate, win, hop))


# ---------------------------------------------------------------------------------------------
# DataModule


def resampled_length(item: Mapping[str, Any], sample_rate: int) -> tuple[int, float]:
    """``(samples after resampling to sample_rate, duration in seconds)`` of a manifest item's audio
    file, from its header; an unreadable or truncated file is a ``ValueError`` naming the manifest line."""
    try:
        info = sf.info(item["path"])
    except Exception as err:  # LibsndfileError / RuntimeError
        raise ValueError(f"{item['where']}: cannot read audio file {item['path']}: {err}") from err
    check_complete_wav(item["path"], item["where"])  # soundfile counts only the frames that are left
    return int(np.ceil(info.frames * sample_rate / info.samplerate)), info.frames / info.samplerate


def warn_short(short: Sequence[str], split_name: str, win: int, what: str = "utterance") -> None:
    """Log the items (``file:line``) left out for being shorter than one analysis window."""
    if short:
        log.warning("skipped %d %s %s(s) shorter than one %d-sample window: %s%s", len(short), split_name, what, win,
                    list(short[:5]), " ..." if len(short) > 5 else "")


def audio_predict_loader(dm: TaskDataModule, source: str | Path, batch_size: int | None,
                         collate: Any = None) -> DataLoader:
    """The predict loader of every audio DataModule: an audio file, a folder of audio files or a manifest
    (:func:`~seqattn.modalities.audio.manifest.read_audio_list`) -> batches of ``waveform [B, T]``,
    ``lengths [B]``, ``ids``; unreadable inputs skipped and recorded (``on_error="skip"``) or raised."""
    if batch_size is not None and batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    bad: list[tuple[str, str]] = []
    items = read_audio_list(source, dm.encoding, skipped=bad if dm.on_error == "skip" else None)
    dm.record_skipped(bad)
    dataset = AudioFileDataset(items, dm.sample_rate, dm.win)
    return dm.predict_batches(dataset, batch_size, where=lambda i: items[i]["where"], collate=collate)


class UtteranceDataModule(TaskDataModule):
    """What the frame-labelling and the label-sequence DataModules share: utterances from the built-in
    corpus (``source=synthetic``, generated into ``data_dir``) or a manifest (``self.manifest``), split by
    speaker (or by the manifest's ``split`` column), utterances shorter than one window dropped. A
    subclass sets ``source``, ``manifest``, ``synth``, ``sample_rate``, ``win`` and defines ``_drop_short``."""

    def _manifest_path(self) -> Path:
        if self.source == "synthetic":
            return generate_speech_corpus(self.data_dir, **self.synth)
        return Path(self.manifest).expanduser()

    def prepare_data(self) -> None:
        if self.source == "synthetic":
            generate_speech_corpus(self.data_dir, **self.synth)

    def _read_splits(self, read: Callable[[Path], list[dict[str, Any]]]
                     ) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
        """The manifest and its utterances by split (``read(path)`` -> items; split, short ones dropped by
        ``_drop_short``, capped by ``limit``); ``ValueError`` naming the file when no training utterance is left."""
        path = self._manifest_path()
        splits = split(read(path), self.val_fraction, self.test_fraction, self.seed, given=lambda it: it["split"],
                       group=lambda it: it["speaker"], where=lambda it: it["where"], what="utterances")
        splits = self.cap({name: self._drop_short(name, items) for name, items in splits.items()})
        if not splits["train"]:
            raise ValueError(f"{path}: no training utterances")
        return path, splits


class SpeechDataModule(UtteranceDataModule):
    """Frame-level phone labelling data: the built-in synthetic corpus or a user manifest.

    Args (besides :class:`~seqattn.datakit.module.TaskDataModule`'s):
        source: ``synthetic`` | ``manifest``; a ``manifest`` path selects ``manifest``.
        manifest: a ``.jsonl`` or ``.csv`` manifest (see :mod:`seqattn.modalities.audio.manifest`).
        default_label: the label of frames no segment covers (else they are ignored, -100).
        sample_rate, win_ms, hop_ms: the framing (the adapter uses the same).
        synth: arguments of :func:`~seqattn.modalities.audio.corpus.generate_speech_corpus`.
    """

    collate = staticmethod(collate_frames)

    def __init__(
        self,
        source: str | None = None,
        data_dir: str | None = None,
        manifest: str | None = None,
        labels: Sequence[str] | None = None,
        default_label: str | None = None,
        sample_rate: int = 16000,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        batch_size: int = 32,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
        synth: Mapping[str, Any] | None = None,
        limit: int | None = None,
        encoding: str = "utf-8",
        bucket_by_length: bool = False,
        bucket_batches: int = 50,
    ) -> None:
        source = resolve_source(source, manifest)
        if labels is None and source == "synthetic":
            labels = list(PHONES)
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, limit=limit, labels=labels,
                         encoding=encoding, bucket_by_length=bucket_by_length, bucket_batches=bucket_batches)
        self.source = source
        self.manifest = manifest
        self.default_label = default_label
        self.sample_rate = int(sample_rate)
        self.win = ms_to_samples(win_ms, sample_rate)
        self.hop = ms_to_samples(hop_ms, sample_rate)
        if self.win <= 0 or self.hop <= 0:
            raise ValueError(f"win_ms={win_ms} / hop_ms={hop_ms} must each be at least one sample")
        self.synth = dict(synth or {})
        self._longest: dict[str, tuple[int, str]] = {}

    def item_length(self, dataset, index: int) -> int:
        """Samples of utterance ``index`` (for ``bucket_by_length``; reads and caches the audio)."""
        return int(dataset[index]["waveform"].numel())

    # -- lifecycle ------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path, splits = self._read_splits(lambda path: read_manifest(path, self.encoding))
        seen = {name: [(seg[2], it["where"]) for it in items for seg in it["segments"]]
                for name, items in splits.items()}
        if self.default_label is not None:
            seen["train"].append((self.default_label, "data.default_label"))
        self.set_labels(seen, source=str(path))
        if self.default_label is not None and self.default_label not in self._labels:
            raise ValueError(f"default_label {self.default_label!r} is not one of the labels {self._labels}")
        self._longest = {name: max((num_frames(it["samples"], self.win, self.hop), it["where"]) for it in items)
                         for name, items in splits.items() if items}
        for name, items in splits.items():
            if not items:
                log.warning("the %s split of %s is empty", name, path)
            self.datasets[name] = FrameLabelDataset(items, self._labels, self.sample_rate, self.win, self.hop,
                                                    self.default_label)
        log.info("speech data from %s: %s utterances, %d labels %s", path,
                 {n: len(d) for n, d in self.datasets.items()}, len(self._labels), self._labels)

    #: segments may end this far past the end of the audio (seconds) before it is an error
    TIME_TOLERANCE_S = 0.05

    def _check_times(self, item: Mapping[str, Any], duration: float) -> None:
        """Segment times must lie inside the audio: times in milliseconds, segments past the end or a
        truncated file would otherwise train on wrong frame labels."""
        end = max((seg[1] for seg in item["segments"]), default=0.0)
        if end <= duration + max(self.TIME_TOLERANCE_S, 0.02 * duration):
            return
        hint = (" -- segment times are seconds: are these milliseconds?" if end > 100 * max(duration, 1e-3) else
                "; is the audio file truncated, or do the labels belong to another file?")
        raise ValueError(f"{item['where']}: segments end at {end:g} s but {item['path']} lasts {duration:.3f} s "
                         f"({int(round(duration * self.sample_rate))} samples){hint}")

    def _drop_short(self, split_name: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Skip (and count) files shorter than one analysis window; count unlabelled frames."""
        kept, short, unlabelled, total = [], [], 0, 0
        for it in items:
            n, duration = resampled_length(it, self.sample_rate)
            self._check_times(it, duration)
            if n < self.win:
                short.append(it["where"])
                continue
            kept.append(dict(it, samples=n))
            centres = np.arange(num_frames(n, self.win, self.hop)) * self.hop + self.win // 2
            covered = np.zeros(centres.size, dtype=bool)
            for s, e, _ in it["segments"]:
                covered |= (centres >= round(s * self.sample_rate)) & (centres < round(e * self.sample_rate))
            unlabelled += int((~covered).sum())
            total += centres.size
        warn_short(short, split_name, self.win)
        if unlabelled:
            fate = f"labelled {self.default_label!r}" if self.default_label else "ignored (-100)"
            log.warning("%d of %d %s frames are covered by no segment: %s", unlabelled, total, split_name, fate)
        return kept

    def longest(self) -> dict[str, tuple[int, str]]:
        """The longest utterance (in frames = tokens) of each split and where it is."""
        return dict(self._longest)

    # -- predict protocol -----------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of unlabelled audio: an audio file, a folder of audio files or a manifest (see
        :func:`~seqattn.modalities.audio.manifest.read_audio_list`). Batches: ``waveform [B, T]``,
        ``lengths [B]``, ``ids``. Needs no ``setup()``: the framing comes from this datamodule's config."""
        return audio_predict_loader(self, source, batch_size)

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """Per utterance: ``duration_s``, ``hop_s`` and the time span of each frame (rows get ``segments``)."""
        out = []
        for ident, samples in zip(batch["ids"], batch["lengths"].tolist()):
            out.append(Item(id=ident, fields={"duration_s": round(samples / self.sample_rate, 5),
                                              "hop_s": self.hop / self.sample_rate},
                            spans=frame_spans(int(samples), self.sample_rate, self.win, self.hop)))
        return out
