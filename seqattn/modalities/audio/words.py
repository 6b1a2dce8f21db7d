"""Built-in spoken-word corpus for utterance classification (``task=speech_cls``).

Words are phone sequences spoken by the synthesiser of :mod:`seqattn.modalities.audio.corpus`
(same phones, same synthetic speakers: f0, vocal-tract scale, loudness, background noise). The
default vocabulary is 16 two-syllable words in four **anagram groups**: the words of a group have
the same two consonants and the same two vowels in a different order::

    kasu kusa saku suka | tami tima mati mita | puni pinu nupi nipu | shafi shifa fashi fisha

So the bag of phones (what a model sees that classifies each frame alone and averages) is the same
within a group: only the order of the phones -- context -- tells ``kasu`` from ``suka``. Each clip
is ``lead silence + word + trail silence`` (50-300 ms each, so the word's position varies), phone
durations drawn as in the speech corpus (stops: a 40-90 ms closure + a 10-25 ms burst).

Written deterministically from a seed as 16 kHz WAV files and a ``manifest.jsonl`` with the keys a
user's manifest has (``path, label, speaker, split``; plus ``phones`` and frame ``segments``), cached
under the data dir (:func:`~seqattn.datakit.cache.cached_folder`). Val and test speakers never occur
in training.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import soundfile as sf

from seqattn.datakit.cache import cached_folder
from seqattn.modalities.audio.corpus import PHONES, STOPS, make_speakers, render_plan

log = logging.getLogger("seqattn.modalities.audio.words")

VERSION = "words_synth_v1"
MANIFEST = "manifest.jsonl"
SPLITS = ("train", "val", "test")
#: four anagram groups of four words (same phones, different order)
WORDS = ("kasu", "kusa", "saku", "suka", "tami", "tima", "mati", "mita",
         "puni", "pinu", "nupi", "nipu", "shafi", "shifa", "fashi", "fisha")
DEFAULT_CLIPS_PER_WORD = {"train": 3, "val": 2, "test": 2}

# phone durations (s): closure of a stop (its burst comes on top), nasals, fricatives, vowels
_DURATION = {"stop": (0.040, 0.090), "burst": (0.010, 0.025), "nasal": (0.05, 0.09), "fricative": (0.08, 0.14),
             "vowel": (0.10, 0.20), "edge": (0.05, 0.30)}


def word_phones(word: str) -> list[str]:
    """``"shafi"`` -> ``["sh", "a", "f", "i"]``: the word split into the synthesiser's phones
    (longest match first); ``ValueError`` naming the word when a letter is no phone."""
    phones = sorted((p for p in PHONES if p != "sil"), key=len, reverse=True)
    out, i = [], 0
    while i < len(word):
        match = next((p for p in phones if word.startswith(p, i)), None)
        if match is None:
            raise ValueError(f"word {word!r}: {word[i:]!r} does not start with a phone of the synthesiser "
                             f"{[p for p in PHONES if p != 'sil']}")
        out.append(match)
        i += len(match)
    if not out:
        raise ValueError("a word needs at least one phone, got ''")
    return out


def word_plan(rng: np.random.Generator, phones: Sequence[str], sr: int) -> list[tuple[str, int, int]]:
    """Segment plan ``[(label, n_samples, burst_samples)]`` of one clip: silence, the word, silence."""

    def n(kind: str) -> int:
        lo, hi = _DURATION[kind]
        return int(round(rng.uniform(lo, hi) * sr))

    plan = [("sil", n("edge"), 0)]
    for p in phones:
        if p in STOPS:
            burst = n("burst")
            plan.append((p, n("stop") + burst, burst))
        elif p in ("m", "n"):
            plan.append((p, n("nasal"), 0))
        elif p in ("s", "sh", "f"):
            plan.append((p, n("fricative"), 0))
        else:
            plan.append((p, n("vowel"), 0))
    plan.append(("sil", n("edge"), 0))
    return plan


def _clips_per_split(clips_per_word: int | Mapping[str, int] | None) -> dict[str, int]:
    if clips_per_word is None:
        return dict(DEFAULT_CLIPS_PER_WORD)
    if isinstance(clips_per_word, int):
        out = {s: clips_per_word for s in SPLITS}
    else:
        unknown = set(clips_per_word) - set(SPLITS)
        if unknown:
            raise ValueError(f"clips_per_word has unknown split(s) {sorted(unknown)}; expected {SPLITS}")
        out = {s: int(clips_per_word.get(s, DEFAULT_CLIPS_PER_WORD[s])) for s in SPLITS}
    bad = {s: v for s, v in out.items() if v < 0}
    if bad:
        raise ValueError(f"clips_per_word must be >= 0, got {bad}")
    return out


def words_params(
    seed: int = 0,
    words: Sequence[str] | None = None,
    n_train_speakers: int = 16,
    n_val_speakers: int = 4,
    n_test_speakers: int = 6,
    clips_per_word: int | Mapping[str, int] | None = None,
    sample_rate: int = 16000,
) -> dict:
    """The normalised parameters that identify a word corpus (and its cache folder)."""
    words = list(WORDS if words is None else words)
    if len(words) < 2 or len(set(words)) != len(words):
        raise ValueError(f"words must be at least two distinct words, got {words}")
    for w in words:
        word_phones(w)
    counts = {"train": int(n_train_speakers), "val": int(n_val_speakers), "test": int(n_test_speakers)}
    bad = {k: v for k, v in counts.items() if v < 0}
    if bad:
        raise ValueError(f"speaker counts must be >= 0, got {bad}")
    if sample_rate < 16000:
        raise ValueError(f"sample_rate={sample_rate} is too low for the fricative bands; expected >= 16000")
    return {"version": VERSION, "seed": int(seed), "words": words, "speakers": counts,
            "clips_per_word": _clips_per_split(clips_per_word), "sample_rate": int(sample_rate)}


def _write(out: Path, params: dict) -> str:
    sr = params["sample_rate"]
    n = 0
    with open(out / MANIFEST, "w", encoding="utf-8") as manifest:
        for spk in make_speakers(params["seed"], params["speakers"]):
            idx = int(spk.name[3:])
            (out / spk.split / spk.name).mkdir(parents=True, exist_ok=True)
            for w, word in enumerate(params["words"]):
                phones = word_phones(word)
                for rep in range(params["clips_per_word"][spk.split]):
                    rng = np.random.default_rng([params["seed"], 3, idx, w, rep])
                    wav, segs = render_plan(rng, spk, word_plan(rng, phones, sr), sr)
                    rel = f"{spk.split}/{spk.name}/{word}_{rep:02d}.wav"
                    sf.write(str(out / rel), wav, sr, subtype="PCM_16")
                    line = {"path": rel, "label": word, "speaker": spk.name, "split": spk.split,
                            "phones": " ".join(phones),
                            "segments": [[round(s / sr, 7), round(e / sr, 7), lab] for s, e, lab in segs]}
                    manifest.write(json.dumps(line) + "\n")
                    n += 1
    return f"{n} clips"


def generate_words_corpus(
    root: str | Path,
    seed: int = 0,
    words: Sequence[str] | None = None,
    n_train_speakers: int = 16,
    n_val_speakers: int = 4,
    n_test_speakers: int = 6,
    clips_per_word: int | Mapping[str, int] | None = None,
    sample_rate: int = 16000,
) -> Path:
    """Generate (or reuse) the word corpus under ``root``; return its ``manifest.jsonl``.

    ``clips_per_word``: clips of every word per speaker, an int or per split; default
    ``{"train": 3, "val": 2, "test": 2}`` (16 words: 768 / 128 / 192 clips). Changing the training
    clips keeps val and test identical (every clip has its own random stream).
    """
    params = words_params(seed, words, n_train_speakers, n_val_speakers, n_test_speakers, clips_per_word,
                          sample_rate)
    folder = cached_folder(root, VERSION, params, lambda tmp: _write(tmp, params), what="spoken-word corpus")
    return folder / MANIFEST
