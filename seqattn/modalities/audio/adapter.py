"""Speech -> Tokens: frame features of a sliding window, projected to the model width.

Letters: b batch, t samples, f frames, c feature dim, d model width.
"""

from __future__ import annotations

import torch
from torch import nn

from seqattn.core.tokens import Tokens
from seqattn.model.protocols import AdapterBase
from seqattn.modalities.audio.features import AudioFeatures


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
    ) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.features = AudioFeatures(sample_rate, win_ms, hop_ms, features, n_mels, n_mfcc, normalize)
        self.proj = nn.Linear(self.features.feature_dim, dim)
        self.dropout = nn.Dropout(dropout)

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
