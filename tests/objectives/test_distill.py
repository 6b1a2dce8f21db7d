"""Distillation with a softmax temperature: the loss, the frozen teacher, and that it helps a student
that has few labels."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from seqattn.objectives import IGNORE_INDEX, SequenceClassification, SequenceLabeling
from seqattn.objectives.distill import Distillation, distillation_kl
from tests.objectives.test_labeling import NET


def _pooled(dim=8, classes=3, depth=1):
    return dict(NET, encoder=dict(NET["encoder"], dim=dim, depth=depth),
                head={"_target_": "seqattn.model.heads.PooledHead", "dim": dim, "num_outputs": classes,
                      "pooling": "mean"})


def test_kl_term_is_t_squared_kl_of_the_softened_distributions():
    torch.manual_seed(0)
    s, t = torch.randn(5, 4), torch.randn(5, 4)
    for temperature in (1.0, 2.0, 5.0):
        p_t = F.softmax(t / temperature, -1)
        want = (p_t * (p_t.log() - F.log_softmax(s / temperature, -1))).sum(-1).mean() * temperature**2
        torch.testing.assert_close(distillation_kl(s, t, temperature), want)
        torch.testing.assert_close(distillation_kl(s, t, temperature),
                                   F.kl_div(F.log_softmax(s / temperature, -1), p_t, reduction="batchmean")
                                   * temperature**2)
    assert float(distillation_kl(t, t, 3.0)) == pytest.approx(0.0, abs=1e-6)
    keep = torch.tensor([True, False, True, False, False])
    torch.testing.assert_close(distillation_kl(s, t, 2.0, keep), distillation_kl(s[keep], t[keep], 2.0))
    assert float(distillation_kl(s, t, 2.0, torch.zeros(5, dtype=torch.bool))) == 0.0
    # T² keeps the gradient's scale: for large T it tends to (s - t) / C per logit, independent of T
    grads = []
    for temperature in (20.0, 40.0):
        x = s.clone().requires_grad_()
        distillation_kl(x, t, temperature).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=0.05, atol=1e-3)


def test_the_training_loss_mixes_teacher_and_labels_and_evaluation_stays_cross_entropy():
    torch.manual_seed(0)
    student = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    teacher = SequenceLabeling(net=NET, labels=["a", "b", "c"])
    student.set_distillation(Distillation(teacher, temperature=3.0, alpha=0.25))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    batch = {"x": torch.randn(2, 4, 8), "mask": mask,
             "labels": torch.tensor([[0, 1, 2, 1], [2, 2, IGNORE_INDEX, IGNORE_INDEX]])}
    real = batch["labels"] != IGNORE_INDEX
    student.train()
    out = student(batch)
    ce = F.cross_entropy(out["logits"][real], batch["labels"][real])
    with torch.no_grad():
        t = teacher(batch)["logits"]
    kd = distillation_kl(out["logits"][real], t[real], 3.0)  # padding positions are left out
    torch.testing.assert_close(student.loss(out, batch), 0.25 * kd + 0.75 * ce)
    student.eval()
    out = student(batch)
    torch.testing.assert_close(student.loss(out, batch), F.cross_entropy(out["logits"][real], batch["labels"][real]))


def test_the_teacher_is_frozen_in_eval_mode_and_not_part_of_the_student():
    teacher = SequenceClassification(net=_pooled(), labels=["a", "b", "c"]).train()
    student = SequenceClassification(net=_pooled(), labels=["a", "b", "c"])
    keys = set(student.state_dict())
    student.set_distillation(Distillation(teacher, 2.0, 0.5))
    student.train()
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    assert set(student.state_dict()) == keys  # not saved with the student
    assert all(p.requires_grad for p in student.parameters()) and len(list(student.parameters())) == len(
        list(SequenceClassification(net=_pooled(), labels=["a", "b", "c"]).parameters()))
    with pytest.raises(ValueError, match=r"labels \['a', 'b', 'c'\], the student \['a', 'c', 'b'\]"):
        SequenceClassification(net=_pooled(), labels=["a", "c", "b"]).set_distillation(Distillation(teacher))
    with pytest.raises(ValueError, match="predicts 3 classes, the student 2"):
        SequenceClassification(net=_pooled(classes=2), labels=["a", "b"]).set_distillation(Distillation(teacher))
    for bad in (dict(temperature=0.0), dict(alpha=1.5)):
        with pytest.raises(ValueError, match="distill"):
            Distillation(teacher, **bad)


def _task(n: int, generator: torch.Generator) -> dict:
    """5 classes; the label is the largest of the first 5 features of the sequence's mean token."""
    x = torch.randn(n, 6, 8, generator=generator)
    mask = torch.ones(n, 6, dtype=torch.bool)
    return {"x": x, "mask": mask, "labels": x.mean(1)[:, :5].argmax(-1)}


def _fit(model, batch, steps: int, lr: float = 1e-2) -> None:
    torch.manual_seed(1)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = model.loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _accuracy(model, batch) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(batch)["logits"].argmax(-1) == batch["labels"]).float().mean())


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is ~10x faster than two on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_student_distilled_from_a_good_teacher_on_few_labels_beats_labels_alone(one_thread):
    g = torch.Generator().manual_seed(0)
    big, small, test = _task(1000, g), _task(40, g), _task(1000, g)
    labels = [str(i) for i in range(5)]
    torch.manual_seed(0)
    teacher = SequenceClassification(net=_pooled(8, 5), labels=labels)
    _fit(teacher, big, 150)
    torch.manual_seed(0)
    plain = SequenceClassification(net=_pooled(8, 5), labels=labels)
    distilled = copy.deepcopy(plain)  # the same student, the same initialisation
    _fit(plain, small, 150)
    distilled.set_distillation(Distillation(teacher, temperature=4.0, alpha=0.9))
    _fit(distilled, small, 150)
    acc_teacher, acc_plain, acc_distilled = _accuracy(teacher, test), _accuracy(plain, test), _accuracy(distilled, test)
    print(f"teacher {acc_teacher:.3f}, student on labels {acc_plain:.3f}, distilled student {acc_distilled:.3f}")
    assert acc_teacher > 0.75
    assert acc_distilled > acc_plain + 0.08
