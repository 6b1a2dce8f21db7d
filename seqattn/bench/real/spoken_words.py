"""Spoken words on voices unseen in training: the clip-classification recipe vs a log-mel CNN.

Both run through the command a user types on the set's own manifest (``path,label,speaker,split``;
16 train / 4 val / 4 test voices, the test voices unseen)::

    python -m seqattn.run task=speech_cls data.manifest=<data>/spoken-words/manifest.csv seed=<s>

The reference is the recipe with the log-mel CNN encoder (``model=logmel_cnn head.pooling=mean``:
2-D convolutions over the ``[frames x mel bins]`` map, the classic keyword-spotting model) on the
same features, augmentation and split. The notes add the classic non-neural clip classifier on the
same split, 20 MFCCs summarised per clip + logistic regression
(:func:`seqattn.modalities.audio.reference.mfcc_logreg`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from seqattn.bench.real import Context, Result, command_line, compare_seeds, recipe_reference

SEEDS = 3
#: the recipe's command for a manifest, and the log-mel CNN reference (the same recipe, another encoder)
RUNS = {"attention": [], "logmel_cnn": ["model=logmel_cnn", "head.pooling=mean"]}


def run_overrides(manifest: Path, name: str) -> list[str]:
    return ["task=speech_cls", f"data.manifest={manifest}", *RUNS[name]]


def mfcc_logreg(manifest: Path) -> dict:
    """``python -m seqattn.modalities.audio.reference MANIFEST`` (MFCC + logistic regression on the recipe's
    split), run as a user would; its JSON line."""
    proc = subprocess.run([sys.executable, "-m", "seqattn.modalities.audio.reference", str(manifest)],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"the MFCC reference failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def case_spoken_words(ctx: Context) -> Result:
    manifest = ctx.data / "spoken-words" / "manifest.csv"
    if not manifest.is_file():
        raise FileNotFoundError(f"no {manifest}")
    ours, cnn = run_overrides(manifest, "attention"), run_overrides(manifest, "logmel_cnn")
    short = ctx.choose([], ["trainer.max_epochs=4"])  # --quick: both sides
    ours, cnn = ours + short, cnn + short
    seqattn, seq_s, ref, ref_s = compare_seeds(ctx, "spoken words", ours, ctx.choose(SEEDS, 1),
                                               recipe_reference(ctx, cnn, "logmel_cnn"), "log-mel CNN")
    start = time.perf_counter()
    plain = mfcc_logreg(manifest)
    ctx.log(f"spoken words: MFCC + logistic regression {plain['test_acc']:.4f} ({time.perf_counter() - start:.0f} s)")
    return Result("spoken words (1,440 clips, 12 words; test voices unseen)", "test accuracy", False,
                  seqattn, ref, "log-mel CNN (model=logmel_cnn, same features and augmentation)", seq_s, ref_s,
                  command_line(ours), notes=ctx.choose("", "QUICK: 1 seed, 4 epochs; ") + f"reference: {command_line(cnn)}; MFCC + logistic regression on the "
                                            f"same split: test {plain['test_acc']:.4f}, val {plain['val_acc']:.4f}")
