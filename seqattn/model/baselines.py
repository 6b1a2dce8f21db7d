"""Context-free and fixed-context baselines with the encoder's interface.

They replace :class:`seqattn.core.Encoder` by config (``model=no_context`` / ``model=cnn`` /
``model=window_mlp`` / ``model=bilstm``) so a recipe can show what attention adds:

- :class:`TokenwiseMLP` sees one token at a time (no context at all);
- :class:`WindowMLP` is the seed's sliding-window fully connected network: each
  token sees the concatenation of its ±``window`` neighbours (a fixed receptive field);
- :class:`ConvEncoder` is a small CNN over an image adapter's 2-D token grid;
- :class:`BiLSTM` is a bidirectional LSTM (``model=bilstm``): unbounded context, no attention.

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


class ConvEncoder(nn.Module):
    """CNN baseline for images with the encoder's interface: ``Tokens -> [B, L, D]``.

    The tokens of an image adapter (row-major over ``tokens.grid = (h, w)``) are put back
    on their grid and run through ``depth`` residual blocks ``x + Dropout(Conv1x1(GELU(Conv k×k(LN(x)))))``:
    a fixed ``k×k`` receptive field per layer, where attention learns its own. Padded pixels
    (``mask`` False) are zeroed before every convolution, exactly like the convolution's own zero
    padding at the border, so an image in a padded batch gets the same output as alone.

    Args:
        dim: width D (channels of every convolution).
        depth: residual conv blocks.
        kernel_size: odd k of the k×k convolutions.
        dropout: on each block's residual branch.
    """

    def __init__(self, dim: int, depth: int = 3, kernel_size: int = 3, dropout: float = 0.1) -> None:
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and >= 1, got {kernel_size}")
        self.dim = dim
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.convs = nn.ModuleList(
            nn.Sequential(nn.Conv2d(dim, dim, kernel_size, padding=kernel_size // 2), nn.GELU(),
                          nn.Conv2d(dim, dim, 1), nn.Dropout(dropout))
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, mask=None, attn_mask=None, edge_index=None, return_attention=False):
        """``x``: a :class:`Tokens` with ``grid = (h, w)`` and ``x [B, h·w, D]`` -> ``[B, h·w, D]``."""
        if not isinstance(x, Tokens) or x.grid is None:
            raise ValueError("ConvEncoder needs Tokens on a 2-D grid (Tokens.grid = (h, w)), as an image adapter "
                             "makes them")
        if x.num_global:
            raise ValueError("ConvEncoder has no global token; use head.pooling=mean|max|attention, not cls")
        tokens = x
        x, mask = tokens.x, tokens.mask if mask is None else mask
        b, length, dim = x.shape
        h, w = tokens.grid
        if dim != self.dim or length != h * w:
            raise ValueError(f"input must be [B, h·w={h * w}, D={self.dim}], got shape {tuple(x.shape)}")
        keep = None if mask is None else mask.view(b, 1, h, w).to(x.dtype)  # [B, 1, h, w]
        for norm, conv in zip(self.norms, self.convs):
            y = norm(x).transpose(1, 2).reshape(b, dim, h, w)  # [B, L, D] -> [B, D, h, w]
            if keep is not None:
                y = y * keep  # padding never enters a receptive field
            x = x + conv(y).flatten(2).transpose(1, 2)  # [B, D, h, w] -> [B, L, D]
        x = self.norm(x)
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        return (x, []) if return_attention else x


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
