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
