"""Key dropout (DropKey, `model.attn_dropout_mode=keys`): the attention of each query over the keys its own draw
keeps (and itself), on every dense path; nothing dropped in eval; refused where there is no dense mask."""

import pytest
import torch

from seqattn.core import Encoder, MultiHeadAttention
from seqattn.core.dropout import keep_mask
from seqattn.core.plan import PlanOptions, Structure, plan_structure

B, H, L, D = 3, 2, 7, 4


def _qkv(seed=0):
    torch.manual_seed(seed)
    return [torch.randn(B, H, L, D, requires_grad=True) for _ in range(3)]


def _reference(q, k, v, allowed, keep, scale=None):
    """Softmax over the keys that are allowed and kept (a query always keeps itself): ``[B, H, L, D]``, zero rows
    where nothing is left."""
    chosen = allowed & (keep | torch.eye(L, dtype=torch.bool))
    scores = (q @ k.transpose(-1, -2)) * (D ** -0.5 if scale is None else scale)
    weights = scores.masked_fill(~chosen, float("-inf")).softmax(-1).nan_to_num(0.0)
    return weights @ v


LENGTHS = torch.tensor([7, 5, 2])
PADDING = torch.arange(L)[None] < LENGTHS[:, None]  # [B, L]


@pytest.mark.parametrize("case, path", [("padding", "dense"), ("math", "math"), ("window", "dense"), ("band", "band"),
                                        ("causal", "causal"), ("varlen", "varlen")])
def test_each_query_attends_over_the_keys_its_draw_keeps(case, path):
    window = 2 if case in ("window", "band") else None
    padding = torch.ones(B, L, dtype=torch.bool) if case == "band" else PADDING
    structure = Structure(B, L, torch.device("cpu"), mask=None if case == "band" else padding, window=window,
                          causal=case == "causal")
    forced = {"math": "math", "varlen": "varlen", "band": "band"}.get(case)
    plan = plan_structure(structure, PlanOptions(kernel="math" if case == "math" else "sdpa", path=forced), heads=H,
                          dim=H * D)
    assert plan.path == path
    allowed = padding[:, None, None, :].expand(B, H, L, L).clone()
    offsets = torch.arange(L)[None] - torch.arange(L)[:, None]  # j - i
    if window is not None:
        allowed &= offsets.abs() <= window
    if case == "causal":
        allowed &= offsets <= 0
    q, k, v = _qkv()
    torch.manual_seed(5)
    keep, _ = keep_mask((B, H, L, L), 0.4)  # the draws the layer makes
    torch.manual_seed(5)
    out, _ = plan.attend(q, k, v, 0.4, drop_keys=True)
    want = _reference(q, k, v, allowed, keep)
    real = padding[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out[real], want[real], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_a_token_always_keeps_itself():
    plan = plan_structure(Structure(B, L, torch.device("cpu"), mask=PADDING), heads=H, dim=H * D)
    q, k, v = _qkv(1)
    torch.manual_seed(0)
    out, _ = plan.attend(q, k, v, 0.99998, drop_keys=True)  # every other key dropped (kept: 1 in 32,768)
    real = PADDING[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out[real], v.detach()[real])


def test_without_dropout_it_is_plain_attention_and_eval_drops_nothing():
    torch.manual_seed(0)
    layer = MultiHeadAttention(H * D, H, dropout=0.3, dropout_mode="keys")
    x = torch.randn(B, L, H * D)
    plain = MultiHeadAttention(H * D, H)
    plain.load_state_dict(layer.state_dict())
    layer.eval()
    plain.eval()
    torch.testing.assert_close(layer(x, PADDING), plain(x, PADDING))
    layer.train()
    first, second = layer(x, PADDING), layer(x, PADDING)
    assert not torch.allclose(first, second)  # training draws anew each call


def test_the_layer_and_the_encoder_pass_the_mode_down():
    """A layer training with keys dropped at p ~ 1 reads each real token's own value only."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(H * D, H, dropout=0.99998, dropout_mode="keys").train()
    x = torch.randn(B, L, H * D)
    out = layer(x, PADDING)
    own = layer.out_proj(layer.v_proj(x))
    torch.testing.assert_close(out[PADDING], own[PADDING], rtol=1e-5, atol=1e-5)
    encoder = Encoder(H * D, 2, H, attn_dropout=0.1, attn_dropout_mode="keys")
    assert [block.attn.dropout_mode for block in encoder.layers] == ["keys", "keys"]
    assert Encoder(H * D, 1, H).layers[0].attn.dropout_mode == "weights"


def test_refused_where_there_is_no_dense_mask_and_for_an_unknown_mode():
    with pytest.raises(ValueError, match="dropout_mode must be 'weights' or 'keys'"):
        MultiHeadAttention(8, 2, dropout=0.1, dropout_mode="heads")
    edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
    structure = Structure(1, 3, torch.device("cpu"), edge_index=edges)
    plan = plan_structure(structure, PlanOptions(kernel="edge"), heads=2, dim=8)
    q = k = v = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="attn_dropout_mode=keys.*'edge'"):
        plan.attend(q, k, v, 0.1, drop_keys=True)
    out, _ = plan.attend(q, k, v, 0.0, drop_keys=True)  # nothing dropped (eval): any path
    assert out.shape == (1, 2, 3, 4)
