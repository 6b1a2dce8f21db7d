"""Heads: padding never reaches a pooled prediction."""

import pytest
import torch

from seqattn.model.heads import PooledHead, TokenHead


@pytest.mark.parametrize("pooling", ["mean", "max", "attention"])
def test_pooled_head_ignores_padding(pooling):
    head = PooledHead(8, 3, pooling=pooling).eval()
    x = torch.randn(2, 6, 8)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    out = head(x, mask)
    assert out.shape == (2, 3)
    torch.testing.assert_close(out[1], head(x[1:, :3])[0])
    x_noisy = x.clone()
    x_noisy[1, 3:] = 1e6  # garbage in the padding changes nothing
    torch.testing.assert_close(head(x_noisy, mask), out)


def test_mean_pool_is_the_mean_of_real_tokens():
    head = PooledHead(4, 2, pooling="mean")
    x = torch.arange(12.0).view(1, 3, 4)
    mask = torch.tensor([[True, True, False]])
    torch.testing.assert_close(head.pool(x, mask), x[:, :2].mean(1))


def test_token_head_shape_and_errors():
    assert TokenHead(8, 5)(torch.randn(2, 7, 8)).shape == (2, 7, 5)
    with pytest.raises(ValueError, match="num_outputs must be a positive int"):
        TokenHead(8, 0)
    with pytest.raises(ValueError, match="unknown pooling 'cls2'"):
        PooledHead(8, 2, pooling="cls2")
