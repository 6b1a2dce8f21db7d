"""SGFormer's simple global attention (``seqattn.core.attention.GlobalLinearAttention``) and the encoder's
``global_attention=w`` branch beside the planned (graph-masked) attention."""

import math

import pytest
import torch

from seqattn.core import Encoder, GlobalLinearAttention, Tokens, mask_to_edge_index


def _naive(module, x, size):
    """The pairwise form on one item's ``size`` real tokens (SGFormer's eq. 4):
    out_l = (v_l + Σ_s (q̃_l·k̃_s) v_s / N) / (1 + Σ_s q̃_l·k̃_s / N)."""
    h = x[:size]
    q, k, v = module.q_proj(h), module.k_proj(h), module.v_proj(h)
    q, k = q / q.norm(), k / k.norm()  # Frobenius norms over the item's real tokens
    scores = q @ k.T  # [N, N]
    assert (scores.abs() <= 1 + 1e-9).all()
    return (v + scores @ v / size) / (1.0 + scores.sum(1, keepdim=True) / size)


def test_global_attention_equals_the_pairwise_formula_per_item_and_ignores_padding():
    """Per item of a padded batch: the linear form equals the O(N²) pairwise attention over its real tokens;
    padding rows come out zero, and whatever the padding holds changes nothing."""
    torch.manual_seed(0)
    module = GlobalLinearAttention(8).double()
    sizes = [6, 3, 1]
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    mask = torch.arange(6)[None, :] < torch.tensor(sizes)[:, None]  # [3, 6]
    out = module(x, mask)
    assert out.shape == (3, 6, 8)
    for i, size in enumerate(sizes):
        torch.testing.assert_close(out[i, :size], _naive(module, x[i], size))
    assert (out[~mask] == 0).all()
    noisy = x.masked_fill(~mask.unsqueeze(-1), 1e3)
    torch.testing.assert_close(module(noisy, mask), out)
    # without a mask every position is real
    torch.testing.assert_close(module(x[:1]), out[:1])


def test_global_attention_reads_the_whole_item_and_keeps_items_apart():
    """Every token's output depends on a far token of its own item (beyond any neighbourhood), and on nothing of
    another item."""
    torch.manual_seed(1)
    module = GlobalLinearAttention(8)
    x = torch.randn(2, 5, 8, requires_grad=True)
    out = module(x, torch.ones(2, 5, dtype=torch.bool))
    (grad,) = torch.autograd.grad(out[0, 0].sum(), x)
    assert grad[0, 4].abs().sum() > 0  # the last token of item 0 reaches its first
    assert (grad[1] == 0).all()  # item 1 does not


def _graph_batch():
    torch.manual_seed(2)
    sizes = [7, 3, 5]
    mask = torch.arange(7)[None, :] < torch.tensor(sizes)[:, None]
    adj = ((torch.rand(3, 7, 7) > 0.5) | torch.eye(7, dtype=torch.bool)) & mask[:, :, None] & mask[:, None, :]
    return torch.randn(3, 7, 16), mask, mask_to_edge_index(adj)


def test_encoder_mixes_the_global_branch_into_every_layer():
    """``global_attention=w``: each layer's attention is (1-w) × the masked attention + w × the global branch
    (one layer by hand), w = 0 builds no branch, and a graph batch is not packed with it (the branch would mix
    the batch's graphs): the packed and padded layouts give the same output."""
    x, mask, edge_index = _graph_batch()
    w = 0.3
    enc = Encoder(16, 1, 4, positional="none", dropout=0.0, graph_path="edge", global_attention=w).eval()
    assert not any("global_attn" in name for name, _ in Encoder(16, 1, 4, positional="none").named_parameters())
    tokens = Tokens(x, mask, edge_index=edge_index)
    out = enc(tokens)
    assert "packed" not in enc.last_plan["summary"]
    layer = enc.layers[0]
    h = layer.norm1(x)
    local = layer.attn(h, plan=enc.plan(tokens))
    y = x + (1 - w) * local + w * layer.global_attn(h, mask)
    y = y + layer.ff(layer.norm2(y))
    torch.testing.assert_close(out, enc.norm(y).masked_fill(~mask.unsqueeze(-1), 0.0))
    padded = Encoder(16, 1, 4, positional="none", dropout=0.0, graph_path="edge", global_attention=w,
                     pack_graphs=False).eval()
    padded.load_state_dict(enc.state_dict())
    torch.testing.assert_close(padded(tokens), out)
    # the other items' tokens do not reach item 0 through the global branch
    moved = x.clone()
    moved[1:] += 5.0
    torch.testing.assert_close(enc(Tokens(moved, mask, edge_index=edge_index))[0], out[0])


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "0.5", math.nan])
def test_encoder_rejects_a_bad_global_attention(bad):
    with pytest.raises(ValueError, match="global_attention must be a number in \\[0, 1\\].*got"):
        Encoder(16, 1, 2, positional="none", global_attention=bad)


def test_global_attention_rejects_a_mask_of_another_shape():
    with pytest.raises(ValueError, match=r"mask must be \[B=2, L=5\].*got \(2, 4\)"):
        GlobalLinearAttention(8)(torch.randn(2, 5, 8), torch.ones(2, 4, dtype=torch.bool))
