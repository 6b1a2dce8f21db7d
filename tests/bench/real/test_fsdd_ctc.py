"""The ``fsdd_ctc`` case of ``python -m seqattn.bench real``: FSDD's recordings as speech recognition, each
digit spelled out as its transcript, the CTC recipe through the user's command against the same recipe with a
BiLSTM encoder on the same split; one row per manifest; a data folder without FSDD skips the case.

The run test uses a tiny copy of the two manifests (absolute paths to the real recordings) and skips when the
real data folder (``../shared/data/fsdd``, or ``$SEQATTN_REAL_DATA``) is absent.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from dataclasses import asdict

import pytest

from seqattn.bench import real as bench_real
from seqattn.bench.real import CASES, HEADER, Context
from seqattn.bench.real import fsdd as fsdd_case
from tests.bench.real.test_fsdd import REAL, TINY, _tiny_copy, needs_fsdd


def test_case_is_listed_and_skips_naming_the_missing_manifest(tmp_path, capsys):
    assert CASES["fsdd_ctc"] == "fsdd" and callable(fsdd_case.case_fsdd_ctc)
    (tmp_path / "fsdd").mkdir()
    (tmp_path / "fsdd" / "manifest_speakers.csv").write_text("path,label,speaker,split\n")
    with pytest.raises(FileNotFoundError, match="manifest_official.csv"):
        fsdd_case.case_fsdd_ctc(Context(data=tmp_path, work=tmp_path / "work", seeds=1, log=print))
    parser = argparse.ArgumentParser()
    bench_real.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path), "--cases", "fsdd_ctc", "--work", str(tmp_path / "work")])
    assert bench_real.run(args) == 0
    out = capsys.readouterr()
    assert "fsdd_ctc: skipped (no " in out.err and "manifest_official.csv" in out.err
    assert "| FSDD" not in out.out


def test_the_spelled_manifest_is_the_users_ctc_manifest_of_the_same_clips(tmp_path):
    folder = tmp_path / "fsdd"
    (folder / "recordings").mkdir(parents=True)
    rows = [("recordings/7_a_0.wav", "7", "a", "train"), ("recordings/0_b_1.wav", "0", "b", "test"),
            ("recordings/3_a_2.wav", "3", "a", "val")]
    with open(folder / "manifest_official.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label", "speaker", "split"])
        w.writerows(rows)
    out = fsdd_case.spelled_manifest(folder, "manifest_official.csv", tmp_path / "work")
    with open(out, newline="") as f:
        got = list(csv.DictReader(f))
    assert [r["transcript"] for r in got] == ["seven", "zero", "three"]
    assert [r["path"] for r in got] == [str((folder / p).resolve()) for p, *_ in rows]
    assert [(r["speaker"], r["split"]) for r in got] == [(s, sp) for _, _, s, sp in rows]
    with open(folder / "manifest_speakers.csv", "w", newline="") as f:
        f.write("path,label,speaker,split\nrecordings/7_a_0.wav,7,a,train\nrecordings/x.wav,10,a,test\n")
    with pytest.raises(ValueError, match=r"manifest_speakers.csv:3: label '10' is not a digit 0-9"):
        fsdd_case.spelled_manifest(folder, "manifest_speakers.csv", tmp_path / "work")


def test_quick_shortens_both_sides_and_the_reference_is_the_bilstm(tmp_path, monkeypatch):
    (tmp_path / "fsdd").mkdir()
    for name in fsdd_case.CTC_SPLITS:
        (tmp_path / "fsdd" / name).write_text("path,label,speaker,split\nr/1_a_0.wav,1,a,train\n")
    calls = []

    def compare(ctx, label, overrides, seeds, reference, reference_name, key):
        calls.append((overrides, seeds, key))
        return [0.9] * seeds, [1.0] * seeds, [0.8] * seeds, [1.0] * seeds

    monkeypatch.setattr(fsdd_case, "compare_seeds", compare)
    short = f"trainer.max_epochs={fsdd_case.QUICK_EPOCHS}"
    for quick in (False, True):
        calls.clear()
        ctx = Context(data=tmp_path, work=tmp_path / f"w{quick}", seeds=None, log=lambda m: None, quick=quick)
        result = fsdd_case.case_fsdd_ctc(ctx)
        assert len(calls) == len(fsdd_case.CTC_SPLITS)
        for overrides, seeds, key in calls:
            assert key == "test/seq_acc" and seeds == (1 if quick else fsdd_case.SEEDS)
            assert (short in overrides) == quick
            assert overrides[0] == "task=speech_ctc" and "data.tokens=characters" in overrides
            assert not any(o.startswith("model=") for o in overrides)  # the recipe's own encoder
        assert result.notes.startswith("QUICK") == quick
        references = re.findall(r"reference: ([^;)]*)", result.notes)  # both rows' reference commands
        assert len(references) == 2 and all(r.endswith("model=bilstm") for r in references)
        assert all((short in r) == quick for r in references)  # --quick shortens the reference too
        assert len(result.row().splitlines()) == 2


@pytest.mark.slow
@needs_fsdd
def test_case_runs_both_manifests_with_the_bilstm_on_the_same_split(tmp_path):
    data = _tiny_copy(tmp_path / "data")
    lines: list[str] = []
    ctx = Context(data=data, work=tmp_path / "work", seeds=1, log=lines.append, extra=TINY)
    result = fsdd_case.case_fsdd_ctc(ctx)
    rows = result.row().splitlines()
    assert len(rows) == 2 and "official split" in rows[0] and "held out" in rows[1]
    assert all(r.count("|") == HEADER.splitlines()[0].count("|") for r in rows)
    assert result.command.startswith("python -m seqattn.run task=speech_ctc data.manifest=")
    json.dumps(asdict(result))
    for stem, got in (("manifest_official", asdict(result)), ("manifest_speakers", result.more[0])):
        ours_run, ref_run = ctx.work / stem / "seqattn_0", ctx.work / stem / "bilstm_0"
        ours, ref = (json.loads((run / "metrics.json").read_text()) for run in (ours_run, ref_run))
        assert got["seqattn"] == [ours["test/seq_acc"]] and got["reference"] == [ref["test/seq_acc"]]
        assert f"character error rate (test/ter): seqattn {ours['test/ter']:.4f}" in got["notes"]
        for run in (ours_run, ref_run):  # both read the same spelled manifest
            assert f"{stem}_spelled.csv" in (run / "config.yaml").read_text()
        assert "BiLSTM" in (ref_run / "config.yaml").read_text()
        assert "BiLSTM" not in (ours_run / "config.yaml").read_text()
    with open(ctx.work / "manifest_speakers_spelled.csv", newline="") as f:
        spelled = list(csv.DictReader(f))
    with open(REAL / "manifest_speakers.csv", newline="") as f:
        kept = {str((REAL / r["path"]).resolve()): r for r in csv.DictReader(f)}
    assert spelled and all(fsdd_case.WORDS[int(kept[r["path"]]["label"])] == r["transcript"] for r in spelled)
    assert [line.split(":")[0] for line in lines] == ["fsdd_ctc manifest_official seed 0",
                                                       "fsdd_ctc manifest_speakers seed 0"]


def test_a_reference_that_scored_zero_gives_no_ratio():
    """A word accuracy of 0 (a tiny or --quick reference run) is a result, not a division by zero."""
    from seqattn.bench.real import Result

    result = Result("d", "test word accuracy", False, [0.2], [0.0], "BiLSTM", [1.0], [1.0], "cmd")
    assert result.ratio() is None and "| – |" in result.row()
