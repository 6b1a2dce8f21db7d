"""The sequence-labeling objective: loss and metrics ignore padding; the network is built from config."""

import pytest
import torch

from seqattn.objectives import IGNORE_INDEX, SequenceLabeling
from seqattn.objectives.schedules import warmup_cosine


class _Adapter(torch.nn.Module):
    inputs = ("x", "mask")

    def forward(self, x, mask):
        from seqattn.core import Tokens

        return Tokens(x, mask)


NET = {
    "_target_": "seqattn.model.network.SequenceModel",
    "adapter": {"_target_": "tests.objectives.test_labeling._Adapter"},
    "encoder": {"_target_": "seqattn.core.Encoder", "dim": 8, "depth": 1, "heads": 2, "dropout": 0.0},
    "head": {"_target_": "seqattn.model.heads.TokenHead", "dim": 8, "num_outputs": 3},
}


def _batch():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    labels = torch.tensor([[0, 1, 2, 1], [2, 2, IGNORE_INDEX, IGNORE_INDEX]])
    return {"x": torch.randn(2, 4, 8), "mask": mask, "labels": labels}


def test_loss_ignores_padding_and_equals_cross_entropy_on_real_tokens():
    model = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    batch = _batch()
    out = model(batch)
    real = batch["labels"] != IGNORE_INDEX
    expected = torch.nn.functional.cross_entropy(out["logits"][real], batch["labels"][real])
    torch.testing.assert_close(model.loss(out, batch), expected)
    preds, targets = model.predictions(out, batch)
    metrics = model.metrics["val_metrics"]
    metrics.update(preds, targets)
    acc = (out["logits"].argmax(-1)[real] == batch["labels"][real]).float().mean()
    torch.testing.assert_close(metrics.compute()["acc"], acc)


def test_hparams_are_plain_and_rebuild_the_network():
    model = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    assert model.hparams["net"] == NET and model.hparams["labels"] == ["a", "b", "c"]
    clone = SequenceLabeling(**model.hparams)
    clone.load_state_dict(model.state_dict())
    batch = _batch()
    model.eval(), clone.eval()
    torch.testing.assert_close(model(batch)["logits"], clone(batch)["logits"])


def test_shape_mismatch_names_both_shapes():
    model = SequenceLabeling(net=NET)
    batch = _batch()
    batch["labels"] = batch["labels"][:, :3]
    with pytest.raises(ValueError, match=r"logits \[B, L, C\] and labels \[B, L\]; got \(2, 4, 3\) and \(2, 3\)"):
        model.loss(model(batch), batch)


def test_warmup_cosine_schedule_shape():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_cosine(opt, total_steps=100, warmup_frac=0.1, min_lr_ratio=0.0)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.1) and max(lrs) == pytest.approx(1.0)
    assert lrs[-1] < 0.01
    with pytest.raises(ValueError, match="total_steps must be positive"):
        warmup_cosine(opt, total_steps=0)


def test_weight_decay_only_on_weight_matrices():
    net = dict(NET, encoder={**NET["encoder"], "positional": "learned", "max_len": 8})
    model = SequenceLabeling(net=net, labels=["a", "b", "c"], optimizer={"_target_": "torch.optim.AdamW", "lr": 1e-3,
                                                                         "weight_decay": 0.05})
    decayed = {id(p) for g in model.parameter_groups() if g["weight_decay"] > 0 for p in g["params"]}
    names = {n: id(p) in decayed for n, p in model.named_parameters()}
    assert names["net.encoder.layers.0.attn.q_proj.weight"] and names["net.head.net.1.weight"]
    assert not names["net.encoder.layers.0.attn.q_proj.bias"]
    assert not names["net.encoder.layers.0.norm1.weight"]  # norms: 1-D
    assert not names["net.encoder.positional.weight"]  # a learned positional table is not shrunk to zero
    optimizer = model.configure_optimizers()
    assert {g["weight_decay"] for g in optimizer.param_groups} == {0.0, 0.05}
