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


def _trainer():
    import lightning as L

    return L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


def test_epoch_loss_is_a_mean_over_labeled_tokens_not_sequences():
    """Two batches with 2 and 8 labeled tokens: the epoch val/loss weights them 2:8."""
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    model = SequenceLabeling(net=NET, labels=["a", "b", "c"]).eval()
    few = _batch()
    few["labels"] = torch.tensor([[0, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX], [2, IGNORE_INDEX] + [IGNORE_INDEX] * 2])
    many = _batch()
    many["labels"] = torch.tensor([[0, 1, 2, 1], [2, 2, 1, 0]])
    many["mask"] = torch.ones(2, 4, dtype=torch.bool)
    with torch.no_grad():
        losses = [float(model.loss(model(b), b)) for b in (few, many)]
    result = _trainer().validate(model, DataLoader([few, many], batch_size=None), verbose=False)[0]
    by_token = (2 * losses[0] + 8 * losses[1]) / 10
    assert result["val/loss"] == pytest.approx(by_token, rel=1e-5)
    assert abs(by_token - sum(losses) / 2) > 1e-3  # the two means differ here: the test can tell them apart


def test_per_class_accuracy_leaves_out_classes_without_test_examples():
    from torch.utils.data import DataLoader

    model = SequenceLabeling(net=NET, labels=["a", "b", "c"]).eval()
    batch = _batch()
    batch["labels"] = torch.tensor([[0, 1, 0, 1], [1, 0, IGNORE_INDEX, IGNORE_INDEX]])  # no "c" in the test split
    result = _trainer().test(model, DataLoader([batch], batch_size=None), verbose=False)[0]
    assert "test/acc_a" in result and "test/acc_b" in result and "test/acc_c" not in result
    with torch.no_grad():
        pred = model(batch)["logits"].argmax(-1)
    real = batch["labels"] == 0
    assert result["test/acc_a"] == pytest.approx(float((pred[real] == 0).float().mean()))
    assert model.test_summary()["classes_without_test_examples"] == ["c"]


def test_subset_counts_merge_like_ddp_processes_do():
    """Each process counts its shard; torchmetrics sums the states: the merged accuracy is the union's."""
    from seqattn.objectives.labeling import SubsetAccuracy

    g = torch.Generator().manual_seed(1)
    preds, targets = torch.randint(0, 3, (40,), generator=g), torch.randint(0, 3, (40,), generator=g)
    subset = torch.rand(40, generator=g) > 0.4
    whole, rank0, rank1 = SubsetAccuracy(), SubsetAccuracy(), SubsetAccuracy()
    whole.update(preds, targets, subset)
    rank0.update(preds[:25], targets[:25], subset[:25])
    rank1.update(preds[25:], targets[25:], subset[25:])
    rank0.merge_state(rank1)
    expected = float((preds[subset] == targets[subset]).float().mean())
    assert float(whole.compute()) == pytest.approx(expected) == pytest.approx(float(rank0.compute()))
    assert {type(rank0).__dict__.get("full_state_update"), rank0._reductions["correct"].__name__} == {False, "dim_zero_sum"}


@pytest.mark.parametrize("crf", [False, True])
@pytest.mark.parametrize("bad", [3, -1])
def test_a_label_outside_the_classes_stops_the_step_at_the_loss(bad, crf):
    """The metrics take their inputs unchecked (validate_args=False, a cost per step): the loss, computed first in
    every step, must refuse a label outside [0, C) that is not the ignore index, or the metrics would count it."""
    model = SequenceLabeling(net=NET, labels=["a", "b", "c"], crf=crf)
    batch = _batch()
    batch["labels"][0, 1] = bad
    with pytest.raises((IndexError, ValueError), match="out of bounds"):  # cross-entropy's / the CRF's own
        model.model_step(batch, "train")
    assert int(model.metrics["train_metrics"]["acc"].tp.sum() + model.metrics["train_metrics"]["acc"].fn.sum()) == 0


def test_f1_is_macro_over_classes_checked_against_a_count_by_hand():
    """Imbalanced classes: macro-F1 (the mean of per-class F1) differs from micro-F1 (= accuracy)."""
    from tests.workflows import macro_f1_from_confusion

    model = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    g = torch.Generator().manual_seed(3)
    targets = torch.cat([torch.zeros(70, dtype=torch.long), torch.ones(20, dtype=torch.long),
                         torch.full((10,), 2, dtype=torch.long)])
    preds = torch.where(torch.rand(100, generator=g) < 0.7, targets, torch.randint(0, 3, (100,), generator=g))
    metrics = model.metrics["test_metrics"]
    metrics.update(preds, targets)
    result = metrics.compute()
    matrix = [[int(((targets == t) & (preds == p)).sum()) for p in range(3)] for t in range(3)]
    assert float(result["f1"]) == pytest.approx(macro_f1_from_confusion(matrix), abs=1e-6)
    assert float(result["acc"]) == pytest.approx(float((preds == targets).float().mean()), abs=1e-6)
    assert abs(float(result["f1"]) - float(result["acc"])) > 0.02  # micro would equal the accuracy


def test_label_smoothing_is_the_smoothed_cross_entropy_written_out():
    """``objective.label_smoothing=e``: per real token ``(1 - e) * (-log p_y) + e * mean_c(-log p_c)``,
    averaged over real tokens (padding out), computed here from the log-probabilities."""
    eps = 0.2
    model = SequenceLabeling(net=NET, labels=["a", "b", "c"], label_smoothing=eps)
    batch = _batch()
    out = model(batch)
    real = batch["labels"] != IGNORE_INDEX
    logp = out["logits"][real].log_softmax(-1)  # [N, C]
    y = batch["labels"][real]
    want = ((1 - eps) * -logp[torch.arange(len(y)), y] + eps * -logp.mean(-1)).mean()
    torch.testing.assert_close(model.loss(out, batch), want)
    plain = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain.loss(plain(batch), batch), want)  # the option changes the loss
