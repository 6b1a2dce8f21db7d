"""Context-free and fixed-context baselines with the encoder's interface.

They replace :class:`seqattn.core.Encoder` by config (``model=no_context`` /
``model=window_mlp``) so a recipe can show what attention adds:

- :class:`TokenwiseMLP` sees one token at a time (no context at all);
- :class:`WindowMLP` is the seed's sliding-window fully connected network: each
  token sees the concatenation of its ±``window`` neighbours (a fixed receptive field).

``forward(x [B, L, D] | Tokens, mask [B, L] | None, ..., return_attention) -> [B, L, D]``
(``(out, [])`` when attention is asked for: they have none).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.tokens import Tokens


class _Residual(nn.Module):
    def __init__(self, dim: int, ff_mult: float, dropout: float) -> None:
        super().__init__()
        hidden = int(dim * ff_mult)
        self.block = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout),
                                   nn.Linear(hidden, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class _Baseline(nn.Module):
    def __init__(self, dim: int, depth: int, ff_mult: float, dropout: float) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.dim = dim
        self.blocks = nn.Sequential(*[_Residual(dim, ff_mult, dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def mix(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return x

    def forward(self, x, mask=None, attn_mask=None, edge_index=None, return_attention=False):
        if isinstance(x, Tokens):
            x, mask = x.x, x.mask if mask is None else mask
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"input must be [B, L, D={self.dim}], got shape {tuple(x.shape)}")
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)  # padding must not leak into windows
        x = self.norm(self.blocks(self.mix(x, mask)))
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        return (x, []) if return_attention else x


class TokenwiseMLP(_Baseline):
    """No context: a residual MLP applied to each token alone."""

    def __init__(self, dim: int, depth: int = 2, ff_mult: float = 2, dropout: float = 0.1) -> None:
        super().__init__(dim, depth, ff_mult, dropout)


class WindowMLP(_Baseline):
    """Sliding-window fully connected network: token ``i`` sees tokens ``i-w … i+w``."""

    def __init__(self, dim: int, window: int = 2, depth: int = 2, ff_mult: float = 2, dropout: float = 0.1) -> None:
        super().__init__(dim, depth, ff_mult, dropout)
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self.window = window
        self.proj = nn.Linear(dim * (2 * window + 1), dim)

    def mix(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        w = self.window
        padded = F.pad(x, (0, 0, w, w))  # [B, L + 2w, D], zeros outside the sequence
        windows = padded.unfold(1, 2 * w + 1, 1)  # [B, L, D, 2w+1]
        return self.proj(windows.transpose(-1, -2).flatten(2))  # [B, L, (2w+1)·D] -> [B, L, D]


class BiLSTM(nn.Module):
    """Recurrent baseline: a bidirectional LSTM stack (each token sees the whole sequence through
    the recurrent state), with the encoder's interface. ``[B, L, D] -> [B, L, D]``.

    Padding never enters the recurrence (``pack_padded_sequence``), so a padded batch gives each
    sequence the same output as running it alone. Each direction has ``dim // 2`` units unless
    ``hidden`` is given; a Linear maps the concatenated directions back to ``dim``.
    """

    def __init__(self, dim: int, depth: int = 2, hidden: int | None = None, dropout: float = 0.1) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        hidden = hidden or max(dim // 2, 1)
        if hidden < 1:
            raise ValueError(f"hidden must be >= 1, got {hidden}")
        self.dim, self.hidden = dim, hidden
        self.lstm = nn.LSTM(dim, hidden, num_layers=depth, batch_first=True, bidirectional=True,
                            dropout=dropout if depth > 1 else 0.0)
        self.proj = nn.Linear(2 * hidden, dim)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, mask=None, attn_mask=None, edge_index=None, return_attention=False):
        if isinstance(x, Tokens):
            x, mask = x.x, x.mask if mask is None else mask
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"input must be [B, L, D={self.dim}], got shape {tuple(x.shape)}")
        b, length, _ = x.shape
        lengths = mask.sum(1) if mask is not None else torch.full((b,), length, device=x.device)  # [B]
        out = x.new_zeros(b, length, 2 * self.hidden)  # [B, L, 2H]
        real = lengths > 0  # an empty sequence has no recurrence: its output stays zero
        if real.any():
            # padding is at the end of each sequence (mask = lengths_to_mask)
            packed = nn.utils.rnn.pack_padded_sequence(x[real], lengths[real].cpu(), batch_first=True,
                                                       enforce_sorted=False)
            seq, _ = self.lstm(packed)
            seq, _ = nn.utils.rnn.pad_packed_sequence(seq, batch_first=True, total_length=length)  # [B', L, 2H]
            out[real] = seq
        x = self.norm(self.proj(self.drop(out)))  # [B, L, D]
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        return (x, []) if return_attention else x
