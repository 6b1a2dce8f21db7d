"""Context-free and fixed-context baselines with the encoder's interface.

They replace :class:`seqattn.core.Encoder` by config (``model=no_context`` / ``model=cnn`` /
``model=window_mlp`` / ``model=bilstm``) so a recipe can show what attention adds:

- :class:`TokenwiseMLP` sees one token at a time (no context at all);
- :class:`WindowMLP` is the seed's sliding-window fully connected network: each
  token sees the concatenation of its ±``window`` neighbours (a fixed receptive field);
- :class:`ConvEncoder` is a small CNN over an image adapter's 2-D token grid;
- :class:`BiLSTM` is a bidirectional LSTM (``model=bilstm``): unbounded context, no attention;
- :class:`SpectrogramCNN` is a log-mel CNN (``model=logmel_cnn``): 2-D convolutions over an audio
  adapter's ``[frames x mel bins]`` features, a fixed (dilated) receptive field in time.

``forward(x [B, L, D] | Tokens, mask [B, L] | None, ..., return_attention) -> [B, L, D]``
(``(out, [])`` when attention is asked for: they have none).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.core.dropout import Dropout
from seqattn.core.tokens import Tokens


class _Residual(nn.Module):
    def __init__(self, dim: int, ff_mult: float, dropout: float) -> None:
        super().__init__()
        hidden = int(dim * ff_mult)
        self.block = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), Dropout(dropout),
                                   nn.Linear(hidden, dim), Dropout(dropout))

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
                          nn.Conv2d(dim, dim, 1), Dropout(dropout))
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
        self.drop = Dropout(dropout)
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


class SpectrogramCNN(nn.Module):
    """Log-mel CNN baseline for audio with the encoder's interface: ``Tokens -> [B, F, D]``.

    Reads the frame features an audio adapter keeps in ``tokens.extra["features"]`` (``[B, F, C]``,
    e.g. 40 log-mel bins; ``tokens.x`` when there are none) as a one-channel image ``[F x C]`` and runs
    ``len(channels)`` blocks ``Conv k×k (dilated in time) -> LayerNorm over channels -> GELU -> max-pool
    2 over frequency``; the time resolution is kept (one output per frame, the adapter's mask holds).
    With dilations 1, 2, 4, 8, 16 a frame sees ±31 frames (±310 ms at a 10 ms hop): a fixed receptive
    field where attention learns its own. The frequency axis is then averaged to ``freq_out`` bins, the
    ``channels[-1]·freq_out`` values of each frame are projected to ``dim`` and added to the adapter's
    frame vector ``tokens.x`` (a residual), then layer-normed.

    Padded frames (``mask`` False) are zeroed before every convolution, exactly like the convolution's
    own zero padding at the ends, so a clip in a padded batch gets the same output as alone.

    Args:
        dim: width D of the output (the adapter's width).
        channels: output channels of each block.
        dilations: time dilation of each block (same length as ``channels``).
        kernel_size: odd k of the k×k convolutions.
        freq_out: frequency bins left after the final average.
        dropout: before the projection.
    """

    def __init__(self, dim: int, channels: tuple[int, ...] | list[int] = (16, 32, 64, 64, 64),
                 dilations: tuple[int, ...] | list[int] = (1, 2, 4, 8, 16), kernel_size: int = 3, freq_out: int = 4,
                 dropout: float = 0.1) -> None:
        super().__init__()
        channels, dilations = [int(c) for c in channels], [int(d) for d in dilations]
        if not channels or len(channels) != len(dilations):
            raise ValueError(f"channels {channels} and dilations {dilations} must be non-empty and of equal length")
        if any(c < 1 for c in channels) or any(d < 1 for d in dilations):
            raise ValueError(f"channels {channels} and dilations {dilations} must be >= 1")
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and >= 1, got {kernel_size}")
        if freq_out < 1:
            raise ValueError(f"freq_out must be >= 1, got {freq_out}")
        self.dim = dim
        k = kernel_size
        ins = [1] + channels[:-1]
        self.convs = nn.ModuleList(nn.Conv2d(i, o, k, padding=(d * (k // 2), k // 2), dilation=(d, 1))
                                   for i, o, d in zip(ins, channels, dilations))
        self.norms = nn.ModuleList(nn.LayerNorm(o) for o in channels)
        self.pool = nn.AdaptiveAvgPool2d((None, freq_out))
        self.drop = Dropout(dropout)
        self.proj = nn.Linear(channels[-1] * freq_out, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, mask=None, attn_mask=None, edge_index=None, return_attention=False):
        """``x``: :class:`Tokens` (``x [B, F, D]``, ``extra["features"] [B, F, C]``) -> ``[B, F, D]``."""
        if not isinstance(x, Tokens):
            raise ValueError("SpectrogramCNN needs the adapter's Tokens (with extra['features']), got a tensor")
        if x.num_global:
            raise ValueError("SpectrogramCNN has no global token; use head.pooling=mean|max|attention, not cls")
        tokens = x
        x, mask = tokens.x, tokens.mask if mask is None else mask
        feats = (tokens.extra or {}).get("features", x)  # [B, F, C]
        b, frames, dim = x.shape
        if dim != self.dim or feats.shape[:2] != x.shape[:2]:
            raise ValueError(f"input must be [B, F, D={self.dim}] with features [B, F, C], got {tuple(x.shape)} and "
                             f"{tuple(feats.shape)}")
        keep = None if mask is None else mask[:, None, :, None].to(feats.dtype)  # [B, 1, F, 1]
        y = feats.to(x.dtype).unsqueeze(1)  # [B, 1, F, C]
        for conv, norm in zip(self.convs, self.norms):
            if keep is not None:
                y = y * keep  # padding never enters a receptive field
            y = conv(y)  # [B, ch, F, C']
            y = F.gelu(norm(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))  # LayerNorm over channels
            if y.shape[-1] > 1:
                y = F.max_pool2d(y, (1, 2), ceil_mode=True)  # [B, ch, F, ceil(C'/2)]
        if keep is not None:
            y = y * keep
        y = self.pool(y)  # [B, ch, F, freq_out]
        y = y.permute(0, 2, 1, 3).reshape(b, frames, -1)  # [B, F, ch·freq_out]
        out = self.norm(x + self.proj(self.drop(y)))  # [B, F, D]
        if mask is not None:
            out = out.masked_fill(~mask.unsqueeze(-1), 0.0)
        return (out, []) if return_attention else out
