"""Encoder invariances: padding, permutation, positional encodings, local windows."""

import pytest
import torch

from seqattn.core import Encoder, RotaryEmbedding, Tokens, local_window_mask


def _batch(lengths, dim=16):
    x = torch.randn(len(lengths), max(lengths), dim)
    mask = torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]
    return x, mask


@pytest.mark.parametrize("kernel", ["sdpa", "math", "linear"])
@pytest.mark.parametrize("positional", ["none", "sinusoidal", "learned", "rotary"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_padded_batch_equals_each_sequence_alone(kernel, positional, norm_first):
    enc = Encoder(16, depth=2, heads=4, dropout=0.0, kernel=kernel, positional=positional, max_len=32,
                  norm_first=norm_first).eval()
    lengths = [9, 5, 1]
    x, mask = _batch(lengths)
    out = enc(x, mask=mask)
    for i, n in enumerate(lengths):
        alone = enc(x[i : i + 1, :n])
        torch.testing.assert_close(out[i, :n], alone[0], atol=1e-5, rtol=1e-5)
        assert torch.equal(out[i, n:], torch.zeros_like(out[i, n:]))  # padding is zeroed


def test_padded_batch_invariance_with_window_and_tokens_input():
    enc = Encoder(16, depth=2, heads=2, dropout=0.0, window=2).eval()
    x, mask = _batch([7, 3])
    out = enc(Tokens(x, mask))
    torch.testing.assert_close(out[1, :3], enc(x[1:, :3])[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["sdpa", "linear"])
def test_without_positions_encoder_is_permutation_equivariant(kernel):
    enc = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none", kernel=kernel).eval()
    x = torch.randn(2, 8, 16)
    perm = torch.randperm(8)
    torch.testing.assert_close(enc(x)[:, perm], enc(x[:, perm]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary"])
def test_with_positions_encoder_is_not_permutation_equivariant(positional):
    enc = Encoder(16, depth=2, heads=4, dropout=0.0, positional=positional, max_len=8).eval()
    x = torch.randn(2, 8, 16)
    perm = torch.arange(8).flip(0)
    assert not torch.allclose(enc(x)[:, perm], enc(x[:, perm]), atol=1e-3)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary"])
def test_positional_encoding_changes_the_output(positional):
    """The seed's pitfall: a PE computed and then discarded. The output must differ from none."""
    torch.manual_seed(0)
    with_pe = Encoder(16, 1, 2, dropout=0.0, positional=positional, max_len=8).eval()
    torch.manual_seed(0)
    without = Encoder(16, 1, 2, dropout=0.0, positional="none").eval()
    without.load_state_dict(with_pe.state_dict(), strict=False)
    x = torch.randn(3, 8, 16)  # batch 3 != length 8: a PE sliced along the batch axis would fail
    assert not torch.allclose(with_pe(x), without(x), atol=1e-4)


def test_learned_positional_past_max_len_raises_naming_both_lengths():
    enc = Encoder(16, 1, 2, positional="learned", max_len=128)
    enc(torch.randn(1, 128, 16))
    with pytest.raises(ValueError, match=r"sequence length 129 exceeds .*max_len=128"):
        enc(torch.randn(1, 129, 16))
    with pytest.raises(ValueError, match="explicit max_len"):
        Encoder(16, 1, 2, positional="learned")


def test_sinusoidal_takes_any_length():
    enc = Encoder(16, 1, 2, positional="sinusoidal")
    assert enc(torch.randn(1, 3000, 16)).shape == (1, 3000, 16)


def test_rotary_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(8)
    q = torch.randn(8).expand(1, 1, 10, 8).contiguous()
    k = torch.randn(8).expand(1, 1, 10, 8).contiguous()
    rq, rk = rope(q, k)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]  # [10, 10]
    torch.testing.assert_close(scores.diagonal(0), scores.diagonal(0)[:1].expand(10), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(scores.diagonal(2), scores.diagonal(2)[:1].expand(8), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="even head width"):
        RotaryEmbedding(7)


def test_local_window_limits_the_receptive_field():
    """CNN = attention with a fixed receptive field: depth 2, window 1 -> sees ±2 tokens."""
    enc = Encoder(16, depth=2, heads=2, dropout=0.0, window=1).eval()
    x = torch.randn(1, 12, 16)
    y = x.clone()
    y[0, 9] = torch.randn(16)
    diff = (enc(x) - enc(y)).abs().sum(-1)[0]  # [12]
    assert (diff[7:12] > 1e-4).all()
    assert (diff[:7] < 1e-5).all()
    assert torch.equal(local_window_mask(4, 1).int(), torch.tensor(
        [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]))


def test_return_attention_gives_weights_per_layer():
    enc = Encoder(16, depth=3, heads=4, dropout=0.0).eval()
    x, mask = _batch([6, 4])
    out, weights = enc(x, mask=mask, return_attention=[-1])
    assert len(weights) == 1 and weights[0].shape == (2, 4, 6, 6)
    torch.testing.assert_close(out, enc(x, mask=mask))
    assert torch.equal(weights[0][1, :, :, 4:], torch.zeros(4, 6, 2))  # padded keys get no weight
    _, all_w = enc(x, mask=mask, return_attention=True)
    assert len(all_w) == 3


def test_encoder_errors():
    with pytest.raises(ValueError, match="unknown positional encoding 'absolute'"):
        Encoder(16, 1, 2, positional="absolute")
    with pytest.raises(ValueError, match="window attention needs a dense kernel"):
        Encoder(16, 1, 2, kernel="linear", window=3)
    with pytest.raises(ValueError, match=r"encoder input must be \[B, L, D=16\]"):
        Encoder(16, 1, 2)(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="pack_graphs must be true or false.*got 'yes'"):
        Encoder(16, 1, 2, pack_graphs="yes")


def test_edge_kernel_encoder_equals_dense_masked_encoder():
    """Graph attention two ways: a dense adjacency mask (sdpa) or an edge list (edge kernel)."""
    from seqattn.core import mask_to_edge_index

    torch.manual_seed(0)
    dense = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none", kernel="sdpa").eval()
    sparse = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none", kernel="edge").eval()
    sparse.load_state_dict(dense.state_dict())
    x, mask = _batch([7, 4])
    adj = (torch.rand(2, 7, 7) > 0.6) | torch.eye(7, dtype=torch.bool)  # self-loops: every node sees itself
    adj &= mask[:, None, :] & mask[:, :, None]  # no edges to or from padding
    out_dense = dense(x, mask=mask, attn_mask=adj)
    out_edge = sparse(Tokens(x, mask, edge_index=mask_to_edge_index(adj)))
    torch.testing.assert_close(out_edge, out_dense, atol=1e-5, rtol=1e-5)


def _attention_by_hand(mha, x, key_mask, bias, scale):
    """``softmax(q kᵀ · scale + bias + padding) v`` per head, then ``W^O``: ``x [B, L, D]`` -> ``[B, L, D]``."""
    b, length, d = x.shape
    h = mha.heads
    q = mha.q_proj(x).view(b, length, h, d // h).transpose(1, 2)
    k = mha.k_proj(x).view(b, length, h, d // h).transpose(1, 2)
    v = mha.v_proj(x).view(b, length, h, d // h).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) * scale + bias  # [B, H, L, L]
    scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, length, d)
    return mha.out_proj(out)


@pytest.mark.parametrize("kernel", ["sdpa", "math"])
@pytest.mark.parametrize("attn_scale", [None, 1.0])
def test_relative_bias_and_scale_enter_the_scores_as_written(kernel, attn_scale):
    """One layer with a relative position bias (random table) and the score scale: its attention equals
    the formula by hand, ``bias[h, i, j] = table[clip(j - i) + M, h]`` added to the scaled scores."""
    torch.manual_seed(0)
    enc = Encoder(16, depth=1, heads=4, dropout=0.0, kernel=kernel, positional="none", relative_bias=2,
                  attn_scale=attn_scale).eval()
    with torch.no_grad():
        enc.relative_bias.table.normal_()
    x, mask = _batch([7, 4])
    layer = enc.layers[0]
    got = layer.attn(layer.norm1(x), plan=enc.plan(x, mask), bias=enc.relative_bias(7))
    scale = 4 ** -0.5 if attn_scale is None else attn_scale  # head width 16 / 4 = 4
    want = _attention_by_hand(layer.attn, layer.norm1(x), mask, enc.relative_bias(7), scale)
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, :4], want[1, :4], atol=1e-5, rtol=1e-5)


def test_relative_bias_encoder_pads_invariantly_learns_and_sees_direction():
    torch.manual_seed(0)
    enc = Encoder(16, depth=2, heads=4, dropout=0.0, positional="rotary", relative_bias=3).eval()
    with torch.no_grad():
        enc.relative_bias.table.normal_()
    lengths = [9, 5, 1]
    x, mask = _batch(lengths)
    out = enc(x, mask=mask)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(out[i, :n], enc(x[i : i + 1, :n])[0], atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert enc.relative_bias.table.grad.abs().sum() > 0  # the bias is trained
    plain = Encoder(16, depth=1, heads=2, dropout=0.0, positional="none", relative_bias=2).eval()
    with torch.no_grad():
        plain.relative_bias.table.normal_()
    x = torch.randn(1, 6, 16)
    flip = torch.arange(6).flip(0)
    # without other positions, reversing the sentence is not a permutation symmetry: left != right
    assert not torch.allclose(plain(x)[:, flip], plain(x[:, flip]), atol=1e-4)


def test_relative_bias_and_scale_reject_bad_values():
    with pytest.raises(ValueError, match="relative_bias"):
        Encoder(16, 1, 2, relative_bias=-1)
    with pytest.raises(ValueError, match="relative_bias needs a dense kernel"):
        Encoder(16, 1, 2, relative_bias=2, kernel="linear")
    with pytest.raises(ValueError, match="scale must be > 0"):
        Encoder(16, 1, 2, attn_scale=0.0)


def test_conv_module_is_the_conformer_formula_and_ignores_padding():
    from seqattn.core.encoder import ConvModule
    torch.manual_seed(0)
    conv = ConvModule(8, 5).eval()
    x = torch.randn(1, 7, 8)
    h = torch.nn.functional.glu(x @ conv.inner.weight.T + conv.inner.bias, dim=-1)  # [1, 7, 8]
    by_hand = torch.nn.functional.conv1d(torch.nn.functional.pad(h.transpose(1, 2), (2, 2)), conv.depthwise.weight,
                                         conv.depthwise.bias, groups=8).transpose(1, 2)  # zeros beyond the ends
    by_hand = torch.nn.functional.layer_norm(by_hand, (8,), conv.norm.weight, conv.norm.bias)
    by_hand = torch.nn.functional.silu(by_hand) @ conv.outer.weight.T + conv.outer.bias
    torch.testing.assert_close(conv(x), by_hand)
    # position 0 reads positions 0..2 only (kernel 5, centred)
    x.requires_grad_(True)
    conv(x)[0, 0].sum().backward()
    assert x.grad[0, :3].abs().sum() > 0 and x.grad[0, 3:].abs().sum() == 0


def test_conv_kernel_encoder_pads_invariantly_and_sees_order():
    torch.manual_seed(0)
    enc = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none", conv_kernel=3).eval()
    lengths = [9, 5, 1]
    x, mask = _batch(lengths)  # padding holds random values: the convolution must not read them
    out = enc(x, mask=mask)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(out[i, :n], enc(x[i : i + 1, :n])[0], atol=1e-5, rtol=1e-5)
    y = torch.randn(2, 8, 16)
    perm = torch.arange(8).flip(0)
    assert not torch.allclose(enc(y)[:, perm], enc(y[:, perm]), atol=1e-4)  # no positions, yet order matters
    plain = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none")
    assert set(enc.state_dict()) - set(plain.state_dict())  # the convolution's own parameters
    assert all("conv" in k for k in set(enc.state_dict()) - set(plain.state_dict()))


def test_conv_module_leaves_out_global_tokens():
    torch.manual_seed(0)
    enc = Encoder(16, depth=1, heads=2, dropout=0.0, positional="none", conv_kernel=3).eval()
    conv = enc.layers[0].conv
    seen = {}
    conv.register_forward_hook(lambda m, args, out: seen.update(mask=args[1], out=out))
    x = torch.randn(2, 6, 16)
    enc(Tokens(x, torch.tensor([[True] * 6, [True] * 4 + [False] * 2]), num_global=1))
    assert seen["mask"][:, 0].tolist() == [False, False] and seen["mask"][1].tolist() == [False] + [True] * 3 + [False] * 2
    assert seen["out"][:, 0].abs().sum() == 0  # the CLS token gets no convolution branch
    h = torch.randn(1, 5, 16, requires_grad=True)
    keep = torch.tensor([[False, True, True, True, True]])
    conv(h, keep)[0, 1:].sum().backward()
    assert h.grad[0, 0].abs().sum() == 0  # the frames never read position 0


def test_conv_layers_put_the_module_in_the_named_layers_only():
    """conv_layers=[1]: layer 1 has the convolution module, layer 0 none; the output equals the layers run by hand
    (layer 0 the plain layer, layer 1 with its module), and a graph batch is refused only while some layer convolves."""
    torch.manual_seed(0)
    enc = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none", conv_kernel=3, conv_layers=[1]).eval()
    assert enc.layers[0].conv is None and enc.layers[1].conv is not None
    every = Encoder(16, depth=2, heads=4, dropout=0.0, positional="none", conv_kernel=3).eval()
    assert all(layer.conv is not None for layer in every.layers) and every.conv_layers == {0, 1}
    assert set(every.state_dict()) - set(enc.state_dict()) == {k for k in every.state_dict() if k.startswith(
        "layers.0.") and "conv" in k}  # layer 0's module only
    x, mask = _batch([6, 4])
    out = enc(x, mask=mask)
    by_hand = enc.norm(enc.layers[1](enc.layers[0](x, mask), mask)).masked_fill(~mask.unsqueeze(-1), 0.0)
    torch.testing.assert_close(out, by_hand)
    edges = torch.tensor([[0, 1], [1, 0]])
    graph = Tokens(torch.randn(1, 2, 16), torch.ones(1, 2, dtype=torch.bool), edge_index=edges)
    none = Encoder(16, 2, 4, positional="none", conv_kernel=3, conv_layers=[])
    assert all(layer.conv is None for layer in none.layers)
    none(graph)  # no layer convolves: a graph is fine
    with pytest.raises(ValueError, match="conv_kernel=3 convolves over positions in order.*graph"):
        enc(graph)


@pytest.mark.parametrize("bad", [[2], [-1], [0, 0], [True], ["1"], "1", 1.0])
def test_bad_conv_layers_are_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match=r"conv_layers must be distinct layer indices in \[0, depth=2\) \(the layers "
                                         r"with the convolution module; null = every layer\), got"):
        Encoder(16, 2, 4, conv_kernel=3, conv_layers=bad)


def test_conv_layers_without_a_conv_kernel_are_refused():
    with pytest.raises(ValueError, match=r"conv_layers=\[0\] names layers for the convolution module, but "
                                         r"conv_kernel=0"):
        Encoder(16, 2, 4, conv_layers=[0])
    assert all(layer.conv is None for layer in Encoder(16, 2, 4, conv_layers=[]).layers)  # nothing named: fine
    plain = Encoder(16, 2, 4)  # no kernel: no layer has the module, whatever conv_layers' default
    assert plain.conv_layers == frozenset() and not plain.has_conv


def test_an_uneven_head_split_is_named_before_the_positional_encoding_sees_it():
    # 62 / 4 heads: the rotary encoding would otherwise complain about a head width of 15
    for positional in ("rotary", "sinusoidal", "none"):
        with pytest.raises(ValueError, match="dim_k=62 must be divisible by heads=4"):
            Encoder(62, 1, 4, positional=positional)


def test_conv_kernel_is_checked():
    for bad in (2, -1, 1.5):
        with pytest.raises(ValueError, match="conv_kernel must be an odd int"):
            Encoder(16, 1, 2, conv_kernel=bad)
    enc = Encoder(16, 1, 2, conv_kernel=3, positional="none")
    edges = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="conv_kernel=3 convolves over positions in order.*graph"):
        enc(Tokens(torch.randn(1, 2, 16), torch.ones(1, 2, dtype=torch.bool), edge_index=edges))


@pytest.mark.parametrize("features", ["none", "bias", "bias+attr"])
def test_packed_graph_layers_equal_the_padded_layers(features):
    """A padded graph batch on the edge path runs its layers on the real tokens only (pack_graphs): the
    outputs (padding: zero) and the gradients of the input, the edge bias / features and every parameter
    equal the padded layout's, with an initial residual and edges into padding in the batch."""
    from seqattn.core import mask_to_edge_index

    torch.manual_seed(0)
    edge_dim = 3 if "attr" in features else 0
    kwargs = dict(depth=2, heads=4, dropout=0.0, positional="none", kernel="sdpa", graph_path="edge",
                  edge_dim=edge_dim, initial_residual=0.2)
    packed = Encoder(16, **kwargs)
    padded = Encoder(16, pack_graphs=False, **kwargs)
    padded.load_state_dict(packed.state_dict())
    x, mask = _batch([7, 3, 5])
    adj = (torch.rand(3, 7, 7) > 0.5) | torch.eye(7, dtype=torch.bool)
    adj &= mask[:, :, None]  # queries are real; keys may be padding (the plan drops those edges)
    edge_index = mask_to_edge_index(adj)
    e = edge_index.shape[1]
    bias = torch.randn(e, 4, requires_grad=True) if features != "none" else None
    attr = torch.randn(e, edge_dim, requires_grad=True) if edge_dim else None
    outs, grads = [], []
    for enc in (packed, padded):
        xi = x.clone().requires_grad_()
        out = enc(Tokens(xi, mask, edge_index=edge_index, edge_bias=bias, edge_attr=attr))
        assert enc.last_graph_path == "edge"
        # the plan's log line says whether the padding was skipped: 15 real tokens of 3 x 7
        assert ("packed: 15 real tokens of 3×7" in enc.last_plan["summary"]) == enc.pack_graphs
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        outs.append(out)
        grads.append([xi.grad] + [t.grad.clone() for t in (bias, attr) if t is not None]
                     + [p.grad for p in enc.parameters()])
        for t in (bias, attr):
            if t is not None:
                t.grad = None
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    assert torch.equal(outs[0][~mask], torch.zeros_like(outs[0][~mask]))
    assert len(grads[0]) == len(grads[1])
    for g0, g1 in zip(*grads):
        torch.testing.assert_close(g0, g1, atol=1e-5, rtol=1e-4)


def test_pack_edge_plan_renumbers_real_tokens_and_drops_edges_to_padding():
    """pack_edge_plan: the real tokens in order, edges renumbered into them, edges touching padding
    dropped with their bias rows; nothing to pack (no padding, another path) -> None."""
    from seqattn.core import plan_attention
    from seqattn.core.plan import pack_edge_plan

    mask = torch.tensor([[True, True, False], [True, False, False]])
    # flattened b*3+l: (0->1), (1->0), (2->1) from padding, (3->3)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 0, 1, 3]])
    bias = torch.arange(8.0).view(4, 2)
    plan = plan_attention(2, 3, heads=2, dim=8, device=torch.device("cpu"), mask=mask, edge_index=edge_index,
                          edge_bias=bias, graph_path="edge")
    tokens, packed = pack_edge_plan(plan)
    assert tokens.tolist() == [0, 1, 3]
    assert (packed.batch, packed.length, packed.path, packed.mask) == (1, 3, "edge", None)
    assert packed.edge_index.tolist() == [[0, 1, 2], [1, 0, 2]]
    assert packed.edge_bias.tolist() == [[0.0, 1.0], [2.0, 3.0], [6.0, 7.0]]
    full = plan_attention(2, 3, heads=2, dim=8, device=torch.device("cpu"), edge_index=edge_index,
                          edge_bias=bias, graph_path="edge")
    assert pack_edge_plan(full) is None
    dense = plan_attention(2, 3, heads=2, dim=8, device=torch.device("cpu"), mask=mask, edge_index=edge_index,
                           edge_bias=bias, graph_path="dense")
    assert pack_edge_plan(dense) is None
