"""Every attention call goes through one planner: a batch of each structure reports its path and equals
the ``math`` kernel (outputs, and gradients of the inputs and of every parameter)."""

import copy

import pytest
import torch

from seqattn.core import Encoder, MultiHeadAttention, Tokens, mask_to_edge_index, prepend_global_token
from seqattn.core.attention_plan import KERNEL_OF_PATH, PATHS
from seqattn.core.flex import structure_mask_mod
from seqattn.core.masks import structure_mask
from seqattn.core.plan import plan_layer
from tests.core.structure_by_hand import allowed_by_hand

DIM, HEADS, EDGE_DIM = 16, 4, 3


def _lengths_mask(lengths, length):
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # [B, L]


def _graph(b=3, n=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = _lengths_mask([n, n - 7, n - 3][:b], n)
    adj = (torch.rand(b, n, n, generator=g) > 0.7) | torch.eye(n, dtype=torch.bool)
    adj &= mask[:, None, :] & mask[:, :, None]
    adj[0, 4] = False  # a real node with nothing to attend to
    edge_index = mask_to_edge_index(adj)
    return g, mask, edge_index


def _tokens(case: str) -> Tokens:
    g = torch.Generator().manual_seed(1)
    if case in ("padding", "varlen", "band", "causal_padded"):
        length = 40 if case == "padding" else 160
        x = torch.randn(3, length, DIM, generator=g)
        return Tokens(x, _lengths_mask([length, 70, 20], length), causal=case == "causal_padded")
    if case == "causal":
        return Tokens(torch.randn(2, 50, DIM, generator=g), causal=True)
    if case in ("grid_window", "window_and_grid_window"):
        x = torch.randn(2, 144, DIM, generator=g)
        mask = torch.ones(2, 144, dtype=torch.bool)
        mask[1, 96:] = False  # the second image is smaller: its bottom rows are padding
        tokens = Tokens(x, mask, grid=(12, 12), grid_window=3)
        return prepend_global_token(tokens, torch.randn(DIM, generator=g))  # a CLS token
    if case == "attn_mask":
        x = torch.randn(2, 30, DIM, generator=g)
        return Tokens(x, _lengths_mask([30, 22], 30), attn_mask=torch.rand(2, 30, 30, generator=g) > 0.5)
    g, mask, edge_index = _graph()
    x = torch.randn(3, 20, DIM, generator=g)
    e = edge_index.shape[1]
    bias = torch.randn(e, HEADS, generator=g) if case in ("graph_bias", "graph_bias_edge", "edge_attr_dense",
                                                          "edge_attr_edge") else None
    attr = torch.randn(e, EDGE_DIM, generator=g) if case.startswith("edge_attr") else None
    return Tokens(x, mask, edge_index=edge_index, edge_bias=bias, edge_attr=attr)


# case -> (encoder options, the path the planner reports)
CASES = {
    "padding": ({}, "dense"),
    "varlen": ({}, "varlen"),
    "band": ({"window": 6}, "band"),
    "grid_window": ({}, "band"),
    "window_and_grid_window": ({"window": 20}, "dense"),
    "causal": ({}, "causal"),
    "causal_padded": ({}, "causal"),
    "attn_mask": ({}, "dense"),
    "graph": ({"graph_path": "dense"}, "dense"),
    "graph_bias": ({"graph_path": "dense"}, "biased"),
    "graph_bias_edge": ({"graph_path": "edge"}, "edge"),
    "edge_attr_dense": ({"graph_path": "dense", "edge_dim": EDGE_DIM}, "math"),
    "edge_attr_edge": ({"graph_path": "edge", "edge_dim": EDGE_DIM}, "edge"),
}


def _inputs(tokens: Tokens) -> tuple[Tokens, list[torch.Tensor]]:
    """Fresh leaf copies of the float inputs (x, edge_bias, edge_attr) that require grad."""
    leaves = {}
    for name in ("x", "edge_bias", "edge_attr"):
        t = getattr(tokens, name)
        if t is not None:
            leaves[name] = t.detach().clone().requires_grad_()
    return tokens.replace(**leaves), list(leaves.values())


def _hand_built(tokens: Tokens, window: int | None) -> Tokens:
    """The same batch with its whole structure written out by hand as one dense ``[B, L, L]`` bool
    ``attn_mask`` (structure AND given mask AND key padding): a reference that needs no combiner."""
    b, length = tokens.x.shape[:2]
    allowed = torch.ones(b, length, length, dtype=torch.bool)
    struct = structure_mask(length, num_global=tokens.num_global, window=window, grid=tokens.grid,
                            grid_window=tokens.grid_window, causal=tokens.causal)
    if struct is not None:
        allowed = allowed & struct
    if tokens.attn_mask is not None:
        allowed = allowed & tokens.attn_mask
    if tokens.mask is not None:
        allowed = allowed & tokens.mask[:, None, :]
    return Tokens(tokens.x, tokens.mask, attn_mask=allowed)


def _assert_grads_equal(got, want, names):
    for a, b, name in zip(got, want, names):
        assert a is not None and b is not None, name
        torch.testing.assert_close(a, b, atol=3e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("case", list(CASES))
def test_each_structure_reports_its_path_and_equals_the_math_kernel(case):
    options, path = CASES[case]
    tokens = _tokens(case)
    positional = "none" if tokens.edge_index is not None or tokens.grid is not None else "sinusoidal"
    torch.manual_seed(0)
    fast = Encoder(DIM, depth=2, heads=HEADS, dropout=0.0, positional=positional, **options)
    # the reference: the dense math kernel (graphs: their dense blocks; else the structure written out by hand)
    ref_options = dict(options, graph_path="dense", window=None)
    ref = Encoder(DIM, depth=2, heads=HEADS, dropout=0.0, positional=positional, kernel="math", **ref_options)
    ref.load_state_dict(fast.state_dict())
    ref_tokens = tokens if tokens.edge_index is not None else _hand_built(tokens, options.get("window"))
    assert fast.plan(tokens).path == path  # asked before running
    assert ref.plan(ref_tokens).path == "math"

    fast_in, fast_leaves = _inputs(tokens)
    ref_in, ref_leaves = _inputs(ref_tokens)
    a, b = fast(fast_in), ref(ref_in)
    assert fast.last_plan["path"] == path and fast.last_plan["summary"].startswith("attention: ")
    torch.testing.assert_close(a, b, atol=3e-5, rtol=1e-4)
    probe = torch.randn(a.shape, generator=torch.Generator().manual_seed(3))
    (a * probe).sum().backward()
    (b * probe).sum().backward()
    names = [n for n, _ in fast.named_parameters()]
    _assert_grads_equal([p.grad for p in fast.parameters()], [p.grad for p in ref.parameters()], names)
    _assert_grads_equal([t.grad for t in fast_leaves], [t.grad for t in ref_leaves], ["x", "edge_bias", "edge_attr"])


@pytest.mark.parametrize("with_masks", [False, True])
def test_cross_attention_plans_a_dense_mask_over_l_by_s_and_equals_math(with_masks):
    torch.manual_seed(0)
    b, length, src, dim = 2, 7, 11, 16
    fast = MultiHeadAttention(dim, 4)
    ref = copy.deepcopy(fast)
    ref.kernel = "math"
    x = torch.randn(b, length, dim, requires_grad=True)
    ctx = torch.randn(b, src, dim, requires_grad=True)
    mask = _lengths_mask([11, 6], src) if with_masks else None
    attn = (torch.rand(length, src) > 0.3) if with_masks else None
    if with_masks:
        attn[2] = False  # a query with nothing to attend to: zeros
    plan = plan_layer(b, length, src, heads=4, mask=mask, attn_mask=attn)
    assert plan.path == ("dense" if with_masks else "none") and plan.key_length == src
    out = fast(x, mask, attn, context=ctx)
    hand = None if not with_masks else attn[None] & mask[:, None, :]  # [B, L, S] written out: no combiner
    want = ref(x, None, hand, context=ctx)
    torch.testing.assert_close(out, want, atol=2e-5, rtol=1e-4)
    got_g = torch.autograd.grad(out.square().sum(), [x, ctx, *fast.parameters()])
    want_g = torch.autograd.grad(want.square().sum(), [x, ctx, *ref.parameters()])
    _assert_grads_equal(got_g, want_g, ["x", "context"] + [n for n, _ in fast.named_parameters()])
    if with_masks:
        _, weights = fast(x, mask, attn, need_weights=True, context=ctx)
        assert weights.shape == (b, 4, length, src) and (weights[:, :, 2] == 0).all()


def test_the_one_combiner_ands_bool_masks_and_float_biases():
    from seqattn.core.masks import combine_masks

    a = torch.tensor([[True, True, False]])
    b = torch.tensor([[True, False, True]])
    bias = torch.tensor([[0.5, -1.0, 2.0]])
    assert combine_masks(None, None) is None and combine_masks(a, None) is a and combine_masks(None, b) is b
    assert torch.equal(combine_masks(a, b), torch.tensor([[True, False, False]]))
    inf = float("-inf")
    assert torch.equal(combine_masks(bias, b), torch.tensor([[0.5, inf, 2.0]]))
    assert torch.equal(combine_masks(a, bias), torch.tensor([[0.5, -1.0, inf]]))
    assert torch.equal(combine_masks(bias, bias), 2 * bias)


def test_the_table_has_one_kernel_per_path():
    assert set(KERNEL_OF_PATH) == set(PATHS) and all(callable(f) for f in KERNEL_OF_PATH.values())


def test_plan_without_running_the_layers_and_its_one_line_summary(monkeypatch):
    enc = Encoder(DIM, depth=4, heads=HEADS, window=64)
    for layer in enc.layers:  # asking for the plan must not run a layer
        monkeypatch.setattr(layer, "forward", lambda *a, **k: pytest.fail("a layer ran"))
    tokens = Tokens(torch.randn(2, 512, DIM), _lengths_mask([512, 300], 512))
    assert enc.plan(tokens).summary(len(enc.layers)) == "attention: band ±64 via the CPU flash kernel, 4 layers"
    both = Encoder(DIM, depth=1, heads=HEADS, window=5).plan(_tokens("window_and_grid_window"))
    assert both.path == "dense" and both.reason == "window and grid window together cannot use the band kernel"
    assert both.summary(1) == ("attention: dense mask + 1 global token via the CPU flash kernel (window and grid "
                               "window together cannot use the band kernel), 1 layer")
    short = Encoder(DIM, depth=1, heads=HEADS, window=3).plan(Tokens(torch.randn(1, 40, DIM)))
    assert "length 40 < 128" in short.summary()
    graph = Encoder(DIM, 2, HEADS, graph_path="edge").plan(_tokens("graph_bias"))
    assert graph.summary(2) == "attention: graph edges via the O(E) edge kernel, 2 layers"


@pytest.mark.parametrize("structure", [dict(window=3), dict(window=2, causal=True, num_global=1), dict(causal=True),
                                       dict(grid=(4, 5), grid_window=3, num_global=2),
                                       dict(grid=(4, 5), grid_window=3, window=6)])
def test_the_flex_mask_mod_follows_the_same_rules_as_structure_mask(structure):
    """The FlexAttention mask_mod allows exactly the pairs of the rules written out by hand (not
    structure_mask: both are built on structure_allows)."""
    length = 20 + structure.get("num_global", 0)
    mask = _lengths_mask([length, length - 5], length)
    mod = structure_mask_mod(length, mask=mask, **structure)
    idx = torch.arange(length)
    for b in range(2):
        got = mod(torch.tensor(b), torch.tensor(0), idx[:, None], idx[None, :])
        want = allowed_by_hand(length, **structure) & mask[b][None, :] | ~mask[b][:, None]
        assert torch.equal(got, want)


def test_a_plan_and_masks_together_are_refused():
    mha = MultiHeadAttention(DIM, 2)
    x = torch.randn(1, 5, DIM)
    plan = plan_layer(1, 5, 5, heads=2)
    with pytest.raises(ValueError, match="give either a plan or mask"):
        mha(x, torch.ones(1, 5, dtype=torch.bool), plan=plan)
