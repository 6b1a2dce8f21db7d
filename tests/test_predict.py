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
from tests.workflows import TASKS, WORKFLOW_TASKS, assert_rows_close, tiny_run, workflow_data_dir  # noqa: F401


@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_batched_prediction_equals_one_at_a_time(task, tiny_run, tmp_path):
    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    model = seqattn.load(run.best)
    batched = model.predict(source, batch_size=4)
    single = model.predict(source, batch_size=1)
    assert len(batched) >= 3
    assert len({json.dumps(r, sort_keys=True) for r in batched}) == len(batched)  # not all the same row
    assert_rows_close(batched, single)


@pytest.mark.parametrize("task", WORKFLOW_TASKS)
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


@pytest.mark.parametrize("task", WORKFLOW_TASKS)
def test_the_predictor_needs_only_the_checkpoint(task, tiny_run, tmp_path):
    """The checkpoint alone rebuilds the model: same weights and outputs as the trained one."""
    run = tiny_run(task)
    checkpoint = read_checkpoint(run.best)  # weights_only=True
    model = seqattn.load(run.best).model
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, checkpoint["state_dict"][name], msg=name)
    assert checkpoint["seqattn_config"]["task_name"] == task
    assert not model.training


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


def test_unknown_output_format_is_refused(tmp_path):
    from seqattn.predict import write_rows

    with pytest.raises(ValueError, match=r"\.csv"):
        write_rows([{"id": "a"}], tmp_path / "out.xlsx")
