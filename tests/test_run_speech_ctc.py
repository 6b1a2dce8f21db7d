"""End to end: `python -m seqattn.run task=speech_ctc` learns to recognise phone strings and writes its artefacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import seqattn
from seqattn.run import train
from tests.workflows import TASKS, tiny_run, workflow_data_dir  # noqa: F401

SMALL = [
    "task=speech_ctc",
    "data.synth.n_train_speakers=4", "data.synth.n_val_speakers=1", "data.synth.n_test_speakers=1",
    "data.synth.utts_per_speaker={train:30,val:12,test:16}",
    "data.batch_size=8",
    "model.dim=64", "model.depth=2",
    "trainer.max_epochs=8",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "callbacks.early_stopping=null",
]


def test_the_recipe_learns_and_writes_its_artefacts(compose_cfg):
    """120 training utterances, 8 epochs: the phone error rate on an unseen speaker falls far below
    1 (what outputting nothing, or all blanks, scores) and the figure and metrics are written."""
    cfg = compose_cfg(SMALL)
    metrics = train(cfg)
    out = Path(metrics["output_dir"])
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test/ter"] == pytest.approx(metrics["test/ter"])
    assert saved["test/ter_unseen_speaker"] == pytest.approx(saved["test/ter"])  # test speakers are all unseen
    assert saved["blank_index"] == 0 and saved["labels"][0] == "a" and "sil" not in saved["labels"]
    assert saved["test/ctc_infeasible"] == 0
    assert len(saved["test_examples"]) == 5 and all(e["reference"] for e in saved["test_examples"])
    assert (out / "test_utterance.png").stat().st_size > 10_000
    print(f"test TER {metrics['test/ter']:.3f} greedy {metrics['test/ter_greedy']:.3f} beam {metrics['test/ter_beam']:.3f}")
    assert metrics["test/ter"] < 0.5, metrics["test/ter"]
    assert metrics["test/ter_beam"] <= metrics["test/ter_greedy"] + 0.05


def test_predict_gives_one_decoded_sequence_per_file(tiny_run, tmp_path):
    run = tiny_run("speech_ctc")
    source = TASKS["speech_ctc"].predict_inputs(run.cfg, tmp_path / "inputs")
    model = seqattn.load(run.best)
    rows = model.predict(source)
    assert len(rows) == 5 and {r["id"] for r in rows} == {p.stem for p in source.iterdir()}
    labels = set(model.labels)
    for row in rows:
        assert set(row) == {"id", "duration_s", "sequence"}
        assert set(row["sequence"]) <= labels and "<blank>" not in row["sequence"]
    # the rows are the decoded network output of each file
    batch = next(iter(model.datamodule.predict_loader(source, batch_size=1)))
    with torch.no_grad():
        out = model.model(batch)
    assert [model.labels[k] for k in model.model.decode(out)[0]] == rows[0]["sequence"]


def test_torchscript_traced_on_one_file_decodes_a_padded_batch_of_other_lengths(tiny_run, tmp_path):
    """Traced on one file, the exported per-frame logits of a padded batch of other lengths are the
    model's; greedy decoding of them (in Python) gives the predicted sequences."""
    from seqattn.export import export
    from seqattn.objectives.ctc_decoding import greedy_decode

    run = tiny_run("speech_ctc")
    source = TASKS["speech_ctc"].predict_inputs(run.cfg, tmp_path / "inputs")
    predictor = seqattn.load(run.best)
    loader = predictor.datamodule.predict_loader(source, batch_size=64)
    batch = next(iter(loader))
    shortest = int(batch["lengths"].argmin())  # traced on the shortest: nothing of its length is baked in
    path, example = export(run.best, "torchscript", tmp_path / "one.ts", sorted(source.glob("*.wav"))[shortest])
    assert len(example[0]) == 1
    logits, mask = torch.jit.load(str(path))(batch["waveform"], batch["lengths"])
    with torch.no_grad():
        want = predictor.model.net(batch)
    assert not bool(want["mask"].all())  # padded, and subsampled: ceil(frames / factor) per file
    torch.testing.assert_close(logits, want["logits"], rtol=1e-5, atol=1e-5)
    assert torch.equal(mask, want["mask"])
    decoded = [[predictor.labels[c - 1] for c in seq] for seq in greedy_decode(logits, mask.sum(1))]
    assert decoded == [row["sequence"] for row in predictor.predict(source, batch_size=64)]
