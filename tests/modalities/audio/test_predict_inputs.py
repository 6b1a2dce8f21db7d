"""The speech DataModule's predict protocol: audio file / folder / manifest -> frame labels and segments."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch

import seqattn
from seqattn.modalities.audio.features import frame_labels, num_frames
from seqattn.modalities.audio.data import SpeechDataModule, frames_to_segments
from seqattn.modalities.audio.manifest import read_audio_list, read_manifest
from tests.workflows import tiny_run, workflow_data_dir  # noqa: F401


def test_segments_give_the_frame_labels_back():
    rng = np.random.default_rng(0)
    sr, win, hop = 16000, 400, 160
    n_samples = 16000 + 123
    n = num_frames(n_samples, win, hop)
    names = ["sil", "a", "k"]
    labels = [names[i] for i in np.repeat(rng.integers(0, 3, size=20), rng.integers(1, 9, size=20))][:n]
    labels += ["sil"] * (n - len(labels))
    segments = frames_to_segments(labels, n_samples, sr, win, hop)
    assert segments[0][0] == 0.0 and segments[-1][1] == pytest.approx(n_samples / sr, abs=1e-6)
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in zip(segments, segments[1:]))  # contiguous, merged
    back = frame_labels(segments, n_samples, sr, win, hop, {k: i for i, k in enumerate(names)})
    assert [names[i] for i in back] == labels


def test_read_audio_list_takes_a_file_a_folder_or_a_manifest(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("b.wav", "sub/a.flac"):
        sf.write(tmp_path / name, np.zeros(800, dtype=np.float32), 16000)
    (tmp_path / "notes.txt").write_text("ignored")
    assert [it["id"] for it in read_audio_list(tmp_path)] == ["b", "sub/a"]
    one = str(tmp_path / "b.wav")
    assert read_audio_list(tmp_path / "b.wav") == [{"path": one, "id": "b", "where": one}]
    (tmp_path / "m.jsonl").write_text(json.dumps({"path": "sub/a.flac"}) + "\n\n" + json.dumps({"path": "b.wav"}))
    assert [it["id"] for it in read_audio_list(tmp_path / "m.jsonl")] == ["sub/a", "b"]
    (tmp_path / "m.csv").write_text("path,speaker\nb.wav,x\n")
    assert [it["id"] for it in read_audio_list(tmp_path / "m.csv")] == ["b"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"path": "missing.wav"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: audio file .*missing.wav does not exist"):
        read_audio_list(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="holds no audio files"):
        read_audio_list(_empty(tmp_path))
    with pytest.raises(ValueError, match="does not exist"):
        read_audio_list(tmp_path / "nothing_here")


def _empty(tmp_path):
    (tmp_path / "empty").mkdir(exist_ok=True)
    return tmp_path / "empty"


def test_predict_loader_needs_no_setup_and_refuses_too_short_audio(tmp_path):
    sf.write(tmp_path / "ok.wav", np.random.default_rng(0).normal(size=3000).astype(np.float32), 16000)
    sf.write(tmp_path / "short.wav", np.zeros(100, dtype=np.float32), 16000)
    dm = SpeechDataModule(source="manifest", manifest=str(tmp_path / "no_such_manifest.jsonl"), batch_size=2)
    batch = next(iter(dm.predict_loader(tmp_path / "ok.wav")))
    assert batch["waveform"].shape == (1, 3000) and batch["lengths"].tolist() == [3000] and batch["ids"] == ["ok"]
    batches = list(dm.predict_loader(tmp_path / "short.wav"))  # default on_error="skip": recorded, not raised
    assert batches == [{"skipped": [(str(tmp_path / "short.wav"), batches[0]["skipped"][0][1])]}]
    assert "short.wav: 100 samples is shorter than the analysis window" in batches[0]["skipped"][0][1]
    dm.on_error = "stop"
    with pytest.raises(ValueError, match="short.wav: 100 samples is shorter than the analysis window"):
        list(dm.predict_loader(tmp_path / "short.wav"))
    with pytest.raises(ValueError, match="batch_size must be positive"):
        dm.predict_loader(tmp_path, batch_size=0)


def test_predictions_on_the_test_manifest_match_the_model_and_the_labels(tiny_run):
    """Rows for the corpus manifest's utterances: frame labels are the model's argmax on the test
    loader's batches, and agree with the true labels above the majority rate."""
    run = tiny_run("speech")
    predictor = seqattn.load(run.best)
    dm = SpeechDataModule(**{k: v for k, v in predictor.config["data"].items() if k != "_target_"})
    dm.setup("test")
    test_items = dm.datasets["test"].items
    manifest = run.output_dir / "test_manifest.jsonl"
    manifest.write_text("".join(json.dumps({"path": it["path"]}) + "\n" for it in test_items))
    rows = iter(predictor.predict(manifest))  # in manifest order = the test loader's order
    correct = total = 0
    counts = torch.zeros(dm.num_classes)
    for batch in dm.test_dataloader():
        with torch.no_grad():
            pred = predictor.model(batch)["logits"].argmax(-1)  # [B, F]
        for i, ident in enumerate(batch["ids"]):
            row = next(rows)
            assert row["id"].endswith(ident)
            n = int((batch["labels"][i] != -100).sum())
            assert len(row["labels"]) == n
            assert row["labels"] == [dm.label_names[j] for j in pred[i, :n]]
            assert row["duration_s"] == pytest.approx(float(batch["lengths"][i]) / dm.sample_rate, abs=1e-4)
            true = batch["labels"][i, :n]
            correct += sum(a == dm.label_names[b] for a, b in zip(row["labels"], true))
            total += n
            counts += torch.bincount(true, minlength=dm.num_classes)
    assert next(rows, None) is None
    majority = float(counts.max() / counts.sum())
    assert correct / total > majority + 0.15, (correct / total, majority)
    assert correct / total == pytest.approx(run.metrics["test/acc"], abs=1e-4)


def test_read_manifest_still_needs_labels_for_training(tmp_path):
    sf.write(tmp_path / "a.wav", np.zeros(800, dtype=np.float32), 16000)
    (tmp_path / "m.jsonl").write_text(json.dumps({"path": "a.wav"}) + "\n")
    with pytest.raises(ValueError, match="missing key 'segments'"):
        read_manifest(tmp_path / "m.jsonl")
