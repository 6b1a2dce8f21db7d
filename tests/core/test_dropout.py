"""seqattn.core.dropout: the cheap CPU masks are dropout (rate, scale, independence, gradient, seeding),
and torch's F.dropout when switched off."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqattn.core import Encoder
from seqattn.core import dropout as fast
from seqattn.core.dropout import Dropout, dropout, keep_mask, scaled_keep_mask, set_fast_dropout

N = 1 << 20  # elements per statistical check: a rate's standard error is ~5e-4


@pytest.fixture(autouse=True)
def _enabled():
    set_fast_dropout(True)
    yield
    set_fast_dropout(True)


def _within(observed: float, expected: float, n: int) -> bool:
    """``observed`` is a frequency of ``n`` draws within 5 standard errors of ``expected``."""
    return abs(observed - expected) <= 5 * math.sqrt(expected * (1 - expected) / n)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_keep_rate_and_every_slot_of_a_draw(p):
    torch.manual_seed(0)
    keep, scale = keep_mask((N,), p)
    assert keep.dtype == torch.bool and keep.shape == (N,)
    assert _within(keep.float().mean().item(), 1 - p, N)
    # the four 15-bit slots of each 63-bit draw (the top one has one bit fewer) each keep at 1 - p
    for slot in range(4):
        assert _within(keep[slot::4].float().mean().item(), 1 - p, N // 4), slot
    assert scale == pytest.approx(1 / (1 - p), rel=1e-4)


@pytest.mark.parametrize("p", [0.0, 1 / 32768, 0.1, 0.3, 0.5, 0.9, 32767 / 32768])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_scaled_mask_is_the_keep_mask_times_its_scale_bit_for_bit(p, dtype):
    shape = (3, 1001, 7)  # an element count not a multiple of 4: the last draw is cut
    torch.manual_seed(5)
    keep, scale = keep_mask(shape, p)
    torch.manual_seed(5)
    mask = scaled_keep_mask(shape, p, dtype)
    assert mask.dtype == dtype and mask.shape == shape
    assert torch.equal(mask, keep.to(dtype).mul_(scale))
    after = torch.rand(())  # the generator moved as far as keep_mask moves it
    torch.manual_seed(5)
    keep_mask(shape, p)
    assert torch.equal(after, torch.rand(()))


def test_scaled_mask_refuses_p_one():
    from seqattn.core.dropout import keep_bits

    with pytest.raises(ValueError, match=r"\[0, 1\), got 1.0"):
        scaled_keep_mask((4,), 1.0)
    with pytest.raises(ValueError, match=r"keep_bits.*\[0, 1\), got -0.1"):
        keep_bits((4,), -0.1)


def test_keep_bits_are_the_scaled_mask_s_draws():
    """The 0/1 int16 bits and the scale are the scaled mask's own draws: ``bits.to(float) * scale`` is it bit for bit."""
    from seqattn.core.dropout import keep_bits

    torch.manual_seed(5)
    bits, scale = keep_bits((3, 50), 0.3)
    torch.manual_seed(5)
    mask = scaled_keep_mask((3, 50), 0.3)
    assert bits.dtype == torch.int16 and set(bits.unique().tolist()) == {0, 1}
    assert torch.equal(bits.to(torch.float32) * scale, mask)


def test_neighbours_are_independent():
    torch.manual_seed(1)
    p = 0.3
    keep = keep_mask((N,), p)[0].float()
    both = (keep[:-1] * keep[1:]).mean().item()  # neighbours in one draw and across draws
    assert _within(both, (1 - p) ** 2, N)
    every_fourth = (keep[:-4] * keep[4:]).mean().item()  # the same slot of consecutive draws
    assert _within(every_fourth, (1 - p) ** 2, N)


def test_kept_values_are_scaled_dropped_are_zero_and_the_mean_is_kept():
    torch.manual_seed(2)
    p = 0.3
    x = torch.rand(N) + 0.5  # no zeros of its own
    out = dropout(x, p)
    kept = out != 0
    scale = 32768 / (32768 - round(p * 32768))
    torch.testing.assert_close(out[kept], x[kept] * scale)
    assert _within(kept.float().mean().item(), 1 - p, N)
    ones = dropout(torch.ones(N), p)
    assert abs(ones.mean().item() - 1.0) < 5 * math.sqrt(p / (1 - p) / N)  # E[out] = x


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(3)
    x = (torch.rand(64, 33) + 0.5).requires_grad_()
    out = dropout(x, 0.4)
    grad = torch.randn_like(out)
    out.backward(grad)
    factor = (out / x).detach()  # 0 or the scale, per element
    torch.testing.assert_close(x.grad, grad * factor)
    kept = factor != 0
    assert 0 < kept.sum() < kept.numel()
    torch.testing.assert_close(factor[kept], torch.full_like(factor[kept], 32768 / (32768 - round(0.4 * 32768))))


def test_seeded_like_torch_and_shapes_kept():
    x = torch.randn(3, 5, 7)
    torch.manual_seed(4)
    a = dropout(x, 0.5)
    torch.manual_seed(4)
    b = dropout(x, 0.5)
    torch.manual_seed(5)
    c = dropout(x, 0.5)
    assert a.shape == x.shape
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_identity_in_eval_and_at_zero_zeros_at_one_and_bad_p():
    x = torch.randn(4, 6)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"\[0, 1\], got 1.5"):
        dropout(x, 1.5)
    module = Dropout(0.5).eval()
    assert torch.equal(module(x), x)


def test_switched_off_is_torch_dropout_exactly():
    x = torch.randn(32, 17)
    set_fast_dropout(False)
    torch.manual_seed(6)
    ours = Dropout(0.3)(x)
    torch.manual_seed(6)
    assert torch.equal(ours, F.dropout(x, 0.3, training=True))
    assert fast.ENABLED is False
    with pytest.raises(ValueError, match="fast_dropout must be true or false.*'yes'"):
        set_fast_dropout("yes")


def test_the_encoder_uses_it():
    torch.manual_seed(7)
    encoder = Encoder(16, 2, 2, dropout=0.5)
    modules = [m for m in encoder.modules() if isinstance(m, torch.nn.Dropout)]
    assert modules and all(isinstance(m, Dropout) for m in modules)
    x = torch.randn(2, 5, 16)
    encoder.train()
    assert not torch.equal(encoder(x), encoder(x))  # dropout draws
    encoder.eval()
    assert torch.equal(encoder(x), encoder(x))


def test_attention_weight_dropout_uses_it():
    """The math kernel drops attention weights with the cheap masks: the same draw as ``dropout`` on the
    softmax weights."""
    from seqattn.core.kernels import math_attention

    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)  # [B=2, H=2, L=5, D=4] each
    torch.manual_seed(8)
    out, _ = math_attention(q, k, v, None, 0.5)
    weights = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)  # scale 1/sqrt(4)
    torch.manual_seed(8)
    torch.testing.assert_close(out, dropout(weights, 0.5) @ v)


def _padded(lengths, heads=2, length=6, dim=4):
    torch.manual_seed(9)
    q, k, v = (torch.randn(len(lengths), heads, length, dim, requires_grad=True) for _ in range(3))
    keys = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # [B, 1, 1, S]
    return q, k, v, keys


@pytest.mark.parametrize("lengths", [[6, 3, 4], [6, 0, 2]], ids=["padded", "an empty sequence"])
@pytest.mark.parametrize("additive", [False, True], ids=["bool mask", "additive mask"])
def test_cpu_dropout_attention_is_the_math_kernel_with_the_same_draws(lengths, additive):
    """The dense path's training kernel on CPU (dropout on the weights): the reference math kernel's output and
    gradients with the same draws, padding masks bool or additive, an empty sequence's rows kept finite."""
    from seqattn.core.kernels import cpu_dropout_attention, math_attention
    from seqattn.core.masks import additive_mask

    q, k, v, keys = _padded(lengths)
    mask = additive_mask(keys, q.dtype) if additive else keys
    probe = torch.randn(q.shape)
    torch.manual_seed(10)
    out = cpu_dropout_attention(q, k, v, mask, 0.3, scale=0.7)
    grads = torch.autograd.grad((out * probe).sum(), (q, k, v))
    torch.manual_seed(10)
    ref, _ = math_attention(q, k, v, mask, 0.3, 0.7)
    ref_grads = torch.autograd.grad((ref * probe).sum(), (q, k, v))
    torch.testing.assert_close(out, ref)
    for g, r in zip(grads, ref_grads):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, r)
    torch.manual_seed(10)
    assert not torch.equal(out, cpu_dropout_attention(q, k, v, mask, 0.0, scale=0.7))  # weights were dropped


def test_cpu_dropout_attention_passes_a_learned_bias_its_gradient():
    """A learned additive bias (relative positions: ``[1, H, L, S]``, broadcast over the batch) added to the scores
    in place gets the reference kernel's gradient, and so do q, k and v."""
    from seqattn.core.kernels import cpu_dropout_attention, math_attention

    q, k, v, keys = _padded([6, 3, 4])
    bias = (0.5 * torch.randn(1, 2, 6, 6)).requires_grad_()
    probe = torch.randn(q.shape)
    grads = []
    for kernel in (cpu_dropout_attention, lambda *a: math_attention(*a)[0]):
        torch.manual_seed(11)
        mask = bias + torch.zeros_like(bias).masked_fill(~keys, float("-inf"))  # [B, 2, 6, 6]
        out = kernel(q, k, v, mask, 0.2, 0.5)
        grads.append((out, torch.autograd.grad((out * probe).sum(), (q, k, v, bias))))
    (out, got), (ref, expected) = grads
    torch.testing.assert_close(out, ref)
    for g, r in zip(got, expected):
        torch.testing.assert_close(g, r)
    assert got[3].abs().sum() > 0


def test_the_dense_path_trains_with_the_cheap_masks_and_switched_off_with_torchs():
    """A padded batch through the attention layer in training: the dense path takes the cheap-mask kernel
    (``fast_dropout`` on) or torch's fused call with its own dropout (off), each reproducible by seed."""
    from seqattn.core.attention import MultiHeadAttention
    from seqattn.core.kernels import cpu_dropout_attention
    from seqattn.core.plan import plan_attention

    torch.manual_seed(11)
    layer = MultiHeadAttention(8, 2, dropout=0.4).train()
    x = torch.randn(3, 6, 8)
    keys = torch.arange(6)[None, :] < torch.tensor([6, 3, 4])[:, None]
    plan = plan_attention(3, 6, heads=2, dim=8, device=x.device, mask=keys)
    assert plan.path == "dense"

    def attend(seed):
        torch.manual_seed(seed)
        return layer(x, plan=plan)

    q, k, v = (layer._split_heads(t) for t in layer._project_self(x))
    torch.manual_seed(12)
    expected = cpu_dropout_attention(q, k, v, plan.mask_for(x.dtype), 0.4)
    expected = layer.out_proj(expected.transpose(1, 2).reshape(3, 6, 8))
    real = keys[:, :, None]
    torch.testing.assert_close(attend(12) * real, expected * real)  # padded query rows: the plan zeroes them
    set_fast_dropout(False)
    torch.manual_seed(12)
    torchs = F.scaled_dot_product_attention(q, k, v, attn_mask=plan.mask_for(x.dtype), dropout_p=0.4)
    torchs = layer.out_proj(torchs.transpose(1, 2).reshape(3, 6, 8))
    torch.testing.assert_close(attend(12) * real, torchs * real)
