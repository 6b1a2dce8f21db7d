"""Sequence classification: one label per sequence, CLS pooling through the global token."""

import pytest
import torch

from seqattn.objectives import SequenceClassification
from tests.objectives.test_labeling import NET


def _net(pooling):
    return dict(NET, head={"_target_": "seqattn.model.heads.PooledHead", "dim": 8, "num_outputs": 2, "pooling": pooling})


def _data(n=64, length=6):
    """Label = whether the first token's feature 0 is positive; later tokens are noise."""
    x = torch.randn(n, length, 8)
    lengths = torch.randint(2, length + 1, (n,))
    mask = torch.arange(length)[None] < lengths[:, None]
    labels = (x[:, 0, 0] > 0).long()
    return {"x": x, "mask": mask, "labels": labels}


@pytest.mark.parametrize("pooling", ["mean", "cls", "attention", "max"])
def test_learns_a_sequence_label_and_reports_confusion(pooling):
    torch.manual_seed(0)
    model = SequenceClassification(net=_net(pooling), labels=["neg", "pos"])
    assert (model.net.global_token is not None) == (pooling == "cls")
    batch = _data()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(60):
        loss = model.loss(model(batch), batch)
        first = loss.item() if first is None else first
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5 * first
    model.eval()
    out = model(batch)
    preds, targets = model.predictions(out, batch)
    assert preds.shape == targets.shape == (64,)
    model.on_test_epoch_start()
    model.update_stage_metrics("test", preds, targets)
    model.confusion_matrix = model.test_confusion.compute()
    summary = model.test_summary()
    assert summary["labels"] == ["neg", "pos"]
    by_hand = [[int(((targets == t) & (preds == p)).sum()) for p in range(2)] for t in range(2)]  # row true, col pred
    assert summary["confusion_matrix"] == by_hand


def test_cls_logits_ignore_padding_content():
    model = SequenceClassification(net=_net("cls")).eval()
    batch = _data(4)
    batch["mask"][:, 3:] = False
    other = dict(batch, x=batch["x"].clone())
    other["x"][:, 3:] = 100.0
    torch.testing.assert_close(model(batch)["logits"], model(other)["logits"])


def test_per_token_head_with_classification_objective_is_an_error():
    model = SequenceClassification(net=NET)
    batch = _data(4)
    with pytest.raises(ValueError, match="head=pooled"):
        model.loss(model(batch), batch)


def test_global_token_contradiction_is_an_error():
    from hydra.utils import instantiate

    parts = {k: instantiate(_net("cls")[k]) for k in ("adapter", "encoder", "head")}
    from seqattn.model.network import SequenceModel

    with pytest.raises(ValueError, match="global_token=False"):
        SequenceModel(**parts, global_token=False)
