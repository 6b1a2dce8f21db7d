"""Audio readers on files built to be bad (issue 21): truncated WAV, overlapping segments, label cells."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from seqattn.modalities.audio.clips import ClipDataModule
from seqattn.modalities.audio.data import SpeechDataModule
from seqattn.modalities.audio.features import load_audio
from seqattn.modalities.audio.manifest import read_clip_manifest, read_manifest, wav_frames

SR = 16000


def _wav(path: Path, frames: int = 4800) -> Path:
    sf.write(path, (0.1 * np.random.default_rng(frames).standard_normal(frames)).astype(np.float32), SR,
             subtype="PCM_16")
    return path


def _cut(path: Path, keep_frames: int) -> Path:
    """Cut a 16-bit mono WAV after ``keep_frames`` frames (plus one stray byte), header untouched."""
    data = path.read_bytes()
    start = data.index(b"data") + 8
    path.write_bytes(data[: start + 2 * keep_frames + 1])
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_truncated_wav_is_an_error_naming_its_manifest_line(tmp_path):
    _wav(tmp_path / "ok.wav")
    _cut(_wav(tmp_path / "cut.wav"), 2000)
    assert sf.info(str(tmp_path / "cut.wav")).frames == 2000  # soundfile alone sees a shorter file
    assert wav_frames(tmp_path / "cut.wav") == (4800, 2000) and wav_frames(tmp_path / "ok.wav") == (4800, 4800)
    segs = [[0.0, 0.1, "a"], [0.1, 0.125, "b"]]
    manifest = _jsonl(tmp_path / "m.jsonl", [{"path": "ok.wav", "segments": segs, "split": "train"},
                                             {"path": "cut.wav", "segments": segs, "split": "train"}])
    with pytest.raises(ValueError, match=rf"m\.jsonl:2: audio file .*cut\.wav is truncated: its header declares "
                                         r"4800 frames, the file holds 2000 \(42%\)"):
        SpeechDataModule(manifest=str(manifest)).setup()
    with pytest.raises(ValueError, match="cut.wav is truncated"):
        load_audio(tmp_path / "cut.wav", SR)  # what every dataset and the predict loader read through


def test_a_truncated_clip_is_listed_as_skipped_in_prediction(tmp_path):
    _wav(tmp_path / "ok.wav")
    _cut(_wav(tmp_path / "cut.wav"), 2000)
    dm = ClipDataModule(manifest=str(tmp_path / "unused.csv"))
    batches = list(dm.predict_loader(tmp_path, batch_size=4))
    assert [ident for b in batches for ident in b.get("ids", [])] == ["ok"]
    skipped = [s for b in batches for s in b.get("skipped", [])]
    assert len(skipped) == 1 and skipped[0][0].endswith("cut.wav") and "truncated" in skipped[0][1]


def test_overlapping_inline_segments_are_an_error_at_their_line(tmp_path):
    _wav(tmp_path / "a.wav")
    manifest = _jsonl(tmp_path / "m.jsonl", [
        {"path": "a.wav", "segments": [[0.0, 0.1, "a"], [0.1, 0.2, "b"]]},  # touching: fine
        {"path": "a.wav", "segments": [[0.15, 0.3, "c"], [0.0, 0.2, "a"]]},  # out of order and overlapping
    ])
    with pytest.raises(ValueError, match=r"m\.jsonl:2: segments \[0\.0, 0\.2, 'a'\] and \[0\.15, 0\.3, 'c'\] "
                                         r"overlap \(0\.15 s < 0\.2 s\)"):
        read_manifest(manifest)


def test_overlapping_segments_of_a_label_file_name_both_lines(tmp_path):
    _wav(tmp_path / "a.wav")
    (tmp_path / "a.txt").write_text("0.0\t0.1\tsil\n0.1\t0.25\tah\n0.2\t0.3\tsil\n")
    manifest = _jsonl(tmp_path / "m.jsonl", [{"path": "a.wav", "labels": "a.txt"}])
    with pytest.raises(ValueError, match=r"a\.txt:2 and .*a\.txt:3: segments \[0\.1, 0\.25, 'ah'\] and "
                                         r"\[0\.2, 0\.3, 'sil'\] overlap"):
        read_manifest(manifest)


def test_numeric_clip_labels_are_one_class_each_and_the_renaming_is_counted(tmp_path, caplog):
    rows = []
    for i, label in enumerate([1, 1.0, 0, 0.0, 1]):
        _wav(tmp_path / f"{i}.wav")
        rows.append({"path": f"{i}.wav", "label": label})
    with caplog.at_level(logging.INFO, logger="seqattn.modalities.audio"):
        items = read_clip_manifest(_jsonl(tmp_path / "m.jsonl", rows))
    assert [it["label"] for it in items] == ["1", "1", "0", "0", "1"]
    assert "2 label(s) written as integral numbers are named by the integer" in caplog.text


def test_segment_labels_go_through_the_same_naming(tmp_path):
    _wav(tmp_path / "a.wav")
    manifest = _jsonl(tmp_path / "m.jsonl", [{"path": "a.wav", "segments": [[0.0, 0.1, 0], [0.1, 0.2, 1.0]]}])
    assert [s[2] for s in read_manifest(manifest)[0]["segments"]] == ["0", "1"]


def test_clip_labels_differing_only_in_case_are_warned_about(tmp_path, caplog):
    rows = []
    for i, label in enumerate(["Up", "up", "up", "down", "down", "down"]):
        _wav(tmp_path / f"{i}.wav")
        rows.append({"path": f"{i}.wav", "label": label, "split": "train" if i < 4 else ("val" if i == 4 else "test")})
    dm = ClipDataModule(manifest=str(_jsonl(tmp_path / "m.jsonl", rows)), speaker_column=None)
    with caplog.at_level(logging.WARNING, logger="seqattn.datakit"):
        dm.setup()
    assert dm.label_names == ["Up", "down", "up"]
    assert "'Up': 1 (e.g." in caplog.text and "'up': 2 (e.g." in caplog.text and "differ only in case" in caplog.text


def test_transcript_characters_differing_in_case_are_no_collision(tmp_path, caplog):
    from seqattn.modalities.audio.sequences import SpeechSequenceDataModule

    rows = []
    for i, (text, split) in enumerate([("Ab", "train"), ("aB", "train"), ("ba", "val"), ("Ba", "test")]):
        _wav(tmp_path / f"{i}.wav")
        rows.append({"path": f"{i}.wav", "transcript": text, "split": split})
    dm = SpeechSequenceDataModule(manifest=str(_jsonl(tmp_path / "m.jsonl", rows)))
    with caplog.at_level(logging.WARNING, logger="seqattn.datakit"):
        dm.setup()
    assert dm.label_names == ["A", "B", "a", "b"] and "differ only in case" not in caplog.text
