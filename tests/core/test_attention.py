"""MultiHeadAttention against torch.nn.MultiheadAttention (code nobody here wrote)."""

import pytest
import torch
from torch import nn

from seqattn.core import MultiHeadAttention, from_torch_key_padding_mask

torch.manual_seed(0)


def _copy_to_torch(ours: MultiHeadAttention, bias: bool) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.dim, ours.heads, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
            ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


def _randomise(module: nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.2)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kernel", ["sdpa", "math"])
@pytest.mark.parametrize("padded", [False, True])
def test_equals_torch_multihead_attention(bias, kernel, padded):
    ours = MultiHeadAttention(32, 4, bias=bias, kernel=kernel)
    _randomise(ours)
    ref = _copy_to_torch(ours, bias)
    x = torch.randn(3, 7, 32)
    mask = None
    key_padding_mask = None
    if padded:
        lengths = torch.tensor([7, 4, 2])
        mask = torch.arange(7)[None] < lengths[:, None]  # True = real
        key_padding_mask = ~mask  # torch: True = ignore
        assert torch.equal(from_torch_key_padding_mask(key_padding_mask), mask)

    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    out = ours(x1, mask=mask)
    expected, _ = ref(x2, x2, x2, key_padding_mask=key_padding_mask, need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-5)
    w_grad = torch.cat([ours.q_proj.weight.grad, ours.k_proj.weight.grad, ours.v_proj.weight.grad])
    torch.testing.assert_close(w_grad, ref.in_proj_weight.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.out_proj.weight.grad, ref.out_proj.weight.grad, atol=1e-5, rtol=1e-5)
    if bias:
        b_grad = torch.cat([ours.q_proj.bias.grad, ours.k_proj.bias.grad, ours.v_proj.bias.grad])
        torch.testing.assert_close(b_grad, ref.in_proj_bias.grad, atol=1e-5, rtol=1e-5)


def test_weights_equal_torch_per_head_weights():
    ours = MultiHeadAttention(16, 2)
    _randomise(ours)
    ref = _copy_to_torch(ours, True)
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    out, weights = ours(x, mask=mask, need_weights=True)
    exp_out, exp_w = ref(x, x, x, key_padding_mask=~mask, need_weights=True, average_attn_weights=False)
    assert weights.shape == (2, 2, 5, 5)
    torch.testing.assert_close(out, exp_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, exp_w, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))


def test_structure_mask_equals_torch_attn_mask():
    ours = MultiHeadAttention(16, 4)
    _randomise(ours)
    ref = _copy_to_torch(ours, True)
    x = torch.randn(2, 6, 16)
    allowed = torch.rand(6, 6) > 0.4
    allowed |= torch.eye(6, dtype=torch.bool)  # torch gives NaN on empty rows; keep rows alive
    out = ours(x, attn_mask=allowed)
    expected, _ = ref(x, x, x, attn_mask=~allowed, need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_dim_k_and_dim_v_may_differ_from_width():
    mha = MultiHeadAttention(12, 2, dim_k=8, dim_v=20)
    _randomise(mha)
    x = torch.randn(2, 5, 12)
    out, w = mha(x, need_weights=True)
    assert out.shape == (2, 5, 12) and w.shape == (2, 2, 5, 5)
    # by hand: per-head softmax(q kᵀ / sqrt(head width)) v, concatenated, then W^O
    q = mha.q_proj(x).view(2, 5, 2, 4).transpose(1, 2)
    k = mha.k_proj(x).view(2, 5, 2, 4).transpose(1, 2)
    v = mha.v_proj(x).view(2, 5, 2, 10).transpose(1, 2)
    att = torch.softmax(q @ k.transpose(-1, -2) / 4**0.5, -1)  # scale by head width, not total width
    by_hand = mha.out_proj((att @ v).transpose(1, 2).reshape(2, 5, 20))
    torch.testing.assert_close(out, by_hand, atol=1e-5, rtol=1e-5)


def test_cross_attention_shapes_and_padding():
    mha = MultiHeadAttention(8, 2)
    x, ctx = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    ctx_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=torch.bool)
    out = mha(x, mask=ctx_mask, context=ctx)
    alone = mha(x[1:], context=ctx[1:, :2])
    torch.testing.assert_close(out[1:], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=10, heads=3), "dim_k=10 must be divisible by heads=3"),
        (dict(dim=8, heads=2, dim_v=5), "dim_v=5"),
        (dict(dim=8, heads=2, kernel="flash9"), "unknown attention kernel 'flash9'"),
        (dict(dim=8, heads=2, dropout=1.5), "dropout must be in"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(**kwargs)


def test_bad_forward_arguments():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"x must be \[B, L, D=8\]"):
        mha(torch.randn(2, 3, 9))
    with pytest.raises(ValueError, match="mask must be bool"):
        mha(torch.randn(2, 3, 8), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"mask must be \[B, S\]"):
        mha(torch.randn(2, 3, 8), mask=torch.ones(2, 4, dtype=torch.bool))
