"""Time subsampling: F frames -> ceil(F / k) tokens, the mask follows, padding never leaks in."""

from __future__ import annotations

import pytest
import torch

from seqattn.core.masks import lengths_to_mask
from seqattn.core.tokens import Tokens
from seqattn.model.build import build_network
from seqattn.model.subsample import TimeSubsampling


@pytest.mark.parametrize("mode", ["stack", "conv"])
@pytest.mark.parametrize("factor", [2, 3, 4])
def test_lengths_follow_and_a_padded_batch_equals_each_item_alone(mode, factor):
    layer = TimeSubsampling(6, factor, mode).eval()
    lengths = torch.tensor([11, 7, 1, 8])
    x = torch.randn(4, 11, 6)
    x[lengths_to_mask(lengths, 11).logical_not()] = 100.0  # garbage in the padding
    out = layer(Tokens(x=x, mask=lengths_to_mask(lengths, 11)))
    want = (lengths + factor - 1) // factor
    assert out.x.shape == (4, (11 + factor - 1) // factor, 6)
    assert out.mask.sum(1).tolist() == want.tolist() == layer.output_lengths(lengths).tolist()
    for i, n in enumerate(lengths.tolist()):
        alone = layer(Tokens(x=x[i : i + 1, :n], mask=torch.ones(1, n, dtype=torch.bool)))
        torch.testing.assert_close(out.x[i, : want[i]], alone.x[0], rtol=1e-5, atol=1e-6)
        assert float(out.x[i, want[i]:].abs().sum()) == 0.0  # padded outputs are zero


def test_stack_concatenates_neighbouring_frames_then_projects():
    layer = TimeSubsampling(2, 3, "stack")
    x = torch.arange(14.0).view(1, 7, 2)
    out = layer(Tokens(x=x))
    groups = torch.cat([x, torch.zeros(1, 2, 2)], 1).view(1, 3, 6)  # frames 0-2, 3-5, 6 + two zero frames
    torch.testing.assert_close(out.x, layer.proj(groups))
    assert out.mask.tolist() == [[True, True, True]]


@pytest.mark.parametrize("factor", [2, 3])
def test_conv_is_the_strided_convolution_of_the_docstring(factor):
    """conv: kernel 2k-1, stride k, zero padding k-1 over the frames (values and gradients of nn.Conv1d's)."""
    torch.manual_seed(0)
    layer = TimeSubsampling(6, factor, "conv")
    x = torch.randn(2, 10, 6, requires_grad=True)
    out = layer(Tokens(x=x)).x
    g = -(-10 // factor)
    want = torch.nn.functional.conv1d(x.transpose(1, 2), layer.proj.weight, layer.proj.bias, stride=factor,
                                      padding=factor - 1)[..., :g].transpose(1, 2)
    torch.testing.assert_close(out, want)
    grad = torch.randn(want.shape)
    got = torch.autograd.grad(out, [x, layer.proj.weight], grad)
    for a, b in zip(got, torch.autograd.grad(want, [x, layer.proj.weight], grad)):
        torch.testing.assert_close(a, b)


def test_factor_one_is_the_identity_and_bad_arguments_are_refused():
    tokens = Tokens(x=torch.randn(2, 5, 4))
    assert TimeSubsampling(4, 1)(tokens) is tokens
    with pytest.raises(ValueError, match="factor"):
        TimeSubsampling(4, 0)
    with pytest.raises(ValueError, match="mode"):
        TimeSubsampling(4, 2, "pool")
    with pytest.raises(ValueError, match="plain sequences"):
        TimeSubsampling(4, 2)(Tokens(x=torch.randn(1, 4, 4), grid=(2, 2)))
    with pytest.raises(ValueError, match=r"D=4"):
        TimeSubsampling(4, 2)(Tokens(x=torch.randn(1, 4, 3)))


@pytest.mark.parametrize("mode", ["stack", "conv"])
def test_the_network_subsamples_before_the_encoder(mode):
    cfg = {
        "_target_": "seqattn.model.network.SequenceModel",
        "adapter": {"_target_": "seqattn.modalities.audio.adapter.AudioAdapter", "dim": 16, "n_mels": 8},
        "encoder": {"_target_": "seqattn.core.Encoder", "dim": 16, "depth": 1, "heads": 2},
        "head": {"_target_": "seqattn.model.heads.CTCHead", "dim": 16, "num_labels": 3},
        "subsample": {"_target_": "seqattn.model.subsample.TimeSubsampling", "dim": 16, "factor": 3, "mode": mode},
    }
    net = build_network(cfg).eval()
    lengths = torch.tensor([8000, 5000])
    wave = torch.randn(2, 8000) * (torch.arange(8000)[None] < lengths[:, None])
    out = net({"waveform": wave, "lengths": lengths})
    frames = 1 + (lengths - 400) // 160  # 25 ms windows, 10 ms hop
    assert out["logits"].shape == (2, int((frames.max() + 2) // 3), 4)  # 1 + 3 labels: the blank first
    assert out["mask"].sum(1).tolist() == ((frames + 2) // 3).tolist()
    alone = net({"waveform": wave[1:, :5000], "lengths": lengths[1:]})
    torch.testing.assert_close(out["logits"][1, : alone["logits"].shape[1]], alone["logits"][0], rtol=1e-4, atol=1e-4)
    assert "subsample" not in build_network({**cfg, "subsample": None}).state_dict().__repr__()
