"""The CTC objective: loss = torch's = brute force, infeasible targets counted, token error rate in tokens."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from seqattn.datakit.spec import DataSpec
from seqattn.labels import IGNORE_INDEX
from seqattn.model.heads import CTCHead
from seqattn.objectives import CTCRecognition
from seqattn.objectives.ctc import min_frames
from seqattn.objectives.ctc_decoding import collapse
from seqattn.objectives.sequence_metrics import SequenceAccuracy, TokenErrorRate, edit_distance

LABELS = ["a", "b", "sh"]


def _net(dim: int = 8, head: str = "seqattn.model.heads.CTCHead") -> dict:
    return {
        "_target_": "seqattn.model.network.SequenceModel",
        "adapter": {"_target_": "seqattn.modalities.audio.adapter.AudioAdapter", "dim": dim, "n_mels": 8},
        "encoder": {"_target_": "seqattn.model.baselines.TokenwiseMLP", "dim": dim, "depth": 1},
        "head": {"_target_": head, "dim": dim},
    }


def _objective(**kwargs) -> CTCRecognition:
    return CTCRecognition(net=_net(), spec=DataSpec(num_outputs=3, labels=LABELS).to_dict(), **kwargs)


def _brute_force_nll(log_probs: torch.Tensor, target: list[int]) -> float:
    """-log P(target): the sum over every path of the frames that collapses to target (blank 0)."""
    frames, classes = log_probs.shape
    total = 0.0
    for path in itertools.product(range(classes), repeat=frames):
        if collapse(path) == target:
            total += math.exp(sum(float(log_probs[t, c]) for t, c in enumerate(path)))
    return -math.log(total) if total > 0 else math.inf


def _batch(labels: list[list[int]]) -> dict:
    lengths = torch.tensor([len(x) for x in labels])
    padded = torch.full((len(labels), max(int(lengths.max()), 1)), IGNORE_INDEX)
    for i, x in enumerate(labels):
        padded[i, : len(x)] = torch.tensor(x, dtype=torch.long)
    return {"labels": padded, "label_lengths": lengths}


def test_the_head_has_one_output_per_label_plus_the_blank():
    model = _objective()
    assert isinstance(model.net.head, CTCHead)
    assert model.net.head.num_outputs == 4 and model.num_labels == 3
    with pytest.raises(ValueError, match="use head=ctc"):
        CTCRecognition(net=_net(head="seqattn.model.heads.TokenHead"), spec=DataSpec(num_outputs=3, labels=LABELS))


def test_loss_equals_torch_ctc_and_brute_force_on_hand_made_cases():
    """Labels are shifted by one (blank = class 0): data label 0 'a' is class 1."""
    model = _objective()
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 4, generator=g)  # [B, F, 1 + C]
    mask = torch.tensor([[True] * 5, [True] * 4 + [False], [True] * 3 + [False] * 2])
    targets = [[0, 1], [2, 2], [1]]  # "a b", "sh sh" (a repeat: needs a blank between), "b"
    loss = model.loss({"logits": logits, "mask": mask}, _batch(targets))

    log_probs = logits.log_softmax(-1)
    want = F.ctc_loss(log_probs.transpose(0, 1), torch.tensor([[1, 2], [3, 3], [2, 0]]), torch.tensor([5, 4, 3]),
                      torch.tensor([2, 2, 1]), blank=0, reduction="mean")
    torch.testing.assert_close(loss, want)
    brute = [_brute_force_nll(log_probs[i, :n], [c + 1 for c in t]) / len(t)
             for i, (n, t) in enumerate(zip([5, 4, 3], targets))]
    assert float(loss) == pytest.approx(sum(brute) / 3, rel=1e-5)
    assert model._infeasible == 0


def test_an_empty_target_is_the_probability_of_all_blanks():
    model = _objective()
    logits = torch.randn(1, 4, 4)
    loss = model.loss({"logits": logits, "mask": torch.ones(1, 4, dtype=torch.bool)}, _batch([[]]))
    assert float(loss) == pytest.approx(-float(logits.log_softmax(-1)[0, :, 0].sum()), rel=1e-5)


def test_a_target_longer_than_its_frames_is_zeroed_and_counted():
    labels, lengths = torch.tensor([[0, 0, 1], [0, 1, 2]]), torch.tensor([3, 3])
    assert min_frames(labels, lengths).tolist() == [4, 3]  # a a b needs a blank between the a's
    logits = torch.randn(2, 3, 4, requires_grad=True)
    out = {"logits": logits, "mask": torch.ones(2, 3, dtype=torch.bool)}
    batch = {"labels": labels, "label_lengths": lengths}
    model = _objective()
    loss = model.loss(out, batch)
    assert model._infeasible == 1 and math.isfinite(float(loss))
    loss.backward()
    assert torch.isfinite(logits.grad).all() and float(logits.grad[0].abs().sum()) == 0.0  # no gradient from it
    strict = _objective(zero_infinity=False)
    assert math.isinf(float(strict.loss(out, batch)))


def test_decode_maps_classes_back_to_data_labels():
    model = _objective()
    logits = torch.full((1, 6, 4), -5.0)
    for t, c in enumerate([0, 3, 3, 0, 1, 2]):  # blank, sh, sh, blank, a, b
        logits[0, t, c] = 5.0
    out = {"logits": logits, "mask": torch.ones(1, 6, dtype=torch.bool)}
    assert model.decode(out, "greedy") == [[2, 0, 1]]
    assert model.decode(out, "beam") == [[2, 0, 1]]


def test_decoder_options_are_checked():
    with pytest.raises(ValueError, match="decoder='viterbi'"):
        _objective(decoder="viterbi")
    with pytest.raises(ValueError, match="beam_width"):
        _objective(beam_width=0)


@pytest.mark.parametrize("hyp, ref", [
    (["sh", "a", "t"], ["s", "a", "t"]),  # one substitution of a two-character phone
    (["a"], ["a", "sh", "sh"]),
    ([], ["k", "a"]),
    (["p", "a", "sh", "i"], ["p", "i", "sh", "a", "k"]),
    (["a", "b"], []),
])
def test_edit_distance_counts_tokens_not_characters(hyp, ref):
    from torchmetrics.functional.text import word_error_rate

    # tokens contain no spaces, so the word error rate of space-joined tokens is the token error rate
    if ref:
        want = float(word_error_rate(" ".join(hyp), " ".join(ref))) * len(ref)
        assert edit_distance(hyp, ref) == pytest.approx(want)
    assert edit_distance(hyp, ref) == edit_distance(ref, hyp)
    assert edit_distance(hyp, hyp) == 0


def test_token_error_rate_is_summed_over_the_corpus():
    metric, exact = TokenErrorRate(), SequenceAccuracy()
    preds = torch.tensor([[1, 2, -1], [3, -1, -1]])  # -1 pads decoded sequences
    refs = torch.tensor([[1, 2, 2], [3, -100, -100]])  # -100 pads references
    metric.update(preds, refs)
    exact.update(preds, refs)
    metric.update(torch.tensor([[0]]), torch.tensor([[1]]))
    assert float(metric.compute()) == pytest.approx((1 + 0 + 1) / (3 + 1 + 1))  # not a mean of per-item rates
    assert float(exact.compute()) == pytest.approx(0.5)
    assert metric._reductions["errors"] is not None and metric._defaults["total"].dtype == torch.long
    keep = TokenErrorRate()
    keep.update(preds, refs, keep=torch.tensor([False, True]))
    assert float(keep.compute()) == 0.0 and int(keep.total) == 1
