"""Mixup for sequence classification: the mixed tokens and loss by hand, eval never mixes, bad input refused."""

import pytest
import torch
import torch.nn.functional as F

from seqattn.core.tokens import Tokens
from seqattn.objectives import SequenceClassification
from seqattn.objectives.mixup import Mix, draw_mix
from tests.objectives.test_classification import _data, _net


def test_mixed_tokens_and_mask_by_hand():
    x = torch.randn(3, 4, 5)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    mix = Mix(0.7, torch.tensor([2, 0, 1]))
    out = mix.tokens(Tokens(x, mask))
    for i, j in enumerate([2, 0, 1]):
        torch.testing.assert_close(out.x[i], 0.7 * x[i] + 0.3 * x[j])
        assert out.mask[i].tolist() == (mask[i] | mask[j]).tolist()
    assert mix.tokens(Tokens(x)).mask is None


def test_mixed_loss_weighs_both_labels():
    logits, labels = torch.randn(4, 3), torch.tensor([0, 2, 1, 1])
    mix = Mix(0.8, torch.tensor([1, 2, 3, 0]))
    by_hand = torch.stack([0.8 * F.cross_entropy(logits[i:i + 1], labels[i:i + 1])
                           + 0.2 * F.cross_entropy(logits[i:i + 1], labels[[1, 2, 3, 0][i]].view(1)) for i in range(4)])
    torch.testing.assert_close(mix.cross_entropy(logits, labels), by_hand.mean())
    torch.testing.assert_close(Mix(1.0, torch.tensor([1, 2, 3, 0])).cross_entropy(logits, labels),
                               F.cross_entropy(logits, labels))


def test_draw_folds_lambda_and_permutes():
    torch.manual_seed(0)
    for _ in range(50):
        mix = draw_mix(0.4, 7)
        assert 0.5 <= mix.lam <= 1.0
        assert sorted(mix.perm.tolist()) == list(range(7))
    with pytest.raises(ValueError, match="alpha must be > 0"):
        draw_mix(0.0, 4)


def test_training_step_mixes_and_evaluation_does_not():
    torch.manual_seed(0)
    model = SequenceClassification(net=_net("mean"), mixup=0.4, label_smoothing=0.1)
    batch = _data(16)
    torch.manual_seed(3)
    loss = model.model_step(batch, "train")
    torch.manual_seed(3)
    mix = draw_mix(0.4, 16)
    assert mix.lam < 0.99  # a real mix, so a dropped mix would be seen
    x = mix.lam * batch["x"] + (1 - mix.lam) * batch["x"][mix.perm]
    mixed = dict(batch, x=x, mask=batch["mask"] | batch["mask"][mix.perm])
    logits = SequenceClassification.forward(model, mixed)["logits"]
    by_hand = (mix.lam * F.cross_entropy(logits, batch["labels"], label_smoothing=0.1)
               + (1 - mix.lam) * F.cross_entropy(logits, batch["labels"][mix.perm], label_smoothing=0.1))
    torch.testing.assert_close(loss, by_hand)
    assert model._mix is None  # nothing left for the next (validation) step
    model.eval()
    plain = F.cross_entropy(model(batch)["logits"], batch["labels"], label_smoothing=0.1)
    torch.testing.assert_close(model.model_step(batch, "val"), plain)


def test_mixup_learns_the_toy():
    torch.manual_seed(0)
    model = SequenceClassification(net=_net("mean"), mixup=0.4)
    batch = _data()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(80):
        loss = model.model_step(batch, "train")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    preds, targets = model.predictions(model(batch), batch)
    assert (preds == targets).float().mean() > 0.9


@pytest.mark.parametrize("bad", [-0.1, True, "0.2", float("nan")])
def test_bad_alpha_is_refused(bad):
    with pytest.raises(ValueError, match="mixup must be"):
        SequenceClassification(net=_net("mean"), mixup=bad)


def test_structured_tokens_and_distillation_are_refused():
    mix = Mix(0.6, torch.tensor([1, 0]))
    edges = Tokens(torch.randn(2, 3, 4), edge_index=torch.tensor([[0, 1], [1, 0]]))
    with pytest.raises(ValueError, match="edge_index"):
        mix.tokens(edges)
    with pytest.raises(ValueError, match="batch of 2"):
        mix.tokens(Tokens(torch.randn(3, 3, 4)))
    model = SequenceClassification(net=_net("mean"), mixup=0.2)
    with pytest.raises(ValueError, match="distillation teacher"):
        model.set_distillation(object())
