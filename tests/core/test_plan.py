"""Every planned attention path equals the dense ``math`` reference: values and gradients, with
padding, global tokens and rows that have nothing to attend to."""

import pytest
import torch

from seqattn.core import Encoder, Tokens, mask_to_edge_index
from seqattn.core.kernels import math_attention
from seqattn.core.masks import grid_window_mask, local_window_mask, structure_mask
from seqattn.core.plan import plan_attention
from seqattn.core.graph_cost import edges_to_dense


def _qkv(b, h, length, d, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, length, d, generator=g, dtype=dtype).requires_grad_() for _ in range(3)]


def _lengths_mask(lengths, length):
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # [B, L]


def _reference(q, k, v, struct, mask, scale=None):
    """math with the structure AND key padding, and padded queries as rows with nothing allowed."""
    ref = struct
    if mask is not None:
        pad = mask[:, None, None, :] & mask[:, None, :, None]  # [B, 1, L, S]
        ref = pad if ref is None else (ref & pad if ref.dtype == torch.bool else ref.masked_fill(~pad, float("-inf")))
    return math_attention(q, k, v, ref, 0.0, scale)


def _check(plan, q, k, v, struct, mask, expected_path, atol=2e-5):
    """The plan's output and input gradients equal ``math``'s on both branches of every kernel: the
    training call without weights (on CPU often a plain ``F.scaled_dot_product_attention``) and the
    call with weights (the kernel's own weights or its logsumexp), with the default ``scale``; and
    the training call with an explicit one."""
    assert plan.path == expected_path, plan.describe()
    g = torch.Generator().manual_seed(7)
    probe = torch.randn(q.shape[:-1] + (v.shape[-1],), generator=g)
    tensors = [t for t in (q, k, v) if t.requires_grad]
    for scale, branches in ((None, (False, True)), (0.7, (False,))):
        ref, ref_w = _reference(q, k, v, struct, mask, scale)
        want = torch.autograd.grad((ref * probe).sum(), tensors)
        for need_weights in branches:
            out, weights = plan.attend(q, k, v, scale=scale, need_weights=need_weights)
            what = f"need_weights={need_weights}, scale={scale}"
            torch.testing.assert_close(out, ref, atol=atol, rtol=1e-4, msg=lambda m: f"{what}: {m}")
            if need_weights:
                torch.testing.assert_close(weights, ref_w.detach(), atol=atol, rtol=1e-4,
                                           msg=lambda m: f"{what}: {m}")
            else:
                assert weights is None
            got = torch.autograd.grad((out * probe).sum(), tensors)
            for a, b in zip(got, want):
                assert torch.isfinite(a).all(), what
                torch.testing.assert_close(a, b, atol=atol, rtol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.fixture(params=["flash", "flash_one_block_per_chunk", "autograd"])
def band_kernel(request, monkeypatch):
    """The band kernel's three ways: the chunked CPU flash function with its default chunks, with one
    block per chunk (the block-range tiles and the overlap-add across chunks), and the autograd path
    (dropout, GPU, compile)."""
    import seqattn.core.band as band

    if request.param == "flash_one_block_per_chunk":
        monkeypatch.setattr(band, "CHUNK_ELEMENTS", 1)
    elif request.param == "autograd":
        monkeypatch.setattr(band, "cpu_flash_available", lambda *a, **k: False)
    return request.param


@pytest.mark.parametrize("window,causal", [(3, False), (40, False), (5, True), (0, False)])
@pytest.mark.parametrize("lengths", [None, [150, 97, 0]])
@pytest.mark.parametrize("num_global", [0, 1])
def test_band_equals_math_1d(window, causal, lengths, num_global, band_kernel):
    b, h, length, d = 3, 2, 150, 8
    mask = None if lengths is None else _lengths_mask(lengths, length)
    if mask is not None and num_global:
        mask[:, :num_global] = True
    q, k, v = _qkv(b, h, length, d)
    plan = plan_attention(b, length, heads=h, dim=h * d, device=q.device, mask=mask, window=window, causal=causal,
                          num_global=num_global, path="band")
    struct = structure_mask(length, num_global=num_global, window=window, causal=causal)[None, None]
    _check(plan, q, k, v, struct, mask, "band")
    assert plan.band.allowed.any(-1).all()  # no row left with nothing (some backends give NaN there)


@pytest.mark.parametrize("grid,k_win", [((12, 11), 3), ((9, 16), 5), ((4, 4), 9)])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("num_global", [0, 1])
def test_band_equals_math_grid(grid, k_win, padded, num_global, band_kernel):
    b, h, d = 2, 2, 8
    length = grid[0] * grid[1] + num_global
    mask = None
    if padded:  # the second image is smaller: its padded pixels (bottom rows) are masked
        mask = torch.ones(b, length, dtype=torch.bool)
        mask[1, num_global + grid[1] * (grid[0] // 2):] = False
    q, k, v = _qkv(b, h, length, d, seed=3)
    plan = plan_attention(b, length, heads=h, dim=h * d, device=q.device, mask=mask, grid=grid, grid_window=k_win,
                          num_global=num_global, path="band")
    struct = structure_mask(length, num_global=num_global, grid=grid, grid_window=k_win)[None, None]
    _check(plan, q, k, v, struct, mask, "band")


def test_structure_mask_matches_the_mask_helpers():
    assert torch.equal(structure_mask(10, window=2), local_window_mask(10, 2))
    assert torch.equal(structure_mask(20, grid=(4, 5), grid_window=3), grid_window_mask(4, 5, 3))
    s = structure_mask(5, num_global=1, window=0)
    assert s[0].all() and s[:, 0].all() and torch.equal(s[1:, 1:], torch.eye(4, dtype=torch.bool))
    assert structure_mask(7) is None


@pytest.fixture(params=["flash", "autograd"])
def varlen_kernel(request, monkeypatch):
    """Per-bucket dispatch through the CPU flash function, or through autograd (dropout, GPU, compile)."""
    if request.param == "autograd":
        import seqattn.core.varlen as varlen

        monkeypatch.setattr(varlen, "cpu_flash_available", lambda *a, **k: False)
    return request.param


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_equals_math(causal, varlen_kernel):
    b, h, length, d = 6, 2, 140, 8
    lengths = [140, 30, 120, 0, 131, 64]
    mask = _lengths_mask(lengths, length)
    q, k, v = _qkv(b, h, length, d, seed=1)
    path = "varlen" if not causal else "causal"
    plan = plan_attention(b, length, heads=h, dim=h * d, device=q.device, mask=mask, causal=causal, path=path)
    struct = structure_mask(length, causal=causal)
    _check(plan, q, k, v, None if struct is None else struct[None, None], mask, path)
    if not causal:
        assert len(plan.varlen.buckets) >= 3 and plan.pairs < b * length * length


def test_varlen_is_planned_only_for_right_padding_and_when_it_saves_work():
    b, h, length = 4, 2, 256
    spread = _lengths_mask([256, 40, 60, 100], length)
    assert plan_attention(b, length, heads=h, dim=16, device=torch.device("cpu"), mask=spread).path == "varlen"
    even = _lengths_mask([256, 250, 256, 240], length)
    assert plan_attention(b, length, heads=h, dim=16, device=torch.device("cpu"), mask=even).path == "dense"
    holes = spread.clone()
    holes[0, 3] = False  # not a prefix: the per-sequence slices would be wrong
    assert plan_attention(b, length, heads=h, dim=16, device=torch.device("cpu"), mask=holes).path == "dense"


def test_causal_without_padding_uses_is_causal():
    b, h, length, d = 2, 2, 33, 8
    q, k, v = _qkv(b, h, length, d)
    plan = plan_attention(b, length, heads=h, dim=16, device=q.device, causal=True)
    _check(plan, q, k, v, structure_mask(length, causal=True)[None, None], None, "causal")


def _graph(b=3, n=20, heads=2, seed=0, isolated=True):
    g = torch.Generator().manual_seed(seed)
    lengths = [n, n - 7, n - 3][:b]
    mask = _lengths_mask(lengths, n)
    adj = (torch.rand(b, n, n, generator=g) > 0.7) | torch.eye(n, dtype=torch.bool)
    adj &= mask[:, None, :] & mask[:, :, None]
    if isolated:
        adj[0, 4] = False  # a real node with no incoming edge at all: nothing to attend to
    edge_index = mask_to_edge_index(adj)
    bias = torch.randn(edge_index.shape[1], heads, generator=g).requires_grad_()
    return mask, edge_index, bias


@pytest.mark.parametrize("n", [20, 150])  # SmallBiasedAttention and the CPU flash kernel + sparse bias gradient
def test_biased_graph_path_equals_math_with_the_bias_gradient(n):
    b, h, d = 3, 2, 8
    mask, edge_index, bias = _graph(b, n, h)
    q, k, v = _qkv(b, h, n, d, seed=2)
    plan = plan_attention(b, n, heads=h, dim=h * d, device=q.device, mask=mask, edge_index=edge_index,
                          edge_bias=bias, graph_path="dense")
    assert plan.path == "biased"
    probe = torch.randn(b, h, n, d)
    for scale in (None, 0.7):
        dense = edges_to_dense(edge_index, bias, b, n, h, torch.float32)  # the reference: bias inside the dense mask
        ref, ref_w = _reference(q, k, v, dense, mask, scale)
        want = torch.autograd.grad((ref * probe).sum(), (q, k, v, bias))
        for need_weights in (False, True):  # the training call and the call with weights
            out, weights = plan.attend(q, k, v, scale=scale, need_weights=need_weights)
            torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
            if need_weights:
                torch.testing.assert_close(weights, ref_w.detach(), atol=2e-5, rtol=1e-4)
            got = torch.autograd.grad((out * probe).sum(), (q, k, v, bias))
            for a, w in zip(got, want):
                torch.testing.assert_close(a, w, atol=2e-5, rtol=1e-4)
    assert (out[0, :, 4] == 0).all()  # the node without incoming edges gets zeros, not NaN


def test_edge_path_drops_padded_sources_once_and_equals_math():
    b, h, n, d = 3, 2, 20, 8
    mask, edge_index, bias = _graph(b, n, h)
    padded_src = torch.tensor([[n + 19], [n + 0]])  # an edge from graph 1's padded node 19 to its node 0
    edge_index = torch.cat([edge_index, padded_src], dim=1)
    bias = torch.cat([bias.detach(), torch.zeros(1, h)]).requires_grad_()
    q, k, v = _qkv(b, h, n, d, seed=4)
    plan = plan_attention(b, n, heads=h, dim=h * d, device=q.device, mask=mask, edge_index=edge_index,
                          edge_bias=bias, graph_path="edge")
    assert plan.path == "edge" and plan.edge_index.shape[1] == edge_index.shape[1] - 1
    for scale in (None, 0.7):
        out, _ = plan.attend(q, k, v, scale=scale)
        ref, _ = _reference(q, k, v, edges_to_dense(edge_index, bias, b, n, h, torch.float32), mask, scale)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_dense_attn_mask_with_dead_rows():
    b, h, length, d = 2, 2, 12, 8
    g = torch.Generator().manual_seed(5)
    attn = torch.rand(b, length, length, generator=g) > 0.6
    attn[1, 3] = False  # nothing to attend to
    mask = _lengths_mask([12, 9], length)
    q, k, v = _qkv(b, h, length, d)
    plan = plan_attention(b, length, heads=h, dim=16, device=q.device, mask=mask, attn_mask=attn)
    _check(plan, q, k, v, attn[:, None], mask, "dense")


def test_weights_for_some_items_only():
    b, h, length, d = 4, 2, 150, 8
    q, k, v = _qkv(b, h, length, d)
    plan = plan_attention(b, length, heads=h, dim=16, device=q.device, window=10, path="band")
    _, weights = plan.attend(q, k, v, need_weights=True, items=[2])
    _, all_w = plan.attend(q, k, v, need_weights=True)
    assert weights.shape == (1, h, length, length)
    torch.testing.assert_close(weights[0], all_w[2])


def test_flex_attention_block_mask_equals_math_on_cpu_inference():
    pytest.importorskip("torch.nn.attention.flex_attention")
    b, h, length, d = 2, 2, 64, 8
    mask = _lengths_mask([64, 41], length)
    with torch.no_grad():
        q, k, v = (t.detach() for t in _qkv(b, h, length, d))
        plan = plan_attention(b, length, heads=h, dim=16, device=q.device, mask=mask, window=5, num_global=1,
                              flex=True, path="flex")
        assert plan.path == "flex"
        out, _ = plan.attend(q, k, v)
        ref, _ = _reference(q, k, v, structure_mask(length, num_global=1, window=5)[None, None], mask)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


# --------------------------------------------------------------------------- the encoder plans


def test_encoder_planned_paths_equal_the_math_encoder():
    """The whole encoder: windows (band), lengths (varlen), graphs (biased) -- same outputs and
    parameter gradients as the same weights on the math kernel."""
    cases = []
    x = torch.randn(3, 160, 16)
    mask = _lengths_mask([160, 70, 20], 160)
    cases.append(({"window": 6}, Tokens(x, mask), "band"))
    cases.append(({}, Tokens(x, mask), "varlen"))
    gmask, edge_index, bias = _graph(3, 20, 4)
    cases.append(({"positional": "none"}, Tokens(torch.randn(3, 20, 16), gmask, edge_index=edge_index,
                                               edge_bias=bias.detach()), "biased"))
    for kwargs, tokens, path in cases:
        torch.manual_seed(0)
        fast = Encoder(16, depth=2, heads=4, dropout=0.0, graph_path="dense", **kwargs)
        ref = Encoder(16, depth=2, heads=4, dropout=0.0, kernel="math", graph_path="dense", **kwargs)
        ref.load_state_dict(fast.state_dict())
        a, b = fast(tokens), ref(tokens)
        assert fast.last_plan["path"] == path
        torch.testing.assert_close(a, b, atol=3e-5, rtol=1e-4)
        a.square().sum().backward()
        b.square().sum().backward()
        for (name, pa), pb in zip(fast.named_parameters(), ref.parameters()):
            torch.testing.assert_close(pa.grad, pb.grad, atol=3e-4, rtol=1e-3, msg=name)


def test_return_attention_for_one_layer_does_not_change_the_output():
    enc = Encoder(16, depth=3, heads=4, dropout=0.0).eval()
    x = torch.randn(2, 40, 16)
    mask = _lengths_mask([40, 25], 40)
    out, weights = enc(x, mask=mask, return_attention=[1], attention_items=[1])
    assert weights[0].shape == (1, 4, 40, 40)
    torch.testing.assert_close(out, enc(x, mask=mask))
    torch.testing.assert_close(weights[0].sum(-1)[0, :, :25], torch.ones(4, 25))
    assert (weights[0][0, :, 25:] == 0).all()  # padded queries


@pytest.mark.parametrize("path", ["band", "varlen"])
def test_band_and_varlen_in_bf16_follow_the_float32_reference(path):
    """bf16 inputs (what autocast hands the layers) through the flash functions: the kernel's
    logsumexp dtype round-trips into backward; values and gradients match float32 math at bf16
    precision."""
    b, h, length, d = 3, 2, 150, 8
    lengths = [150, 97, 40]
    mask = _lengths_mask(lengths, length)
    q32, k32, v32 = _qkv(b, h, length, d, seed=5)
    q, k, v = (t.detach().bfloat16().requires_grad_() for t in (q32, k32, v32))
    kwargs = {"window": 6} if path == "band" else {}
    plan = plan_attention(b, length, heads=h, dim=h * d, device=q.device, mask=mask, path=path, **kwargs)
    assert plan.path == path
    out, _ = plan.attend(q, k, v)
    assert out.dtype == torch.bfloat16
    struct = structure_mask(length, **kwargs)
    ref, _ = _reference(q32, k32, v32, None if struct is None else struct[None, None], mask)
    real = mask[:, None, :, None]
    torch.testing.assert_close(out.float() * real, ref * real, atol=3e-2, rtol=3e-2)
    probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)) * real
    got = torch.autograd.grad((out.float() * probe).sum(), (q, k, v))
    want = torch.autograd.grad((ref * probe).sum(), (q32, k32, v32))
    for a, w in zip(got, want):
        torch.testing.assert_close(a.float(), w, atol=5e-2, rtol=5e-2)


def test_biased_mask_built_at_the_edges_equals_the_dense_construction():
    """The biased path's mask from the edges alone equals the dense construction (edges_to_dense,
    key padding, dead rows revived), with edges from padded keys and a head whose every edge into
    one query is -inf (dead for that head only)."""
    from seqattn.core.masks import dead_rows, revive_dead_rows
    from seqattn.core.masks import combine_masks as combine
    from seqattn.core.plan import _biased_mask

    b, n, h = 3, 12, 2
    g = torch.Generator().manual_seed(4)
    mask = _lengths_mask([12, 7, 9], n)
    adj = (torch.rand(b, n, n, generator=g) > 0.6)  # edges to and from padded nodes too
    adj[0, 3] = False  # a query with no edge at all
    adj[1, 2, :] = False
    adj[1, 2, [0, 5]] = True  # query 2 of graph 1: two edges ...
    edge_index = mask_to_edge_index(adj)
    bias = torch.randn(edge_index.shape[1], h, generator=g)
    src, dst = edge_index
    into = dst == 1 * n + 2
    bias[into, 1] = float("-inf")  # ... both -inf in head 1: dead there, alive in head 0
    hh = torch.arange(h)
    flat = (((dst // n)[:, None] * h + hh[None]) * n + (dst % n)[:, None]) * n + (src % n)[:, None]
    dense, rows = _biased_mask(edge_index, bias, flat, b, n, h, mask)
    ref = combine(edges_to_dense(edge_index, bias, b, n, h, torch.float32), mask[:, None, None, :])
    ref_rows = dead_rows(ref)
    torch.testing.assert_close(dense, revive_dead_rows(ref, ref_rows))
    assert torch.equal(rows, ref_rows)
    assert rows[1, 1, 2, 0] and not rows[1, 0, 2, 0] and rows[0, :, 3].all()


@pytest.mark.parametrize("with_bias,fill_bias", [(True, True), (True, False), (False, True)])
def test_packed_linear_equals_gather_linear_scatter_values_and_gradients(with_bias, fill_bias):
    """``PackedLinear`` (the real rows of a padded batch projected, saving the batch instead of a gathered copy):
    values and gradients of x, the weight and the bias equal index_select -> linear -> scatter; checked by
    gradcheck in double precision too."""
    from seqattn.core.varlen import PackedLinear, packed_linear

    torch.manual_seed(0)
    x = torch.randn(12, 5, dtype=torch.double, requires_grad=True)
    rows = torch.tensor([0, 1, 2, 6, 7, 11])
    weight = torch.randn(3, 5, dtype=torch.double, requires_grad=True)
    bias = torch.randn(3, dtype=torch.double, requires_grad=True) if with_bias else None
    y = packed_linear(x, rows, weight, bias, fill_bias)
    filled = bias.expand(12, 3) if (bias is not None and fill_bias) else torch.zeros(12, 3, dtype=torch.double)
    ref = filled.clone().index_copy(0, rows, torch.nn.functional.linear(x.index_select(0, rows), weight, bias))
    torch.testing.assert_close(y, ref)
    probe = torch.randn(12, 3, dtype=torch.double)
    inputs = [x, weight] + ([bias] if bias is not None else [])
    got = torch.autograd.grad((y * probe).sum(), inputs)
    want = torch.autograd.grad((ref * probe).sum(), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert torch.autograd.gradcheck(lambda a, w, c: PackedLinear.apply(a, rows, w, c, fill_bias),
                                    (x, weight, bias))


def test_the_packed_layer_keeps_no_more_for_backward_than_the_padded_layer():
    """Spread lengths: the packed projections keep the layer's input and the kernel's output for backward, not
    gathered copies of them, so the tensors saved for backward take no more memory than the padded layer's
    but the index of the real rows (before: 1.14x here, 1.19x at the bench's varlen cell)."""
    from seqattn.core.attention import MultiHeadAttention

    torch.manual_seed(0)
    b, length, dim = 4, 200, 32
    mask = _lengths_mask([200, 20, 90, 45], length)
    layer = MultiHeadAttention(dim, 4)
    x = torch.randn(b, length, dim, requires_grad=True)

    def saved_bytes(packed: bool) -> int:
        plan = plan_attention(b, length, heads=4, dim=dim, device=x.device, mask=mask)
        assert plan.path == "varlen" and plan.varlen.tokens is not None
        if not packed:
            plan.varlen.tokens = None
        storages = {}

        def keep(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            layer(x, plan=plan)
        return sum(storages.values())

    packed, padded = saved_bytes(packed=True), saved_bytes(packed=False)
    assert packed <= 1.02 * padded, (packed, padded)  # + the real rows' index (2.8 kB here)


def test_packed_projections_equal_the_padded_layer():
    """Spread lengths: the layer projects only the real tokens; outputs (padded rows too: the output
    bias) and the gradients of x and every parameter equal the padded layer's."""
    import copy

    from seqattn.core.attention import MultiHeadAttention

    torch.manual_seed(0)
    b, length, dim = 4, 160, 16
    lengths = [160, 20, 75, 0]
    mask = _lengths_mask(lengths, length)
    layer = MultiHeadAttention(dim, 2)
    other = copy.deepcopy(layer)
    x = torch.randn(b, length, dim, requires_grad=True)
    plan = plan_attention(b, length, heads=2, dim=dim, device=x.device, mask=mask)
    assert plan.path == "varlen" and plan.varlen.tokens is not None and plan.varlen.tokens.numel() == sum(lengths)
    out = layer(x, plan=plan)
    padded_plan = plan_attention(b, length, heads=2, dim=dim, device=x.device, mask=mask)
    padded_plan.varlen.tokens = None  # the padded projections
    x2 = x.detach().clone().requires_grad_()
    ref = other(x2, plan=padded_plan)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    probe = torch.randn(out.shape)
    (out * probe).sum().backward()
    (ref * probe).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(layer.named_parameters(), other.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_packed_projections_under_bf16_autocast_equal_the_padded_layer():
    """Under CPU autocast (``precision=bf16-mixed``) the packed layer computes in bf16 as the padded layer does:
    the same output dtype and values, the same gradients (fp32 parameters)."""
    import copy

    from seqattn.core.attention import MultiHeadAttention

    torch.manual_seed(0)
    b, length, dim = 4, 200, 32
    mask = _lengths_mask([200, 20, 90, 45], length)
    layer = MultiHeadAttention(dim, 4)
    other = copy.deepcopy(layer)
    x = torch.randn(b, length, dim, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    plan = plan_attention(b, length, heads=4, dim=dim, device=x.device, mask=mask)
    padded_plan = plan_attention(b, length, heads=4, dim=dim, device=x.device, mask=mask)
    padded_plan.varlen.tokens = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = layer(x, plan=plan), other(x2, plan=padded_plan)
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref)
    out.float().square().sum().backward()
    ref.float().square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    for (name, p), q in zip(layer.named_parameters(), other.parameters()):
        assert p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_varlen_training_with_dropout_drops_each_buckets_weights_with_the_cheap_masks():
    """Spread lengths with dropout on the attention weights (CPU): every bucket through
    ``cpu_dropout_attention`` in bucket order (the cheap masks), its rows written back, the padded tails zero."""
    from seqattn.core.kernels import cpu_dropout_attention
    from seqattn.core.varlen import varlen_attention

    b, h, length, d = 5, 2, 120, 8
    lengths = [120, 30, 100, 0, 64]
    q, k, v = _qkv(b, h, length, d, seed=4)
    plan = plan_attention(b, length, heads=h, dim=h * d, device=q.device, mask=_lengths_mask(lengths, length),
                          path="varlen")
    torch.manual_seed(5)
    out = varlen_attention(q, k, v, plan.varlen, dropout_p=0.3)
    torch.manual_seed(5)
    expected = torch.zeros_like(out)
    for bucket in plan.varlen.buckets:
        if bucket.length == 0:
            continue
        m, rows = bucket.length, bucket.index
        piece = cpu_dropout_attention(q[rows, :, :m], k[rows, :, :m], v[rows, :, :m], bucket.key_mask, 0.3)
        expected[rows, :, :m] = piece
    real = _lengths_mask(lengths, length)[:, None, :, None]
    torch.testing.assert_close(out * real, expected * real)
    assert not torch.equal(out, varlen_attention(q, k, v, plan.varlen))  # the weights were dropped
