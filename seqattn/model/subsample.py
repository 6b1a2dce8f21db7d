"""Time subsampling between the adapter and the encoder: ``F`` frames -> ``ceil(F / k)`` tokens.

Long inputs (speech at a 10 ms hop) stay cheap for attention (cost ~ ``F²``) and CTC gets a frame
rate closer to its output rate. ``SequenceModel(subsample=TimeSubsampling(dim, factor=k))`` applies
it to the adapter's tokens; the mask (and so every length downstream: the encoder's, the head's
logits, a CTC loss's input lengths) follows.

Modes (both map ``[B, F, D] -> [B, ceil(F/k), D]``):

- ``stack``: concatenate ``k`` consecutive frames, then a Linear ``k·D -> D`` (frame stacking);
- ``conv``: a strided 1-D convolution, kernel ``2k-1``, stride ``k``, zero padding ``k-1``:
  output ``j`` sees frames ``j·k-(k-1) .. j·k+k-1`` (overlapping its neighbours).

Padding frames are zeroed first, exactly like the zeros a sequence run alone is padded with, so an
item's output does not depend on its batch. Output position ``j`` stands for input frames
``j·k .. j·k+k-1``; it is real when any of them is (``ceil(length / k)`` real outputs).

Letters: b batch, f frames, g groups (= ``ceil(f / k)``), k factor, d width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.conv import conv1d_positions
from seqattn.core.dropout import Dropout
from seqattn.core.tokens import Tokens

MODES = ("stack", "conv")


class TimeSubsampling(nn.Module):
    """``Tokens(x [B, F, D], mask [B, F]) -> Tokens(x [B, ceil(F/k), D], mask [B, ceil(F/k)])``.

    Args:
        dim: token width D (in and out).
        factor: k >= 1 (1 = identity, no parameters).
        mode: ``stack`` | ``conv`` (see the module docstring).
        dropout: on the output.
    """

    def __init__(self, dim: int, factor: int = 2, mode: str = "stack", dropout: float = 0.0) -> None:
        super().__init__()
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise ValueError(f"factor must be an int >= 1 (frames per token), got {factor!r}")
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        if dim <= 0:
            raise ValueError(f"dim must be positive, got {dim}")
        self.dim, self.factor, self.mode = dim, factor, mode
        if factor == 1:
            self.proj = None
        elif mode == "stack":
            self.proj = nn.Linear(factor * dim, dim)
        else:
            self.proj = nn.Conv1d(dim, dim, kernel_size=2 * factor - 1, stride=factor, padding=factor - 1)
        self.dropout = Dropout(dropout)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Real frames ``[B]`` -> real output tokens ``[B]``: ``ceil(lengths / k)``."""
        return torch.div(lengths + self.factor - 1, self.factor, rounding_mode="floor")

    def forward(self, tokens: Tokens) -> Tokens:
        if tokens.attn_mask is not None or tokens.edge_index is not None or tokens.grid is not None \
                or tokens.num_global:
            raise ValueError("TimeSubsampling works on plain sequences (no attn_mask, edge_index, grid or global "
                             "token): it merges neighbouring positions in time")
        x, mask = tokens.x, tokens.mask
        if x.shape[-1] != self.dim:
            raise ValueError(f"tokens must be [B, F, D={self.dim}], got shape {tuple(x.shape)}")
        if self.proj is None:
            return tokens
        b, f, d = x.shape
        k = self.factor
        if mask is None:
            mask = torch.ones(b, f, dtype=torch.bool, device=x.device)
        x = x.masked_fill(~mask.unsqueeze(-1), 0.0)  # padding enters no group
        pad = (k - f % k) % k
        x = F.pad(x, (0, 0, 0, pad))  # [B, g·k, D]
        g = (f + pad) // k
        new_mask = F.pad(mask, (0, pad), value=False).view(b, g, k).any(-1)  # [B, g]
        if self.mode == "stack":
            y = self.proj(x.reshape(b, g, k * d))  # [B, g, k, D] -> [B, g, k·D] -> [B, g, D]
        else:
            # the right zero padding of the convolution covers frames beyond g·k; on the channels-last route
            # (seqattn.core.conv: 2.0x faster forward + backward than nn.Conv1d on the transposed view at
            # speech_ctc's FSDD shape, 32 × 81 frames × 96, one thread)
            y = conv1d_positions(self.proj, x)[:, :g]  # [B, g·k, D] -> [B, g, D]
        y = self.dropout(y).masked_fill(~new_mask.unsqueeze(-1), 0.0)
        extra = dict(tokens.extra)
        extra["subsample"] = k
        return Tokens(x=y, mask=new_mask, extra=extra)
