"""Built-in synthetic speech corpus for frame-level phone labelling (``task=speech``).

Deterministic from a seed, offline, a few seconds to generate. It is written as a
folder of 16 kHz mono WAV files plus ``manifest.jsonl`` -- the same format a user
brings (see :mod:`seqattn.modalities.audio.manifest`), so one reader serves both.

Phone classes: ``sil``; vowels ``a i u`` (harmonics of the speaker's f0 weighted by a
formant envelope); nasals ``m n`` (weak murmur, low F1, distinct upper formants);
fricatives ``s sh f`` (band-shaped noise, ``f`` weak and broad); stops ``p t k`` =
a closure (silence + background noise, 40-90 ms) then a short burst (10-25 ms, band
depends on place). The whole stop, closure included, carries the stop's label, so a
closure frame alone looks exactly like ``sil``: only the burst and the vowel after it
tell which stop it is. Context matters.

Speakers differ in f0 (90-250 Hz, with drift and jitter), vocal-tract scale
(0.85-1.2, multiplies formants), loudness and background-noise SNR (15-30 dB). Val
and test speakers never occur in train.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import soundfile as sf

from seqattn.datakit.cache import cached_folder

log = logging.getLogger("seqattn.modalities.audio.corpus")

VERSION = "speech_synth_v1"
PHONES = ("sil", "a", "i", "u", "m", "n", "s", "sh", "f", "p", "t", "k")
VOWELS = ("a", "i", "u")
CONSONANTS = ("m", "n", "s", "sh", "f", "p", "t", "k")
STOPS = ("p", "t", "k")
# consonant draw probabilities: stops are frequent, they are the phones that need context
_CONSONANT_P = np.array([0.09, 0.09, 0.09, 0.09, 0.09, 0.55 / 3, 0.55 / 3, 0.55 / 3])
SPLITS = ("train", "val", "test")
DEFAULT_UTTS_PER_SPEAKER = {"train": 90, "val": 50, "test": 70}
MANIFEST = "manifest.jsonl"

# formant centre frequencies (Hz) at vocal-tract scale 1, relative peak amplitudes, bandwidths (Hz)
_FORMANTS = {
    "a": ((730.0, 1090.0, 2440.0, 3400.0), (1.0, 0.7, 0.25, 0.1)),
    "i": ((270.0, 2290.0, 3010.0, 3700.0), (1.0, 0.35, 0.3, 0.12)),
    "u": ((300.0, 870.0, 2240.0, 3300.0), (1.0, 0.6, 0.1, 0.05)),
    "m": ((250.0, 1000.0, 2200.0, 3300.0), (1.0, 0.08, 0.12, 0.05)),
    "n": ((250.0, 1700.0, 2600.0, 3500.0), (1.0, 0.15, 0.2, 0.06)),
}
_BANDWIDTHS = (90.0, 110.0, 160.0, 250.0)
# noise bands (lo, hi) Hz at scale 1, RMS level relative to a vowel
_NOISE = {
    "s": ((4500.0, 7600.0), 0.35),
    "sh": ((2000.0, 4200.0), 0.35),
    "f": ((700.0, 7600.0), 0.07),
    "p": ((150.0, 1400.0), 0.35),
    "t": ((3500.0, 7600.0), 0.55),
    "k": ((1500.0, 3000.0), 0.5),
}
_LEVEL = {"a": 1.0, "i": 0.8, "u": 0.8, "m": 0.22, "n": 0.22}


@dataclass(frozen=True)
class Speaker:
    name: str
    split: str
    f0: float  # Hz
    scale: float  # vocal-tract scale multiplying formants
    gain: float  # RMS of the utterance
    snr_db: float  # background noise


def _utts_per_split(utts_per_speaker: int | Mapping[str, int] | None) -> dict[str, int]:
    if utts_per_speaker is None:
        return dict(DEFAULT_UTTS_PER_SPEAKER)
    if isinstance(utts_per_speaker, int):
        out = {s: utts_per_speaker for s in SPLITS}
    else:
        unknown = set(utts_per_speaker) - set(SPLITS)
        if unknown:
            raise ValueError(f"utts_per_speaker has unknown split(s) {sorted(unknown)}; expected {SPLITS}")
        out = {s: int(utts_per_speaker.get(s, DEFAULT_UTTS_PER_SPEAKER[s])) for s in SPLITS}
    bad = {s: n for s, n in out.items() if n < 0}
    if bad:
        raise ValueError(f"utts_per_speaker must be >= 0, got {bad}")
    return out


def make_speakers(seed: int, counts: Mapping[str, int]) -> list[Speaker]:
    """Speakers ``spk00 ...`` in split order train, val, test (disjoint by construction)."""
    speakers = []
    for split in SPLITS:
        for _ in range(counts[split]):
            idx = len(speakers)
            rng = np.random.default_rng([seed, 1, idx])
            speakers.append(
                Speaker(
                    name=f"spk{idx:02d}",
                    split=split,
                    f0=float(rng.uniform(90.0, 250.0)),
                    scale=float(rng.uniform(0.85, 1.2)),
                    gain=float(10 ** rng.uniform(np.log10(0.03), np.log10(0.15))),
                    snr_db=float(rng.uniform(15.0, 30.0)),
                )
            )
    return speakers


def _plan(rng: np.random.Generator, sr: int) -> list[tuple[str, int, int]]:
    """Segment plan ``[(label, n_samples, burst_samples)]`` of one utterance (~0.8-1.6 s)."""

    def n(lo: float, hi: float) -> int:
        return int(round(rng.uniform(lo, hi) * sr))

    lead, trail = n(0.08, 0.15), n(0.08, 0.15)
    budget = int(rng.uniform(0.8, 1.6) * sr) - lead - trail  # the utterance lasts 0.8-1.6 s
    plan: list[tuple[str, int, int]] = [("sil", lead, 0)]
    used = 0
    while True:
        syllable: list[tuple[str, int, int]] = []
        if used > 0 and rng.random() < 0.12:
            syllable.append(("sil", n(0.05, 0.15), 0))  # short pause
        if rng.random() < 0.85:
            c = str(rng.choice(CONSONANTS, p=_CONSONANT_P))
            if c in STOPS:
                burst = n(0.010, 0.025)
                syllable.append((c, n(0.040, 0.090) + burst, burst))  # closure + burst
            elif c in ("m", "n"):
                syllable.append((c, n(0.05, 0.09), 0))
            else:
                syllable.append((c, n(0.08, 0.14), 0))
        syllable.append((str(rng.choice(VOWELS)), n(0.08, 0.18), 0))
        length = sum(p[1] for p in syllable)
        if used > 0 and used + length > budget:
            break
        plan += syllable
        used += length
    plan.append(("sil", trail + max(budget - used, 0), 0))  # the slack goes to the trailing silence
    return plan


def _f0_contour(rng: np.random.Generator, spk: Speaker, total: int, sr: int) -> np.ndarray:
    """``[N]`` f0 in Hz: declination + slow wobble + smoothed jitter."""
    t = np.arange(total) / sr
    base = spk.f0 * rng.uniform(0.95, 1.05)
    decl = np.linspace(rng.uniform(0.02, 0.1), -rng.uniform(0.02, 0.1), total)
    wobble = 0.03 * np.sin(2 * np.pi * rng.uniform(0.5, 2.0) * t + rng.uniform(0, 2 * np.pi))
    knots = rng.normal(0.0, 0.012, size=total // 80 + 2)  # one knot per 5 ms
    jitter = np.interp(np.arange(total) / 80.0, np.arange(knots.size), knots)
    return base * (1.0 + decl + wobble + jitter)


def _ramp(n: int, sr: int) -> np.ndarray:
    """``[n]`` raised-cosine on/off envelope (<= 10 ms each side)."""
    r = min(int(0.010 * sr), n // 4)
    env = np.ones(n)
    if r > 0:
        up = 0.5 - 0.5 * np.cos(np.pi * np.arange(r) / r)
        env[:r], env[n - r :] = up, up[::-1]
    return env


def _voiced(rng, label: str, phase: np.ndarray, f0_mean: float, scale: float, sr: int) -> np.ndarray:
    """Additive synthesis: harmonics ``k f0`` weighted by a sum of formant resonances."""
    centres, amps = _FORMANTS[label]
    centres = np.asarray(centres) * scale * rng.uniform(0.96, 1.04, size=len(centres))  # [J]
    k = np.arange(1, int(min(5000.0, 0.45 * sr) / f0_mean) + 1)  # [K] harmonics up to 5 kHz
    freqs = k * f0_mean  # [K]
    resonance = np.asarray(amps)[None] / (1.0 + ((freqs[:, None] - centres[None]) / np.asarray(_BANDWIDTHS)[None]) ** 2)
    weights = resonance.sum(axis=1) / np.sqrt(k)  # [K]
    arg = (phase % (2 * np.pi)).astype(np.float32)[:, None] * k[None].astype(np.float32)  # [n, K]
    sig = (np.sin(arg) @ weights.astype(np.float32)).astype(np.float64)  # [n, K] @ [K] -> [n]
    return sig / (np.sqrt(np.mean(sig**2)) + 1e-12)


def _band_noise(rng, n: int, lo: float, hi: float, sr: int) -> np.ndarray:
    """White noise shaped into a smooth band ``[lo, hi]`` Hz, unit RMS."""
    spec = np.fft.rfft(rng.standard_normal(n))  # [n // 2 + 1]
    f = np.fft.rfftfreq(n, 1.0 / sr)
    width = 0.08 * (hi - lo) + 50.0
    gain = 1.0 / (1.0 + np.exp(-(f - lo) / width)) / (1.0 + np.exp(-(hi - f) / width))
    sig = np.fft.irfft(spec * gain, n)
    return sig / (np.sqrt(np.mean(sig**2)) + 1e-12)


def synth_utterance(rng: np.random.Generator, spk: Speaker, sr: int) -> tuple[np.ndarray, list[tuple[int, int, str]]]:
    """One utterance: waveform ``[N]`` float32 and its ``(start, end, label)`` sample segments."""
    return render_plan(rng, spk, _plan(rng, sr), sr)


def render_plan(rng: np.random.Generator, spk: Speaker, plan: list[tuple[str, int, int]], sr: int
                ) -> tuple[np.ndarray, list[tuple[int, int, str]]]:
    """Synthesise a segment plan ``[(phone, n_samples, burst_samples)]`` (stops: ``burst_samples`` > 0,
    the rest of the stop is its closure) as spoken by ``spk``: waveform ``[N]`` float32 and its
    ``(start, end, label)`` sample segments."""
    total = sum(p[1] for p in plan)
    f0 = _f0_contour(rng, spk, total, sr)  # [N]
    phase = 2 * np.pi * np.cumsum(f0) / sr  # [N]
    speech = np.zeros(total)
    segments, start = [], 0
    for label, n, burst in plan:
        end = start + n
        level = 10 ** (rng.uniform(-2.0, 2.0) / 20)  # +-2 dB per token
        if label in _FORMANTS:
            sig = _voiced(rng, label, phase[start:end], float(f0[start:end].mean()), spk.scale, sr)
            speech[start:end] = level * _LEVEL[label] * sig * _ramp(n, sr)
        elif label in _NOISE:
            (lo, hi), rms = _NOISE[label]
            s = spk.scale ** 0.5  # place bands shift mildly with vocal-tract size
            lo, hi = lo * s, min(hi * s, 0.48 * sr)
            if label in STOPS:
                decay = np.exp(-np.arange(burst) / (0.3 * burst))
                speech[end - burst : end] = level * rms * _band_noise(rng, burst, lo, hi, sr) * decay
            else:
                speech[start:end] = level * rms * _band_noise(rng, n, lo, hi, sr) * _ramp(n, sr)
        segments.append((start, end, label))
        start = end
    active = np.abs(speech) > 0
    power = float(np.mean(speech[active] ** 2)) if active.any() else 1.0
    snr = np.clip(spk.snr_db + rng.uniform(-2.0, 2.0), 15.0, 30.0)
    noise = rng.standard_normal(total)
    noise = 0.7 * noise + 0.3 * np.concatenate([[0.0], noise[:-1]])  # slightly low-tilted background
    noise *= np.sqrt(power / 10 ** (snr / 10) / np.mean(noise**2))
    wav = speech + noise
    wav *= spk.gain * rng.uniform(0.8, 1.25) / np.sqrt(np.mean(wav**2))
    peak = np.abs(wav).max()
    if peak > 0.99:
        wav *= 0.99 / peak
    return wav.astype(np.float32), segments


def corpus_params(
    seed: int = 0,
    n_train_speakers: int = 8,
    n_val_speakers: int = 2,
    n_test_speakers: int = 3,
    utts_per_speaker: int | Mapping[str, int] | None = None,
    sample_rate: int = 16000,
) -> dict:
    """The normalised parameters that identify a corpus (and its cache folder)."""
    counts = {"train": n_train_speakers, "val": n_val_speakers, "test": n_test_speakers}
    bad = {k: v for k, v in counts.items() if int(v) < 0}
    if bad:
        raise ValueError(f"speaker counts must be >= 0, got {bad}")
    if sample_rate < 16000:
        raise ValueError(f"sample_rate={sample_rate} is too low for the fricative bands; expected >= 16000")
    return {
        "version": VERSION,
        "seed": int(seed),
        "speakers": {k: int(v) for k, v in counts.items()},
        "utts_per_speaker": _utts_per_split(utts_per_speaker),
        "sample_rate": int(sample_rate),
    }


def _write_corpus(out: Path, params: dict) -> int:
    sr = params["sample_rate"]
    n_utts = 0
    with open(out / MANIFEST, "w", encoding="utf-8") as manifest:
        for spk in make_speakers(params["seed"], params["speakers"]):
            idx = int(spk.name[3:])
            (out / spk.split / spk.name).mkdir(parents=True, exist_ok=True)
            for u in range(params["utts_per_speaker"][spk.split]):
                rng = np.random.default_rng([params["seed"], 2, idx, u])
                wav, segs = synth_utterance(rng, spk, sr)
                rel = f"{spk.split}/{spk.name}/{spk.name}_{u:04d}.wav"
                sf.write(str(out / rel), wav, sr, subtype="PCM_16")
                line = {
                    "path": rel,
                    "speaker": spk.name,
                    "split": spk.split,
                    "segments": [[round(s / sr, 7), round(e / sr, 7), lab] for s, e, lab in segs],
                }
                manifest.write(json.dumps(line) + "\n")
                n_utts += 1
    return n_utts


def generate_speech_corpus(
    root: str | Path,
    seed: int = 0,
    n_train_speakers: int = 8,
    n_val_speakers: int = 2,
    n_test_speakers: int = 3,
    utts_per_speaker: int | Mapping[str, int] | None = None,
    sample_rate: int = 16000,
) -> Path:
    """Generate (or reuse) the synthetic corpus under ``root``; return its ``manifest.jsonl``.

    ``utts_per_speaker``: an int for every split or a mapping per split; default
    ``{"train": 90, "val": 50, "test": 70}`` (720 / 100 / 210 utterances).
    The corpus lives in ``root / "speech_synth_v1_<hash of params>"``; a finished
    corpus (marker file present) is reused. It is written to a temporary folder and
    renamed into place, so an interrupted run never leaves a half corpus.
    """
    params = corpus_params(seed, n_train_speakers, n_val_speakers, n_test_speakers, utts_per_speaker, sample_rate)
    target = cached_folder(root, VERSION, params, lambda tmp: f"{_write_corpus(tmp, params)} utterances",
                           what="synthetic speech corpus")
    return target / MANIFEST
