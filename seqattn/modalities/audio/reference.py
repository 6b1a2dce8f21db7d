"""A plain reference for utterance classification, and the real-data runs of ``task=speech_cls``.

:func:`mfcc_logreg` is the classic clip classifier the attention model should beat: 20 MFCCs per
frame summarised per clip (mean, standard deviation and the means of 4 equal time segments: 120
numbers), standardised with the training split's statistics, then a multinomial logistic
regression with an L2 penalty (``C = 1``, as scikit-learn's default ``LogisticRegression``; fitted
here by L-BFGS in torch, scikit-learn is not a dependency). It reads the same manifest and the same
split as ``task=speech_cls`` (:class:`~seqattn.modalities.audio.clips.ClipDataModule`)::

    python -m seqattn.modalities.audio.reference /work/shared/data/spoken-words/manifest.csv

prints its val / test accuracy as JSON. :data:`SPOKEN_WORDS_RUNS` and :func:`run_overrides` are the
``python -m seqattn.run`` command lines of the real-data table of ``tasks/speech_cls/README.md``
(attention, the log-mel CNN, no context), for a benchmark suite to run side by side with the
reference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from seqattn.modalities.audio.clips import ClipDataModule
from seqattn.modalities.audio.features import AudioFeatures

#: name -> overrides of ``python -m seqattn.run task=speech_cls data.manifest=...`` (the README's table)
SPOKEN_WORDS_RUNS: dict[str, list[str]] = {
    "attention": [],
    "logmel_cnn": ["model=logmel_cnn", "head.pooling=mean"],
    "no_context": ["model=no_context", "head.pooling=mean"],
}


def run_overrides(manifest: str | Path, name: str = "attention", extra: Sequence[str] = ()) -> list[str]:
    """The ``python -m seqattn.run`` arguments of one real-data run (see :data:`SPOKEN_WORDS_RUNS`)."""
    if name not in SPOKEN_WORDS_RUNS:
        raise ValueError(f"unknown run {name!r}; known: {sorted(SPOKEN_WORDS_RUNS)}")
    return ["task=speech_cls", f"data.manifest={manifest}", *SPOKEN_WORDS_RUNS[name], *extra]


def clip_summary(feats: torch.Tensor, segments: int = 4) -> torch.Tensor:
    """Frame features ``[F, C]`` -> ``[(2 + segments) · C]``: mean, std, and the means of ``segments``
    equal time segments (a clip shorter than ``segments`` frames repeats its frames)."""
    if feats.shape[0] < segments:
        feats = feats.repeat_interleave(segments, dim=0)
    parts = torch.tensor_split(feats, segments, dim=0)
    return torch.cat([feats.mean(0), feats.std(0, unbiased=False)] + [p.mean(0) for p in parts])


def _features(dataset, extractor: AudioFeatures) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for i in range(len(dataset)):
        item = dataset[i]
        feats, _ = extractor(item["waveform"][None])  # [1, F, C]
        xs.append(clip_summary(feats[0]))
        ys.append(item["label"])
    return torch.stack(xs), torch.tensor(ys, dtype=torch.long)


def fit_logreg(x: torch.Tensor, y: torch.Tensor, num_classes: int, c: float = 1.0, max_iter: int = 500
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression minimising ``Σ CE + ||W||² / (2C)`` (bias not penalised), by
    L-BFGS: returns ``(W [D, K], b [K])``."""
    x, n = x.double(), x.shape[0]
    w = torch.zeros(x.shape[1], num_classes, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(num_classes, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-9, tolerance_change=1e-12,
                                  history_size=20, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(x @ w + b, y, reduction="sum") / n + (w**2).sum() / (2 * c * n)
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach(), b.detach()


def mfcc_logreg(manifest: str | Path, n_mfcc: int = 20, c: float = 1.0, **data: Any) -> dict[str, float]:
    """Train the MFCC summary + logistic regression reference on ``manifest``'s training split (the
    split of ``ClipDataModule(manifest=..., **data)``); returns ``{"val_acc", "test_acc", ...}``."""
    dm = ClipDataModule(manifest=str(manifest), **data)
    dm.setup()
    extractor = AudioFeatures(dm.sample_rate, features="mfcc", n_mels=40, n_mfcc=n_mfcc, normalize=False)
    with torch.no_grad():
        splits = {name: _features(dm.datasets[name], extractor) for name in ("train", "val", "test")
                  if len(dm.datasets[name])}
    x_train, y_train = splits["train"]
    mean, std = x_train.mean(0), x_train.std(0).clamp_min(1e-8)
    w, b = fit_logreg((x_train - mean) / std, y_train, dm.num_classes, c)
    out: dict[str, float] = {"classes": dm.num_classes, "features": int(x_train.shape[1])}
    for name, (x, y) in splits.items():
        pred = (((x - mean) / std).double() @ w + b).argmax(-1)
        out[f"{name}_acc"] = round(float((pred == y).double().mean()), 4)
        out[f"{name}_clips"] = int(y.numel())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m seqattn.modalities.audio.reference MANIFEST.csv|.jsonl")
        return 0 if argv else 2
    print(json.dumps(mfcc_logreg(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
