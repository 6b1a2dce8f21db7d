"""Frame-labelled audio: manifest reader, dataset, collate and the speech DataModule.

A manifest is JSONL, one utterance per line::

    {"path": "a.wav", "segments": [[0.0, 0.31, "sil"], [0.31, 0.42, "k"], ...]}
    {"path": "b.wav", "labels": "b.txt", "split": "val", "speaker": "spk1"}

``labels`` names an Audacity-style label file (``start<TAB>end<TAB>label`` per line).
A CSV manifest with columns ``path,labels[,split][,speaker]`` works too. Relative
paths resolve against the manifest's folder. The built-in synthetic corpus
(:mod:`seqattn.data.speech`) is written in the same format.

Letters: b batch, t samples, f frames.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import soundfile as sf
import torch
from torch.utils.data import DataLoader, Dataset

from seqattn.adapters.audio import frame_labels, load_audio, ms_to_samples, num_frames
from seqattn.core.tokens import IGNORE_INDEX
from seqattn.data.base import SplitDataModule
from seqattn.data.speech import PHONES, generate_speech_corpus

log = logging.getLogger("seqattn.data.audio")

SPLITS = ("train", "val", "test")
_SPLIT_ALIASES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                  "dev": "val", "test": "test", "eval": "test"}


# ---------------------------------------------------------------------------------------------
# manifest reading


def read_label_file(path: str | Path) -> list[tuple[float, float, str]]:
    """Audacity label file -> ``[(start_s, end_s, label)]``.

    One ``start<TAB>end<TAB>label`` per line; blank lines and Audacity's
    spectral-selection lines (starting with a backslash) are skipped.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ValueError(f"cannot read label file {path}: {err}") from err
    out = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("\\"):
            continue
        parts = line.split("\t") if "\t" in line else line.split(None, 2)
        if len(parts) != 3 or not parts[2].strip():
            raise ValueError(f"{path}:{lineno}: expected 'start<TAB>end<TAB>label', got {line!r}")
        out.append(_segment(parts, f"{path}:{lineno}"))
    return out


def _segment(seg: Any, where: str) -> tuple[float, float, str]:
    if not isinstance(seg, (list, tuple)) or len(seg) != 3:
        raise ValueError(f"{where}: a segment must be [start_s, end_s, label], got {seg!r}")
    try:
        start, end = float(seg[0]), float(seg[1])
    except (TypeError, ValueError):
        raise ValueError(f"{where}: segment times must be numbers (seconds), got {seg!r}") from None
    label = str(seg[2]).strip()
    if not label:
        raise ValueError(f"{where}: segment {seg!r} has an empty label")
    if start < 0 or end <= start:
        raise ValueError(f"{where}: segment {seg!r} needs 0 <= start < end (seconds)")
    return start, end, label


def _item(raw: Mapping[str, Any], base: Path, where: str) -> dict[str, Any]:
    if not raw.get("path"):
        raise ValueError(f"{where}: missing key 'path' (the audio file)")
    audio = (base / str(raw["path"])).expanduser()
    if not audio.is_file():
        raise ValueError(f"{where}: audio file {audio} does not exist")
    if raw.get("segments") is not None:
        if not isinstance(raw["segments"], list):
            raise ValueError(f"{where}: 'segments' must be a list of [start_s, end_s, label]")
        segments = [_segment(s, where) for s in raw["segments"]]
    elif raw.get("labels"):
        label_path = (base / str(raw["labels"])).expanduser()
        if not label_path.is_file():
            raise ValueError(f"{where}: label file {label_path} does not exist")
        segments = read_label_file(label_path)
    else:
        raise ValueError(f"{where}: missing key 'segments' (inline [start_s, end_s, label] list) or 'labels' "
                         "(a label file)")
    split = raw.get("split") or None
    if split is not None:
        if str(split).lower() not in _SPLIT_ALIASES:
            raise ValueError(f"{where}: split {split!r} is not one of {SPLITS}")
        split = _SPLIT_ALIASES[str(split).lower()]
    try:
        ident = str(audio.relative_to(base).with_suffix(""))
    except ValueError:
        ident = str(audio.with_suffix(""))
    speaker = raw.get("speaker")
    return {"path": str(audio), "segments": segments, "split": split,
            "speaker": None if speaker in (None, "") else str(speaker), "id": ident, "where": where}


def read_manifest(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL or CSV manifest.

    Returns one dict per utterance: ``path`` (absolute), ``segments``
    ``[(start_s, end_s, label)]``, ``split`` (``train``/``val``/``test`` or None),
    ``speaker`` (or None), ``id`` and ``where`` (``file:line`` for messages).
    Errors raise ValueError naming the file and line.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"manifest {path} does not exist")
    base = path.parent
    items = []
    if path.suffix.lower() == ".csv":
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"path", "labels"} - set(reader.fieldnames or [])
            if missing:
                raise ValueError(f"{path}:1: CSV header needs columns 'path,labels[,split][,speaker]', "
                                 f"missing {sorted(missing)}")
            for row in reader:
                where = f"{path}:{reader.line_num}"
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue
                items.append(_item({k: (v.strip() if isinstance(v, str) else v) for k, v in row.items()},
                                   base, where))
        return items
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(raw, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
            items.append(_item(raw, base, where))
    return items


# ---------------------------------------------------------------------------------------------
# dataset and collate


class FrameLabelDataset(Dataset):
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
        self.items = list(items)
        self.label_names = list(label_names)
        self.label_to_index = {name: i for i, name in enumerate(self.label_names)}
        if default_label is not None and default_label not in self.label_to_index:
            raise ValueError(f"default_label {default_label!r} is not one of the labels {self.label_names}")
        self.sample_rate, self.win, self.hop = sample_rate, win, hop
        self.default_label = default_label
        self._cache: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index not in self._cache:
            item = self.items[index]
            wav = load_audio(item["path"], self.sample_rate)  # [T]
            if wav.numel() < self.win:
                raise ValueError(f"{item['path']}: {wav.numel()} samples is shorter than the analysis window "
                                 f"({self.win} samples)")
            labels = frame_labels(item["segments"], wav.numel(), self.sample_rate, self.win, self.hop,
                                  self.label_to_index, self.default_label)  # [F]
            self._cache[index] = {"waveform": wav, "labels": labels, "id": item["id"]}
        return self._cache[index]


def collate_frames(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """List of dataset items -> ``dict(waveform [B, T_max] zero-padded, lengths [B] long,
    labels [B, F_max] padded with -100, ids list[str])``."""
    lengths = torch.tensor([b["waveform"].numel() for b in batch], dtype=torch.long)  # [B]
    frames = [b["labels"].numel() for b in batch]
    waveform = torch.zeros(len(batch), int(lengths.max()))  # [B, T_max]
    labels = torch.full((len(batch), max(frames)), IGNORE_INDEX, dtype=torch.long)  # [B, F_max]
    for i, b in enumerate(batch):
        waveform[i, : lengths[i]] = b["waveform"]
        labels[i, : frames[i]] = b["labels"]
    return {"waveform": waveform, "lengths": lengths, "labels": labels, "ids": [b["id"] for b in batch]}


AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".au")


def read_audio_list(source: str | Path) -> list[dict[str, str]]:
    """What to predict on -> ``[{"path", "id"}]``.

    ``source`` is an audio file, a folder (every file ending in one of ``AUDIO_SUFFIXES``, searched
    recursively, sorted; ids are paths relative to the folder without suffix) or a manifest
    (``.jsonl`` / ``.csv`` with a ``path`` column; segments and labels are not needed and ignored).
    """
    source = Path(source).expanduser()
    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
        if not files:
            raise ValueError(f"folder {source} holds no audio files ({', '.join(AUDIO_SUFFIXES)})")
        return [{"path": str(p), "id": str(p.relative_to(source).with_suffix(""))} for p in files]
    if not source.is_file():
        raise ValueError(f"input {source} does not exist (expected an audio file, a folder or a manifest)")
    if source.suffix.lower() not in (".jsonl", ".csv"):
        return [{"path": str(source), "id": source.stem}]
    rows: list[tuple[str, dict]] = []
    if source.suffix.lower() == ".csv":
        with open(source, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if "path" not in (reader.fieldnames or []):
                raise ValueError(f"{source}:1: CSV manifest needs a 'path' column, has {reader.fieldnames}")
            rows = [(f"{source}:{reader.line_num}", row) for row in reader if (row.get("path") or "").strip()]
    else:
        with open(source, encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{source}:{lineno}: invalid JSON ({err.msg} at column {err.colno})") from None
                if not isinstance(raw, dict) or not raw.get("path"):
                    raise ValueError(f"{source}:{lineno}: expected a JSON object with a 'path', got {line.strip()!r}")
                rows.append((f"{source}:{lineno}", raw))
    items = []
    for where, raw in rows:
        audio = (source.parent / str(raw["path"]).strip()).expanduser()
        if not audio.is_file():
            raise ValueError(f"{where}: audio file {audio} does not exist")
        try:
            ident = str(audio.relative_to(source.parent).with_suffix(""))
        except ValueError:
            ident = str(audio.with_suffix(""))
        items.append({"path": str(audio), "id": ident})
    if not items:
        raise ValueError(f"manifest {source} lists no audio files")
    return items


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


def collate_audio(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Unlabelled items -> ``dict(waveform [B, T_max] zero-padded, lengths [B] long, ids list[str])``."""
    lengths = torch.tensor([b["waveform"].numel() for b in batch], dtype=torch.long)  # [B]
    waveform = torch.zeros(len(batch), int(lengths.max()))  # [B, T_max]
    for i, b in enumerate(batch):
        waveform[i, : lengths[i]] = b["waveform"]
    return {"waveform": waveform, "lengths": lengths, "ids": [b["id"] for b in batch]}


def frames_to_segments(labels: Sequence[str], num_samples: int, sample_rate: int, win: int,
                       hop: int) -> list[list]:
    """Per-frame labels -> merged ``[[start_s, end_s, label], ...]`` (runs of equal labels).

    Frame ``i`` is labelled at its centre sample ``c_i = i * hop + win // 2`` (see
    :func:`~seqattn.adapters.audio.frame_labels`); a run of frames ``i..j`` covers from the midpoint
    ``c_i - hop / 2`` to ``c_j + hop / 2``, the first run starts at 0 and the last ends at the end
    of the audio. Feeding these segments back through ``frame_labels`` gives ``labels`` again.
    """
    segments: list[list] = []
    n = len(labels)
    duration = num_samples / sample_rate
    start = 0
    for i in range(1, n + 1):
        if i == n or labels[i] != labels[start]:
            begin = 0.0 if start == 0 else ((start - 1) * hop + win // 2 + hop / 2) / sample_rate
            end = duration if i == n else ((i - 1) * hop + win // 2 + hop / 2) / sample_rate
            segments.append([round(begin, 6), round(end, 6), labels[start]])
            start = i
    return segments


# ---------------------------------------------------------------------------------------------
# splitting


def split_items(
    items: Sequence[dict[str, Any]], val_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[dict[str, Any]]]:
    """Items -> ``{"train", "val", "test"}``: by their ``split`` field when every item has one,
    else at random by ``seed`` with the fractions -- by speaker when every item names one."""
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= frac < 1.0:
            raise ValueError(f"{name}={frac} must be in [0, 1)")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction = {val_fraction + test_fraction} must be < 1")
    with_split = [it for it in items if it["split"] is not None]
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    if with_split:
        if len(with_split) != len(items):
            first = next(it for it in items if it["split"] is None)
            raise ValueError(f"{first['where']}: no 'split', but other lines have one; give every line a "
                             "split or none (then the data is split by seed)")
        for it in items:
            out[it["split"]].append(it)
        return out
    rng = np.random.default_rng(seed)
    by_speaker = bool(items) and all(it["speaker"] is not None for it in items)
    keys = sorted({it["speaker"] for it in items}) if by_speaker else list(range(len(items)))
    order = [keys[i] for i in rng.permutation(len(keys))]
    n_test = int(round(test_fraction * len(keys)))
    n_val = int(round(val_fraction * len(keys)))
    if len(keys) >= 3:  # a fraction > 0 always gets at least one speaker / item
        n_test = max(n_test, int(test_fraction > 0))
        n_val = max(n_val, int(val_fraction > 0))
    assign = {k: "test" for k in order[:n_test]}
    assign.update({k: "val" for k in order[n_test : n_test + n_val]})
    for i, it in enumerate(items):
        out[assign.get(it["speaker"] if by_speaker else i, "train")].append(it)
    log.info("split %d utterances at random (seed %d%s): %s", len(items), seed,
             ", by speaker" if by_speaker else "", {s: len(v) for s, v in out.items()})
    return out


# ---------------------------------------------------------------------------------------------
# DataModule


class SpeechDataModule(SplitDataModule):
    """Frame-level phone labelling data: the built-in synthetic corpus or a user manifest.

    Batches are ``collate_frames`` dicts: ``waveform [B, T]``, ``lengths [B]``,
    ``labels [B, F]`` (-100 = ignore), ``ids``.
    """

    collate = staticmethod(collate_frames)

    def __init__(
        self,
        source: str = "synthetic",
        data_dir: str | None = "~/.cache/seqattn",
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
    ) -> None:
        super().__init__()
        if source not in ("synthetic", "manifest"):
            raise ValueError(f"source={source!r} is not one of ('synthetic', 'manifest')")
        if source == "manifest" and not manifest:
            raise ValueError("source='manifest' needs manifest=<path to a .jsonl or .csv manifest>")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if limit is not None and limit <= 0:
            raise ValueError(f"limit must be a positive number of utterances per split or None, got {limit}")
        if data_dir is None:
            data_dir = os.environ.get("SEQATTN_DATA_DIR", "~/.cache/seqattn")
        self.source = source
        self.data_dir = Path(data_dir).expanduser()
        self.manifest = manifest
        self.default_label = default_label
        self.sample_rate = int(sample_rate)
        self.win = ms_to_samples(win_ms, sample_rate)
        self.hop = ms_to_samples(hop_ms, sample_rate)
        if self.win <= 0 or self.hop <= 0:
            raise ValueError(f"win_ms={win_ms} / hop_ms={hop_ms} must each be at least one sample")
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.seed = seed
        self.synth = dict(synth or {})
        self.limit = limit
        self._labels = list(labels) if labels is not None else (list(PHONES) if source == "synthetic" else None)
        self.datasets: dict[str, FrameLabelDataset] = {}

    # -- labels ---------------------------------------------------------------------------
    @property
    def label_names(self) -> list[str]:
        if self._labels is None:
            raise RuntimeError("label_names are known after setup() (they come from the train split)")
        return list(self._labels)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    # -- lifecycle ------------------------------------------------------------------------
    def _manifest_path(self) -> Path:
        if self.source == "synthetic":
            return generate_speech_corpus(self.data_dir, **self.synth)
        return Path(self.manifest).expanduser()

    def prepare_data(self) -> None:
        if self.source == "synthetic":
            generate_speech_corpus(self.data_dir, **self.synth)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path = self._manifest_path()
        splits = split_items(read_manifest(path), self.val_fraction, self.test_fraction, self.seed)
        splits = {name: self._drop_short(name, items) for name, items in splits.items()}
        if self.limit is not None:
            for name, items in splits.items():
                if len(items) > self.limit:
                    log.info("limit=%d: using %d of %d %s utterances", self.limit, self.limit, len(items), name)
                    splits[name] = items[: self.limit]
        if not splits["train"]:
            raise ValueError(f"{path}: no training utterances")
        if self._labels is None:
            seen = {seg[2] for it in splits["train"] for seg in it["segments"]}
            if self.default_label is not None:
                seen.add(self.default_label)
            self._labels = sorted(seen)
        self._check_labels(splits)
        for name, items in splits.items():
            if not items:
                log.warning("the %s split of %s is empty", name, path)
            self.datasets[name] = FrameLabelDataset(items, self._labels, self.sample_rate, self.win, self.hop,
                                                    self.default_label)
        log.info("speech data from %s: %s utterances, %d labels %s", path,
                 {n: len(d) for n, d in self.datasets.items()}, len(self._labels), self._labels)

    def _drop_short(self, split: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Skip (and count) files shorter than one analysis window; count unlabelled frames."""
        kept, short, unlabelled, total = [], [], 0, 0
        for it in items:
            try:
                info = sf.info(it["path"])
            except Exception as err:  # LibsndfileError / RuntimeError
                raise ValueError(f"{it['where']}: cannot read audio file {it['path']}: {err}") from err
            n = int(np.ceil(info.frames * self.sample_rate / info.samplerate))  # after resampling
            if n < self.win:
                short.append(it["where"])
                continue
            kept.append(it)
            centres = np.arange(num_frames(n, self.win, self.hop)) * self.hop + self.win // 2
            covered = np.zeros(centres.size, dtype=bool)
            for s, e, _ in it["segments"]:
                covered |= (centres >= round(s * self.sample_rate)) & (centres < round(e * self.sample_rate))
            unlabelled += int((~covered).sum())
            total += centres.size
        if short:
            log.warning("skipped %d %s utterance(s) shorter than one %d-sample window: %s%s", len(short), split,
                        self.win, short[:5], " ..." if len(short) > 5 else "")
        if unlabelled:
            fate = f"labelled {self.default_label!r}" if self.default_label else "ignored (-100)"
            log.warning("%d of %d %s frames are covered by no segment: %s", unlabelled, total, split, fate)
        return kept

    def _check_labels(self, splits: Mapping[str, list[dict[str, Any]]]) -> None:
        known = set(self._labels)
        if self.default_label is not None and self.default_label not in known:
            raise ValueError(f"default_label {self.default_label!r} is not one of the labels {self._labels}")
        for name, items in splits.items():
            counts = Counter(seg[2] for it in items for seg in it["segments"] if seg[2] not in known)
            if counts:
                label = next(iter(counts))
                where = next(it["where"] for it in items if any(seg[2] == label for seg in it["segments"]))
                raise ValueError(f"{where}: label {label!r} in the {name} split is not in the label set "
                                 f"{self._labels} (unknown labels: {dict(counts)})")

    def predict_dataloader(self) -> DataLoader:
        return self.split_loader("test", shuffle=False)

    # -- prediction (the predict protocol of seqattn.predict) -------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of unlabelled audio: an audio file, a folder of audio files or a manifest (see
        :func:`read_audio_list`). Batches: ``waveform [B, T]``, ``lengths [B]``, ``ids``. Needs no
        ``setup()``: the framing comes from this datamodule's config (the checkpoint's)."""
        if batch_size is not None and batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        dataset = AudioFileDataset(read_audio_list(source), self.sample_rate, self.win)
        return DataLoader(dataset, batch_size=batch_size or self.batch_size, shuffle=False,
                          num_workers=self.num_workers, collate_fn=collate_audio)

    def prediction_rows(self, batch: Mapping[str, Any], output: Mapping[str, Any],
                        labels: Sequence[str] | None) -> list[dict[str, Any]]:
        """One row per utterance: ``id``, ``duration_s``, ``hop_s``, ``frame_labels`` (one per
        frame), ``frame_prob`` (the predicted label's probability per frame) and ``segments``
        ``[[start_s, end_s, label], ...]`` (runs of equal frame labels; the manifest's segment format).

        ``output`` is ``SequenceLabeling.predict_step``'s: ``pred [B, F]``, ``prob [B, F, C]``, ``mask [B, F]``.
        """
        pred, prob, mask = output["pred"], output["prob"], output["mask"]
        if pred.dim() != 2:
            raise ValueError(f"speech prediction rows need per-frame predictions [B, F], got {tuple(pred.shape)}")
        names = list(labels) if labels else [str(i) for i in range(prob.shape[-1])]
        rows = []
        for i, ident in enumerate(batch["ids"]):
            n = int(mask[i].sum())
            frame_idx = pred[i, :n].tolist()
            frame_names = [names[j] for j in frame_idx]
            frame_prob = prob[i, :n].gather(-1, pred[i, :n, None]).squeeze(-1)  # [F]
            samples = int(batch["lengths"][i])
            rows.append({
                "id": ident,
                "duration_s": round(samples / self.sample_rate, 5),
                "hop_s": self.hop / self.sample_rate,
                "frame_labels": frame_names,
                "frame_prob": [round(float(p), 5) for p in frame_prob],
                "segments": frames_to_segments(frame_names, samples, self.sample_rate, self.win, self.hop),
            })
        return rows
