"""`python -m seqattn.predict` / `seqattn.load(ckpt).predict(source)`: rebuilt from the checkpoint alone."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import seqattn
from seqattn.training.checkpoint import NotASeqattnCheckpoint, read_checkpoint
from seqattn.predict import main as predict_main
from seqattn.predict import parse_args
from tests.workflows import PREDICT_TASKS, TASKS, assert_rows_close, tiny_run, workflow_data_dir  # noqa: F401


@pytest.mark.parametrize("task", PREDICT_TASKS)
def test_batched_prediction_equals_one_at_a_time(task, tiny_run, tmp_path):
    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    model = seqattn.load(run.best)
    batched = model.predict(source, batch_size=4)
    single = model.predict(source, batch_size=1)
    assert len(batched) >= 3
    assert len({json.dumps(r, sort_keys=True) for r in batched}) == len(batched)  # not all the same row
    assert_rows_close(batched, single)


@pytest.mark.parametrize("task", PREDICT_TASKS)
def test_cli_writes_csv_and_jsonl_with_one_row_per_input(task, tiny_run, tmp_path):
    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    expected = seqattn.load(run.best).predict(source)
    assert predict_main([f"ckpt={run.best}", f"input={source}", f"output={tmp_path / 'p.jsonl'}"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert_rows_close(rows, expected)
    assert predict_main([f"ckpt={run.best}", f"input={source}", f"output={tmp_path / 'p.csv'}", "batch_size=2"]) == 0
    with open(tmp_path / "p.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["id"] for r in table] == [r["id"] for r in expected]


@pytest.mark.parametrize("task", PREDICT_TASKS)
def test_the_predictor_needs_only_the_checkpoint(task, tiny_run, tmp_path):
    """The checkpoint alone (weights, spec, data config) rebuilds the model the run tested: scoring the
    test split with it gives the test metrics the run reported from memory."""
    import lightning as L
    from hydra.utils import instantiate

    run = tiny_run(task)
    checkpoint = read_checkpoint(run.best)  # weights_only=True
    assert checkpoint["seqattn_config"]["task_name"] == task
    predictor = seqattn.load(run.best)
    assert not predictor.model.training
    datamodule = instantiate(checkpoint["seqattn_config"]["data"], _convert_="all")
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    scored = trainer.test(predictor.model, datamodule=datamodule, verbose=False)[0]
    reported = {k: v for k, v in run.metrics.items() if k.startswith("test/") and isinstance(v, float)}
    assert reported and set(reported) <= set(scored)
    for key, value in reported.items():
        assert scored[key] == pytest.approx(value, abs=1e-5), key


def test_not_a_checkpoint_is_refused_with_a_clear_message(tmp_path):
    random_pt = tmp_path / "random.pt"
    torch.save({"weights": torch.randn(3, 3)}, random_pt)
    with pytest.raises(NotASeqattnCheckpoint, match="not a seqattn checkpoint.*lacks"):
        seqattn.load(random_pt)
    text = tmp_path / "notes.ckpt"
    text.write_text("hello, not a checkpoint\n")
    with pytest.raises(NotASeqattnCheckpoint, match="torch cannot read it"):
        seqattn.load(text)
    obj = tmp_path / "object.pt"
    torch.save({"state_dict": {}, "x": Path("somewhere")}, obj)  # a pickled Python object
    with pytest.raises(NotASeqattnCheckpoint, match="weights_only"):
        read_checkpoint(obj)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_checkpoint(tmp_path / "missing.ckpt")
    assert predict_main([f"ckpt={text}", f"input={tmp_path}"]) == 2


def test_predict_arguments_are_checked():
    assert parse_args(["ckpt=a.ckpt", "input=x", "batch_size=3"]) == {"ckpt": "a.ckpt", "input": "x", "batch_size": 3}
    with pytest.raises(ValueError, match="unexpected argument 'model=x'"):
        parse_args(["ckpt=a", "input=b", "model=x"])
    with pytest.raises(ValueError, match=r"missing \['input'\]"):
        parse_args(["ckpt=a"])
    with pytest.raises(ValueError, match="batch_size='zero'"):
        parse_args(["ckpt=a", "input=b", "batch_size=zero"])


def test_unreadable_inputs_are_listed_and_the_readable_ones_predicted(tiny_run, tmp_path, capsys):
    run = tiny_run("image")
    source = TASKS["image"].predict_inputs(run.cfg, tmp_path / "inputs")
    (source / "broken.png").write_bytes(b"not an image")
    good = len(list(source.glob("shape_*.png")))
    predictor = seqattn.load(run.best)
    rows = predictor.predict(source)
    assert len(rows) == good and "broken.png" not in {r["id"] for r in rows}
    assert len(predictor.errors) == 1 and predictor.errors[0][0].endswith("broken.png")
    with pytest.raises(ValueError, match="broken.png"):
        predictor.predict(source, on_error="stop")
    out = tmp_path / "p.jsonl"
    assert predict_main([f"ckpt={run.best}", f"input={source}", f"output={out}"]) == 1  # rows written, exit 1
    assert len(out.read_text().splitlines()) == good
    assert "broken.png" in capsys.readouterr().err


def test_a_clip_too_short_and_a_bad_smiles_are_skipped_with_the_reason(tiny_run, tmp_path):
    import numpy as np
    import soundfile as sf

    speech = tiny_run("speech")
    folder = TASKS["speech"].predict_inputs(speech.cfg, tmp_path / "audio")
    sf.write(folder / "tiny.wav", np.zeros(50, dtype=np.float32), 16000)
    predictor = seqattn.load(speech.best)
    rows = predictor.predict(folder, batch_size=2)
    assert len(rows) == 5 and [w for w, _ in predictor.errors] == [str(folder / "tiny.wav")]
    assert "shorter than the analysis window" in predictor.errors[0][1]

    molecule = tiny_run("molecule")
    source = TASKS["molecule"].predict_inputs(molecule.cfg, tmp_path / "mol")
    source.write_text(source.read_text() + "C1CC(\n")
    predictor = seqattn.load(molecule.best)
    rows = predictor.predict(source)
    assert len(rows) == 6 and predictor.errors[0][0].endswith("molecules.csv:8")
    # a malformed CSV row (a quote never closed) is left out and listed too; the rows after it are read
    source.write_text(source.read_text() + '"CCO,broken\nCCN\n')
    rows = predictor.predict(source)
    errors = dict((w.rsplit("/", 1)[-1], reason) for w, reason in predictor.errors)
    assert len(rows) == 7 and sorted(errors) == ["molecules.csv:8", "molecules.csv:9"]
    assert "malformed CSV" in errors["molecules.csv:9"] and rows[-1]["smiles"] == "CCN"
    with pytest.raises(ValueError, match="molecules.csv:"):
        predictor.predict(source, on_error="stop")


def test_predict_takes_paths_and_says_what_it_takes_otherwise(tiny_run, tmp_path):
    from PIL import Image

    run = tiny_run("text_cls")
    source = TASKS["text_cls"].predict_inputs(run.cfg, tmp_path / "inputs")
    predictor = seqattn.load(run.best)
    one = predictor.predict(source)
    assert len(predictor.predict([source, source])) == 2 * len(one)  # a list of inputs
    with pytest.raises(ValueError, match="not an existing file or folder.*one sentence per line"):
        predictor.predict("the film was not bad")
    with pytest.raises(ValueError, match="got a PIL.Image.Image"):
        predictor.predict(Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError, match="empty list"):
        predictor.predict([])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is available"):
            seqattn.load(run.best, device="cuda")
        assert predict_main([f"ckpt={run.best}", f"input={source}", "device=cuda"]) == 2


def test_unknown_output_format_is_refused(tmp_path):
    from seqattn.predict import write_rows

    with pytest.raises(ValueError, match=r"\.csv"):
        write_rows([{"id": "a"}], tmp_path / "out.xlsx")


def _predict_cli(ckpt, source, out, *extra):
    return predict_main([f"ckpt={ckpt}", f"input={source}", f"output={out}", *extra])


@pytest.mark.parametrize("task, name, text, bad", [
    # a stray quote and a quote never closed: both rows are left out, the rows after them are read
    ("text_cls", "reviews.csv", 'text\nthe film was good\n"great" film\nnot bad\n"never closed\nboring\n',
     {3: "malformed CSV", 5: "malformed CSV"}),
    ("text_cls", "reviews.jsonl", '{"text": "the film was good"}\n{"text": "not bad"\n[1, 2]\n{"text": "boring"}\n',
     {2: "invalid JSON", 3: "expected a JSON object"}),
    ("text_tagging", "sentences.conllu", "1\tthe\t_\tDET\t_\t_\t0\t_\t_\t_\n2\tfilm\t_\tNOUN\t_\t_\t0\t_\t_\t_\n\n"
                                         "1\twe\t_\tPRON\n2\tsell\t_\tVERB\t_\t_\t0\t_\t_\t_\n\n"
                                         "1\tthey\t_\tPRON\t_\t_\t0\t_\t_\t_\n\n",
     {4: "needs 10 tab-separated fields"}),
])
def test_text_predict_skips_malformed_lines_and_predicts_the_rest(task, name, text, bad, tiny_run, tmp_path, capsys):
    """README: every readable input gets a row. A malformed line (bad CSV quote, bad JSON line, short
    CoNLL-U line: its sentence) is left out and listed as file:line with the reason; with on_error=stop
    it stops the call."""
    run = tiny_run(task)
    source = tmp_path / name
    source.write_text(text)
    predictor = seqattn.load(run.best)
    rows = predictor.predict(source)
    good = 4 - len(bad) if task == "text_cls" else 2
    assert len(rows) == good + (1 if name.endswith(".csv") else 0)
    assert [w for w, _ in predictor.errors] == [f"{source}:{line}" for line in bad]
    for (_, reason), want in zip(predictor.errors, bad.values()):
        assert want in reason
    if name.endswith(".csv"):
        assert [r["id"] for r in rows] == [f"{name}:{line}" for line in (2, 4, 6)]
    if task == "text_tagging":
        assert [r["tokens"] for r in rows] == [["the", "film"], ["they"]]
    with pytest.raises(ValueError, match=f"{name}:{min(bad)}"):
        predictor.predict(source, on_error="stop")
    out = tmp_path / "p.jsonl"
    assert _predict_cli(run.best, source, out) == 1  # rows written, the bad lines listed, exit 1
    assert len(out.read_text().splitlines()) == len(rows)
    assert f"{name}:{min(bad)}" in capsys.readouterr().err


def test_molecule_predict_takes_a_csv_without_the_id_column(tiny_run, tmp_path):
    """data.id_column (from the run or given to predict) names rows when the CSV has that column; a CSV
    without it is predicted with the SMILES as ids instead of refused."""
    run = tiny_run("molecule")
    plain = TASKS["molecule"].predict_inputs(run.cfg, tmp_path / "mol")
    named = tmp_path / "named.csv"
    named.write_text("name,smiles\nethanol,CCO\nphenol,c1ccccc1O\n")
    predictor = seqattn.load(run.best, data={"id_column": "name"})
    assert predictor.datamodule.id_column == "name"
    assert [r["id"] for r in predictor.predict(named)] == ["ethanol", "phenol"]
    rows = predictor.predict(plain)
    assert len(rows) == 6 and rows[0]["id"] == "CCO" and not predictor.errors
    out = tmp_path / "p.jsonl"
    assert _predict_cli(run.best, named, out, "data.id_column=name") == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["ethanol", "phenol"]


def _karate_edges(run, path, extra=""):
    """A ring over the karate club's nodes (other edges than training's), plus ``extra`` lines."""
    nodes = TASKS["social"].predict_inputs(run.cfg, path.parent / "nodes")
    ids = [line.split(",")[0] for line in nodes.read_text().splitlines()[1:]]
    path.write_text("source,target\n" + "".join(f"{a},{b}\n" for a, b in zip(ids, ids[1:] + ids[:1])) + extra)
    return nodes


def test_social_predict_reads_a_new_edge_file_given_as_a_data_option(tiny_run, tmp_path):
    run = tiny_run("social")
    edges = tmp_path / "ring.csv"
    nodes = _karate_edges(run, edges)
    trained = seqattn.load(run.best).predict(nodes)
    ring = seqattn.load(run.best, data={"edges": str(edges)}).predict(nodes)
    assert [r["id"] for r in ring] == [r["id"] for r in trained] and len(ring) == 34
    assert json.dumps(ring) != json.dumps(trained)  # the ring's edges were used, not the training edge file
    out = tmp_path / "p.jsonl"
    assert _predict_cli(run.best, nodes, out, f"data.edges={edges}") == 0
    assert_rows_close([json.loads(line) for line in out.read_text().splitlines()], ring)


def test_a_misspelt_data_option_is_refused_with_the_valid_ones(tiny_run, tmp_path):
    run = tiny_run("social")
    nodes = TASKS["social"].predict_inputs(run.cfg, tmp_path / "nodes")
    with pytest.raises(ValueError, match=r"data\.edge: .*no option 'edge' \(did you mean data\.edges\?\)"):
        seqattn.load(run.best, data={"edge": "x.csv"})
    assert predict_main([f"ckpt={run.best}", f"input={nodes}", "data.unknown_node=skip"]) == 2
    with pytest.raises(ValueError, match="cannot parse 'data.edges'"):
        parse_args(["ckpt=a", "input=b", "data.edges"])


def _hinted_option(message: str) -> str:
    """The ``key=value`` option an error message tells the user to set."""
    import re

    found = re.findall(r"\b((?:data\.)?[a-z_]+=[a-z_0-9]+)\b", message.strip().splitlines()[-1])
    assert found, message
    return found[-1]


def test_predict_error_hints_name_options_predict_accepts(tiny_run, tmp_path, capsys):
    """Following the hint of a predict error, as written, makes that predict command work."""
    social = tiny_run("social")
    edges = tmp_path / "edges.csv"
    nodes = _karate_edges(social, edges, extra="0,ghost\n")
    out = tmp_path / "p.jsonl"
    assert _predict_cli(social.best, nodes, out, f"data.edges={edges}") == 2
    hint = _hinted_option(capsys.readouterr().err)
    assert hint == "data.unknown_nodes=skip"
    assert _predict_cli(social.best, nodes, out, f"data.edges={edges}", hint) == 0
    assert len(out.read_text().splitlines()) == 34

    image = tiny_run("image")
    folder = TASKS["image"].predict_inputs(image.cfg, tmp_path / "images")
    (folder / "broken.png").write_bytes(b"not an image")
    assert _predict_cli(image.best, folder, out, "on_error=stop") == 2
    err = capsys.readouterr().err
    assert "broken.png" in err and "on_bad_file" not in err
    hint = _hinted_option(err)
    assert hint == "on_error=skip"
    assert _predict_cli(image.best, folder, out, hint) == 1  # the readable ones predicted, the broken one listed
    assert len(out.read_text().splitlines()) == 5
