"""The ``lines_pretrain`` and ``fsdd_pretrain`` cases of ``python -m seqattn.bench real`` (issue 22): listed,
skipped with the missing file named (nothing trained) when the data is absent, and the runs they make (the
runners replaced by recorders: nothing trained)."""

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

    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
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
    assert f"finetune.vocabulary={pretrain_case.FINETUNE_VOCABULARY}" in tuned
    _assert_length_chosen_on_dev(tuned, quick)
    assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS)
    assert ("QUICK" in result.notes) == quick and "pretraining (" in result.notes
    scratch = result.notes.split("scratch:")[1].split(";")[0]
    assert "data.train_fraction=0.1" in scratch and "init_from" not in scratch and "finetune.vocabulary" not in scratch
    assert "pretrained 0.8000 (40 ep)" in result.notes and "scratch 0.7000 (30 ep)" in result.notes


def _recording_compare(calls):
    """A ``compare_seeds`` that records its arguments and writes each arm's metrics.json as a run would."""
    import json

    def compare(ctx, label, overrides, seeds, reference, reference_name):
        calls.update(overrides=overrides, seeds=seeds)
        for seed in range(seeds):
            for arm, acc, epochs in (("seqattn", 0.8, 40), ("scratch", 0.7, 30)):
                (ctx.work / f"{arm}_{seed}").mkdir(parents=True, exist_ok=True)
                (ctx.work / f"{arm}_{seed}" / "metrics.json").write_text(
                    json.dumps({"best_val/acc": acc, "epochs": epochs, "test/acc": acc}))
        return [0.8] * seeds, [1.0] * seeds, [0.7] * seeds, [1.0] * seeds

    return compare


def _assert_length_chosen_on_dev(tuned, quick):
    """Full mode: up to FINETUNE_EPOCHS with early stopping on dev (the recipe's fixed epochs left both arms
    still improving); quick: 2 epochs."""
    assert ("trainer.max_epochs=2" in tuned) == quick
    assert (f"trainer.max_epochs={pretrain_case.FINETUNE_EPOCHS}" in tuned) != quick
    assert (f"callbacks.early_stopping.patience={pretrain_case.FINETUNE_PATIENCE}" in tuned) != quick


def test_fsdd_case_is_listed_and_skips_naming_the_missing_manifest(tmp_path):
    assert CASES["fsdd_pretrain"] == "pretrain"
    ctx = Context(data=tmp_path, work=tmp_path / "work", seeds=1, log=print)
    with pytest.raises(FileNotFoundError, match="manifest_speakers.csv"):
        pretrain_case.case_fsdd_pretrain(ctx)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("quick", [False, True])
def test_fsdd_case_pretrains_on_the_training_clips_with_the_fine_tunes_features(tmp_path, monkeypatch, quick):
    manifest = tmp_path / "fsdd" / "manifest_speakers.csv"
    manifest.parent.mkdir()
    manifest.write_text("path,label,speaker,split\n")
    runs, calls = [], {}

    def run_recipe(overrides, out):
        runs.append(overrides)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 0.5}')
        return {"test/loss": 0.5}, 1.0

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)
    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
    ctx = Context(data=tmp_path, work=tmp_path / "w", seeds=None, log=print, quick=quick)
    result = pretrain_case.case_fsdd_pretrain(ctx)
    pretrain_case.case_fsdd_pretrain(ctx)  # a rerun reuses the finished pretraining
    (pretrain,) = runs
    assert "task=speech_pretrain" in pretrain and f"data.manifest={manifest}" in pretrain
    assert "adapter.f_max=4000" in pretrain  # speech_cls's mel band: the fine-tune reads the same features
    assert f"trainer.max_epochs={1 if quick else pretrain_case.FSDD_PRETRAIN_EPOCHS}" in pretrain
    tuned = calls["overrides"]
    assert "task=speech_cls" in tuned and "data.train_fraction=0.1" in tuned and f"data.manifest={manifest}" in tuned
    assert any(o.startswith("init_from=") and o.endswith("best.ckpt") for o in tuned)
    _assert_length_chosen_on_dev(tuned, quick)
    assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS)
    assert "init_from" not in result.notes.split("scratch:")[1] and ("QUICK" in result.notes) == quick


def test_cora_case_is_listed_and_skips_naming_the_missing_raw_files(tmp_path):
    assert CASES["cora_pretrain"] == "pretrain"
    ctx = Context(data=tmp_path, work=tmp_path / "work", seeds=1, log=print)
    with pytest.raises(FileNotFoundError, match="Cora/raw"):
        pretrain_case.case_cora_pretrain(ctx)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("quick", [False, True])
def test_cora_case_pretrains_on_the_whole_graph_with_the_fine_tunes_adapter(tmp_path, monkeypatch, quick):
    (tmp_path / "Cora" / "raw").mkdir(parents=True)
    runs, calls = [], {}

    def run_recipe(overrides, out):
        runs.append(overrides)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 0.06, "epochs": 120}')
        return {"test/loss": 0.06, "epochs": 120}, 1.0

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)
    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
    ctx = Context(data=tmp_path, work=tmp_path / "w", seeds=None, log=print, quick=quick)
    result = pretrain_case.case_cora_pretrain(ctx)
    pretrain_case.case_cora_pretrain(ctx)  # a rerun reuses the finished pretraining
    (pretrain,) = runs
    graph = ["data.source=planetoid", "data.name=Cora", f"data.root={tmp_path}"]
    assert "task=social_pretrain" in pretrain and "experiment=citation_graph_pretrain" in pretrain
    assert all(o in pretrain for o in graph) and not any("label" in o for o in pretrain)
    epochs = pretrain_case.CORA_QUICK_EPOCHS[0] if quick else pretrain_case.CORA_PRETRAIN_EPOCHS
    assert f"trainer.max_epochs={epochs}" in pretrain
    tuned = calls["overrides"]
    assert "task=social" in tuned and "experiment=citation_graph" in tuned and all(o in tuned for o in graph)
    assert any(o.startswith("init_from=") and o.endswith("best.ckpt") for o in tuned)
    assert any(o.startswith("trainer.max_epochs=") for o in tuned) == quick  # else citation_graph's own length
    assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS)
    assert "init_from" not in result.notes.split("scratch:")[1] and ("QUICK" in result.notes) == quick
    assert "120 epochs" in result.notes and "pretrained 0.8000 (40 ep)" in result.notes
