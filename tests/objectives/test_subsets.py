"""Accuracy on subsets of tokens (``batch["subsets"]``), logged at test time as ``test/acc_<name>``."""

import lightning as L
import torch
from torch.utils.data import DataLoader

from seqattn.objectives import IGNORE_INDEX, SequenceLabeling
from tests.objectives.test_labeling import NET


def _batches(n=3):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        mask = torch.rand(4, 6, generator=g) > 0.2
        mask[:, 0] = True
        labels = torch.randint(0, 3, (4, 6), generator=g).masked_fill(~mask, IGNORE_INDEX)
        subset = torch.rand(4, 6, generator=g) > 0.5
        out.append({"x": torch.randn(4, 6, 8, generator=g), "mask": mask, "labels": labels,
                    "subsets": {"odd": subset}})
    return out


def test_subset_accuracy_equals_the_accuracy_counted_by_hand():
    torch.manual_seed(0)
    model = SequenceLabeling(net=NET, labels=["a", "b", "c"]).eval()
    batches = _batches()
    correct = total = 0
    with torch.no_grad():
        for batch in batches:
            pred = model(batch)["logits"].argmax(-1)
            keep = batch["subsets"]["odd"] & (batch["labels"] != IGNORE_INDEX)
            correct += int((pred[keep] == batch["labels"][keep]).sum())
            total += int(keep.sum())
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    results = trainer.test(model, DataLoader(batches, batch_size=None), verbose=False)[0]
    assert abs(results["test/acc_odd"] - correct / total) < 1e-6
    assert model.test_summary()["subset_sizes"] == {"odd": total}
    # without subsets nothing extra is logged
    plain = [{k: v for k, v in b.items() if k != "subsets"} for b in batches]
    results = trainer.test(model, DataLoader(plain, batch_size=None), verbose=False)[0]
    assert "test/acc_odd" not in results and "subset_sizes" not in model.test_summary()
