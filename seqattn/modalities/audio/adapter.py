"""Speech -> Tokens: frame features of a sliding window, projected to the model width.

Letters: b batch, t samples, f frames, c feature dim, d model width.
"""

from __future__ import annotations

import torch
from torch import nn

from seqattn.core.dropout import Dropout
from seqattn.core.tokens import Tokens
from seqattn.model.protocols import AdapterBase, TargetLayout, TokenTargets
from seqattn.core.masks import lengths_to_mask
from seqattn.modalities.audio.features import AudioFeatures, num_frames


class AudioAdapter(AdapterBase):
    """Waveform -> :class:`Tokens`: frame features, then a linear projection to ``dim``.

    The network calls ``adapter(**{k: batch[k] for k in adapter.inputs})``.
    """

    inputs = ("waveform", "lengths")

    def __init__(
        self,
        dim: int,
        sample_rate: int = 16000,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        features: str = "logmel",
        n_mels: int = 40,
        n_mfcc: int = 20,
        normalize: bool = True,
        dropout: float = 0.0,
        f_min: float = 0.0,
        f_max: float | None = None,
    ) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.features = AudioFeatures(sample_rate, win_ms, hop_ms, features, n_mels, n_mfcc, normalize, f_min, f_max)
        self.proj = nn.Linear(self.features.feature_dim, dim)
        self.dropout = Dropout(dropout)

    def export_description(self) -> dict:
        """The waveform the exported model takes; the features are computed inside it."""
        f = self.features
        return {
            "inputs": {
                "waveform": {"shape": ["B", "T"], "meaning": "mono samples at preprocessing.sample_rate Hz, "
                             "float32 in [-1, 1] (as soundfile reads them), zeros after each item's end"},
                "lengths": {"shape": ["B"], "meaning": "the real samples of each item (int64)"},
            },
            "preprocessing": {
                "sample_rate": f.sample_rate,
                "channels": "mono: the mean over the file's channels",
                "resampling": "files at another rate are resampled to sample_rate (torchaudio.functional.resample)",
                "features_inside_the_model": {"kind": f.kind, "win_samples": f.win, "hop_samples": f.hop,
                                              "n_mels": f.n_mels, "n_mfcc": f.n_mfcc, "normalize": f.normalize,
                                              "f_min": f.f_min, "f_max": f.f_max},
                "frames": "output position f covers samples [f * hop_samples, f * hop_samples + win_samples)",
            },
        }

    def example_inputs(self, batch: int = 2, scale: int = 1) -> dict[str, torch.Tensor]:
        """``waveform [B, T]`` of quiet noise (T = ``scale`` s of audio, the last item shorter) and ``lengths [B]``."""
        n = int(self.features.sample_rate * scale)
        g = torch.Generator().manual_seed(0)
        lengths = torch.tensor([n - (n // 4) * (i % 2) for i in range(batch)], dtype=torch.long)
        waveform = 0.05 * torch.randn(batch, n, generator=g) * (torch.arange(n)[None] < lengths[:, None])
        return {"waveform": waveform, "lengths": lengths}

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> Tokens:
        """``waveform [B, T]`` (or ``[T]``), ``lengths [B]`` -> Tokens(x ``[B, F, dim]``, mask ``[B, F]``).

        ``extra["features"]`` holds the frame features ``[B, F, feature_dim]``.
        """
        feats, mask = self.features(waveform, lengths)  # [B, F, C], [B, F]
        x = self.dropout(self.proj(feats))  # [B, F, D]
        return Tokens(x=x, mask=mask, extra={"features": feats})

    # -- masked-frame pretraining (seqattn.objectives.masked) -------------------------------
    def token_target_layout(self) -> TargetLayout:
        """Masked-frame pretraining regresses each hidden frame's features: ``("regression", feature_dim)``
        (40 log-mel bins by default)."""
        return TargetLayout("regression", self.features.feature_dim)

    def token_targets(self, batch) -> TokenTargets:
        """Each frame's features as the adapter computes them from the **clean** waveform (``values
        [B, F, feature_dim]``: log-mel by default, normalised per utterance and bin over its real frames
        when ``normalize``: the projection's own input), maskable on real frames only (``maskable [B, F]``;
        padding frames never). Computed here by the feature module alone, so no augmentation of a
        training forward reaches the targets (noise and SpecAugment hide information the model must
        restore), clip by clip in fp32, so a clip's targets are the same bit for bit in any batch."""
        if not isinstance(batch.get("waveform"), torch.Tensor):
            raise ValueError(f"{type(self).__name__}.token_targets needs waveform [B, T] (and lengths [B]); the "
                             f"batch has {sorted(batch)}")
        f = self.features
        waveform, lengths = f._check(batch["waveform"], batch.get("lengths"))  # [B, T], [B]
        frames = f.frame_lengths(lengths)  # [B]
        values = waveform.new_zeros(waveform.shape[0], num_frames(waveform.shape[1], f.win, f.hop), f.feature_dim)
        # each clip alone, at its own length and in fp32 (no autocast): the same values bit for bit in any batch,
        # padding, precision or process count (evaluation hides positions chosen by a hash of them)
        with torch.no_grad(), torch.autocast(waveform.device.type, enabled=False):
            for i, n in enumerate(lengths.tolist()):
                values[i, : int(frames[i])] = f(waveform[i : i + 1, :n], lengths[i : i + 1])[0][0]  # [F_i, C]
        mask = lengths_to_mask(frames, max_len=values.shape[1])  # [B, F]
        return TokenTargets("regression", values, mask, f.feature_dim)
