"""PropertyPrediction: standardisation round trip, missing labels masked, RMSE/MAE in units, ROC-AUC."""

import math

import lightning as L
import pytest
import torch

from seqattn.objectives import PropertyPrediction
from tests.objectives.test_labeling import NET


def roc_auc_by_pairs(labels: torch.Tensor, scores: torch.Tensor) -> float:
    """ROC-AUC as the Mann-Whitney statistic: P(score of a positive > score of a negative), ties half."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).float() + 0.5 * (diff == 0).float()).mean())


def _net(targets: int) -> dict:
    return dict(NET, head={"_target_": "seqattn.model.heads.PooledHead", "dim": 8, "num_outputs": targets,
                           "pooling": "mean"})


def _model(**kw) -> PropertyPrediction:
    kw.setdefault("target_kinds", ["regression", "classification"])
    kw.setdefault("target_mean", [100.0, 0.0])
    kw.setdefault("target_std", [20.0, 1.0])
    return PropertyPrediction(net=_net(2), labels=["tpsa", "active"], **kw)


def _batch(n=6):
    g = torch.Generator().manual_seed(1)
    targets = torch.stack([100 + 20 * torch.randn(n, generator=g), (torch.rand(n, generator=g) > 0.5).float()], 1)
    targets[1, 0] = float("nan")
    targets[2, 1] = float("nan")
    return {"x": torch.randn(n, 4, 8, generator=g), "mask": torch.ones(n, 4, dtype=torch.bool), "targets": targets}


def test_standardisation_round_trip_and_classification_columns_untouched():
    model = _model()
    y = torch.tensor([[140.0, 1.0], [60.0, 0.0]])
    z = model.standardize(y)
    torch.testing.assert_close(z, torch.tensor([[2.0, 1.0], [-2.0, 0.0]]))
    torch.testing.assert_close(model.unstandardize(z), y)
    probs = model.predict_values(torch.tensor([[0.5, 0.0]]))
    torch.testing.assert_close(probs, torch.tensor([[110.0, 0.5]]))


def test_loss_masks_missing_labels_and_matches_the_formula():
    model = _model()
    batch = _batch()
    out = model(batch)
    logits, t = out["logits"], batch["targets"]
    present = ~torch.isnan(t)
    mse = (logits[:, 0] - (t[:, 0] - 100) / 20) ** 2
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 1], torch.nan_to_num(t[:, 1]),
                                                                reduction="none")
    expected = (mse[present[:, 0]].sum() + bce[present[:, 1]].sum()) / present.sum()
    loss = model.loss(out, batch)
    torch.testing.assert_close(loss, expected)
    assert torch.isfinite(loss)
    loss.backward()
    # NaN labels must not leak NaN into the gradients
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_metrics_in_original_units_and_roc_auc_match_references():
    model = _model()
    batch = _batch(40)
    out = model(batch)
    preds, targets = model.predictions(out, batch)
    metrics = model.metrics["test_metrics"]
    metrics.update(preds, targets)
    values = metrics.compute()
    keep = ~torch.isnan(targets[:, 0])
    err = preds[keep, 0] - targets[keep, 0]
    torch.testing.assert_close(values["rmse_tpsa"], err.pow(2).mean().sqrt(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(values["mae_tpsa"], err.abs().mean(), rtol=1e-5, atol=1e-4)
    keep = ~torch.isnan(targets[:, 1])
    ref = roc_auc_by_pairs(targets[keep, 1], preds[keep, 1])
    assert values["auroc_active"].item() == pytest.approx(ref, abs=1e-5)
    assert set(values) == {"rmse_tpsa", "mae_tpsa", "auroc_active"}
    # the trivial baseline (the training mean for every molecule) is kept at test time
    model.on_test_epoch_start()
    model.update_stage_metrics("test", preds, targets)
    keep = ~torch.isnan(targets[:, 0])
    baseline = (targets[keep, 0] - 100.0).pow(2).mean().sqrt()
    torch.testing.assert_close(model.test_baseline.compute()["baseline_rmse_tpsa"], baseline, rtol=1e-5, atol=1e-4)


def test_learns_and_the_checkpoint_keeps_the_target_statistics(tmp_path):
    """A tiny fit lowers RMSE far below the std; load_from_checkpoint restores mean/std and kinds."""
    torch.manual_seed(0)
    n = 64
    x = torch.randn(n, 4, 8)
    y = 50 + 10 * x[:, :, 0].mean(1, keepdim=True)  # depends on the tokens
    batch = {"x": x, "mask": torch.ones(n, 4, dtype=torch.bool), "targets": y}
    model = PropertyPrediction(net=_net(1), labels=["y"], target_mean=[float(y.mean())],
                               target_std=[float(y.std())], optimizer={"_target_": "torch.optim.Adam", "lr": 1e-2})
    optimizer = model.configure_optimizers()
    for _ in range(150):
        loss = model.loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    rmse = (model.predict_values(model(batch)["logits"]) - y).pow(2).mean().sqrt()
    assert rmse < 0.3 * y.std()
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=0)
    trainer.strategy.connect(model)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = PropertyPrediction.load_from_checkpoint(path, map_location="cpu")
    assert loaded.hparams["target_mean"] == [pytest.approx(float(y.mean()))]
    torch.testing.assert_close(loaded.target_std, model.target_std)
    loaded.eval()
    torch.testing.assert_close(loaded.predict_values(loaded(batch)["logits"]),
                               model.predict_values(model(batch)["logits"]))


def test_bad_configuration_is_named():
    with pytest.raises(ValueError, match="target_kinds"):
        _model(target_kinds=["regression", "ordinal"])
    with pytest.raises(ValueError, match="one per target"):
        _model(target_mean=[1.0])
    with pytest.raises(ValueError, match="target_std must be"):
        _model(target_std=[0.0, 1.0])
    model = _model()
    with pytest.raises(ValueError, match="logits \\[B, T\\] and targets"):
        model.loss({"logits": torch.zeros(3, 2)}, {"targets": torch.zeros(3, 3)})


def test_single_class_auroc_is_nan_not_an_error():
    model = _model()
    preds = torch.tensor([[1.0, 0.3], [2.0, 0.6]])
    targets = torch.tensor([[1.0, 1.0], [2.0, 1.0]])
    metrics = model.metrics["val_metrics"]
    metrics.update(preds, targets)
    assert math.isnan(metrics.compute()["auroc_active"].item())
