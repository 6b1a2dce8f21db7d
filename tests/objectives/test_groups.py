"""Accuracy per group of items (``batch["groups"]``, e.g. per speaker), declared in the data's spec."""

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from seqattn.datakit.spec import DataSpec
from seqattn.objectives import IGNORE_INDEX, SequenceClassification, SequenceLabeling
from seqattn.objectives.labeling import GroupAccuracy
from tests.objectives.test_labeling import NET

POOLED = dict(NET, head={"_target_": "seqattn.model.heads.PooledHead", "dim": 8, "num_outputs": 3})
SPEAKERS = ["ann", "bob", "cyd", "dee"]  # dee never occurs in the test batches


def _trainer():
    return L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


def _by_hand(model, batches, per_token: bool):
    counts = {s: [0, 0] for s in SPEAKERS}
    with torch.no_grad():
        for batch in batches:
            pred = model(batch)["logits"].argmax(-1)
            for i, g in enumerate(batch["groups"]["speaker"].tolist()):
                if g < 0:
                    continue
                p, t = (pred[i], batch["labels"][i])
                keep = t != IGNORE_INDEX
                counts[SPEAKERS[g]][0] += int((p[keep] == t[keep]).sum()) if per_token else int(p == t)
                counts[SPEAKERS[g]][1] += int(keep.sum()) if per_token else 1
    return {s: c / n for s, (c, n) in counts.items() if n}


@pytest.mark.parametrize("per_token", [False, True])
def test_accuracy_per_speaker_equals_the_counts_by_hand(per_token):
    torch.manual_seed(0)
    spec = DataSpec(num_outputs=3, labels=["a", "b", "c"], groups={"speaker": SPEAKERS})
    objective = SequenceLabeling(net=NET, spec=spec) if per_token else SequenceClassification(net=POOLED, spec=spec)
    model = objective.eval()
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(3):
        mask = torch.ones(5, 6, dtype=torch.bool)
        mask[:, 4:] = torch.rand(5, 2, generator=g) > 0.5
        labels = torch.randint(0, 3, (5, 6) if per_token else (5,), generator=g)
        if per_token:
            labels = labels.masked_fill(~mask, IGNORE_INDEX)
        speaker = torch.randint(-1, 3, (5,), generator=g)  # -1: an item without a speaker
        batches.append({"x": torch.randn(5, 6, 8, generator=g), "mask": mask, "labels": labels,
                        "groups": {"speaker": speaker, "undeclared": torch.zeros(5, dtype=torch.long)}})
    want = _by_hand(model, batches, per_token)
    results = _trainer().test(model, DataLoader(batches, batch_size=None), verbose=False)[0]
    summary = model.test_summary()
    assert set(summary["acc_per_speaker"]) == set(want) and "dee" not in want  # no test items: not reported
    for speaker, acc in want.items():
        assert summary["acc_per_speaker"][speaker] == pytest.approx(acc, abs=1e-6)
    assert results["test/acc_speaker_worst"] == pytest.approx(min(want.values()), abs=1e-6)
    assert results["test/acc_speaker_mean"] == pytest.approx(sum(want.values()) / len(want), abs=1e-6)
    assert "acc_per_undeclared" not in summary


def test_group_counts_are_sum_states_for_ddp_and_spec_groups_are_checked():
    metric = GroupAccuracy(3)
    assert all(metric._reductions[k].__name__ in ("dim_zero_sum", "sum") for k in ("correct", "total"))
    metric.update(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2]))
    assert metric.compute().tolist() == [[1, 0, 1], [1, 0, 2]]
    with pytest.raises(ValueError, match="more than once"):
        DataSpec(num_outputs=2, groups={"speaker": ["a", "a"]})
    spec = DataSpec(num_outputs=2, groups={"speaker": ["a", "b"]})
    assert DataSpec.from_dict(spec.to_dict()) == spec and spec.to_dict()["groups"] == {"speaker": ["a", "b"]}
