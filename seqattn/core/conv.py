"""Convolutions over a sequence kept as ``[N, L, C]`` (positions, then channels), as the encoder holds it.

``nn.Conv1d`` wants ``[N, C, L]``; given the transposed view of an ``[N, L, C]`` tensor, oneDNN copies it to a
contiguous one forward and backward and runs its generic path. Viewed as ``[N, C, 1, L]`` the same memory is a
contiguous channels-last 2-d image, which oneDNN convolves where it lies. ``python -m seqattn.bench conv`` times
both side by side (forward + backward, the layers of the recipes); values and gradients are bit-identical on CPU.

:data:`CHANNELS_LAST` False makes :func:`conv1d_positions` take ``nn.Conv1d``'s path (the bench's other side).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: the channels-last 2-d route on (the bench turns it off to time ``nn.Conv1d``'s)
CHANNELS_LAST = True


def conv1d_positions(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x.transpose(1, 2)).transpose(1, 2)``: ``x [N, L, C_in] -> [N, L', C_out]`` with ``conv``'s own
    weights, stride, padding, dilation and groups, computed as a 2-d convolution of the channels-last view
    ``[N, C_in, 1, L]`` (module docstring). A ``conv`` with a string padding or a padding mode other than
    zeros takes ``nn.Conv1d``'s own path."""
    if x.dim() != 3 or x.shape[-1] != conv.in_channels:
        raise ValueError(f"x must be [N, L, C_in={conv.in_channels}], got {tuple(x.shape)}")
    if not CHANNELS_LAST or isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        return conv(x.transpose(1, 2)).transpose(1, 2)
    out = F.conv2d(x.transpose(1, 2).unsqueeze(2), conv.weight.unsqueeze(2), conv.bias,
                   stride=(1, conv.stride[0]), padding=(0, conv.padding[0]), dilation=(1, conv.dilation[0]),
                   groups=conv.groups)  # [N, C_out, 1, L']
    return out.squeeze(2).transpose(1, 2)
