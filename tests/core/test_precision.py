"""Dtypes: positional tables in the model's precision, float masks under bf16, the sinusoidal formula itself."""

import math

import pytest
import torch

from seqattn.core import Encoder, MultiHeadAttention, RotaryEmbedding, SinusoidalPositional, sinusoidal_table
from seqattn.core.kernels import math_attention, sdpa_attention


def test_sinusoidal_table_is_the_transformer_formula():
    """PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D)) -- computed independently."""
    length, dim = 50, 16
    table = sinusoidal_table(length, dim, dtype=torch.float64)
    for p in (0, 1, 7, 49):
        for i in range(dim // 2):
            angle = p / 10000 ** (2 * i / dim)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


def test_positional_tables_follow_a_float64_model():
    """A float64 model gets float64-accurate positions (a float32 table is off by ~1e-5 at position 4000)."""
    length, dim = 4000, 32
    exact = torch.tensor([[math.sin(p / 10000 ** (2 * i / dim)) if j % 2 == 0 else math.cos(p / 10000 ** (2 * i / dim))
                           for j, i in ((j, j // 2) for j in range(dim))] for p in range(length - 3, length)],
                         dtype=torch.float64)
    x = torch.zeros(1, length, dim, dtype=torch.float64)
    out = SinusoidalPositional(dim)(x)[0, -3:]
    assert out.dtype == torch.float64
    assert (out - exact).abs().max() < 1e-10
    assert (sinusoidal_table(length, dim)[-3:].double() - exact).abs().max() > 1e-7  # float32 would not do
    rope = RotaryEmbedding(8)
    q = torch.ones(1, 1, length, 8, dtype=torch.float64)
    rq, _ = rope(q, q)
    angle = (length - 1) * 1.0  # first frequency: 10000^0 = 1
    assert rq[0, 0, -1, 0].item() == pytest.approx(math.cos(angle) - math.sin(angle), abs=1e-10)
    enc = Encoder(16, depth=1, heads=2, positional="sinusoidal").double()
    assert enc(torch.randn(2, 5, 16, dtype=torch.float64)).dtype == torch.float64


def test_math_kernel_takes_a_float_bias_under_bf16():
    """need_weights=True runs the math kernel; a float32 bias with bf16 activations must work as with sdpa."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4).bfloat16() for _ in range(3))
    bias = torch.randn(2, 1, 5, 5)  # float32, as a graph edge bias is
    out, weights = math_attention(q, k, v, bias)
    assert out.dtype == torch.bfloat16 and weights.shape == (2, 2, 5, 5)
    torch.testing.assert_close(out.float(), sdpa_attention(q, k, v, bias).float(), atol=3e-2, rtol=3e-2)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, w = mha(x, attn_mask=torch.zeros(2, 5, 5), need_weights=True)
    assert y.dtype == torch.bfloat16 and torch.isfinite(w.float()).all()
