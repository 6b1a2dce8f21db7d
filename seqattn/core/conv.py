"""Convolutions over a sequence kept as ``[N, L, C]`` (positions, then channels), as the encoder holds it.

``nn.Conv1d`` wants ``[N, C, L]``; given the transposed view of an ``[N, L, C]`` tensor, oneDNN copies it to a
contiguous one forward and backward and runs its generic path. Viewed as ``[N, C, 1, L]`` the same memory is a
contiguous channels-last 2-d image, which oneDNN convolves where it lies. ``python -m seqattn.bench conv`` times
both side by side (forward + backward, the layers of the recipes); values and gradients are bit-identical on CPU
(but see the depthwise backward below).

:data:`CHANNELS_LAST` False makes :func:`conv1d_positions` take ``nn.Conv1d``'s path (the bench's other side).

A depthwise convolution (``groups == C_in == C_out``, the encoder's convolution module) is cheap forward but not
backward on CPU: at speech_ctc's shape (kernel 15, 32 × 27 × 96, one thread) oneDNN's forward took 0.08 ms and its
forward + backward 1.8 ms. :class:`_DepthwiseConv` keeps the forward and computes the
backward itself: the input's gradient as the forward convolution of the output's gradient with the kernel flipped,
the weight's as ``K`` products summed over batch and positions. Equal to oneDNN's to float32 rounding (the sums run
in another order), not bit-identical; kernels under :data:`DEPTHWISE_MIN_KERNEL` keep oneDNN's backward, which was
faster there. :data:`DEPTHWISE_GRAD` False turns it off (``python -m seqattn.bench conv`` times both).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: the channels-last 2-d route on (the bench turns it off to time ``nn.Conv1d``'s)
CHANNELS_LAST = True
#: seqattn's backward for depthwise convolutions on CPU (module docstring; the bench turns it off to time oneDNN's)
DEPTHWISE_GRAD = True
#: the smallest kernel it serves: at kernel 3 (64 × 22 × 64, text_tagging's) oneDNN's whole forward + backward took
#: 0.32 ms against 0.41-0.46 ms, at kernel 7 1.2 ms against 0.69 ms (1 thread, 2026-12-07)
DEPTHWISE_MIN_KERNEL = 5


def _conv_positions(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: int, padding: int,
                    dilation: int, groups: int) -> torch.Tensor:
    """``x [N, L, C_in]`` convolved with ``weight [C_out, C_in / groups, K]`` as a 2-d convolution of the
    channels-last view ``[N, C_in, 1, L]`` -> ``[N, L', C_out]``."""
    out = F.conv2d(x.transpose(1, 2).unsqueeze(2), weight.unsqueeze(2), bias, stride=(1, stride),
                   padding=(0, padding), dilation=(1, dilation), groups=groups)  # [N, C_out, 1, L']
    return out.squeeze(2).transpose(1, 2)


class _DepthwiseConv(torch.autograd.Function):
    """A stride-1 depthwise convolution of ``x [N, L, C]`` with ``weight [C, 1, K]`` (+ ``bias [C]``) ->
    ``[N, L + 2 padding - dilation (K - 1), C]``, with the backward of the module docstring. Needs
    ``padding <= dilation (K - 1)`` (the input gradient's convolution pads by the difference)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x, weight, bias, padding: int, dilation: int):
        ctx.save_for_backward(x, weight)
        ctx.padding, ctx.dilation, ctx.has_bias = padding, dilation, bias is not None
        return _conv_positions(x, weight, bias, 1, padding, dilation, x.shape[-1])

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):  # grad [N, L', C]
        x, weight = ctx.saved_tensors
        p, d = ctx.padding, ctx.dilation
        size, span = weight.shape[-1], grad.shape[1]
        grad_x = grad_w = grad_b = None
        # the sums in float32 at least (bf16 autocast: the output's gradient is bf16), as oneDNN's backward does
        g = grad.float() if grad.dtype in (torch.bfloat16, torch.float16) else grad
        if ctx.needs_input_grad[0]:  # the transposed convolution: the kernel flipped, padded by d (K - 1) - p
            grad_x = _conv_positions(grad, weight.flip(-1), None, 1, d * (size - 1) - p, d, x.shape[-1])
        if ctx.needs_input_grad[1]:  # dW[c, 0, k] = sum over n, l of grad[n, l, c] · x_padded[n, l + d k, c]
            padded = F.pad(x, (0, 0, p, p)).to(g.dtype)
            grad_w = torch.stack([(g * padded[:, k * d:k * d + span]).sum((0, 1)) for k in range(size)], 1)
            grad_w = grad_w.unsqueeze(1)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g.sum((0, 1))
        return grad_x, grad_w, grad_b, None, None


def _depthwise_backward_serves(conv: nn.Conv1d, x: torch.Tensor) -> bool:
    """Whether :class:`_DepthwiseConv` computes ``conv`` on ``x`` (module docstring)."""
    k, p, d = conv.kernel_size[0], conv.padding[0], conv.dilation[0]
    return (DEPTHWISE_GRAD and x.device.type == "cpu" and conv.groups == conv.in_channels == conv.out_channels
            and conv.stride[0] == 1 and k >= DEPTHWISE_MIN_KERNEL and p <= d * (k - 1)
            and torch.is_grad_enabled() and (x.requires_grad or conv.weight.requires_grad))


def conv1d_positions(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x.transpose(1, 2)).transpose(1, 2)``: ``x [N, L, C_in] -> [N, L', C_out]`` with ``conv``'s own
    weights, stride, padding, dilation and groups, computed as a 2-d convolution of the channels-last view
    ``[N, C_in, 1, L]`` (module docstring). A ``conv`` with a string padding or a padding mode other than
    zeros takes ``nn.Conv1d``'s own path."""
    if x.dim() != 3 or x.shape[-1] != conv.in_channels:
        raise ValueError(f"x must be [N, L, C_in={conv.in_channels}], got {tuple(x.shape)}")
    if not CHANNELS_LAST or isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        return conv(x.transpose(1, 2)).transpose(1, 2)
    if _depthwise_backward_serves(conv, x):
        return _DepthwiseConv.apply(x, conv.weight, conv.bias, conv.padding[0], conv.dilation[0])
    return _conv_positions(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0], conv.dilation[0], conv.groups)
