"""Baselines have the encoder's interface and exactly the context they claim."""

import pytest
import torch

from seqattn.model.baselines import TokenwiseMLP, WindowMLP
from seqattn.core import Tokens


def _changed_positions(model, position, length=10):
    model.eval()
    x = torch.randn(1, length, 8)
    y = x.clone()
    y[0, position] = torch.randn(8)
    return ((model(x) - model(y)).abs().sum(-1)[0] > 1e-6).nonzero().flatten().tolist()


def test_tokenwise_mlp_has_no_context():
    assert _changed_positions(TokenwiseMLP(8, depth=2), 4) == [4]


def test_window_mlp_sees_exactly_its_window():
    assert _changed_positions(WindowMLP(8, window=2), 4) == [2, 3, 4, 5, 6]


@pytest.mark.parametrize("cls", [TokenwiseMLP, WindowMLP])
def test_padded_batch_equals_alone_and_padding_is_zero(cls):
    model = cls(8).eval()
    x = torch.randn(2, 7, 8)
    mask = torch.tensor([[1] * 7, [1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    out, attention = model(Tokens(x, mask), return_attention=True)
    assert attention == []
    torch.testing.assert_close(out[1, :3], model(x[1:, :3])[0], atol=1e-6, rtol=1e-6)
    assert torch.equal(out[1, 3:], torch.zeros(4, 8))


def test_bilstm_sees_the_whole_sequence_in_both_directions():
    from seqattn.model.baselines import BiLSTM

    assert _changed_positions(BiLSTM(8, depth=1), 4) == list(range(10))


def test_bilstm_padded_batch_equals_alone_and_padding_is_zero():
    from seqattn.model.baselines import BiLSTM

    model = BiLSTM(8, depth=2).eval()
    x = torch.randn(3, 7, 8)
    mask = torch.tensor([[1] * 7, [1, 1, 1, 0, 0, 0, 0], [0] * 7], dtype=torch.bool)
    x[1, 3:] = 100.0  # padding content must not matter
    out, attention = model(Tokens(x, mask), return_attention=True)
    assert attention == [] and out.shape == (3, 7, 8)
    torch.testing.assert_close(out[1, :3], model(x[1:2, :3])[0], atol=1e-6, rtol=1e-6)
    assert torch.equal(out[1, 3:], torch.zeros(4, 8)) and torch.equal(out[2], torch.zeros(7, 8))
    with pytest.raises(ValueError, match="D=8"):
        model(torch.randn(1, 3, 5))
