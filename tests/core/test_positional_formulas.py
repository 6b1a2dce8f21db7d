"""Positional formulas written out by hand at positions and channels where the base matters (a wrong
base, exponent or pairing changes these numbers; position 0 and channel 0 are the same for every base)."""

import math

import pytest
import torch

from seqattn.core import RelativePositionBias, RotaryEmbedding


def _rope_by_hand(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE (Su et al. 2021, the half-split pairing): channel ``j < K/2`` and ``j + K/2`` at position
    ``p`` rotated by the angle ``p · base^(-2j/K)``."""
    length, k = x.shape[-2:]
    out = torch.empty_like(x)
    for p in range(length):
        for j in range(k // 2):
            angle = p * base ** (-2 * j / k)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., p, j], x[..., p, j + k // 2]
            out[..., p, j] = a * c - b * s
            out[..., p, j + k // 2] = b * c + a * s
    return out


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_rotary_is_the_rope_formula_at_every_frequency(base):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64)
    rope = RotaryEmbedding(8) if base == 10000.0 else RotaryEmbedding(8, base=base)
    rq, rk = rope(q, k)
    torch.testing.assert_close(rq, _rope_by_hand(q, base), atol=1e-12, rtol=0)
    torch.testing.assert_close(rk, _rope_by_hand(k, base), atol=1e-12, rtol=0)


def test_rotary_scores_depend_only_on_the_offset():
    """<R(p) q, R(p + d) k> is the same for every p: what makes RoPE relative."""
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    rope = RotaryEmbedding(8)
    length = 12
    rq, rk = rope(q.expand(1, 1, length, 8).contiguous(), k.expand(1, 1, length, 8).contiguous())
    scores = rq[0, 0] @ rk[0, 0].T  # [L, L]
    for d in (1, 3, 5):
        diag = scores.diagonal(d)
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), atol=1e-12, rtol=0)


def test_rotary_gradient_is_the_formulas_and_every_path_agrees():
    """The rotation's hand-written backward (``positional._Rotate``) against autograd of the plain formula, with
    angles whose two halves differ (a swapped half of sin in the backward shows); and the no-grad path."""
    from seqattn.core.positional import _Rotate, rotate

    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    cos, sin = torch.randn(5, 8, generator=g, dtype=torch.float64), torch.randn(5, 8, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: _Rotate.apply(t, cos, sin), (x,))
    plain = x * cos + RotaryEmbedding._rotate_half(x) * sin
    weight = torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64)
    (expected,) = torch.autograd.grad((plain * weight).sum(), x)
    out = rotate(x, cos, sin)
    (got,) = torch.autograd.grad((out * weight).sum(), x)
    assert out.grad_fn is not None and type(out.grad_fn).__name__ == "_RotateBackward"
    torch.testing.assert_close(out, plain, atol=1e-12, rtol=0)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(rotate(x, cos, sin), plain, atol=1e-12, rtol=0)
    angles = sin.clone().requires_grad_()  # angles that learn get the plain formula (and their gradient)
    (grad_angles,) = torch.autograd.grad((rotate(x, cos, angles) * weight).sum(), angles)
    torch.testing.assert_close(grad_angles, (RotaryEmbedding._rotate_half(x) * weight).sum((0, 1)))


def _relative_bias_by_hand(table: torch.Tensor, length: int, key_length: int, m: int) -> torch.Tensor:
    """``bias[h, i, j] = table[min(max(j - i, -m), m) + m, h]`` written out, ``[1, H, L, S]``."""
    heads = table.shape[1]
    out = torch.empty(1, heads, length, key_length, dtype=table.dtype)
    for h in range(heads):
        for i in range(length):
            for j in range(key_length):
                out[0, h, i, j] = table[min(max(j - i, -m), m) + m, h]
    return out


@pytest.mark.parametrize("length,key_length", [(7, 7), (5, 9), (9, 4)])
def test_relative_bias_is_the_clipped_signed_offset_table(length, key_length):
    rel = RelativePositionBias(heads=3, max_distance=2)
    with torch.no_grad():
        rel.table.copy_(torch.arange(15, dtype=torch.float32).view(5, 3))  # every entry distinct
    torch.testing.assert_close(rel(length, key_length), _relative_bias_by_hand(rel.table.detach(), length,
                                                                                key_length, 2), atol=0, rtol=0)


def test_relative_bias_is_shift_invariant_and_direction_aware():
    """The bias of (i, j) depends only on j - i (the same on every diagonal), and a key d to the left
    gets another bias than one d to the right (the direction TENER says sinusoidal encodings lose)."""
    rel = RelativePositionBias(heads=2, max_distance=3)
    with torch.no_grad():
        rel.table.normal_(generator=torch.Generator().manual_seed(0))
    bias = rel(10)[0]  # [H, L, L]
    for d in range(-9, 10):
        diag = bias.diagonal(d, dim1=-2, dim2=-1)  # [H, L - |d|]
        torch.testing.assert_close(diag, diag[:, :1].expand_as(diag), atol=0, rtol=0)
    for d in (1, 2, 3):
        assert not torch.equal(bias.diagonal(d, dim1=-2, dim2=-1)[:, 0], bias.diagonal(-d, dim1=-2, dim2=-1)[:, 0])
    far = bias.diagonal(7, dim1=-2, dim2=-1)[:, 0]  # beyond ±3: the edge entry
    torch.testing.assert_close(far, bias.diagonal(3, dim1=-2, dim2=-1)[:, 0], atol=0, rtol=0)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_relative_bias_rejects_a_bad_max_distance(bad):
    with pytest.raises(ValueError, match="max_distance"):
        RelativePositionBias(heads=2, max_distance=bad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_paired_rotary_attention_equals_the_half_width_rotation_with_gradients(monkeypatch, dtype):
    """Self-attention with rotary positions reads its q / k rows pair by pair and rotates with one complex product
    (``MultiHeadAttention._project_rotated``): the same outputs and parameter gradients as the half-width rotation,
    with padding, at lengths past the first table (the angle table grows), and the same attention weights."""
    import seqattn.core.attention as attention_module
    from seqattn.core import MultiHeadAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(24, heads=3, dropout=0.0).to(dtype)
    rope = RotaryEmbedding(8)
    for length in (5, 13, 40):
        x = torch.randn(2, length, 24, dtype=dtype)
        mask = torch.ones(2, length, dtype=torch.bool)
        mask[1, length // 2:] = False
        results = []
        for paired in (False, True):
            monkeypatch.setattr(attention_module, "PAIRED_ROTARY", paired)
            layer.zero_grad()
            out, weights = layer(x, mask=mask, rotary=rope, need_weights=True)
            (out * torch.linspace(-1, 1, 24, dtype=dtype)).sum().backward()
            results.append((out, weights, [p.grad.clone() for p in layer.parameters()]))
        (out0, w0, g0), (out1, w1, g1) = results
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else {}
        torch.testing.assert_close(out1, out0, **tol)
        torch.testing.assert_close(w1, w0, **tol)
        for a, b in zip(g1, g0):
            torch.testing.assert_close(a, b, **tol)
    assert rope._table.shape[0] >= 40


def test_paired_rotary_falls_back_where_complex_numbers_do_not_serve():
    """Under bf16 autocast the projection is bf16 (no complex type): the layer takes the half-width rotation."""
    from seqattn.core import MultiHeadAttention

    torch.manual_seed(0)
    layer, rope = MultiHeadAttention(16, heads=2, dropout=0.0), RotaryEmbedding(8)
    x = torch.randn(2, 6, 16)
    assert rope.paired(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not rope.paired(x)
        out = layer(x, rotary=rope)
    torch.testing.assert_close(out.float(), layer(x, rotary=rope), rtol=0.05, atol=0.05)
