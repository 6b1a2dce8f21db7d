"""Training-only audio augmentation, inside the adapter: speed perturbation (each clip resampled by a
factor drawn from a few, Ko et al. 2015), random crop and time shift, additive noise at a random SNR
(on the waveform), vocal tract length perturbation (a per-clip frequency warp of the power spectrum,
VTLP), SpecAugment time and frequency masks (on the frame features).

It lives in the adapter (:class:`AugmentedAudioAdapter`, active only while ``self.training``), not
in the data's collate: the draws then come from torch's global random state like dropout's, so an
exactly resumed run (:mod:`seqattn.training.resume`) draws the same augmentation; evaluation,
prediction, export and a distillation teacher (all in eval mode) see the clean audio; and the
modality never imports an objective. The draws are per item (each clip its own crop, shift, SNR and
masks), within each clip's own length; padding stays zero.

Letters: b batch, t samples, f frames, c feature dim.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torchaudio
from torch import nn

from seqattn.core.tokens import Tokens
from seqattn.modalities.audio.adapter import AudioAdapter
from seqattn.modalities.audio.features import ms_to_samples


class WaveAugment(nn.Module):
    """Waveform augmentation of a padded batch: ``(waveform [B, T], lengths [B]) -> same shapes``.

    Args:
        sample_rate: samples per second (for the millisecond arguments).
        crop: keep a random contiguous share in ``[crop, 1]`` of each clip (1 = no crop); at least
            ``min_samples`` are kept.
        shift_ms: rotate each clip by a random offset in ``[-shift_ms, shift_ms]`` within its own
            length (0 = off): the word moves, the background wraps around.
        noise_p: probability that a clip gets white noise added.
        snr_db: ``[low, high]``: the noise's signal-to-noise ratio, uniform in dB.
        min_samples: the shortest clip a crop may leave (one analysis window).
        speed: speed perturbation (first, before the crop): each clip plays at a factor drawn uniformly
            from this list, e.g. ``[0.9, 1.0, 1.1]`` (Kaldi's three): a factor ``s`` resamples the clip
            from ``sample_rate * s`` to ``sample_rate`` Hz (``torchaudio.functional.resample``), so it
            lasts ``1/s`` as long and its pitch and formants move by ``s``; lengths become
            ``ceil(length / s)`` and the batch's padded width the longest of them. Empty = off.
    """

    def __init__(self, sample_rate: int = 16000, crop: float = 1.0, shift_ms: float = 0.0, noise_p: float = 0.0,
                 snr_db: Sequence[float] = (10.0, 30.0), min_samples: int = 1, speed: Sequence[float] = ()) -> None:
        super().__init__()
        if isinstance(speed, (int, float, str)) or any(isinstance(v, (bool, str)) or not 0.5 <= float(v) <= 2.0
                                                        for v in speed):
            raise ValueError(f"speed={speed} must be a list of factors in [0.5, 2], e.g. [0.9, 1.0, 1.1] (empty = off)")
        self.sample_rate = int(sample_rate)
        self.speed = [float(v) for v in speed]
        for v in self.speed:
            if abs(self.sample_rate * v - round(self.sample_rate * v)) > 1e-6:
                raise ValueError(f"speed factor {v} times sample_rate={sample_rate} is not a whole rate in Hz "
                                 "(the clip is resampled from sample_rate * factor)")
        if not 0.0 < crop <= 1.0:
            raise ValueError(f"crop={crop} must be in (0, 1]: the smallest share of a clip a crop keeps")
        if shift_ms < 0:
            raise ValueError(f"shift_ms={shift_ms} must be >= 0")
        if not 0.0 <= noise_p <= 1.0:
            raise ValueError(f"noise_p={noise_p} must be a probability in [0, 1]")
        snr_db = [float(v) for v in snr_db]
        if len(snr_db) != 2 or snr_db[0] > snr_db[1]:
            raise ValueError(f"snr_db={snr_db} must be [low, high] in dB with low <= high")
        self.crop, self.noise_p, self.snr_db = float(crop), float(noise_p), snr_db
        self.shift = ms_to_samples(shift_ms, sample_rate)
        self.min_samples = max(int(min_samples), 1)

    @property
    def active(self) -> bool:
        return self.crop < 1.0 or self.shift > 0 or self.noise_p > 0 or self.perturbs_speed

    @property
    def perturbs_speed(self) -> bool:
        return any(v != 1.0 for v in self.speed)

    def change_speed(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``waveform [B, T]``, ``lengths [B]`` -> ``[B, T']``, ``[B]``: each clip resampled by a factor
        drawn from ``speed`` (clips of one factor resampled together); past each new length the
        resampler's tails remain (``forward`` zeroes every clip's padding)."""
        b = waveform.shape[0]
        pick = torch.randint(len(self.speed), (b,), device=waveform.device)  # [B] index into speed
        parts, new_lengths = [], lengths.clone()
        for k, factor in enumerate(self.speed):
            rows = torch.nonzero(pick == k).flatten()
            if rows.numel() == 0:
                continue
            if factor == 1.0:
                parts.append((rows, waveform[rows]))
                continue
            orig, new = round(self.sample_rate * factor), self.sample_rate
            g = math.gcd(orig, new)
            with torch.autocast(waveform.device.type, enabled=False):  # fp32 under bf16 autocast
                parts.append((rows, torchaudio.functional.resample(waveform[rows].float(), orig // g, new // g)))
            new_lengths[rows] = torch.div(lengths[rows] * new + orig - 1, orig, rounding_mode="floor")  # ceil
        width = max(int(new_lengths.max()), 1)
        out = waveform.new_zeros(b, width)
        for rows, wave in parts:
            n = min(wave.shape[1], width)
            out[rows, :n] = wave[:, :n]
        return out, new_lengths

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = lengths.long()
        if self.perturbs_speed:
            waveform, lengths = self.change_speed(waveform, lengths)
        b, t = waveform.shape
        start = torch.zeros(b, dtype=torch.long, device=waveform.device)
        if self.crop < 1.0:
            share = self.crop + (1.0 - self.crop) * torch.rand(b, device=waveform.device)  # [B]
            kept = torch.maximum((share * lengths).ceil().long(), torch.clamp(lengths, max=self.min_samples))
            kept = torch.minimum(kept, lengths)
            start = ((lengths - kept + 1) * torch.rand(b, device=waveform.device)).long()  # [B] in 0..len-kept
            lengths = kept
        pos = torch.arange(t, device=waveform.device)[None]  # [1, T]
        real = pos < lengths[:, None]  # [B, T]
        if self.shift > 0:
            offset = torch.randint(-self.shift, self.shift + 1, (b,), device=waveform.device)  # [B]
            pos = (pos - offset[:, None]) % lengths.clamp_min(1)[:, None]  # [B, T] rotated within the clip
        index = (start[:, None] + pos).clamp(max=t - 1)  # [B, T]
        out = waveform.gather(1, index) * real  # [B, T], padding zero (also a resampled clip's tail)
        if self.noise_p > 0:
            noise = torch.randn_like(out) * real  # [B, T]
            lo, hi = self.snr_db
            snr = lo + (hi - lo) * torch.rand(b, device=out.device)  # [B] dB
            noisy = torchaudio.functional.add_noise(out, noise, snr, lengths)
            use = torch.rand(b, device=out.device) < self.noise_p  # [B]
            out = torch.where(use[:, None], noisy, out)
        return out, lengths


class SpecAugment(nn.Module):
    """SpecAugment masks on frame features (torchaudio ``TimeMasking`` / ``FrequencyMasking``, drawn
    per item): ``(feats [B, F, C], mask [B, F]) -> feats [B, F, C]``; masked values are 0 (the mean of
    normalised features), padding stays 0.

    Args:
        time_masks, time_mask_frames: how many time masks, each up to this many frames wide (its
            position is drawn over the batch's padded length; at most ``time_mask_p`` of it).
        freq_masks, freq_mask_bins: how many frequency masks, each up to this many feature bins.
    """

    def __init__(self, time_masks: int = 0, time_mask_frames: int = 10, freq_masks: int = 0,
                 freq_mask_bins: int = 8, time_mask_p: float = 0.2) -> None:
        super().__init__()
        for name, value in (("time_masks", time_masks), ("time_mask_frames", time_mask_frames),
                            ("freq_masks", freq_masks), ("freq_mask_bins", freq_mask_bins)):
            if int(value) < 0:
                raise ValueError(f"{name}={value} must be >= 0")
        self.time_masks, self.freq_masks = int(time_masks), int(freq_masks)
        self.time = torchaudio.transforms.TimeMasking(int(time_mask_frames), iid_masks=True, p=float(time_mask_p))
        self.freq = torchaudio.transforms.FrequencyMasking(int(freq_mask_bins), iid_masks=True)

    @property
    def active(self) -> bool:
        return self.time_masks > 0 or self.freq_masks > 0

    def forward(self, feats: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        spec = feats.transpose(1, 2).unsqueeze(1)  # [B, F, C] -> [B, 1, C, F] (torchaudio: ..., freq, time)
        for _ in range(self.time_masks):
            spec = self.time(spec)
        for _ in range(self.freq_masks):
            spec = self.freq(spec)
        return spec.squeeze(1).transpose(1, 2) * mask[..., None].to(feats.dtype)  # [B, F, C]


class AugmentedAudioAdapter(AudioAdapter):
    """:class:`~seqattn.modalities.audio.adapter.AudioAdapter` with training-only augmentation (see the
    module docstring); in eval mode it computes exactly what ``AudioAdapter`` does (same parameters,
    same checkpoint keys, same exports).

    Args (besides ``AudioAdapter``'s): ``speed``, ``crop``, ``shift_ms``, ``noise_p``, ``snr_db``
    (:class:`WaveAugment`), ``time_masks``, ``time_mask_frames``, ``freq_masks``, ``freq_mask_bins``
    (:class:`SpecAugment`);
    ``warp``: each clip's frequency axis scaled by a factor drawn uniformly from ``[1 - warp, 1 + warp]``
    (:func:`~seqattn.modalities.audio.features.warp_frequencies`; 0 = off; logmel / mfcc features only).

    ``augmented_inputs``: after a training forward, the augmented ``{"waveform", "lengths"}`` it read
    (None without waveform augmentation), so a distillation teacher can be shown the same augmented clips as the student
    (:mod:`seqattn.objectives.distill`); SpecAugment masks stay the student's own.
    """

    augmented_inputs: dict | None = None

    def __init__(self, dim: int, *args, crop: float = 1.0, shift_ms: float = 0.0, noise_p: float = 0.0,
                 snr_db: Sequence[float] = (10.0, 30.0), time_masks: int = 0, time_mask_frames: int = 10,
                 freq_masks: int = 0, freq_mask_bins: int = 8, warp: float = 0.0, speed: Sequence[float] = (),
                 **kwargs) -> None:
        super().__init__(dim, *args, **kwargs)
        if not 0.0 <= warp < 1.0:
            raise ValueError(f"warp={warp} must be in [0, 1): the largest change of a clip's frequency scale")
        if warp > 0 and self.features.kind == "raw":
            raise ValueError(f"warp={warp} needs a spectrum: features='raw' has none (use logmel or mfcc)")
        self.warp = float(warp)
        self.wave_augment = WaveAugment(self.features.sample_rate, crop, shift_ms, noise_p, snr_db,
                                        min_samples=self.features.win, speed=speed)
        self.spec_augment = SpecAugment(time_masks, time_mask_frames, freq_masks, freq_mask_bins)

    def token_targets(self, batch):
        """:meth:`AudioAdapter.token_targets`, refused while a crop, a time shift or a speed change is
        on: they move the frames of a training forward away from the clean frames the targets come from
        (noise and SpecAugment keep the frames in place and are allowed)."""
        wave = self.wave_augment
        if wave.crop < 1.0 or wave.shift > 0 or wave.perturbs_speed:
            raise ValueError(f"masked-frame pretraining with adapter crop={wave.crop} / shift_ms > 0 / "
                             f"speed={wave.speed}: a crop, a time shift or a speed change moves the frames away "
                             "from their clean targets; use adapter=audio, or set adapter.crop=1 adapter.shift_ms=0 "
                             "adapter.speed=[]")
        return super().token_targets(batch)

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None):
        """``waveform [B, T]``, ``lengths [B]`` -> Tokens(x ``[B, F, dim]``, mask ``[B, F]``), augmented
        while training; ``extra["features"]`` holds the (augmented) frame features."""
        if not self.training or not (self.wave_augment.active or self.spec_augment.active or self.warp > 0):
            return super().forward(waveform, lengths)  # no state is touched: export and eval see AudioAdapter
        if waveform.dim() == 1:
            waveform = waveform[None]
        if lengths is None:
            lengths = torch.full(waveform.shape[:1], waveform.shape[1], dtype=torch.long, device=waveform.device)
        self.augmented_inputs = None
        if self.wave_augment.active:
            waveform, lengths = self.wave_augment(waveform.float(), lengths)
            self.augmented_inputs = {"waveform": waveform, "lengths": lengths}
        warp = None
        if self.warp > 0:
            warp = 1.0 + self.warp * (2 * torch.rand(waveform.shape[0], device=waveform.device) - 1)  # [B]
        feats, mask = self.features(waveform, lengths, warp)  # [B, F, C], [B, F]
        if self.spec_augment.active:
            feats = self.spec_augment(feats, mask)
        x = self.dropout(self.proj(feats))  # [B, F, D]
        return Tokens(x=x, mask=mask, extra={"features": feats})
