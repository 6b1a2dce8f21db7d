"""The ``fsdd`` case of ``python -m seqattn.bench real``: both manifests, the recipe through the user's
command and the log-mel CNN through the same recipe on the same split, one table row per manifest; a
data folder without FSDD skips the case with the missing file named.

The run test uses a tiny copy of the two manifests (2 clips per digit and split, absolute paths to
the real recordings) and skips when the real data folder (``../shared/data/fsdd``, or
``$SEQATTN_REAL_DATA``) is absent.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest

from seqattn.bench import real as bench_real
from seqattn.bench.real import CASES, DEFAULT_DATA, HEADER, Context
from seqattn.bench.real import fsdd as fsdd_case


def _real_fsdd() -> Path | None:
    candidates = [Path(os.environ["SEQATTN_REAL_DATA"])] if os.environ.get("SEQATTN_REAL_DATA") else []
    candidates += [DEFAULT_DATA] + [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    return next((c / "fsdd" for c in candidates if (c / "fsdd" / "manifest_official.csv").is_file()), None)


REAL = _real_fsdd()
needs_fsdd = pytest.mark.skipif(REAL is None, reason="no FSDD folder (../shared/data/fsdd/manifest_official.csv; "
                                                     "set SEQATTN_REAL_DATA)")
TINY = ["model.dim=16", "data.batch_size=16",
        "trainer.max_epochs=1", "plot=false", "trainer.enable_model_summary=false"]


def test_case_is_listed_and_skips_naming_the_missing_manifest(tmp_path, capsys):
    assert CASES["fsdd"] == "fsdd" and callable(fsdd_case.case_fsdd)
    (tmp_path / "fsdd").mkdir()
    (tmp_path / "fsdd" / "manifest_official.csv").write_text("path,label,speaker,split\n")
    ctx = Context(data=tmp_path, work=tmp_path / "work", seeds=1, log=print)
    with pytest.raises(FileNotFoundError, match="manifest_speakers.csv"):
        fsdd_case.case_fsdd(ctx)
    # the suite: the case is skipped with the reason, nothing is trained, the table has no row
    parser = argparse.ArgumentParser()
    bench_real.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path), "--cases", "fsdd", "--work", str(tmp_path / "work")])
    assert bench_real.run(args) == 0
    out = capsys.readouterr()
    assert "fsdd: skipped (no " in out.err and "manifest_speakers.csv" in out.err
    assert "| FSDD" not in out.out and not (tmp_path / "work").exists()


def _tiny_copy(folder: Path) -> Path:
    """``folder/fsdd/manifest_{official,speakers}.csv``: 2 clips per digit and split of the real manifests."""
    out = folder / "fsdd"
    out.mkdir(parents=True)
    for name in fsdd_case.SPLITS:
        with open(REAL / name, newline="") as f:
            rows = list(csv.DictReader(f))
        kept, seen = [], {}
        for r in rows:
            key = (r["split"], r["label"])
            if seen.get(key, 0) < 2:
                seen[key] = seen.get(key, 0) + 1
                kept.append({**r, "path": str(REAL / r["path"])})
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(kept)
    return folder


@pytest.mark.slow
@needs_fsdd
def test_case_runs_both_manifests_with_the_cnn_on_the_same_split(tmp_path):
    data = _tiny_copy(tmp_path / "data")
    lines: list[str] = []
    ctx = Context(data=data, work=tmp_path / "work", seeds=1, log=lines.append, extra=TINY)
    result = fsdd_case.case_fsdd(ctx)
    # one row per manifest, each as wide as the header
    rows = result.row().splitlines()
    assert len(rows) == 2 and rows[0].startswith("| FSDD recorded digits, official split")
    assert "held out" in rows[1]
    assert all(r.count("|") == HEADER.splitlines()[0].count("|") for r in rows)
    assert result.command.startswith("python -m seqattn.run task=speech_cls data.manifest=")
    assert "manifest_official.csv" in result.command and "model=" not in result.command
    assert "manifest_speakers.csv" in result.notes and "model=logmel_cnn head.pooling=mean" in result.notes
    json.dumps(asdict(result))  # --json can write it
    for stem, more in (("manifest_official", None), ("manifest_speakers", result.more[0])):
        ours = json.loads((ctx.work / stem / "seqattn_0" / "metrics.json").read_text())
        cnn_run = ctx.work / stem / "logmel_cnn_0"
        cnn = json.loads((cnn_run / "metrics.json").read_text())
        got = result if more is None else more
        got_ours, got_ref = (got.seqattn, got.reference) if more is None else (got["seqattn"], got["reference"])
        assert got_ours == [ours["test/acc"]] and got_ref == [cnn["test/acc"]]
        # both sides read the same manifest; the reference is the CNN, the recipe attention
        assert f"{stem}.csv" in (cnn_run / "config.yaml").read_text()
        assert "SpectrogramCNN" in (cnn_run / "config.yaml").read_text()
        assert "SpectrogramCNN" not in (ctx.work / stem / "seqattn_0" / "config.yaml").read_text()
        # the recipe's conv stem stays on its side: the reference is the plain CNN
        assert "SpectrogramStem" in (ctx.work / stem / "seqattn_0" / "config.yaml").read_text()
        assert "SpectrogramStem" not in (cnn_run / "config.yaml").read_text()
    assert len(lines) == 2 and lines[0].startswith("fsdd manifest_official seed 0")
