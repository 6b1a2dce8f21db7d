"""Audio with a label *sequence* per utterance (no times): the data of ``task=speech_ctc``.

Where each utterance's target sequence comes from, per manifest line (see
:mod:`seqattn.modalities.audio.manifest` for the manifest format and its other keys):

- ``transcript`` (a JSONL key or a CSV column; another name with ``transcript_key``, e.g. ``label`` for a
  manifest of spoken words): text, cut into tokens by ``tokens``:
  ``characters`` (every character; runs of whitespace become one ``" "`` token, leading and
  trailing whitespace is dropped) or ``whitespace`` (whitespace-separated units: phones, words);
- else frame labels (``segments`` / ``labels``, as for ``task=speech``): their label sequence
  in time order, adjacent equal labels merged into one;
- then the tokens in ``drop_labels`` (default ``[sil]``) are removed (silence is no output token).

The built-in source is the synthetic speech corpus (:mod:`seqattn.modalities.audio.corpus`): its
phone segments without their times, silence dropped.

Batches: ``waveform [B, T]`` zero-padded, ``lengths [B]``, ``labels [B, S]`` (token indices,
-100 = padding), ``label_lengths [B]``, ``ids``, ``subsets = {"unseen_speaker": bool [B]}`` when
the manifest names speakers (true for utterances of speakers the training split does not have).
Prediction batches carry only the audio and ids.

The token vocabulary (``DataSpec.labels``) is the training split's tokens, sorted, unless
``labels`` is given; a val/test token outside it, an empty transcript, a line with neither a
transcript nor frame labels, a missing audio file: ``ValueError`` naming ``file:line``.

Letters: b batch, t samples, s target length.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from seqattn.datakit.items import Item
from seqattn.datakit.spec import DataSpec
from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.audio.corpus import PHONES
from seqattn.modalities.audio.data import (CachedAudioDataset, UtteranceDataModule, audio_predict_loader, collate_audio, resampled_length,
                                         warn_short)
from seqattn.modalities.audio.features import ms_to_samples, num_frames
from seqattn.modalities.audio.manifest import read_manifest, resolve_source

log = logging.getLogger("seqattn.modalities.audio")

TOKENIZERS = ("characters", "whitespace")
UNSEEN = "unseen_speaker"


def _blank_text(text: Any) -> bool:
    return text is None or (isinstance(text, float) and text != text) or (isinstance(text, str) and not text.strip())


def transcript_tokens(text: Any, tokens: str, where: str, key: str = "transcript") -> list[str]:
    """A transcript -> its tokens (see the module docstring); ``ValueError`` naming ``where`` when empty.

    Only an absent / whitespace-only value is empty: a transcript ``"none"`` or ``"NA"`` is text."""
    if tokens not in TOKENIZERS:
        raise ValueError(f"tokens={tokens!r} is not one of {TOKENIZERS}")
    if _blank_text(text):
        raise ValueError(f"{where}: empty transcript (a transcript needs at least one token)")
    if not isinstance(text, str):
        raise ValueError(f"{where}: {key!r} must be text, got {type(text).__name__} {text!r}")
    return text.split() if tokens == "whitespace" else list(" ".join(text.split()))


def segment_sequence(segments: Sequence[Sequence]) -> list[str]:
    """Frame-label segments ``[(start_s, end_s, label)]`` -> their labels in time order, adjacent
    equal labels merged (``sil a a k`` -> ``sil a k``)."""
    out: list[str] = []
    for _, _, label in sorted(segments, key=lambda s: (float(s[0]), float(s[1]))):
        if not out or out[-1] != str(label):
            out.append(str(label))
    return out


def item_sequence(item: Mapping[str, Any], tokens: str, drop: Sequence[str], key: str = "transcript") -> list[str]:
    """A manifest item (:func:`~seqattn.modalities.audio.manifest.read_manifest`) -> its target tokens
    (the transcript under ``key``, else its frame labels' sequence)."""
    raw = item.get("raw") or {}
    # a line with frame labels and an empty transcript cell (a CSV with both columns) uses its frame labels
    if key in raw and not (_blank_text(raw[key]) and item.get("segments") is not None):
        seq = transcript_tokens(raw[key], tokens, item["where"], key)
    elif item.get("segments") is not None:
        seq = segment_sequence(item["segments"])
    else:
        raise ValueError(f"{item['where']}: no {key!r} (text) and no 'segments' / 'labels' (frame labels): "
                         "nothing to recognise")
    dropped = set(drop)
    return [t for t in seq if t not in dropped]


class LabelSequenceDataset(CachedAudioDataset):
    """Utterances with a target token sequence. ``__getitem__`` -> ``dict(waveform [T] float32,
    labels [S] long, id str, unseen bool)``; audio is read on first access and kept in memory."""

    def __init__(self, items: Sequence[Mapping[str, Any]], label_names: Sequence[str], sample_rate: int,
                 win: int) -> None:
        super().__init__(items, sample_rate, min_samples=win)
        self.label_to_index = {name: i for i, name in enumerate(label_names)}
        self.win = win

    def example(self, item: Mapping[str, Any], waveform: torch.Tensor) -> dict[str, Any]:
        labels = torch.tensor([self.label_to_index[t] for t in item["sequence"]], dtype=torch.long)  # [S]
        return {"waveform": waveform, "labels": labels, "id": item["id"], "unseen": bool(item.get("unseen", False))}


def collate_sequences(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Dataset items -> ``dict(waveform [B, T_max], lengths [B], labels [B, S_max] padded with -100,
    label_lengths [B], ids, subsets={"unseen_speaker": [B] bool})``."""
    out = collate_audio([{"waveform": b["waveform"], "id": b["id"]} for b in batch])
    lengths = torch.tensor([b["labels"].numel() for b in batch], dtype=torch.long)  # [B]
    labels = torch.full((len(batch), max(int(lengths.max()), 1)), IGNORE_INDEX, dtype=torch.long)  # [B, S_max]
    for i, b in enumerate(batch):
        labels[i, : lengths[i]] = b["labels"]
    out.update(labels=labels, label_lengths=lengths,
               subsets={UNSEEN: torch.tensor([b["unseen"] for b in batch], dtype=torch.bool)})
    return out


class SpeechSequenceDataModule(UtteranceDataModule):
    """Audio -> label sequence data: the built-in corpus's phone strings or a user manifest.

    Args (besides :class:`~seqattn.datakit.module.TaskDataModule`'s; ``labels`` = the token vocabulary):
        source: ``synthetic`` | ``manifest``; a ``manifest`` path selects ``manifest``.
        manifest: a ``.jsonl`` / ``.csv`` manifest with ``transcript`` or frame labels per line.
        tokens: ``characters`` | ``whitespace``: how a transcript is cut into tokens.
        transcript_key: the manifest key / CSV column holding the transcript.
        drop_labels: tokens removed from every target (default ``["sil"]``).
        sample_rate, win_ms, hop_ms: the framing (the adapter uses the same).
        synth: arguments of :func:`~seqattn.modalities.audio.corpus.generate_speech_corpus`.
    """

    collate = staticmethod(collate_sequences)
    label_kind = "tokens"
    tokens_as_written = True  # "A" and "a" are two characters of a transcript, "1.0" a word

    def __init__(
        self,
        source: str | None = None,
        data_dir: str | None = None,
        manifest: str | None = None,
        tokens: str = "characters",
        transcript_key: str = "transcript",
        drop_labels: Sequence[str] | None = ("sil",),
        labels: Sequence[str] | None = None,
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
    ) -> None:
        source = resolve_source(source, manifest)
        if tokens not in TOKENIZERS:
            raise ValueError(f"tokens={tokens!r} is not one of {TOKENIZERS}")
        drop = [str(t) for t in (drop_labels or [])]
        if labels is None and source == "synthetic":
            labels = [p for p in PHONES if p not in drop]
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, limit=limit, labels=labels,
                         encoding=encoding)
        self.source, self.manifest, self.tokens, self.drop_labels = source, manifest, tokens, drop
        self.transcript_key = str(transcript_key)
        self.sample_rate = int(sample_rate)
        self.win = ms_to_samples(win_ms, sample_rate)
        self.hop = ms_to_samples(hop_ms, sample_rate)
        if self.win <= 0 or self.hop <= 0:
            raise ValueError(f"win_ms={win_ms} / hop_ms={hop_ms} must each be at least one sample")
        self.synth = dict(synth or {})
        self.has_speakers = False

    # -- lifecycle ------------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path, splits = self._read_splits(self._read_items)
        seen = {name: [(tok, it["where"]) for it in its for tok in it["sequence"]] for name, its in splits.items()}
        self.set_labels(seen, min_classes=1, source=str(path))
        train_speakers = {it["speaker"] for it in splits["train"] if it["speaker"]}
        self.has_speakers = any(it["speaker"] for its in splits.values() for it in its)
        for name, its in splits.items():
            for it in its:
                it["unseen"] = bool(it["speaker"]) and it["speaker"] not in train_speakers
            empty = sum(1 for it in its if not it["sequence"])
            if empty:
                log.warning("%d %s utterance(s) of %s have an empty target once %s are dropped (they teach "
                            "'output nothing')", empty, name, path, self.drop_labels)
            if not its:
                log.warning("the %s split of %s is empty", name, path)
            self.datasets[name] = LabelSequenceDataset(its, self._labels, self.sample_rate, self.win)
        sizes = {n: len(d) for n, d in self.datasets.items()}
        lengths = [len(it["sequence"]) for it in splits["train"]]
        log.info("speech sequences from %s: %s utterances, %d tokens %s, train targets %.1f tokens on average",
                 path, sizes, len(self._labels), self._labels[:40], float(np.mean(lengths)))

    def _read_items(self, path: Path) -> list[dict[str, Any]]:
        """The manifest's utterances, each with its target ``sequence`` (tokens, ``drop_labels`` removed)."""
        items = read_manifest(path, self.encoding, require_segments=False)
        for it in items:
            it["sequence"] = item_sequence(it, self.tokens, self.drop_labels, self.transcript_key)
        return items

    def _drop_short(self, split_name: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Skip (and count) files shorter than one analysis window; count targets longer than the
        frames can align (CTC needs at least ``length + repeats`` frames, before any subsampling)."""
        kept, short, tight = [], [], 0
        for it in items:
            n, _ = resampled_length(it, self.sample_rate)
            if n < self.win:
                short.append(it["where"])
                continue
            seq = it["sequence"]
            need = len(seq) + sum(a == b for a, b in zip(seq, seq[1:]))
            tight += int(num_frames(n, self.win, self.hop) < need)
            kept.append(it)
        warn_short(short, split_name, self.win)
        if tight:
            log.warning("%d %s utterance(s) have fewer frames than their target has tokens (+ repeats): CTC cannot "
                        "align them (their loss is zeroed and counted as ctc_infeasible)", tight, split_name)
        return kept

    def spec(self) -> DataSpec:
        """The token vocabulary (``labels``, ``num_outputs`` = its size; the CTC blank is the head's)
        and the ``unseen_speaker`` subset when the data names speakers."""
        return DataSpec(num_outputs=self.num_classes, labels=self.label_names,
                        subsets=(UNSEEN,) if self.has_speakers else ())

    # -- predict protocol -----------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of unlabelled audio (a file, a folder, a manifest: see
        :func:`~seqattn.modalities.audio.manifest.read_audio_list`): ``waveform``, ``lengths``, ``ids``."""
        return audio_predict_loader(self, source, batch_size, collate=collate_audio)

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """Per utterance: its id and ``duration_s`` (rows get the decoded ``sequence``)."""
        return [Item(id=ident, fields={"duration_s": round(samples / self.sample_rate, 5)})
                for ident, samples in zip(batch["ids"], batch["lengths"].tolist())]
