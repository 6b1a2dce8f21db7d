"""Heads: padding never reaches a pooled prediction."""

import pytest
import torch

from seqattn.model.heads import PooledHead, TokenHead


@pytest.mark.parametrize("pooling", ["mean", "max", "attention", "sum", "mha", "gru"])
def test_pooled_head_ignores_padding(pooling):
    torch.manual_seed(0)
    head = PooledHead(8, 3, pooling=pooling, pool_heads=2, pool_queries=2).eval()
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


@pytest.mark.parametrize("pooling", ["mha", "gru"])
def test_readouts_are_invariant_to_token_order(pooling):
    """A permutation of the real tokens (and where the padding sits) leaves the pooled prediction unchanged."""
    torch.manual_seed(0)
    head = PooledHead(8, 2, pooling=pooling, pool_heads=4, pool_queries=3, pool_steps=3).eval()
    x = torch.randn(3, 7, 8)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1, 0, 1, 0, 1, 1, 0]], dtype=torch.bool)
    out = head(x, mask)
    perm = torch.randperm(7)
    torch.testing.assert_close(head(x[:, perm], mask[:, perm]), out)
    assert head.pool(x, mask).shape == ((3, 24) if pooling == "mha" else (3, 8))


@pytest.mark.parametrize("pooling", ["mha", "gru"])
def test_readouts_learn_from_every_real_token_only(pooling):
    """Gradients reach every real token's vector and no padded one."""
    torch.manual_seed(0)
    head = PooledHead(8, 1, pooling=pooling)
    x = torch.randn(2, 5, 8, requires_grad=True)
    mask = torch.tensor([[1] * 5, [1, 1, 0, 0, 0]], dtype=torch.bool)
    head(x, mask).sum().backward()
    norms = x.grad.norm(dim=-1)
    assert bool((norms[mask] > 0).all()) and bool((norms[~mask] == 0).all())


def test_mha_readout_of_an_empty_sequence_is_finite():
    head = PooledHead(8, 2, pooling="mha")
    out = head(torch.randn(2, 3, 8), torch.tensor([[True, True, False], [False, False, False]]))
    assert torch.isfinite(out).all()


def test_readout_options_are_checked():
    with pytest.raises(ValueError, match="pool_heads must be a positive divisor of the width 8, got 3"):
        PooledHead(8, 2, pooling="mha", pool_heads=3)
    with pytest.raises(ValueError, match="pool_queries must be a positive int, got 0"):
        PooledHead(8, 2, pooling="mha", pool_queries=0)
    with pytest.raises(ValueError, match="pool_steps must be a positive int"):
        PooledHead(8, 2, pooling="gru", pool_steps=0)
