"""Speech as a sequence of frames from a sliding window: reading audio, framing, frame features.

One framing everywhere: frame ``i`` covers samples ``[i * hop, i * hop + win)`` and
its label is the label at its centre sample ``i * hop + win // 2``. There is no
centre padding, so a frame only ever sees real samples of its own utterance and
the features of an item do not depend on how much padding its batch has.

Letters: b batch, t samples, f frames, c feature dim, d model width.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import soundfile as sf
import torch
import torchaudio
from torch import nn

from seqattn.core.masks import lengths_to_mask
from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.audio.manifest import check_complete_wav

log = logging.getLogger("seqattn.modalities.audio.features")

FEATURES = ("raw", "logmel", "mfcc")
#: the STFT power as ``re² + im²`` (:meth:`AudioFeatures.power_spectrum`); False: torchaudio's ``Spectrogram``
#: (``|z|²``), the other side of ``python -m seqattn.bench audio``
FAST_POWER = True
_LOG_EPS = 1e-6
_STD_EPS = 1e-5


def ms_to_samples(ms: float, sample_rate: int) -> int:
    """Milliseconds -> whole samples (rounded)."""
    return int(round(ms * sample_rate / 1000.0))


def num_frames(num_samples: int, win: int, hop: int) -> int:
    """Number of full windows: ``1 + (num_samples - win) // hop``, 0 if shorter than ``win``."""
    if win <= 0 or hop <= 0:
        raise ValueError(f"win and hop must be positive sample counts, got win={win}, hop={hop}")
    if num_samples < win:
        return 0
    return 1 + (num_samples - win) // hop


def load_audio(path: str | Path, sample_rate: int) -> torch.Tensor:
    """Read an audio file as float32 mono ``[T]`` at ``sample_rate``.

    Multichannel audio is averaged over channels; a file at another rate is
    resampled with ``torchaudio.functional.resample``. An unreadable, empty or truncated
    file raises ``ValueError`` naming it.
    """
    path = Path(path)
    try:
        data, file_rate = sf.read(str(path), dtype="float32", always_2d=True)  # [T, C]
    except Exception as err:  # soundfile raises LibsndfileError / RuntimeError / OSError
        raise ValueError(f"cannot read audio file {path}: {err}") from err
    if data.shape[0] == 0:
        raise ValueError(f"audio file {path} is empty (0 samples)")
    check_complete_wav(path)  # a cut WAV reads without an error: what is left
    wav = torch.from_numpy(np.ascontiguousarray(data.mean(axis=1)))  # [T]
    if file_rate != sample_rate:
        wav = torchaudio.functional.resample(wav, int(file_rate), int(sample_rate))  # [T']
    return wav.to(torch.float32)


def frame_labels(
    segments: Sequence[Sequence],
    num_samples: int,
    sample_rate: int,
    win: int,
    hop: int,
    label_to_index: Mapping[str, int],
    default: str | None = None,
) -> torch.Tensor:
    """Per-frame class indices ``[F]`` long from ``(start_s, end_s, label)`` segments.

    A frame takes the label of the segment covering its centre sample
    (``start <= centre < end``; a later segment wins where segments overlap).
    A frame no segment covers gets ``default`` (a label name) or, if ``default``
    is None, ``-100`` (ignored by the loss).
    """

    def index_of(name: str) -> int:
        if name not in label_to_index:
            raise ValueError(f"unknown label {name!r}; known labels: {sorted(label_to_index)}")
        return label_to_index[name]

    fill = IGNORE_INDEX if default is None else index_of(default)
    n = num_frames(num_samples, win, hop)
    centres = torch.arange(n) * hop + win // 2  # [F]
    out = torch.full((n,), fill, dtype=torch.long)  # [F]
    for start_s, end_s, name in segments:
        idx = index_of(str(name))
        start, end = round(float(start_s) * sample_rate), round(float(end_s) * sample_rate)
        out[(centres >= start) & (centres < end)] = idx
    return out


def warp_frequencies(spec: torch.Tensor, alpha: torch.Tensor, boundary: float = 0.9) -> torch.Tensor:
    """Vocal tract length perturbation (Jaitly & Hinton 2013): each item's frequency axis scaled by its
    factor, piecewise linearly so that 0 and the Nyquist frequency stay fixed.

    A source frequency ``f`` moves to ``alpha * f`` up to ``boundary * nyquist * min(alpha, 1) / alpha``,
    then linearly to the Nyquist frequency; the output bins read the source bins by linear interpolation.

    Args:
        spec: ``[B, K, F]`` power spectra (``K`` bins from 0 to the Nyquist frequency, ``F`` frames).
        alpha: ``[B]`` warp factors (> 0; 1 = unchanged; VTLP draws them from ~[0.9, 1.1]).
        boundary: where the linear part ends, as a share of the Nyquist frequency.

    Returns:
        ``[B, K, F]``: ``alpha > 1`` moves energy up (a shorter vocal tract), ``< 1`` down.
    """
    b, k, _ = spec.shape
    if alpha.shape != (b,):
        raise ValueError(f"alpha must be [B] = [{b}], got shape {tuple(alpha.shape)}")
    nyq = float(k - 1)  # in bins
    a = alpha.to(spec.dtype)[:, None]  # [B, 1]
    out = torch.arange(k, device=spec.device, dtype=spec.dtype)[None]  # [1, K] output bins
    cut = boundary * nyq * torch.clamp(a, max=1.0) / a  # [B, 1] source frequency where the linear part ends
    low = out / a  # [B, K] source bin below the cut
    high = nyq - (nyq - out) * (nyq - cut) / (nyq - a * cut)  # [B, K] above it: to the Nyquist frequency
    src = torch.where(out <= a * cut, low, high).clamp(0.0, nyq)  # [B, K]
    lo = src.floor().long().clamp(max=k - 2)  # [B, K]
    frac = (src - lo.to(spec.dtype))[..., None]  # [B, K, 1]
    index = lo[..., None].expand(-1, -1, spec.shape[-1])  # [B, K, F]
    return spec.gather(1, index) * (1 - frac) + spec.gather(1, index + 1) * frac


class AudioFeatures(nn.Module):
    """Waveform -> frame features: ``raw`` window samples, ``logmel`` or ``mfcc``.

    No trainable parameters. ``win`` / ``hop`` are in samples. The mel filters span ``[f_min, f_max]``
    Hz (``f_max`` None: the Nyquist frequency ``sample_rate / 2``). An ``f_max`` above the Nyquist
    frequency is clipped to it with a warning naming both (a recipe default such as 4 kHz stays valid
    for 8 kHz and 16 kHz input); ``f_min`` must lie below the (clipped) ``f_max``.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        features: str = "logmel",
        n_mels: int = 40,
        n_mfcc: int = 20,
        normalize: bool = True,
        f_min: float = 0.0,
        f_max: float | None = None,
    ) -> None:
        super().__init__()
        if features not in FEATURES:
            raise ValueError(f"features={features!r} is not one of {FEATURES}")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        self.sample_rate = int(sample_rate)
        self.win = ms_to_samples(win_ms, sample_rate)
        self.hop = ms_to_samples(hop_ms, sample_rate)
        if self.win <= 0 or self.hop <= 0:
            raise ValueError(
                f"win_ms={win_ms} and hop_ms={hop_ms} must each be at least one sample at {sample_rate} Hz"
            )
        if features == "mfcc" and not 0 < n_mfcc <= n_mels:
            raise ValueError(f"n_mfcc={n_mfcc} must be in 1..n_mels={n_mels}")
        self.kind = features
        self.n_mels = n_mels
        self.n_mfcc = n_mfcc
        self.normalize = normalize
        self.f_min, self.f_max = self._band(float(f_min), f_max)
        if features != "raw":
            self.mel = torchaudio.transforms.MelSpectrogram(
                sample_rate=sample_rate,
                n_fft=self.win,
                win_length=self.win,
                hop_length=self.hop,
                n_mels=n_mels,
                f_min=self.f_min,
                f_max=self.f_max,
                center=False,
                power=2.0,
            )
        if features == "mfcc":
            dct = torchaudio.functional.create_dct(n_mfcc, n_mels, norm="ortho")  # [n_mels, n_mfcc]
            self.register_buffer("dct", dct, persistent=False)

    def _band(self, f_min: float, f_max: float | None) -> tuple[float, float]:
        """``(f_min, f_max)`` in Hz with ``f_max`` clipped to the Nyquist frequency (a warning says so)."""
        nyquist = self.sample_rate / 2.0
        if f_max is None:
            f_max = nyquist
        f_max = float(f_max)
        if f_max <= 0:
            raise ValueError(f"f_max={f_max} Hz must be positive (or null for the Nyquist frequency)")
        if f_max > nyquist:
            log.warning("f_max=%g Hz is above the Nyquist frequency %g Hz of sample_rate=%d Hz: the mel filters "
                        "stop at %g Hz", f_max, nyquist, self.sample_rate, nyquist)
            f_max = nyquist
        if not 0.0 <= f_min < f_max:
            raise ValueError(f"f_min={f_min} Hz must be in [0, f_max={f_max:g} Hz) at sample_rate={self.sample_rate} Hz")
        return f_min, f_max

    @property
    def feature_dim(self) -> int:
        return {"raw": self.win, "logmel": self.n_mels, "mfcc": self.n_mfcc}[self.kind]

    def _check(self, waveform: torch.Tensor, lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if waveform.dim() == 1:
            waveform = waveform[None]  # [1, T]
            if lengths is not None and lengths.dim() == 0:
                lengths = lengths[None]
        if waveform.dim() != 2:
            raise ValueError(f"waveform must be [B, T] or [T], got shape {tuple(waveform.shape)}")
        b, t = waveform.shape
        if lengths is None:
            lengths = torch.full((b,), t, dtype=torch.long, device=waveform.device)
        if lengths.shape != (b,):
            raise ValueError(f"lengths must be [B] = [{b}], got shape {tuple(lengths.shape)}")
        if torch.compiler.is_exporting() or torch.jit.is_tracing():  # export / trace: no checks on tensor values
            return waveform.float(), lengths.long()
        if (lengths > t).any() or (lengths < 0).any():
            raise ValueError(f"lengths must be in 0..T={t}, got {lengths.tolist()}")
        if t == 0:
            raise ValueError("waveform is empty (0 samples); need at least one window of "
                             f"{self.win} samples ({self._ms(self.win):.1f} ms)")
        too_short = (lengths < self.win).nonzero().flatten().tolist()
        if too_short:
            i = too_short[0]
            n = int(lengths[i])
            raise ValueError(
                f"batch item {i} has {n} samples ({self._ms(n):.1f} ms), shorter than the analysis "
                f"window of {self.win} samples ({self._ms(self.win):.1f} ms); "
                f"{len(too_short)} item(s) too short: {too_short}"
            )
        return waveform.float(), lengths.long()

    def _ms(self, n: int) -> float:
        return 1000.0 * n / self.sample_rate

    def power_spectrum(self, waveform: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` -> ``[B, n_fft // 2 + 1, F]`` power spectra, what ``self.mel.spectrogram`` (torchaudio's
        ``Spectrogram(power=2)``) computes, as ``re² + im²`` of the STFT: torchaudio takes ``|z|`` (a hypot per
        bin) and squares it; the log-mel features are 1.2-2.7x faster this way on CPU (``python -m seqattn.bench
        audio``), equal within float rounding (``tests/modalities/audio/test_adapter.py``); masked-frame pretraining's
        evaluation sample does not depend on that rounding (:func:`seqattn.objectives.masked.content_scores`)."""
        s = self.mel.spectrogram
        if not FAST_POWER:
            return s(waveform)
        z = torch.stft(waveform, s.n_fft, hop_length=s.hop_length, win_length=s.win_length,
                       window=s.window.to(waveform.dtype), center=s.center, pad_mode=s.pad_mode,
                       normalized=False, onesided=s.onesided, return_complex=True)  # [B, K, F] complex
        ri = torch.view_as_real(z)  # [B, K, F, 2]
        return ri[..., 0] * ri[..., 0] + ri[..., 1] * ri[..., 1]

    def frame_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Samples ``[B]`` -> number of frames ``[B]`` (0 where shorter than ``win``)."""
        return torch.where(lengths >= self.win, 1 + (lengths - self.win).div(self.hop, rounding_mode="floor"), 0)

    def forward(
        self, waveform: torch.Tensor, lengths: torch.Tensor | None = None, warp: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frame features of a padded batch.

        Args:
            waveform: ``[B, T]`` float (or ``[T]``, a batch of one), zero-padded.
            lengths: ``[B]`` long real samples per item, or None (all ``T``).
            warp: ``[B]`` float frequency-warp factors (VTLP, :func:`warp_frequencies`) applied to the
                power spectrum before the mel filters; None: no warp. ``logmel`` / ``mfcc`` only.

        Returns:
            feats ``[B, F, C]`` with ``F = num_frames(T, win, hop)``, ``C = feature_dim``;
            padding frames are zero. mask ``[B, F]`` bool, True = real frame.
        """
        waveform, lengths = self._check(waveform, lengths)
        if self.kind == "raw":
            feats = waveform.unfold(-1, self.win, self.hop)  # [B, F, win]
        else:
            spec = self.power_spectrum(waveform)  # [B, n_fft // 2 + 1, F]
            if warp is not None:
                spec = warp_frequencies(spec, warp)
            power = self.mel.mel_scale(spec)  # [B, n_mels, F]
            feats = torch.log(power + _LOG_EPS).transpose(1, 2)  # [B, F, n_mels]
            if self.kind == "mfcc":
                feats = feats @ self.dct  # [B, F, n_mfcc]
        mask = lengths_to_mask(self.frame_lengths(lengths), max_len=feats.shape[1])  # [B, F]
        m = mask[..., None].to(feats.dtype)  # [B, F, 1]
        if self.normalize:
            count = m.sum(dim=1, keepdim=True)  # [B, 1, 1]
            mean = (feats * m).sum(dim=1, keepdim=True) / count  # [B, 1, C]
            var = ((feats - mean) ** 2 * m).sum(dim=1, keepdim=True) / count  # [B, 1, C]
            feats = (feats - mean) / var.sqrt().clamp_min(_STD_EPS)  # [B, F, C]
        return feats * m, mask
