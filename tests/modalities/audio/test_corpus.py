"""Synthetic speech corpus: determinism, cache, speaker split, and that context matters.

Run as a script to measure the context probe on the default-size corpus::

    python tests/data/test_speech.py [data_dir]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from seqattn.modalities.audio.features import AudioFeatures, frame_labels, load_audio
from seqattn.modalities.audio.manifest import read_manifest
from seqattn.modalities.audio.corpus import PHONES, STOPS, generate_speech_corpus

TINY = dict(n_train_speakers=2, n_val_speakers=1, n_test_speakers=1, utts_per_speaker=3)


def _lines(manifest: Path) -> list[dict]:
    return [json.loads(line) for line in manifest.read_text().splitlines()]


def test_same_seed_same_corpus_different_seed_differs(tmp_path):
    a = generate_speech_corpus(tmp_path / "a", seed=1, **TINY)
    b = generate_speech_corpus(tmp_path / "b", seed=1, **TINY)
    c = generate_speech_corpus(tmp_path / "c", seed=2, **TINY)
    assert a.read_bytes() == b.read_bytes()
    for line in _lines(a):
        assert (a.parent / line["path"]).read_bytes() == (b.parent / line["path"]).read_bytes()
    assert a.read_bytes() != c.read_bytes()
    first = _lines(a)[0]["path"]
    assert (a.parent / first).read_bytes() != (c.parent / first).read_bytes()


def test_manifest_format_and_coverage(tmp_path):
    manifest = generate_speech_corpus(tmp_path, seed=0, **TINY)
    lines = _lines(manifest)
    assert len(lines) == 4 * 3
    for line in lines:
        assert set(line) == {"path", "speaker", "split", "segments"}
        wav = load_audio(manifest.parent / line["path"], 16000)
        segs = line["segments"]
        assert segs[0][0] == 0.0 and segs[0][2] == "sil" and segs[-1][2] == "sil"
        assert abs(segs[-1][1] * 16000 - wav.numel()) < 1  # covers the whole utterance
        assert all(s[1] == pytest.approx(t[0]) for s, t in zip(segs, segs[1:]))  # contiguous
        assert all(s[2] in PHONES for s in segs)
        assert 0.79 <= wav.numel() / 16000 <= 1.61
        assert wav.abs().max() <= 1.0
    # the same reader that serves user data reads the corpus
    assert len(read_manifest(manifest)) == len(lines)


def test_cache_is_reused(tmp_path, caplog):
    m1 = generate_speech_corpus(tmp_path, seed=0, **TINY)
    wav = m1.parent / _lines(m1)[0]["path"]
    stamps = (m1.stat().st_mtime_ns, wav.stat().st_mtime_ns)
    with caplog.at_level("INFO", logger="seqattn"):
        m2 = generate_speech_corpus(tmp_path, seed=0, **TINY)
    assert m2 == m1
    assert (m2.stat().st_mtime_ns, wav.stat().st_mtime_ns) == stamps
    assert "reusing" in caplog.text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]  # no temp folder left behind


def test_incomplete_folder_is_regenerated(tmp_path):
    m1 = generate_speech_corpus(tmp_path, seed=0, **TINY)
    (m1.parent / ".complete").unlink()  # as if a crash had happened after the rename
    m2 = generate_speech_corpus(tmp_path, seed=0, **TINY)
    assert (m2.parent / ".complete").exists() and len(_lines(m2)) == 12


def test_split_by_speaker(tmp_path):
    lines = _lines(generate_speech_corpus(tmp_path, seed=0, **TINY))
    speakers = {}
    for line in lines:
        speakers.setdefault(line["speaker"], set()).add(line["split"])
    assert all(len(s) == 1 for s in speakers.values())
    counts = {split: sum(1 for s in speakers.values() if split in s) for split in ("train", "val", "test")}
    assert counts == {"train": 2, "val": 1, "test": 1}


def test_bad_params(tmp_path):
    with pytest.raises(ValueError, match="utts_per_speaker.*'dev'"):
        generate_speech_corpus(tmp_path, utts_per_speaker={"dev": 3})
    with pytest.raises(ValueError, match="speaker counts"):
        generate_speech_corpus(tmp_path, n_train_speakers=-1)


# ---------------------------------------------------------------------------------------------
# context matters: a per-frame linear probe on one frame vs the frame with +-8 neighbours


def _frames(items, feats: AudioFeatures, ctx: int) -> tuple[torch.Tensor, torch.Tensor]:
    index = {p: i for i, p in enumerate(PHONES)}
    xs, ys = [], []
    for it in items:
        wav = load_audio(it["path"], feats.sample_rate)  # [T]
        x = feats(wav)[0][0]  # [F, C]
        if ctx:
            padded = F.pad(x, (0, 0, ctx, ctx))  # [F + 2 ctx, C]
            x = padded.unfold(0, 2 * ctx + 1, 1).transpose(1, 2).reshape(x.shape[0], -1)  # [F, (2 ctx + 1) C]
        xs.append(x)
        ys.append(frame_labels(it["segments"], wav.numel(), feats.sample_rate, feats.win, feats.hop, index))
    return torch.cat(xs), torch.cat(ys)


def context_probe(manifest: Path, ctx: int, steps: int = 200) -> dict[str, float]:
    """Train a linear softmax classifier on train frames; accuracy on test frames (all / stops)."""
    torch.manual_seed(0)
    items = read_manifest(manifest)
    feats = AudioFeatures()
    x_tr, y_tr = _frames([i for i in items if i["split"] == "train"], feats, ctx)
    x_te, y_te = _frames([i for i in items if i["split"] == "test"], feats, ctx)
    model = torch.nn.Linear(x_tr.shape[1], len(PHONES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x_tr), y_tr).backward()
        opt.step()
    with torch.no_grad():
        pred = model(x_te).argmax(-1)
    stop = torch.isin(y_te, torch.tensor([PHONES.index(s) for s in STOPS]))
    return {
        "acc": (pred == y_te).float().mean().item(),
        "stop_acc": (pred[stop] == y_te[stop]).float().mean().item(),
        "train_frames": len(y_tr),
        "test_frames": len(y_te),
    }


def test_context_matters(tmp_path):
    manifest = generate_speech_corpus(tmp_path, seed=0, n_train_speakers=4, n_val_speakers=0, n_test_speakers=2,
                                      utts_per_speaker={"train": 30, "test": 20})
    single = context_probe(manifest, ctx=0)
    stacked = context_probe(manifest, ctx=8)
    assert stacked["acc"] > single["acc"] + 0.03, (single, stacked)
    assert single["stop_acc"] < 0.5, single  # a closure frame alone looks like silence
    assert stacked["stop_acc"] > single["stop_acc"] + 0.25, (single, stacked)


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/seqattn_speech")
    t0 = time.perf_counter()
    manifest = generate_speech_corpus(root)
    print(f"corpus {manifest} ready in {time.perf_counter() - t0:.1f} s")
    for ctx in (0, 8):
        t0 = time.perf_counter()
        r = context_probe(manifest, ctx)
        print(f"linear probe, frames ±{ctx}: test acc {r['acc']:.3f}, stop-frame acc {r['stop_acc']:.3f} "
              f"({r['train_frames']} train / {r['test_frames']} test frames, {time.perf_counter() - t0:.1f} s)")
