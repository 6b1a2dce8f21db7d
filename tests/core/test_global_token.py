"""prepend_global_token: the CLS / virtual-node token is one piece of core code for every modality."""

import pytest
import torch

from seqattn.core import Encoder, Tokens, edge_index_to_mask, prepend_global_token


def _tokens(with_mask=True):
    x = torch.randn(2, 4, 8)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    return Tokens(x, mask if with_mask else None)


def test_shapes_mask_and_vector_in_front():
    tokens = _tokens()
    vector = torch.randn(8)
    out = prepend_global_token(tokens, vector)
    assert out.x.shape == (2, 5, 8)
    torch.testing.assert_close(out.x[:, 0], vector.expand(2, 8))
    torch.testing.assert_close(out.x[:, 1:], tokens.x)
    assert out.mask.tolist() == [[True] * 5, [True, True, True, True, False]]
    assert out.num_global == 1
    assert prepend_global_token(_tokens(with_mask=False), vector).mask.all()


@pytest.mark.parametrize("shape", [(4, 4), (2, 4, 4), (2, 3, 4, 4)])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_attn_mask_gains_an_allow_all_row_and_column(shape, dtype):
    base = torch.rand(shape) > 0.5 if dtype == torch.bool else torch.randn(shape)
    out = prepend_global_token(Tokens(torch.randn(2, 4, 8), attn_mask=base), torch.zeros(8)).attn_mask
    assert out.shape == (*shape[:-2], 5, 5)
    allow = True if dtype == torch.bool else 0.0
    assert (out[..., 0, :] == allow).all() and (out[..., :, 0] == allow).all()
    torch.testing.assert_close(out[..., 1:, 1:], base)


def test_edge_index_renumbered_and_connected_to_the_global_token():
    # graph 0: path 0-1-2 (3 real nodes), graph 1: edge 0->1 (2 real nodes, 1 pad), L=3
    edge_index = torch.tensor([[0, 1, 1, 2, 3], [1, 0, 2, 1, 4]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    out = prepend_global_token(Tokens(torch.randn(2, 3, 8), mask, edge_index=edge_index), torch.zeros(8))
    n_added = out.extra["global_edges"]
    assert n_added == 2 * 5 + 2  # both directions for 5 real nodes + 2 self-loops
    torch.testing.assert_close(out.edge_index[:, :5], torch.tensor([[1, 2, 2, 3, 5], [2, 1, 3, 2, 6]]))
    adjacency = edge_index_to_mask(out.edge_index, 2, 4)  # [B, L+1, L+1] target x source
    assert adjacency[0, 0].tolist() == [True, True, True, True]
    assert adjacency[1, 0].tolist() == [True, True, True, False]  # never the padded node
    assert adjacency[1, 1:, 0].tolist() == [True, True, False]


def test_edge_kernel_equals_dense_kernel_after_prepending():
    torch.manual_seed(1)
    edge_index = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    tokens = prepend_global_token(Tokens(torch.randn(2, 3, 16), mask, edge_index=edge_index), torch.randn(16))
    dense = Encoder(16, 2, 4, dropout=0.0, positional="none", kernel="math").eval()
    edge = Encoder(16, 2, 4, dropout=0.0, positional="none", kernel="edge").eval()
    edge.load_state_dict(dense.state_dict())
    attn = edge_index_to_mask(tokens.edge_index, 2, 4)
    expected = dense(tokens.x, tokens.mask, attn_mask=attn)
    got = edge(tokens.x, tokens.mask, edge_index=tokens.edge_index)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_wrong_vector_width_is_an_error():
    with pytest.raises(ValueError, match=r"\[D=8\]"):
        prepend_global_token(_tokens(), torch.zeros(7))
