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
