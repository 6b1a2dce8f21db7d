"""``Encoder(unmasked_layers=[...])``: layers that attend to every real token of their batch item (edge-set
attention's unmasked blocks between the graph-masked ones)."""

import pytest
import torch

from seqattn.core import Encoder, Tokens, mask_to_edge_index


def _chain_batch():
    """Three padded chains (each node linked to the next) of 7, 5 and 3 nodes: ``x [3, 7, 16]``, ``mask [3, 7]``,
    their edges."""
    torch.manual_seed(0)
    sizes = [7, 5, 3]
    mask = torch.arange(7)[None, :] < torch.tensor(sizes)[:, None]  # [3, 7]
    adj = torch.zeros(3, 7, 7, dtype=torch.bool)
    idx = torch.arange(6)
    adj[:, idx, idx + 1] = True
    adj[:, idx + 1, idx] = True
    adj |= torch.eye(7, dtype=torch.bool)
    adj &= mask[:, :, None] & mask[:, None, :]
    return torch.randn(3, 7, 16), mask, mask_to_edge_index(adj)


@pytest.mark.parametrize("graph_path", ["edge", "dense"])
def test_an_unmasked_layer_runs_the_padding_only_plan_and_the_others_the_graphs(graph_path):
    """Layer by layer by hand: layer 0 on the graph's plan, layer 1 on the plan of the same tokens without edges;
    the encoder's output equals it, and differs from the all-masked encoder with the same weights."""
    x, mask, edge_index = _chain_batch()
    enc = Encoder(16, 2, 4, positional="none", dropout=0.0, graph_path=graph_path, unmasked_layers=[1]).eval()
    masked = Encoder(16, 2, 4, positional="none", dropout=0.0, graph_path=graph_path).eval()
    masked.load_state_dict(enc.state_dict())  # no parameters of its own
    tokens = Tokens(x, mask, edge_index=edge_index)
    out = enc(tokens)
    h = enc.layers[0](x, plan=enc.plan(tokens))
    h = enc.layers[1](h, plan=enc.plan(Tokens(x, mask)))
    torch.testing.assert_close(out, enc.norm(h).masked_fill(~mask.unsqueeze(-1), 0.0))
    assert not torch.allclose(out, masked(tokens))
    assert "layers [1] unmasked" in enc.last_plan["summary"] and "packed" not in enc.last_plan["summary"]


def test_an_unmasked_layer_reaches_beyond_the_neighbourhood_and_keeps_items_apart():
    """One masked layer over a chain: node 0 reads nodes 0-1 only. One unmasked layer: node 0 reads the far end of
    its own chain, no padding and nothing of another item (gradients)."""
    x, mask, edge_index = _chain_batch()
    x = x.requires_grad_()
    for unmasked, reaches_far in (([], False), ([0], True)):
        enc = Encoder(16, 1, 4, positional="none", dropout=0.0, unmasked_layers=unmasked).eval()
        out = enc(Tokens(x, mask, edge_index=edge_index))
        (grad,) = torch.autograd.grad(out[0, 0, 0], x, retain_graph=True)
        assert bool(grad[0, 6].abs().sum() > 0) is reaches_far  # the chain's far end
        assert (grad[1:] == 0).all()  # other items
        (grad,) = torch.autograd.grad(out[2, 0, 0], x)
        assert (grad[2, 3:] == 0).all()  # item 2's padding


@pytest.mark.parametrize("bad", [[2], [-1], [0, 0], [True], ["1"], 5, "1", 1.0])
def test_bad_unmasked_layers_are_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match=r"unmasked_layers must be distinct layer indices in \[0, depth=2\)"):
        Encoder(16, 2, 4, unmasked_layers=bad)
    # none, and one bare index (model.unmasked_layers=1 on the command line), are fine
    assert Encoder(16, 2, 4, unmasked_layers=None).unmasked_layers == frozenset()
    assert Encoder(16, 2, 4, unmasked_layers=1).unmasked_layers == frozenset({1})


def test_unmasked_layers_refuse_the_edge_kernel_and_causal_batches():
    with pytest.raises(ValueError, match="'edge' kernel"):
        Encoder(16, 2, 4, kernel="edge", positional="none", unmasked_layers=[1])
    enc = Encoder(16, 2, 4, positional="none", unmasked_layers=[1])
    with pytest.raises(ValueError, match="causal tokens see the future"):
        enc(Tokens(torch.randn(2, 5, 16), causal=True))
