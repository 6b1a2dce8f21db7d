"""conv1d_positions: nn.Conv1d's result on [N, L, C] tokens, by the channels-last 2-d route."""

import pytest
import torch
from torch import nn

from seqattn.core import conv as conv_module
from seqattn.core.conv import conv1d_positions


@pytest.mark.parametrize("kwargs", [
    {"in_channels": 8, "out_channels": 8, "kernel_size": 3, "padding": 1, "groups": 8},  # the encoder's depthwise
    {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "padding": 1},  # the character CNN
    {"in_channels": 6, "out_channels": 4, "kernel_size": 5, "stride": 2, "padding": 3, "dilation": 2, "groups": 2},
    {"in_channels": 5, "out_channels": 5, "kernel_size": 1, "bias": False},
])
def test_values_and_gradients_equal_nn_conv1d(kwargs):
    torch.manual_seed(0)
    conv = nn.Conv1d(**kwargs)
    x = torch.randn(3, 11, kwargs["in_channels"], requires_grad=True)
    ref = conv(x.transpose(1, 2)).transpose(1, 2)
    weight = torch.randn(ref.shape)
    (ref * weight).sum().backward()
    ref_grads = [x.grad.clone()] + [p.grad.clone() for p in conv.parameters()]
    x.grad = None
    conv.zero_grad()
    out = conv1d_positions(conv, x)
    (out * weight).sum().backward()
    torch.testing.assert_close(out, ref)
    for got, want in zip([x.grad] + [p.grad for p in conv.parameters()], ref_grads):
        torch.testing.assert_close(got, want)


def test_string_padding_and_other_padding_modes_take_conv1d_s_own_path(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 4)
    for conv in (nn.Conv1d(4, 4, 3, padding="same"), nn.Conv1d(4, 4, 3, padding=1, padding_mode="circular")):
        torch.testing.assert_close(conv1d_positions(conv, x), conv(x.transpose(1, 2)).transpose(1, 2))
    monkeypatch.setattr(conv_module, "CHANNELS_LAST", False)  # the bench's other side: nn.Conv1d itself
    conv = nn.Conv1d(4, 4, 3, padding=1)
    torch.testing.assert_close(conv1d_positions(conv, x), conv(x.transpose(1, 2)).transpose(1, 2))


def test_a_wrong_layout_is_named():
    conv = nn.Conv1d(4, 6, 3, padding=1)
    with pytest.raises(ValueError, match=r"x must be \[N, L, C_in=4\], got \(2, 4, 7\)"):
        conv1d_positions(conv, torch.randn(2, 4, 7))  # [N, C, L], as nn.Conv1d takes it
    with pytest.raises(ValueError, match=r"x must be \[N, L, C_in=4\], got \(7, 4\)"):
        conv1d_positions(conv, torch.randn(7, 4))


def _served(out):
    """Whether seqattn's depthwise backward computes ``out``'s gradient."""
    return type(out.grad_fn).__name__ == "_DepthwiseConvBackward"


def _depthwise(kernel, padding, dilation=1, bias=True, channels=6):
    torch.manual_seed(0)
    return nn.Conv1d(channels, channels, kernel, padding=padding, dilation=dilation, groups=channels, bias=bias)


@pytest.mark.parametrize("kernel,padding,dilation,bias", [
    (7, 3, 1, True),     # the centred window of the encoder's convolution module
    (15, 7, 1, False),   # speech_ctc's width, no bias
    (5, 0, 1, True),     # no padding: a shorter output
    (5, 8, 2, True),     # dilated, padded by the whole reach d (K - 1)
])
def test_depthwise_backward_equals_onednn_s(kernel, padding, dilation, bias):
    conv = _depthwise(kernel, padding, dilation, bias)
    x = torch.randn(3, 13, 6, requires_grad=True)
    out = conv1d_positions(conv, x)
    assert _served(out)
    ref = conv(x.transpose(1, 2)).transpose(1, 2)
    weight = torch.randn(ref.shape)
    want = torch.autograd.grad((ref * weight).sum(), [x, *conv.parameters()])
    got = torch.autograd.grad((out * weight).sum(), [x, *conv.parameters()])
    torch.testing.assert_close(out, ref)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_depthwise_backward_passes_gradcheck_twice():
    """First and second derivatives against finite differences, in float64 (dilation 2, uneven padding)."""
    conv = _depthwise(5, 3, 2).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64, requires_grad=True)

    def fn(x, weight, bias):
        return conv_module._DepthwiseConv.apply(x, weight, bias, 3, 2)
    inputs = (x, conv.weight, conv.bias)
    assert torch.autograd.gradcheck(fn, inputs)
    assert torch.autograd.gradgradcheck(fn, inputs)


def test_depthwise_backward_under_bf16_autocast_keeps_float32_gradients():
    """Under bf16 autocast the output and its gradient are bf16; the weight's gradient is still summed in float32
    (to 1e-5 of the float64 sum of the bf16 gradient times x), the input's is oneDNN's to bf16 rounding."""
    conv = _depthwise(7, 3, channels=16)
    x = torch.randn(4, 20, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv1d_positions(conv, x)
        ref = conv(x.transpose(1, 2)).transpose(1, 2)
    assert _served(out) and out.dtype == ref.dtype == torch.bfloat16
    grad_out = torch.randn(out.shape).to(torch.bfloat16)
    got = torch.autograd.grad(out, [x, conv.weight, conv.bias], grad_out)
    want = torch.autograd.grad(ref, [x, conv.weight, conv.bias], grad_out)
    assert all(g.dtype == torch.float32 for g in got)
    padded = torch.nn.functional.pad(x.detach().double(), (0, 0, 3, 3))
    exact_w = torch.stack([(grad_out.double() * padded[:, k:k + 20]).sum((0, 1)) for k in range(7)], 1)
    torch.testing.assert_close(got[1], exact_w.unsqueeze(1).float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[2], grad_out.double().sum((0, 1)).float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[0], want[0], rtol=2e-2, atol=2e-2 * float(want[0].abs().max()))


def test_small_kernels_strides_and_the_switch_keep_onednn_s_backward(monkeypatch):
    x = torch.randn(2, 11, 6, requires_grad=True)
    for conv in (_depthwise(3, 1), nn.Conv1d(6, 6, 7, padding=3, stride=2, groups=6), nn.Conv1d(6, 6, 7, padding=3)):
        assert not _served(conv1d_positions(conv, x))
    with torch.no_grad():  # nothing to differentiate: the plain forward
        assert conv1d_positions(_depthwise(7, 3), x).grad_fn is None
    monkeypatch.setattr(conv_module, "DEPTHWISE_GRAD", False)
    assert not _served(conv1d_positions(_depthwise(7, 3), x))
