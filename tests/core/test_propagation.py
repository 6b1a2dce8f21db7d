"""Personalised-PageRank output propagation (``seqattn.core.propagation``, ``Encoder(output_propagation=k)``)."""

import pytest
import torch

from seqattn.core import Encoder
from seqattn.core.propagation import GraphOperator, ppr_propagate
from seqattn.core.tokens import Tokens


def _graph():
    """Two graphs padded to 5 nodes: a 5-cycle with a chord and a 3-path (2 padding rows); both directions."""
    n = 5
    local = [torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]]), torch.tensor([[0, 1], [1, 2]])]
    both = [torch.cat([e, e.flip(0)], dim=1) for e in local]
    edge_index = torch.cat([e + i * n for i, e in enumerate(both)], dim=1)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    return edge_index, mask, both, [5, 3]


def test_ppr_equals_the_dense_formula_per_graph_and_leaves_padding():
    """z_{t+1} = (1-α) Â z_t + α x with Â = D^-1/2 (A + I) D^-1/2, per graph of a padded batch (dense by hand)."""
    torch.manual_seed(0)
    edge_index, mask, local, sizes = _graph()
    x = torch.randn(2, 5, 3)
    got = ppr_propagate(x, edge_index, mask, steps=4, alpha=0.2)
    assert got.shape == x.shape
    for i, (e, size) in enumerate(zip(local, sizes)):
        a = torch.eye(size)
        a[e[1], e[0]] = 1.0  # row = target
        d = a.sum(1).rsqrt()
        a_hat = d[:, None] * a * d[None, :]
        z = x[i, :size]
        for _ in range(4):
            z = 0.8 * a_hat @ z + 0.2 * x[i, :size]
        torch.testing.assert_close(got[i, :size], z)
    torch.testing.assert_close(got[1, 3:], x[1, 3:])  # padding untouched, and it sent nothing
    # self-loops already in the edges (the graph adapter adds them) are not counted twice
    loops = torch.nonzero(mask.reshape(-1)).squeeze(1)
    with_loops = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    torch.testing.assert_close(ppr_propagate(x, with_loops, mask, 4, 0.2), got)
    assert ppr_propagate(x, edge_index, mask, 0, 0.2) is x
    torch.testing.assert_close(ppr_propagate(x, edge_index, mask, 3, 1.0), x)  # alpha 1: always restart


def test_ppr_commutes_with_a_node_permutation():
    torch.manual_seed(1)
    edge_index, mask, local, _ = _graph()
    x = torch.randn(1, 5, 4)
    e = local[0]
    perm = torch.randperm(5)
    inv = torch.argsort(perm)  # new position of old node j is inv[j]
    out = ppr_propagate(x, e, None, 5, 0.1)
    out_p = ppr_propagate(x[:, perm], inv[e], None, 5, 0.1)
    torch.testing.assert_close(out_p, out[:, perm])


@pytest.mark.parametrize("bad", [dict(steps=-1), dict(steps=1.5), dict(alpha=1.5), dict(alpha=-0.1)])
def test_ppr_rejects_bad_values(bad):
    edge_index, mask, _, _ = _graph()
    args = dict(steps=2, alpha=0.1) | bad
    with pytest.raises(ValueError, match="steps|alpha"):
        ppr_propagate(torch.zeros(2, 5, 3), edge_index, mask, **args)


def _tokens(x, mask, edge_index):
    loops = torch.nonzero(mask.reshape(-1)).squeeze(1)  # the adapter's self-loops
    return Tokens(x=x, mask=mask, edge_index=torch.cat([edge_index, torch.stack([loops, loops])], dim=1))


def test_encoder_output_propagation_changes_the_output_and_is_the_last_step():
    """``output_propagation=k`` = the plain encoder's output, then k PPR steps over the tokens' edges (padding
    zero); it changes the output; node permutation permutes it; a batch without edges is an error."""
    torch.manual_seed(0)
    edge_index, mask, local, _ = _graph()
    x = torch.randn(2, 5, 16)
    plain = Encoder(16, 2, 2, positional="none", dropout=0.0).eval()
    prop = Encoder(16, 2, 2, positional="none", dropout=0.0, output_propagation=3, propagation_alpha=0.3).eval()
    prop.load_state_dict(plain.state_dict())
    tokens = _tokens(x, mask, edge_index)
    base, out = plain(tokens), prop(tokens)
    assert out.shape == (2, 5, 16)
    assert not torch.allclose(out, base)
    want = ppr_propagate(base, tokens.edge_index, mask, 3, 0.3).masked_fill(~mask.unsqueeze(-1), 0.0)
    torch.testing.assert_close(out, want)
    assert not out[1, 3:].any()
    # permuting the nodes of the first graph permutes the output
    perm = torch.randperm(5)
    inv = torch.argsort(perm)
    one = _tokens(x[:1], mask[:1], local[0])
    moved = _tokens(x[:1, perm], mask[:1], inv[local[0]])
    torch.testing.assert_close(prop(moved), prop(one)[:, perm], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="output_propagation"):
        prop(Tokens(x=x, mask=mask))


@pytest.mark.parametrize("bad", [dict(output_propagation=-1), dict(output_propagation=2.0),
                                 dict(propagation_alpha=2.0)])
def test_encoder_rejects_bad_propagation_settings(bad):
    with pytest.raises(ValueError, match="output_propagation|propagation_alpha"):
        Encoder(16, 1, 2, positional="none", **bad)


def test_encoder_initial_residual_mixes_the_input_back_after_every_layer():
    """``initial_residual=α``: x_{l+1} = (1-α) layer_l(x_l) + α x_0 after every layer (the same layers by hand),
    then the final norm; it changes the output of a 3-layer stack."""
    torch.manual_seed(0)
    edge_index, mask, _, _ = _graph()
    x = torch.randn(2, 5, 16)
    plain = Encoder(16, 3, 2, positional="none", dropout=0.0).eval()
    mixed = Encoder(16, 3, 2, positional="none", dropout=0.0, initial_residual=0.25).eval()
    mixed.load_state_dict(plain.state_dict())
    tokens = _tokens(x, mask, edge_index)
    plan = plain.plan(tokens)
    h = x
    for layer in plain.layers:
        h = 0.75 * layer(h, plan=plan) + 0.25 * x
    want = plain.norm(h).masked_fill(~mask.unsqueeze(-1), 0.0)
    out = mixed(tokens)
    torch.testing.assert_close(out, want)
    assert not torch.allclose(out, plain(tokens), atol=1e-3)


@pytest.mark.parametrize("bad", [-0.1, 1.5, True])
def test_encoder_rejects_a_bad_initial_residual(bad):
    with pytest.raises(ValueError, match="initial_residual"):
        Encoder(16, 1, 2, positional="none", initial_residual=bad)


def _directed(num_tokens=7):
    """A directed graph over 7 tokens with a repeated edge (its weight counts twice) and no edge at token 6."""
    src = torch.tensor([0, 1, 2, 3, 4, 5, 0, 2, 2])
    dst = torch.tensor([1, 2, 3, 4, 5, 0, 3, 0, 0])
    weight = torch.linspace(0.5, 1.5, src.shape[0], dtype=torch.float64)
    return GraphOperator(src, dst, weight, num_tokens), src, dst, weight


def _by_hand(src, dst, weight, n):
    a = torch.zeros(n, n, dtype=torch.float64)
    a.index_put_((dst, src), weight, accumulate=True)  # row = target; a repeated edge adds up
    return a


def test_graph_operator_is_the_weighted_adjacency_product_and_its_transpose_in_backward():
    """Sparse path (CSR) = the dense matrix by hand, forward and gradients, on a directed graph (Âᵀ ≠ Â: a
    backward through Â instead of Âᵀ fails) with a repeated edge; add_product = beta base + alpha Â h."""
    op, src, dst, weight = _directed()
    a = _by_hand(src, dst, weight, 7)
    assert op.sparse(torch.float64, torch.device("cpu"))
    torch.manual_seed(0)
    h = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    base = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(h), a @ h)
    torch.testing.assert_close(op.add_product(base, h, beta=0.3, alpha=0.7), 0.3 * base + 0.7 * (a @ h))
    assert torch.autograd.gradcheck(lambda x: op(x), (h,))
    assert torch.autograd.gradcheck(lambda b, x: op.add_product(b, x, beta=0.3, alpha=0.7), (base, h))
    g = torch.randn(7, 3, dtype=torch.float64)
    gb, gh = torch.autograd.grad(op.add_product(base, h, beta=0.3, alpha=0.7), (base, h), g)
    torch.testing.assert_close(gb, 0.3 * g)
    torch.testing.assert_close(gh, 0.7 * (a.T @ g))
    with torch.no_grad():
        torch.testing.assert_close(op.add_product(base, h, 0.3, 0.7), 0.3 * base + 0.7 * (a @ h))


def test_graph_operator_gathered_path_is_the_same_function(monkeypatch):
    """Other dtypes / devices / tracing take the gather-and-add path: same values and gradients."""
    op, _, _, _ = _directed()
    torch.manual_seed(1)
    h = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    base = torch.randn(7, 4, dtype=torch.float64)
    sparse_out = op.add_product(base, h, 0.2, 0.8)
    (sparse_grad,) = torch.autograd.grad(sparse_out.square().sum(), h)
    monkeypatch.setattr(GraphOperator, "sparse", lambda self, dtype, device: False)
    gathered = op.add_product(base, h, 0.2, 0.8)
    (gathered_grad,) = torch.autograd.grad(gathered.square().sum(), h)
    torch.testing.assert_close(gathered, sparse_out)
    torch.testing.assert_close(gathered_grad, sparse_grad)
    half = _directed()[0]
    assert not half.sparse(torch.bfloat16, torch.device("cpu"))


def test_ppr_gradient_equals_the_dense_formula():
    """d/dx of the propagated output (padded batch, alpha 0.2, 3 steps) = autograd through the dense formula."""
    torch.manual_seed(2)
    edge_index, mask, local, sizes = _graph()
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 5, 3, dtype=torch.float64)
    (got,) = torch.autograd.grad(ppr_propagate(x, edge_index, mask, 3, 0.2), x, g)
    want = torch.zeros_like(x)
    for i, (e, size) in enumerate(zip(local, sizes)):
        a = torch.eye(size, dtype=torch.float64)
        a[e[1], e[0]] = 1.0
        d = a.sum(1).rsqrt()
        a_hat = d[:, None] * a * d[None, :]
        xi = x[i, :size]
        z = xi
        for _ in range(3):
            z = 0.8 * a_hat @ z + 0.2 * xi
        (want_i,) = torch.autograd.grad(z, xi, g[i, :size])
        want[i, :size] = want_i
    want[1, 3:] = g[1, 3:]  # padding rows pass through unchanged
    torch.testing.assert_close(got, want)


def test_graph_operator_under_bf16_autocast_keeps_fp32_sums():
    """Under CPU autocast (trainer.precision=bf16-mixed) the sparse product runs at the input's fp32 (the CSR
    product takes no bf16), forward and backward, and equals the product outside autocast."""
    op, src, dst, weight = _directed()
    op = GraphOperator(src, dst, weight.float(), 7)
    torch.manual_seed(3)
    h = torch.randn(7, 4, requires_grad=True)
    base = torch.randn(7, 4)
    want = op.add_product(base, h, 0.2, 0.8)
    (want_grad,) = torch.autograd.grad(want.sum(), h)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = op.add_product(base, h, 0.2, 0.8)
        plain = op(h)
        (got_grad,) = torch.autograd.grad(got.sum(), h)
    assert got.dtype == torch.float32 and plain.dtype == torch.float32
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


def test_graph_operator_takes_the_sparse_product_on_cuda_only_for_large_graphs(monkeypatch):
    """CPU: always (fp32 / fp64); CUDA: from CUDA_SPARSE_EDGES edges (measured on an H200); bf16: never."""
    from seqattn.core import propagation

    op, _, _, _ = _directed()
    cuda = torch.device("cuda")
    assert op.sparse(torch.float32, torch.device("cpu")) and not op.sparse(torch.bfloat16, torch.device("cpu"))
    assert not op.sparse(torch.float32, cuda)
    monkeypatch.setattr(propagation, "CUDA_SPARSE_EDGES", op.src.numel())
    assert op.sparse(torch.float32, cuda)
