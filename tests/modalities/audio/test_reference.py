"""The MFCC + logistic-regression reference for utterance classification, and the real-data command lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqattn.modalities.audio.reference import SPOKEN_WORDS_RUNS, clip_summary, fit_logreg, mfcc_logreg, run_overrides

SPOKEN_WORDS = Path("/work/shared/data/spoken-words/manifest.csv")


def test_clip_summary_is_mean_std_and_segment_means():
    feats = torch.arange(16.0).view(8, 2)  # 8 frames, 2 features
    out = clip_summary(feats, segments=4)
    assert out.shape == (12,)
    torch.testing.assert_close(out[:2], feats.mean(0))
    torch.testing.assert_close(out[2:4], feats.std(0, unbiased=False))
    torch.testing.assert_close(out[4:6], feats[:2].mean(0))
    torch.testing.assert_close(out[10:], feats[6:].mean(0))
    assert clip_summary(torch.ones(2, 3)).shape == (18,)  # fewer frames than segments


def test_logistic_regression_reaches_its_optimum():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 5, generator=g)
    y = (x @ torch.randn(5, 3, generator=g)).argmax(-1)
    w, b = fit_logreg(x, y, 3, c=1.0)
    assert float(((x.double() @ w + b).argmax(-1) == y).double().mean()) > 0.95
    w, b = w.clone().requires_grad_(), b.clone().requires_grad_()  # the gradient of the objective is ~0 there
    loss = F.cross_entropy(x.double() @ w + b, y, reduction="sum") / 200 + (w**2).sum() / 400
    loss.backward()
    assert float(w.grad.abs().max()) < 1e-5 and float(b.grad.abs().max()) < 1e-5


def test_run_overrides_are_the_readme_commands():
    assert run_overrides("m.csv") == ["task=speech_cls", "data.manifest=m.csv"]
    assert run_overrides("m.csv", "logmel_cnn")[2:] == SPOKEN_WORDS_RUNS["logmel_cnn"]
    with pytest.raises(ValueError, match="unknown run"):
        run_overrides("m.csv", "rnn")


@pytest.mark.skipif(not SPOKEN_WORDS.is_file(), reason=f"real data not here: {SPOKEN_WORDS} (see /work/shared/data)")
def test_the_reference_on_spoken_words_is_close_to_the_published_plain_reference():
    """The data's README: 0.74 val / 0.81 test accuracy (unseen voices) for this kind of reference."""
    result = mfcc_logreg(SPOKEN_WORDS)
    assert result["train_clips"] == 960 and result["val_clips"] == 240 and result["test_clips"] == 240
    assert 0.70 < result["val_acc"] < 0.80 and 0.75 < result["test_acc"] < 0.86
