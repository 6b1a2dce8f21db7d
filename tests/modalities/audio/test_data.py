"""Manifest reader, frame dataset, collate and the speech DataModule."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from seqattn.modalities.audio.adapter import AudioAdapter
from seqattn.modalities.audio.features import num_frames
from seqattn.modalities.audio.data import FrameLabelDataset, SpeechDataModule, collate_frames
from seqattn.modalities.audio.manifest import read_label_file, read_manifest

from seqattn.modalities.audio.corpus import PHONES

SR = 16000


def _wav(path: Path, seconds: float, sr: int = SR) -> Path:
    rng = np.random.default_rng(len(str(path)))
    sf.write(path, 0.1 * rng.standard_normal(int(seconds * sr)), sr)
    return path


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def user_data(tmp_path):
    """Six utterances by three speakers, segments inline or in Audacity label files."""
    rows = []
    for i in range(6):
        _wav(tmp_path / f"u{i}.wav", 0.3 + 0.05 * i)
        if i % 2:
            (tmp_path / f"u{i}.txt").write_text("0.0\t0.1\tsil\n0.1\t0.25\tah\n\n0.25\t0.3\tsil\n")
            rows.append({"path": f"u{i}.wav", "labels": f"u{i}.txt", "speaker": f"s{i % 3}"})
        else:
            rows.append({"path": f"u{i}.wav", "segments": [[0, 0.1, "sil"], [0.1, 0.3, "ee"]], "speaker": f"s{i % 3}"})
    return _jsonl(tmp_path / "manifest.jsonl", rows)


def test_read_manifest_jsonl_and_label_files(user_data):
    items = read_manifest(user_data)
    assert len(items) == 6
    assert items[0]["segments"] == [(0.0, 0.1, "sil"), (0.1, 0.3, "ee")]
    assert items[1]["segments"][1] == (0.1, 0.25, "ah")
    assert Path(items[0]["path"]).is_absolute() and items[0]["id"] == "u0"
    assert items[0]["split"] is None and items[0]["speaker"] == "s0"


def test_read_manifest_csv(tmp_path):
    _wav(tmp_path / "a.wav", 0.3)
    (tmp_path / "a.txt").write_text("0\t0.3\tx\n")
    (tmp_path / "m.csv").write_text("path,labels,split\na.wav,a.txt,train\n\n")
    items = read_manifest(tmp_path / "m.csv")
    assert len(items) == 1 and items[0]["split"] == "train" and items[0]["segments"] == [(0.0, 0.3, "x")]
    (tmp_path / "bad.csv").write_text("path,split\na.wav,train\n")
    with pytest.raises(ValueError, match=r"bad\.csv:1: .*missing \['labels'\]"):
        read_manifest(tmp_path / "bad.csv")
    (tmp_path / "gone.csv").write_text("path,labels\na.wav,a.txt\nb.wav,a.txt\n")
    with pytest.raises(ValueError, match=r"gone\.csv:3: audio file .*b\.wav does not exist"):
        read_manifest(tmp_path / "gone.csv")


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"path": "a.wav", "segments": [[0, 0.1, "x"]', r"m\.jsonl:3: invalid JSON"),
        ('{"segments": [[0, 0.1, "x"]]}', r"m\.jsonl:3: missing key 'path'"),
        ('{"path": "a.wav"}', r"m\.jsonl:3: missing key 'segments'"),
        ('{"path": "a.wav", "segments": [[0.2, 0.1, "x"]]}', r"m\.jsonl:3: segment .* start < end"),
        ('{"path": "a.wav", "segments": [[0.1, 0.1, "x"]]}', r"m\.jsonl:3: segment .* start < end"),
        ('{"path": "nope.wav", "segments": [[0, 0.1, "x"]]}', r"m\.jsonl:3: audio file .*nope\.wav does not exist"),
        ('{"path": "a.wav", "segments": [[0, 0.1]]}', r"m\.jsonl:3: a segment must be \[start_s, end_s, label\]"),
        ('{"path": "a.wav", "segments": [[0, 0.1, "x"]], "split": "holdout"}', r"m\.jsonl:3: split 'holdout'"),
    ],
)
def test_manifest_errors_name_file_and_line(tmp_path, line, message):
    _wav(tmp_path / "a.wav", 0.3)
    ok = json.dumps({"path": "a.wav", "segments": [[0, 0.3, "x"]]})
    m = _jsonl(tmp_path / "m.jsonl", [ok, "", line])  # line 2 is blank (skipped), line 3 is bad
    with pytest.raises(ValueError, match=message):
        read_manifest(m)


def test_label_file_errors(tmp_path):
    lab = tmp_path / "l.txt"
    lab.write_text("0\t0.1\tsil\n\\\t100\t2000\n0.1\toops\tx\n")  # line 2: Audacity frequency line, skipped
    with pytest.raises(ValueError, match=r"l\.txt:3: segment times must be numbers"):
        read_label_file(lab)
    lab.write_text("0\t0.1\n")
    with pytest.raises(ValueError, match=r"l\.txt:1: expected 'start<TAB>end<TAB>label'"):
        read_label_file(lab)


def test_dataset_and_collate(user_data):
    items = read_manifest(user_data)
    ds = FrameLabelDataset(items, ["ah", "ee", "sil"], SR, 400, 160)
    x = ds[2]
    assert x["waveform"].dtype == torch.float32 and x["waveform"].shape == (int(0.4 * SR),)
    assert x["labels"].shape == (num_frames(int(0.4 * SR), 400, 160),)
    # u2 is 0.4 s, its segments end at 0.3 s: the frames after are ignored
    assert (x["labels"] == -100).any() and set(x["labels"].tolist()) <= {-100, 1, 2}
    batch = collate_frames([ds[0], ds[5]])
    assert batch["waveform"].shape == (2, int(0.55 * SR))
    assert batch["lengths"].tolist() == [int(0.3 * SR), int(0.55 * SR)]
    assert torch.all(batch["waveform"][0, int(0.3 * SR):] == 0)
    assert batch["labels"].shape == (2, num_frames(int(0.55 * SR), 400, 160))
    assert torch.all(batch["labels"][0, num_frames(int(0.3 * SR), 400, 160):] == -100)
    assert batch["ids"] == ["u0", "u5"]


def test_random_split_is_by_speaker(user_data):
    """The DataModule's own split of a manifest without a split column: each speaker's utterances in one
    split (three speakers, fractions 0.34: one speaker each), the same split again for the same seed."""
    def splits(seed):
        dm = SpeechDataModule(source="manifest", manifest=str(user_data), val_fraction=0.34, test_fraction=0.34,
                              default_label="sil", seed=seed)
        dm.setup()
        return {name: sorted((it["speaker"], it["id"]) for it in dm.datasets[name].items)
                for name in ("train", "val", "test")}

    parts = splits(0)
    speakers = {name: {spk for spk, _ in part} for name, part in parts.items()}
    assert all(len(s) == 1 for s in speakers.values()), speakers
    assert set().union(*speakers.values()) == {"s0", "s1", "s2"}
    assert sum(len(p) for p in parts.values()) == 6 and all(len(p) == 2 for p in parts.values())
    assert splits(0) == parts  # deterministic


def test_datamodule_on_user_manifest(user_data, caplog):
    dm = SpeechDataModule(source="manifest", manifest=str(user_data), val_fraction=0.34, test_fraction=0.34,
                          batch_size=4, default_label="sil")
    dm.setup()
    seen = {lab for it in dm.datasets["train"].items for _, _, lab in it["segments"]}
    assert dm.label_names == sorted(seen | {"sil"}) and dm.num_classes == len(dm.label_names)
    batch = next(iter(dm.train_dataloader()))
    assert (batch["labels"][batch["labels"] != -100] >= 0).all()


def test_unknown_label_in_val_is_an_error(tmp_path):
    rows = []
    for i, (split, lab) in enumerate([("train", "a"), ("val", "b")]):
        _wav(tmp_path / f"{i}.wav", 0.3)
        rows.append({"path": f"{i}.wav", "segments": [[0, 0.3, lab]], "split": split})
    m = _jsonl(tmp_path / "m.jsonl", rows)
    dm = SpeechDataModule(source="manifest", manifest=str(m))
    with pytest.raises(ValueError, match=r"m\.jsonl:2: label 'b' in the val split is not in the label set \['a'\]"):
        dm.setup()


def test_short_files_are_counted_and_skipped(tmp_path, caplog):
    rows = []
    for i, sec in enumerate([0.3, 0.01, 0.3]):
        _wav(tmp_path / f"{i}.wav", sec)
        rows.append({"path": f"{i}.wav", "segments": [[0, sec / 2, "a"], [sec / 2, sec, "b"]], "split": "train"})
    dm = SpeechDataModule(source="manifest", manifest=str(_jsonl(tmp_path / "m.jsonl", rows)))
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.audio"):
        dm.setup()
    assert len(dm.datasets["train"]) == 2
    assert "skipped 1 train utterance(s) shorter than one 400-sample window" in caplog.text


def test_bad_datamodule_arguments():
    with pytest.raises(ValueError, match="source='folder'"):
        SpeechDataModule(source="folder")
    with pytest.raises(ValueError, match="needs manifest="):
        SpeechDataModule(source="manifest")


def test_data_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQATTN_DATA_DIR", str(tmp_path))
    assert SpeechDataModule(data_dir=None).data_dir == tmp_path


def test_datamodule_synthetic_end_to_end(tmp_path):
    synth = dict(n_train_speakers=2, n_val_speakers=1, n_test_speakers=1, utts_per_speaker=4)
    dm = SpeechDataModule(data_dir=str(tmp_path), synth=synth, batch_size=3, limit=3)
    dm.prepare_data()
    dm.setup()
    dm.setup()  # idempotent
    assert dm.label_names == list(PHONES) and dm.num_classes == 12
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 3, "val": 3, "test": 3}
    batch = next(iter(dm.train_dataloader()))
    b, t = batch["waveform"].shape
    assert b == 3 and batch["lengths"].max() == t and batch["lengths"].dtype == torch.long
    frames = [num_frames(int(n), dm.win, dm.hop) for n in batch["lengths"]]
    assert batch["labels"].shape == (3, max(frames))
    for i, f in enumerate(frames):
        assert (batch["labels"][i, :f] >= 0).all() and (batch["labels"][i, f:] == -100).all()
    assert batch["labels"].max() < dm.num_classes
    adapter = AudioAdapter(dim=8)
    tokens = adapter(**{k: batch[k] for k in adapter.inputs})
    assert tokens.mask.shape == batch["labels"].shape
    assert torch.equal(tokens.mask, batch["labels"] != -100)
    # the shuffled train order is seeded: the same on a second loader
    first = [x["ids"] for x in dm.train_dataloader()]
    assert first == [x["ids"] for x in dm.train_dataloader()]
    assert len(next(iter(dm.val_dataloader()))["ids"]) == 3


@pytest.mark.parametrize("kind", ["frames", "sequence", "clip", "unlabelled"])
def test_every_audio_dataset_names_the_item_of_a_short_or_unreadable_file_and_reads_each_file_once(kind, tmp_path,
                                                                                                   monkeypatch):
    from seqattn.modalities.audio import data as audio_data
    from seqattn.modalities.audio.clips import ClipDataset, UnlabelledClipDataset
    from seqattn.modalities.audio.sequences import LabelSequenceDataset

    def dataset(path, where):
        item = {"path": str(path), "where": where, "id": "u", "segments": [(0.0, 0.5, "ah")], "sequence": ["ah"],
                "label": "ah"}
        return {"frames": lambda: FrameLabelDataset([item], ["ah"], SR, 400, 160),
                "sequence": lambda: LabelSequenceDataset([item], ["ah"], SR, 400),
                "clip": lambda: ClipDataset([item], ["ah"], SR),
                "unlabelled": lambda: UnlabelledClipDataset([item], SR)}[kind]()

    reads = []
    real_load = audio_data.load_audio
    monkeypatch.setattr(audio_data, "load_audio", lambda *a: reads.append(a) or real_load(*a))
    ds = dataset(_wav(tmp_path / "ok.wav", 0.5), "m.csv:2")
    first = ds[0]
    assert ds[0] is first and len(reads) == 1  # read once, then from memory
    assert first["waveform"].shape == (int(0.5 * SR),)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    with pytest.raises(ValueError, match=r"^m\.csv:3: .*bad\.wav"):
        dataset(bad, "m.csv:3")[0]
    short = dataset(_wav(tmp_path / "short.wav", 0.01), "m.csv:4")  # 160 samples
    if kind in ("frames", "sequence"):  # these need one analysis window (400 samples)
        with pytest.raises(ValueError, match=r"^m\.csv:4: 160 samples is shorter than the analysis window"):
            short[0]
    else:
        assert short[0]["waveform"].numel() == 160
