"""The ``lines_pretrain`` case of ``python -m seqattn.bench real`` (issue 22): listed, and skipped with the
missing file named (nothing trained) when the UD English-LinES files are absent."""

from __future__ import annotations

import argparse

import pytest

from seqattn.bench import real as bench_real
from seqattn.bench.real import CASES, Context
from seqattn.bench.real import pretrain as pretrain_case


def test_case_is_listed_and_skips_naming_the_missing_files(tmp_path, capsys):
    assert CASES["lines_pretrain"] == "pretrain" and callable(pretrain_case.case_lines_pretrain)
    (tmp_path / "ud-english-lines").mkdir()
    (tmp_path / "ud-english-lines" / "train.conllu").write_text("")
    ctx = Context(data=tmp_path, work=tmp_path / "work", seeds=1, log=print)
    with pytest.raises(FileNotFoundError, match="dev.conllu"):
        pretrain_case.case_lines_pretrain(ctx)
    parser = argparse.ArgumentParser()
    bench_real.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path), "--cases", "lines_pretrain", "--work", str(tmp_path / "work")])
    assert bench_real.run(args) == 0
    out = capsys.readouterr()
    assert "lines_pretrain: skipped (no UD English-LinES files" in out.err and "test.conllu" in out.err
    assert "| UD English-LinES" not in out.out and not (tmp_path / "work").exists()


@pytest.mark.parametrize("quick", [False, True])
def test_case_shortens_only_when_quick_and_both_arms_see_the_same_fraction(tmp_path, monkeypatch, quick):
    folder = tmp_path / "ud-english-lines"
    folder.mkdir()
    for name in ("train", "dev", "test"):
        (folder / f"{name}.conllu").write_text("")
    runs, calls = [], {}

    def run_recipe(overrides, out):
        runs.append(overrides)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 5.0, "test/acc": 0.2}')
        return {"test/loss": 5.0, "test/acc": 0.2}, 1.0

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)

    def compare(ctx, label, overrides, seeds, reference, reference_name):
        calls.update(overrides=overrides, seeds=seeds)
        return [0.8] * seeds, [1.0] * seeds, [0.7] * seeds, [1.0] * seeds

    monkeypatch.setattr(pretrain_case, "compare_seeds", compare)
    ctx = Context(data=tmp_path, work=tmp_path / "w", seeds=None, log=print, quick=quick)
    result = pretrain_case.case_lines_pretrain(ctx)
    pretrain_case.case_lines_pretrain(ctx)  # a rerun reuses the finished pretraining with the same command
    (pretrain,) = runs
    assert "task=text_pretrain" in pretrain and f"data.train_path={folder / 'train.conllu'}" in pretrain
    assert f"trainer.max_epochs={1 if quick else pretrain_case.PRETRAIN_EPOCHS}" in pretrain
    tuned = calls["overrides"]
    assert "task=text_tagging" in tuned and "data.train_fraction=0.1" in tuned
    assert f"data.labels={pretrain_case.UPOS}" in tuned and "SYM" in pretrain_case.UPOS  # a 10 % sample may lack SYM
    assert any(o.startswith("init_from=") and o.endswith("best.ckpt") for o in tuned)
    assert ("trainer.max_epochs=2" in tuned) == quick
    assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS)
    assert ("QUICK" in result.notes) == quick and "pretraining (" in result.notes
    assert "data.train_fraction=0.1" in result.notes and "init_from" not in result.notes.split("scratch:")[1]
