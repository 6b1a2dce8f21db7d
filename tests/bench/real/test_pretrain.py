"""The ``lines_pretrain(_full)``, ``fsdd_pretrain(_full)`` and ``freesolv_pretrain(_full)`` cases of ``python -m seqattn.bench real`` (issue 22): listed,
skipped with the missing file named (nothing trained) when the data is absent, and the runs they make (the
runners replaced by recorders: nothing trained)."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    folder = _empty_treebank(tmp_path)
    runs, calls = [], {}
    run_recipe = _recording_run(lambda overrides, out: runs.append(overrides))

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


@pytest.mark.parametrize("quick", [False, True])
def test_lines_cases_share_one_pretraining_and_the_full_case_tags_with_every_sentence(tmp_path, monkeypatch, quick):
    _empty_treebank(tmp_path)
    runs, calls, results = [], {}, {}
    run_recipe = _recording_run(lambda overrides, out: runs.append((overrides, out)))

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)
    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
    tuned = {}
    for name in ("lines_pretrain", "lines_pretrain_full"):
        assert CASES[name] == "pretrain"
        ctx = Context(data=tmp_path, work=tmp_path / "w" / name, seeds=None, log=print, quick=quick)
        results[name] = getattr(pretrain_case, f"case_{name}")(ctx)
        tuned[name] = calls["overrides"]
        _assert_length_chosen_on_dev(tuned[name], quick)  # the full case chooses its length on dev the same way
        assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS) and calls["key"] == "test/acc"
        scratch = results[name].notes.split("scratch:")[1].split(";")[0]
        assert "init_from" not in scratch and "finetune.vocabulary" not in scratch
        assert ("data.train_fraction=0.1" in scratch) == (name == "lines_pretrain")
    ((pretrain, out),) = runs  # one pretraining serves both cases
    assert out == tmp_path / "w" / "lines_pretraining" / "pretrain" and "task=text_pretrain" in pretrain
    full, few = tuned["lines_pretrain_full"], tuned["lines_pretrain"]
    assert not any(o.startswith("data.train_fraction") for o in full)  # every tagged training sentence
    assert [o for o in few if o != "data.train_fraction=0.1"] == full  # otherwise the same recipe and pretraining
    assert f"init_from={out / 'checkpoints' / 'best.ckpt'}" in full
    assert "all 3,457 tagged" in results["lines_pretrain_full"].dataset
    assert "10% of the tagged" in results["lines_pretrain"].dataset


def _empty_treebank(data):
    """``<data>/ud-english-lines/{train,dev,test}.conllu``, empty: the case finds its files (nothing is read).
    Returns the folder."""
    folder = data / "ud-english-lines"
    folder.mkdir()
    for name in ("train", "dev", "test"):
        (folder / f"{name}.conllu").write_text("")
    return folder


def _recording_run(record):
    """A ``run_recipe`` that calls ``record(overrides, out)`` and writes the metrics.json a pretraining would."""
    def run_recipe(overrides, out):
        record(overrides, out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 5.0, "test/acc": 0.2}')
        return {"test/loss": 5.0, "test/acc": 0.2}, 1.0
    return run_recipe


def _recording_compare(calls):
    """A ``compare_seeds`` that records its arguments and writes each arm's metrics.json as a run would."""
    import json

    def compare(ctx, label, overrides, seeds, reference, reference_name, key="test/acc"):
        calls.update(overrides=overrides, seeds=seeds, key=key)
        for seed in range(seeds):
            for arm, acc, epochs in (("seqattn", 0.8, 40), ("scratch", 0.7, 30)):
                (ctx.work / f"{arm}_{seed}").mkdir(parents=True, exist_ok=True)
                (ctx.work / f"{arm}_{seed}" / "metrics.json").write_text(
                    json.dumps({"best_val/acc": acc, "best_val/loss": 1 - acc, "epochs": epochs, "test/acc": acc}))
        return [0.8] * seeds, [1.0] * seeds, [0.7] * seeds, [1.0] * seeds

    return compare


def _assert_length_chosen_on_dev(tuned, quick):
    """Full mode: up to FINETUNE_EPOCHS with early stopping on dev (the recipe's fixed epochs left both arms
    still improving); quick: 2 epochs."""
    assert ("trainer.max_epochs=2" in tuned) == quick
    assert (f"trainer.max_epochs={pretrain_case.FINETUNE_EPOCHS}" in tuned) != quick
    assert (f"callbacks.early_stopping.patience={pretrain_case.FINETUNE_PATIENCE}" in tuned) != quick


@pytest.mark.parametrize("name", ["fsdd_pretrain", "fsdd_pretrain_full"])
def test_fsdd_case_is_listed_and_skips_naming_the_missing_manifest(tmp_path, name):
    assert CASES[name] == "pretrain"
    ctx = Context(data=tmp_path, work=tmp_path / "work" / name, seeds=1, log=print)
    with pytest.raises(FileNotFoundError, match="manifest_speakers.csv"):
        getattr(pretrain_case, f"case_{name}")(ctx)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("quick", [False, True])
def test_fsdd_case_pretrains_on_the_training_clips_with_the_fine_tunes_features(tmp_path, monkeypatch, quick):
    """``fsdd_pretrain`` and ``fsdd_pretrain_full`` share one pretraining (``<work>/../fsdd_pretraining``); the 10 %
    case chooses its length on val, the full case keeps speech_cls's own length; otherwise the same fine-tunes."""
    manifest = tmp_path / "fsdd" / "manifest_speakers.csv"
    manifest.parent.mkdir()
    manifest.write_text("path,label,speaker,split\n")
    runs, calls, results, tuned = [], {}, {}, {}

    def run_recipe(overrides, out):
        runs.append((overrides, out))
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 0.5}')
        return {"test/loss": 0.5}, 1.0

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)
    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
    for name in ("fsdd_pretrain", "fsdd_pretrain_full"):
        ctx = Context(data=tmp_path, work=tmp_path / "w" / name, seeds=None, log=print, quick=quick)
        results[name] = getattr(pretrain_case, f"case_{name}")(ctx)
        getattr(pretrain_case, f"case_{name}")(ctx)  # a rerun reuses the finished pretraining
        tuned[name] = calls["overrides"]
        assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS) and calls["key"] == "test/acc"
        assert "init_from" not in results[name].notes.split("scratch:")[1] and ("QUICK" in results[name].notes) == quick
    ((pretrain, out),) = runs  # one pretraining serves both cases
    assert out == tmp_path / "w" / "fsdd_pretraining" / "pretrain"
    assert "task=speech_pretrain" in pretrain and f"data.manifest={manifest}" in pretrain
    assert "adapter.f_max=4000" in pretrain  # speech_cls's mel band: the fine-tune reads the same features
    assert f"trainer.max_epochs={1 if quick else pretrain_case.FSDD_PRETRAIN_EPOCHS}" in pretrain
    few, full = tuned["fsdd_pretrain"], tuned["fsdd_pretrain_full"]
    assert "task=speech_cls" in few and "data.train_fraction=0.1" in few and f"data.manifest={manifest}" in few
    assert "model=transformer" in few  # the pretrained encoder, without speech_cls's default conv stem
    assert "adapter.n_mels=40" in few and "adapter.n_mels" not in " ".join(pretrain)  # speech_pretrain's mel width
    init = f"init_from={out / 'checkpoints' / 'best.ckpt'}"
    assert init in few and init in full
    _assert_length_chosen_on_dev(few, quick)
    # all labels: every labelled training clip, speech_cls's own length (its 20 epochs; 100 would take hours)
    assert not any(o.startswith("data.train_fraction") for o in full)
    assert [o for o in full if o.startswith(("trainer.max_epochs", "callbacks."))] == (
        ["trainer.max_epochs=2"] if quick else [])
    length = {"data.train_fraction=0.1", *_finetune_length_overrides(quick)}
    assert [o for o in few if o not in length] == [o for o in full if o != "trainer.max_epochs=2"]
    assert "all 1,800 labelled" in results["fsdd_pretrain_full"].dataset
    assert "10% of the labelled" in results["fsdd_pretrain"].dataset


def _finetune_length_overrides(quick):
    """The 10 % cases' fine-tune length overrides (``_finetune_length``)."""
    return (["trainer.max_epochs=2"] if quick else
            [f"trainer.max_epochs={pretrain_case.FINETUNE_EPOCHS}",
             f"callbacks.early_stopping.patience={pretrain_case.FINETUNE_PATIENCE}"])


# ------------------------------------------------------------------------------------------------
# FreeSolv: masked-atom pretraining on FreeSolv + Lipophilicity + NCI SMILES, the test molecules excluded
# ------------------------------------------------------------------------------------------------
#: 40 small molecules, distinct after canonicalisation (a FreeSolv-like file: iupac,smiles,expt,calc)
FREESOLV_SMILES = ["C" * n + tail for tail in ("", "O", "N", "Cl") for n in range(1, 11)]


def _molecule_data(tmp_path):
    """``<data>/molecules/{freesolv,lipophilicity}.csv`` (tiny) and the canonical SMILES of each seed's test split
    of the fine-tune's data (computed here with the DataModule, independently of the case)."""
    from seqattn.modalities.graph.molecule_data import MoleculeDataModule

    folder = tmp_path / "data" / "molecules"
    folder.mkdir(parents=True)
    (folder / "freesolv.csv").write_text("iupac,smiles,expt,calc\n" + "".join(
        f"m{i},{s},{-i / 4},{-i / 5}\n" for i, s in enumerate(FREESOLV_SMILES)))
    (folder / "lipophilicity.csv").write_text("smiles,target\nc1ccccc1O,1.5\nc1ccccc1N,2.5\n")
    tests = {}
    for seed in range(3):
        dm = MoleculeDataModule(path=str(folder / "freesolv.csv"), target_columns=["expt"], seed=seed,
                                data_dir=str(tmp_path / "cache"), cache=False)
        dm.setup()
        tests[seed] = {pretrain_case.canonical(g["smiles"]) for g in dm.datasets["test"].graphs}
    return folder, tests


def test_pretrain_smiles_leave_out_the_excluded_and_count_what_they_drop(tmp_path):
    folder, _ = _molecule_data(tmp_path)
    nci = tmp_path / "nci.smi"
    nci.write_text("OCC 1\nc1ccccc1S 2\nnot_a_smiles 3\nc1ccccc1S 4\nC(=O)O 5\n")
    sources = [folder / "freesolv.csv", folder / "lipophilicity.csv", nci]
    exclude = {pretrain_case.canonical("CCO"), pretrain_case.canonical("CCCN")}
    path, counts = pretrain_case.write_pretrain_smiles(tmp_path / "work", sources, exclude)
    written = path.read_text().splitlines()
    assert path.parent == tmp_path / "work" and path.suffix == ".smi"
    assert not set(written) & exclude and "CCO" not in written  # "OCC" (NCI) is the excluded CCO: dropped as well
    assert {pretrain_case.canonical("c1ccccc1S"), pretrain_case.canonical("C(=O)O")} <= set(written)  # NCI kept
    assert pretrain_case.canonical("c1ccccc1O") in written and pretrain_case.canonical("CCCCC") in written
    assert len(written) == len(set(written)) == 40 - 2 + 2 + 2  # each molecule once
    assert counts["freesolv.csv"] == {"read": 40, "invalid": 0, "excluded": 2, "duplicate": 0, "written": 38}
    assert counts["nci.smi"] == {"read": 5, "invalid": 1, "excluded": 1, "duplicate": 1, "written": 2}
    again, _ = pretrain_case.write_pretrain_smiles(tmp_path / "work", sources, set())
    assert again != path and len(again.read_text().splitlines()) == 44  # another content, another file


@pytest.mark.parametrize("quick", [False, True])
def test_freesolv_cases_pretrain_once_without_any_evaluated_test_molecule(tmp_path, monkeypatch, quick):
    folder, tests = _molecule_data(tmp_path)
    test_molecules = set().union(*(tests[s] for s in range(1 if quick else 3)))
    unseen = sorted(set().union(*tests.values()) - test_molecules)  # quick: seed 1's and 2's test molecules
    nci = tmp_path / "nci.smi"
    one_test = sorted(tests[0])[0]
    nci.write_text(f"c1ccccc1S 1\nC(=O)O 2\n{one_test} 3\n")  # an evaluated test molecule in the NCI file
    monkeypatch.setattr(pretrain_case, "nci_smiles_path", lambda: nci)
    runs, calls = [], {}

    def run_recipe(overrides, out):
        runs.append(overrides)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 0.4, "test/acc": 0.9}')
        return {"test/loss": 0.4, "test/acc": 0.9}, 1.0

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)
    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
    extra = [f"paths.data_dir={tmp_path / 'cache'}"]
    results = {}
    for name, fraction in (("freesolv_pretrain", 0.1), ("freesolv_pretrain_full", None)):
        assert CASES[name] == "pretrain"
        ctx = Context(data=tmp_path / "data", work=tmp_path / "w" / name, seeds=None, log=print, extra=extra,
                      quick=quick)
        results[name] = getattr(pretrain_case, f"case_{name}")(ctx)
        tuned = calls["overrides"]
        assert "task=molecule" in tuned and f"data.path={folder / 'freesolv.csv'}" in tuned
        assert ("data.train_fraction=0.1" in tuned) == (fraction is not None)
        assert any(o.startswith("init_from=") and o.endswith("best.ckpt") for o in tuned)
        # the pretrained arm's learning-rate multiplier chosen on val (10 %: 3; all labels: the default 1)
        assert ("finetune.pretrained_lr_mult=3" in tuned) == (fraction is not None)
        assert calls["key"] == "test/rmse_expt" and calls["seeds"] == (1 if quick else 3)
        assert ("budget.steps=500" in tuned) == quick  # full: the recipe's own length, best val epoch tested
        scratch = results[name].notes.split("scratch:")[1].split(";")[0]
        assert "init_from" not in scratch and "finetune" not in scratch
        assert ("data.train_fraction=0.1" in scratch) == (fraction is not None)
        assert results[name].lower_is_better and "best val loss / epochs run per seed" in results[name].notes
    (pretrain,) = runs  # one pretraining serves both cases
    assert "task=molecule_pretrain" in pretrain and f"trainer.max_epochs={1 if quick else 10}" in pretrain
    smi = Path(next(o for o in pretrain if o.startswith("data.path=")).split("=", 1)[1])
    assert smi.parent == tmp_path / "w" / "freesolv_pretraining"  # the work folder, never the repository
    written = set(smi.read_text().splitlines())
    assert not written & test_molecules  # no test molecule of an evaluated split, from FreeSolv or from NCI
    assert set(unseen) <= written  # only the evaluated seeds' test molecules are left out
    assert {pretrain_case.canonical("c1ccccc1S"), pretrain_case.canonical("C(=O)O")} <= written  # the NCI molecules are in
    assert pretrain_case.canonical("c1ccccc1O") in written  # Lipophilicity's too
    train0 = {pretrain_case.canonical(s) for s in FREESOLV_SMILES} - test_molecules
    assert train0 <= written and len(written) == len(train0) + 2 + 2
    assert f"{len(test_molecules)} test molecules of seeds 0..{0 if quick else 2} excluded" in results[
        "freesolv_pretrain"].notes


@pytest.mark.parametrize("name", ["cora_pretrain", "cora_pretrain_full"])
def test_cora_case_is_listed_and_skips_naming_the_missing_raw_files(tmp_path, name):
    assert CASES[name] == "pretrain"
    ctx = Context(data=tmp_path, work=tmp_path / "work" / name, seeds=1, log=print)
    with pytest.raises(FileNotFoundError, match="Cora/raw"):
        getattr(pretrain_case, f"case_{name}")(ctx)
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("quick", [False, True])
def test_cora_case_pretrains_on_the_whole_graph_with_the_fine_tunes_adapter(tmp_path, monkeypatch, quick):
    """Both Cora cases share ONE pretraining (``<work>/../cora_pretraining``); the full case fine-tunes the same
    recipe on ``data.planetoid_split=full``, the 140-label case on the default public split."""
    (tmp_path / "Cora" / "raw").mkdir(parents=True)
    runs, calls, results, tuned = [], {}, {}, {}

    def run_recipe(overrides, out):
        runs.append((overrides, out))
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text('{"test/loss": 0.06, "epochs": 120}')
        return {"test/loss": 0.06, "epochs": 120}, 1.0

    monkeypatch.setattr(pretrain_case, "run_recipe", run_recipe)
    monkeypatch.setattr(pretrain_case, "compare_seeds", _recording_compare(calls))
    for name in ("cora_pretrain", "cora_pretrain_full", "cora_pretrain"):  # a rerun reuses the finished pretraining
        ctx = Context(data=tmp_path, work=tmp_path / "w" / name, seeds=None, log=print, quick=quick)
        results[name] = getattr(pretrain_case, f"case_{name}")(ctx)
        tuned[name] = calls["overrides"]
        assert calls["seeds"] == (1 if quick else pretrain_case.SEEDS)
        assert "init_from" not in results[name].notes.split("scratch:")[1] and ("QUICK" in results[name].notes) == quick
        assert "120 epochs" in results[name].notes and "pretrained 0.8000 (40 ep)" in results[name].notes
    ((pretrain, out),) = runs  # one pretraining serves both cases
    assert out == tmp_path / "w" / "cora_pretraining" / "pretrain"
    graph = ["data.source=planetoid", "data.name=Cora", f"data.root={tmp_path}"]
    assert "task=social_pretrain" in pretrain and "experiment=citation_graph_pretrain" in pretrain
    assert all(o in pretrain for o in graph) and not any("label" in o or "split" in o for o in pretrain)
    epochs = pretrain_case.CORA_QUICK_EPOCHS[0] if quick else pretrain_case.CORA_PRETRAIN_EPOCHS
    assert f"trainer.max_epochs={epochs}" in pretrain
    few, full = tuned["cora_pretrain"], tuned["cora_pretrain_full"]
    assert "task=social" in few and "experiment=citation_graph" in few and all(o in few for o in graph)
    assert f"init_from={out / 'checkpoints' / 'best.ckpt'}" in few
    assert any(o.startswith("trainer.max_epochs=") for o in few) == quick  # else citation_graph's own length
    assert not any("planetoid_split" in o for o in few)  # the public split: the 140 labels
    assert [o for o in full if o != "data.planetoid_split=full"] == few and "data.planetoid_split=full" in full
    assert "data.planetoid_split=full" in results["cora_pretrain_full"].notes.split("scratch:")[1]
    assert "140 labels" in results["cora_pretrain"].dataset and "1,208" in results["cora_pretrain_full"].dataset


def test_a_pretraining_made_under_other_recipe_defaults_is_run_again(tmp_path, monkeypatch):
    """The reuse of a finished pretraining is keyed on the composed config, not only the command: a recipe
    default that changed since (molecule_pretrain's positional encoding) must not hand the fine-tunes a checkpoint
    of the old architecture."""
    runs, logs = [], []
    monkeypatch.setattr(pretrain_case, "run_recipe", _recording_run(lambda overrides, out: runs.append(out)))
    ctx = Context(data=tmp_path, work=tmp_path / "w" / "case", seeds=1, log=logs.append)
    command = ["task=molecule_pretrain", "trainer.max_epochs=1"]
    pretrain_case._pretrain_once(ctx, command, "case", "case")
    pretrain_case._pretrain_once(ctx, command, "case", "case")
    assert len(runs) == 1 and "reusing the finished pretraining" in logs[-1]
    monkeypatch.setattr(pretrain_case, "config_digest",
                        lambda overrides: "a config composed after a default changed")
    pretrain_case._pretrain_once(ctx, command, "case", "case")
    assert len(runs) == 2 and "the same command with other recipe defaults: running it again" in logs[-1]
    pretrain_case._pretrain_once(ctx, command + ["seed=1"], "case", "case")
    assert len(runs) == 3 and "another command" in logs[-1]


def test_the_config_digest_follows_a_default_the_command_does_not_name(tmp_path, monkeypatch):
    import shutil

    from seqattn import configs

    command = ["task=molecule_pretrain"]
    plain = pretrain_case.config_digest(command)
    assert plain == pretrain_case.config_digest(command)
    conf = shutil.copytree(configs.CONFIG_DIR, tmp_path / "conf")  # the same tree with one recipe default changed
    task = conf / "task" / "molecule_pretrain.yaml"
    assert "positional: random_walk" in task.read_text()
    task.write_text(task.read_text().replace("positional: random_walk", "positional: laplacian"))
    monkeypatch.setattr(configs, "CONFIG_DIR", conf)
    assert pretrain_case.config_digest(command) != plain
