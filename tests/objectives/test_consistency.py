"""Two-view consistency (``seqattn.objectives.consistency``, ``SequenceLabeling(consistency=λ)``)."""

import pytest
import torch

from seqattn.objectives import IGNORE_INDEX, SequenceClassification, SequenceLabeling
from seqattn.objectives.consistency import sharpened_consistency
from tests.objectives.test_labeling import NET


def test_sharpened_consistency_by_hand_counts_masked_tokens_and_stops_the_target_gradient():
    """The value by hand (mask respected, target q = p̄² / Σ p̄² at T = 0.5), and the gradient of the views only
    (q is a constant): the same as the loss with q computed apart and detached."""
    torch.manual_seed(0)
    a = torch.randn(2, 4, 3, requires_grad=True)
    b = torch.randn(2, 4, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    got = sharpened_consistency([a, b], mask, temperature=0.5)
    pa, pb = a.softmax(-1), b.softmax(-1)
    with torch.no_grad():
        mean = (pa + pb) / 2
        q = mean**2 / (mean**2).sum(-1, keepdim=True)
    per = (((pa - q) ** 2).sum(-1) + ((pb - q) ** 2).sum(-1)) / 2  # [2, 4]
    want = per[mask].mean()
    torch.testing.assert_close(got, want)
    ga, gb = torch.autograd.grad(got, [a, b])
    wa, wb = torch.autograd.grad(want, [a, b])
    torch.testing.assert_close(ga, wa)
    torch.testing.assert_close(gb, wb)
    assert not ga[~mask].any()  # masked tokens get no gradient
    # identical confident views agree with their (sharpened) mean: almost no loss
    sure = torch.tensor([[[20.0, 0.0, 0.0]]])
    assert float(sharpened_consistency([sure, sure], torch.ones(1, 1, dtype=torch.bool))) < 1e-12


@pytest.mark.parametrize("bad", [dict(views=1), dict(temperature=0.0), dict(temperature=1.5), dict(mask="int")])
def test_sharpened_consistency_rejects_bad_inputs(bad):
    views = [torch.zeros(2, 3, 4)] * bad.get("views", 2)
    mask = torch.ones(2, 3, dtype=torch.int64 if bad.get("mask") else torch.bool)
    with pytest.raises(ValueError, match="views|temperature|mask"):
        sharpened_consistency(views, mask, bad.get("temperature", 0.5))


def _batch():
    torch.manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    labels = torch.tensor([[0, IGNORE_INDEX, IGNORE_INDEX, 1], [2, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]])
    return {"x": torch.randn(2, 4, 8), "mask": mask, "labels": labels}


def test_labeling_with_consistency_trains_two_views_over_every_real_token():
    """In training: (CE(view 1) + CE(view 2)) / 2 + λ · consistency(view 1, view 2) over every real token, the
    second view a fresh forward (its own dropout draws); in evaluation the plain cross-entropy."""
    net = dict(NET, encoder=dict(NET["encoder"], dropout=0.5))
    model = SequenceLabeling(net=net, labels=["a", "b", "c"], consistency=2.0, consistency_temperature=0.5)
    batch = _batch()
    model.train()
    torch.manual_seed(5)
    out = model(batch)
    loss = model.loss(out, batch)
    torch.manual_seed(5)
    first = model(batch)["logits"]
    second = model(batch)["logits"]  # the draws the objective's second forward made
    torch.testing.assert_close(first, out["logits"])
    assert not torch.allclose(first, second)  # two dropout views
    labels = batch["labels"].flatten()
    ce = lambda lg: torch.nn.functional.cross_entropy(lg.reshape(-1, 3), labels, ignore_index=IGNORE_INDEX)  # noqa: E731
    want = (ce(first) + ce(second)) / 2 + 2.0 * sharpened_consistency([first, second], batch["mask"], 0.5)
    torch.testing.assert_close(loss, want)
    # every real token counts, labeled or not: over the labeled ones only, the loss would differ
    only_labeled = sharpened_consistency([first, second], batch["labels"] != IGNORE_INDEX, 0.5)
    assert not torch.allclose(only_labeled, sharpened_consistency([first, second], batch["mask"], 0.5))
    model.eval()
    out = model(batch)
    torch.testing.assert_close(model.loss(out, batch), ce(out["logits"]))


def test_labeling_with_four_consistency_views_averages_four_forwards():
    """``consistency_views=4``: the mean of four views' cross-entropies + λ · consistency of all four, each view
    a fresh forward in turn."""
    net = dict(NET, encoder=dict(NET["encoder"], dropout=0.5))
    model = SequenceLabeling(net=net, labels=["a", "b", "c"], consistency=1.5, consistency_views=4)
    batch = _batch()
    model.train()
    torch.manual_seed(7)
    loss = model.loss(model(batch), batch)
    torch.manual_seed(7)
    views = [model(batch)["logits"] for _ in range(4)]
    assert not torch.allclose(views[2], views[3])
    labels = batch["labels"].flatten()
    ce = lambda lg: torch.nn.functional.cross_entropy(lg.reshape(-1, 3), labels, ignore_index=IGNORE_INDEX)  # noqa: E731
    want = sum(ce(v) for v in views) / 4 + 1.5 * sharpened_consistency(views, batch["mask"], 0.5)
    torch.testing.assert_close(loss, want)
    # three views would be another number
    assert not torch.allclose(loss, sum(ce(v) for v in views[:3]) / 3 + 1.5 * sharpened_consistency(views[:3], batch["mask"], 0.5))


def test_consistency_settings_are_checked():
    for bad in (dict(consistency=-1.0), dict(consistency_temperature=0.0), dict(consistency_temperature=2.0),
                dict(consistency_views=1), dict(consistency_views=2.0), dict(consistency_views=True)):
        with pytest.raises(ValueError, match="consistency"):
            SequenceLabeling(net=NET, labels=["a", "b", "c"], **bad)
    with pytest.raises(ValueError, match="consistency"):
        SequenceClassification(net=NET, labels=["a", "b", "c"], consistency=1.0)
