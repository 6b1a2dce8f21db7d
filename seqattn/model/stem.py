"""A convolutional front end between an audio adapter and the encoder: local time-frequency context per token.

Frame-level attention sees each 25 ms log-mel frame through one Linear, with no notion of "the same
pattern one mel bin higher" or of the neighbouring frames. Speech transformers put convolutions in
front for that (Conformer's conv subsampling, AST's patches). :class:`SpectrogramStem` runs the first
blocks of the log-mel CNN baseline (:class:`~seqattn.model.baselines.SpectrogramCNN`: 2-D convolutions
over the ``[frames x mel bins]`` map the adapter keeps in ``tokens.extra["features"]``) and adds their
output to each frame's vector; the encoder then attends over these frames. One token per frame by default
(the mask and the sequence length unchanged); ``time_factor=k`` merges every k frames after the CNN
(:class:`~seqattn.model.subsample.TimeSubsampling`), so the encoder runs on a k-th of the tokens. Either way a
padded batch's per-item outputs equal each item's alone.

``SequenceModel(subsample=SpectrogramStem(dim))`` applies it (config: ``net.subsample``).
"""

from __future__ import annotations

from torch import nn

from seqattn.core.tokens import Tokens
from seqattn.model.baselines import SpectrogramCNN
from seqattn.model.subsample import TimeSubsampling


class SpectrogramStem(nn.Module):
    """``Tokens(x [B, F, D], mask [B, F], extra["features"] [B, F, C]) -> Tokens(x [B, F, D], mask [B, F])``.

    ``x' = LayerNorm(x + Linear(CNN(features)))`` with the CNN of
    :class:`~seqattn.model.baselines.SpectrogramCNN` (``len(channels)`` blocks of k×k convolutions,
    dilated in time, LayerNorm, GELU, max-pool 2 over frequency; then ``freq_out`` bins). With
    ``dilations=(1, 2)`` and k = 3 a frame sees ±3 frames (±30 ms at a 10 ms hop). Padded frames never
    enter a receptive field, so an item's output does not depend on its batch.

    Args:
        dim: token width D (in and out).
        channels: output channels of each 2-D block.
        dilations: time dilation of each block (same length as ``channels``).
        kernel_size: odd k of the k×k convolutions.
        freq_out: frequency bins left after the blocks (averaged).
        dropout: before the projection.
        time_factor: k >= 1: after the CNN, every k frames become one token
            (:class:`~seqattn.model.subsample.TimeSubsampling`, ``time_mode``): ``[B, F, D] -> [B, ceil(F/k), D]``,
            so attention and the layers after it run on a k-th of the frames (1 = one token per frame).
        time_mode: ``stack`` | ``conv`` (TimeSubsampling's modes).
    """

    def __init__(self, dim: int, channels: tuple[int, ...] | list[int] = (16, 32),
                 dilations: tuple[int, ...] | list[int] = (1, 2), kernel_size: int = 3, freq_out: int = 4,
                 dropout: float = 0.1, time_factor: int = 1, time_mode: str = "stack") -> None:
        super().__init__()
        self.dim = dim
        self.cnn = SpectrogramCNN(dim, channels=channels, dilations=dilations, kernel_size=kernel_size,
                                  freq_out=freq_out, dropout=dropout)
        self.time = TimeSubsampling(dim, time_factor, time_mode)  # the identity (no parameters) for 1

    def forward(self, tokens: Tokens) -> Tokens:
        if not isinstance(tokens, Tokens):
            raise ValueError(f"SpectrogramStem needs the adapter's Tokens, got {type(tokens).__name__}")
        if tokens.attn_mask is not None or tokens.edge_index is not None or tokens.grid is not None \
                or tokens.num_global:
            raise ValueError("SpectrogramStem works on plain frame sequences (no attn_mask, edge_index, grid or "
                             "global token): it convolves neighbouring frames")
        if "features" not in (tokens.extra or {}):
            raise ValueError("SpectrogramStem reads the adapter's frame features (tokens.extra['features'] "
                             f"[B, F, C]); this adapter's tokens carry only {sorted(tokens.extra or {})}")
        x = self.cnn(tokens)  # [B, F, D], padding zeroed
        out = Tokens(x=x, mask=tokens.mask, extra=dict(tokens.extra))
        return self.time(out)  # [B, ceil(F/k), D]
