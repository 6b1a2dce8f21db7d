"""The kernels agree with each other and with their own formulas; empty rows are safe."""

import pytest
import torch
import torch.nn.functional as F

from seqattn.core.checks import set_debug_checks
from seqattn.core import (
    build_attention_mask,
    edge_index_to_mask,
    linear_attention,
    mask_to_edge_index,
    scaled_dot_product_attention,
)

B, H, L, D = 2, 3, 6, 4


def _qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, D, generator=g, requires_grad=True) for _ in range(3)]


def _grads(out, tensors):
    return torch.autograd.grad((out * torch.arange(out.numel()).view_as(out).sin()).sum(), tensors)


def _structure():
    g = torch.Generator().manual_seed(1)
    adj = torch.rand(B, L, L, generator=g) > 0.5
    adj[0, 2] = False  # query 2 of graph 0 has no neighbours at all
    padding = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    return adj, padding


@pytest.mark.parametrize("use_padding", [False, True])
def test_math_sdpa_edge_agree(use_padding):
    adj, padding = _structure()
    pad = padding if use_padding else None
    kernel_mask = build_attention_mask(pad, adj)
    q, k, v = _qkv()
    ref = scaled_dot_product_attention(q, k, v, kernel_mask, kernel="math")
    ref_grads = _grads(ref, (q, k, v))
    sdpa = scaled_dot_product_attention(q, k, v, kernel_mask, kernel="sdpa")
    # the edge kernel gets the same structure as an edge list (padding still as a mask)
    edge_index = mask_to_edge_index(adj)
    edge = scaled_dot_product_attention(
        q, k, v, build_attention_mask(pad), kernel="edge", edge_index=edge_index
    )
    for out in (sdpa, edge):
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        for g, rg in zip(_grads(out, (q, k, v)), ref_grads):
            torch.testing.assert_close(g, rg, atol=1e-5, rtol=1e-5)
    assert torch.equal(edge_index_to_mask(edge_index, B, L), adj)


def test_float_bias_equals_bool_mask():
    adj, _ = _structure()
    adj[0, 2, 0] = True
    q, k, v = _qkv()
    bias = torch.zeros(B, L, L).masked_fill(~adj, float("-inf"))
    for kernel in ("math", "sdpa"):
        a = scaled_dot_product_attention(q, k, v, build_attention_mask(None, adj), kernel=kernel)
        b = scaled_dot_product_attention(q, k, v, build_attention_mask(None, bias), kernel=kernel)
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kernel", ["math", "sdpa"])
def test_exact_kernels_equal_torch_sdpa_without_mask(kernel):
    q, k, v = _qkv()
    ours = scaled_dot_product_attention(q, k, v, kernel=kernel)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


def _linear_direct(q, k, v, padding=None):
    """Direct O(L²) evaluation of the linear-attention formula (phi = elu + 1)."""
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    scores = phi_q @ phi_k.transpose(-1, -2)  # [B, H, L, S]
    if padding is not None:
        scores = scores * padding[:, None, None, :]
    return (scores / scores.sum(-1, keepdim=True)) @ v


@pytest.mark.parametrize("use_padding", [False, True])
def test_linear_matches_its_formula(use_padding):
    _, padding = _structure()
    pad = padding if use_padding else None
    q, k, v = _qkv()
    out = scaled_dot_product_attention(q, k, v, build_attention_mask(pad), kernel="linear")
    direct = _linear_direct(q, k, v, pad)
    torch.testing.assert_close(out, direct, atol=1e-5, rtol=1e-5)
    for g, rg in zip(_grads(out, (q, k, v)), _grads(direct, (q, k, v))):
        torch.testing.assert_close(g, rg, atol=1e-5, rtol=1e-5)
    _, weights = scaled_dot_product_attention(q, k, v, build_attention_mask(pad), kernel="linear", need_weights=True)
    torch.testing.assert_close(weights @ v, direct, atol=1e-5, rtol=1e-5)


def test_linear_rejects_structure_masks():
    adj, _ = _structure()
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="'linear' kernel supports only a bool padding mask"):
        linear_attention(q, k, v, build_attention_mask(None, adj))


@pytest.mark.parametrize("kernel", ["math", "sdpa", "linear", "edge"])
def test_row_with_nothing_to_attend_gives_zeros_and_finite_grads(kernel):
    q, k, v = _qkv()
    padding = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)  # batch 1: all padding
    kernel_mask = build_attention_mask(padding)
    edge_index = None
    if kernel == "edge":
        full = torch.ones(B, L, L, dtype=torch.bool)
        full[0, 1] = False  # node 1 of graph 0: no incoming edge
        edge_index = mask_to_edge_index(full)
    out = scaled_dot_product_attention(q, k, v, kernel_mask, kernel=kernel, edge_index=edge_index)
    assert torch.isfinite(out).all()
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    if kernel == "edge":
        assert torch.equal(out[0, :, 1], torch.zeros_like(out[0, :, 1]))
    grads = _grads(out, (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)

    if kernel in ("math", "sdpa"):  # a structure mask with one empty row
        adj = torch.ones(L, L, dtype=torch.bool)
        adj[3] = False
        out = scaled_dot_product_attention(q, k, v, build_attention_mask(None, adj), kernel=kernel)
        assert torch.isfinite(out).all() and torch.equal(out[:, :, 3], torch.zeros_like(out[:, :, 3]))
        assert all(torch.isfinite(g).all() for g in _grads(out, (q, k, v)))


def test_edge_kernel_bad_inputs():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="needs an edge_index"):
        scaled_dot_product_attention(q, k, v, kernel="edge")
    # the value check is a host sync: per call only in debug mode (the encoder checks once per forward)
    previous = set_debug_checks(True)
    try:
        with pytest.raises(ValueError, match=r"edge_index values must lie in \[0, B\*L\)"):
            scaled_dot_product_attention(q, k, v, kernel="edge", edge_index=torch.tensor([[0], [B * L]]))
    finally:
        set_debug_checks(previous)
    from seqattn.core import Encoder, Tokens

    with pytest.raises(ValueError, match=r"edge_index values must lie in \[0, B\*L\)"):
        Encoder(12, 1, 3, kernel="edge")(Tokens(torch.randn(B, L, 12), edge_index=torch.tensor([[0], [B * L]])))
    with pytest.raises(ValueError, match="only used by kernel='edge'"):
        scaled_dot_product_attention(q, k, v, kernel="sdpa", edge_index=torch.tensor([[0], [1]]))


def test_edge_bias_equals_dense_float_bias():
    adj, _ = _structure()
    adj[0, 2, 2] = True
    q, k, v = _qkv()
    edge_index = mask_to_edge_index(adj)
    bias_dense = torch.randn(B, H, L, L)
    src, dst = edge_index
    edge_bias = bias_dense[dst // L, :, dst % L, src % L]  # [E, H]
    dense = bias_dense.masked_fill(~adj[:, None], float("-inf"))
    ref = scaled_dot_product_attention(q, k, v, dense, kernel="math")
    out = scaled_dot_product_attention(q, k, v, kernel="edge", edge_index=edge_index, edge_bias=edge_bias)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def _has_node(t, name):
    """Whether ``t``'s autograd graph has a node whose name starts with ``name``."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if fn.name().startswith(name):
            return True
        todo.extend(f for f, _ in fn.next_functions)
    return False


def test_edge_kernel_custom_backward_passes_gradcheck_in_chunks(monkeypatch):
    """The edge kernel's hand-written backward (recomputing per-edge gathers chunk by chunk) is exact."""
    import seqattn.core.kernels as kernels

    torch.manual_seed(0)
    b, h, length = 2, 3, 7
    q, k = (torch.randn(b, h, length, 5, dtype=torch.float64, requires_grad=True) for _ in range(2))
    v = torch.randn(b, h, length, 4, dtype=torch.float64, requires_grad=True)
    src = torch.randint(0, b * length, (30,))
    dst = (src // length) * length + torch.randint(0, length, (30,))  # same graph, repeats allowed
    edge_index = torch.stack([src, dst])
    bias = torch.randn(30, h, dtype=torch.float64, requires_grad=True)

    def attend(q, k, v, bias):
        return kernels.edge_attention(q, k, v, edge_index, None, 0.0, None, bias)[0]

    whole = attend(q, k, v, bias)  # fits one chunk: autograd through the gathered rows
    g = torch.randn_like(whole)
    plain_grads = torch.autograd.grad(whole, (q, k, v, bias), g)
    monkeypatch.setattr(kernels, "_EDGE_CHUNK_ELEMENTS", 7)  # many chunks of one or two edges: the Function
    chunked = attend(q, k, v, bias)
    assert _has_node(chunked, "_EdgeAttention") and not _has_node(whole, "_EdgeAttention")
    torch.testing.assert_close(chunked, whole)
    for got, want in zip(torch.autograd.grad(chunked, (q, k, v, bias), g), plain_grads):
        torch.testing.assert_close(got, want)
    assert torch.autograd.gradcheck(attend, (q, k, v, bias))


@pytest.mark.parametrize("use_padding", [False, True])
def test_edge_key_value_offsets_agree_between_math_sdpa_and_edge(use_padding):
    """Per-pair key / value offsets: dense [B, H, L, S, .] for math and sdpa, per edge [E, H, .] for edge;
    equal outputs and gradients, and each formula as written (q·(k + ek), Σ a (v + ev))."""
    adj, padding = _structure()
    pad = padding if use_padding else None
    q, k, v = _qkv()
    g = torch.Generator().manual_seed(3)
    ek_dense = torch.randn(B, H, L, L, D, generator=g).mul(adj[:, None, :, :, None]).requires_grad_(True)
    ev_dense = torch.randn(B, H, L, L, D, generator=g).mul(adj[:, None, :, :, None]).requires_grad_(True)
    kernel_mask = build_attention_mask(pad, adj)
    ref = scaled_dot_product_attention(q, k, v, kernel_mask, kernel="math", edge_key=ek_dense, edge_value=ev_dense)
    ref_grads = _grads(ref, (q, k, v, ek_dense, ev_dense))
    sdpa = scaled_dot_product_attention(q, k, v, kernel_mask, kernel="sdpa", edge_key=ek_dense, edge_value=ev_dense)
    edge_index = mask_to_edge_index(adj)
    src, dst = edge_index
    pick = lambda t: t[dst // L, :, dst % L, src % L]  # noqa: E731 -- [E, H, D]
    edge = scaled_dot_product_attention(q, k, v, build_attention_mask(pad), kernel="edge", edge_index=edge_index,
                                        edge_key=pick(ek_dense), edge_value=pick(ev_dense))
    for out in (sdpa, edge):
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        for got, want in zip(_grads(out, (q, k, v, ek_dense, ev_dense)), ref_grads):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the formula, for one query row: scores q·(k_s + ek_s) / √d over its neighbours, values v_s + ev_s
    b, i = 1, 3
    allowed = adj[b, i] & (padding[b] if use_padding else True)
    keys = k[b, :, allowed] + ek_dense[b, :, i, allowed]  # [H, S', D]
    w = torch.softmax((q[b, :, i, None] * keys).sum(-1) / D ** 0.5, dim=-1)  # [H, S']
    want = (w[..., None] * (v[b, :, allowed] + ev_dense[b, :, i, allowed])).sum(1)  # [H, D]
    torch.testing.assert_close(ref[b, :, i], want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="linear"):
        scaled_dot_product_attention(q, k, v, kernel="linear", edge_key=ek_dense)
    with pytest.raises(ValueError, match="edge_key must be"):
        scaled_dot_product_attention(q, k, v, kernel="edge", edge_index=edge_index, edge_key=ek_dense)
