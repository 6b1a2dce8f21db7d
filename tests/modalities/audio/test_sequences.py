"""Audio -> label sequence data (task=speech_ctc): transcripts, frame labels, vocabulary, file:line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.audio.corpus import PHONES
from seqattn.modalities.audio.sequences import (
    SpeechSequenceDataModule,
    item_sequence,
    segment_sequence,
    transcript_tokens,
)

SR = 16000


def _wav(path: Path, seconds: float = 0.3, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    sf.write(str(path), (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR)
    return path


def _manifest(tmp_path: Path, lines: list[dict | str], name: str = "manifest.jsonl") -> Path:
    for i in range(8):
        _wav(tmp_path / f"u{i}.wav", 0.2 + 0.05 * i, i)
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    return path


def _dm(manifest: Path, **kwargs) -> SpeechSequenceDataModule:
    dm = SpeechSequenceDataModule(manifest=str(manifest), batch_size=4, data_dir=str(manifest.parent / "cache"),
                                  **kwargs)
    dm.setup()
    return dm


def test_transcripts_are_cut_into_characters_or_whitespace_units():
    assert transcript_tokens("  yes  no ", "characters", "m:1") == ["y", "e", "s", " ", "n", "o"]
    assert transcript_tokens("sh a  t\ti", "whitespace", "m:1") == ["sh", "a", "t", "i"]
    assert transcript_tokens("none", "characters", "m:1") == list("none")  # a word, not a missing value
    for empty in ("", "   ", None):
        with pytest.raises(ValueError, match="m:3: empty transcript"):
            transcript_tokens(empty, "characters", "m:3")
    with pytest.raises(ValueError, match="m:4: 'transcript' must be text"):
        transcript_tokens(12, "whitespace", "m:4")


def test_frame_labels_become_their_sequence_with_repeats_merged_and_silence_dropped():
    segments = [(0.0, 0.1, "sil"), (0.1, 0.2, "k"), (0.2, 0.3, "a"), (0.3, 0.35, "a"), (0.35, 0.5, "sil"),
                (0.5, 0.6, "a")]
    assert segment_sequence(segments) == ["sil", "k", "a", "sil", "a"]
    item = {"segments": segments, "raw": {}, "where": "m:1"}
    assert item_sequence(item, "characters", ["sil"]) == ["k", "a", "a"]  # two a's: a pause lies between
    assert item_sequence(item, "characters", []) == ["sil", "k", "a", "sil", "a"]
    with pytest.raises(ValueError, match="m:9: no 'transcript'"):
        item_sequence({"segments": None, "raw": {"path": "x.wav"}, "where": "m:9"}, "characters", [])


def test_a_user_manifest_with_transcripts(tmp_path):
    lines = [{"path": f"u{i}.wav", "transcript": t, "speaker": s, "split": sp} for i, (t, s, sp) in enumerate([
        ("ab", "s1", "train"), ("ba", "s1", "train"), ("abc", "s2", "train"), ("c", "s2", "train"),
        ("ab", "s3", "val"), ("ca", "s1", "test"), ("b", "s4", "test")])]
    dm = _dm(_manifest(tmp_path, lines))
    assert dm.label_names == ["a", "b", "c"]
    spec = dm.spec()
    assert spec.num_outputs == 3 and list(spec.labels) == ["a", "b", "c"] and spec.subsets == ("unseen_speaker",)
    batch = next(iter(dm.test_dataloader()))
    assert batch["labels"].tolist() == [[2, 0], [1, IGNORE_INDEX]]
    assert batch["label_lengths"].tolist() == [2, 1]
    assert batch["subsets"]["unseen_speaker"].tolist() == [False, True]  # s1 is a training speaker, s4 is not
    assert batch["waveform"].shape[0] == 2 and batch["lengths"].tolist()[0] == int(0.2 * SR) + 5 * int(0.05 * SR)
    train = next(iter(dm.train_dataloader()))
    assert set(train) == {"waveform", "lengths", "labels", "label_lengths", "ids", "subsets"}


def test_csv_manifest_with_a_transcript_column_and_whitespace_tokens(tmp_path):
    text = "path,transcript,split\nu0.wav,sh a,train\nu1.wav,a  t,train\nu2.wav,t sh,val\nu3.wav,a,test\n"
    for i in range(4):
        _wav(tmp_path / f"u{i}.wav")
    (tmp_path / "m.csv").write_text(text)
    dm = _dm(tmp_path / "m.csv", tokens="whitespace")
    assert dm.label_names == ["a", "sh", "t"]
    assert next(iter(dm.val_dataloader()))["labels"].tolist() == [[2, 1]]
    assert dm.spec().subsets == ()  # no speakers named


def test_the_transcript_column_can_have_another_name(tmp_path):
    for i in range(3):
        _wav(tmp_path / f"u{i}.wav")
    (tmp_path / "m.csv").write_text("path,label,split\nu0.wav,yes,train\nu1.wav,no,train\nu2.wav,,test\n")
    with pytest.raises(ValueError, match="m.csv:4: empty transcript"):
        _dm(tmp_path / "m.csv", transcript_key="label")
    with pytest.raises(ValueError, match="m.csv:2: no 'transcript'"):
        _dm(tmp_path / "m.csv")
    (tmp_path / "m.csv").write_text("path,label,split\nu0.wav,yes,train\nu1.wav,no,train\nu2.wav,on,test\n")
    assert _dm(tmp_path / "m.csv", transcript_key="label").label_names == ["e", "n", "o", "s", "y"]


def test_a_frame_labeled_manifest_works_too(tmp_path):
    segs = [[0.0, 0.05, "sil"], [0.05, 0.1, "k"], [0.1, 0.15, "a"], [0.15, 0.2, "sil"]]
    lines = [{"path": f"u{i}.wav", "segments": segs, "split": sp} for i, sp in enumerate(["train", "train", "test"])]
    lines.append({"path": "u3.wav", "segments": segs, "transcript": "ka", "split": "val"})  # a transcript wins
    dm = _dm(_manifest(tmp_path, lines))
    assert dm.label_names == ["a", "k"]
    assert next(iter(dm.test_dataloader()))["labels"].tolist() == [[1, 0]]


@pytest.mark.parametrize("bad, message", [
    ({"path": "missing.wav", "transcript": "ab"}, r"manifest.jsonl:3: audio file .*missing.wav does not exist"),
    ({"path": "u2.wav", "transcript": "  "}, r"manifest.jsonl:3: empty transcript"),
    ({"path": "u2.wav", "transcript": ""}, r"manifest.jsonl:3: empty transcript"),
    ({"path": "u2.wav"}, r"manifest.jsonl:3: no 'transcript' \(text\) and no 'segments'"),
    ({"path": "u2.wav", "transcript": "abz", "split": "test"},
     r"manifest.jsonl:3: token 'z' in the test split is not in the label set \['a', 'b'\]"),
    ('{"path": "u2.wav", "transcript": "ab"', r"manifest.jsonl:3"),  # invalid JSON
])
def test_bad_manifest_lines_are_errors_naming_file_and_line(tmp_path, bad, message):
    lines = [{"path": "u0.wav", "transcript": "ab", "split": "train"},
             {"path": "u1.wav", "transcript": "ba", "split": "train"}]
    if isinstance(bad, dict):
        bad = {"split": "val", **bad}
    with pytest.raises(ValueError, match=message):
        _dm(_manifest(tmp_path, lines + [bad]))


def test_a_token_only_in_a_fixed_vocabulary_is_fine_and_tokens_outside_it_are_not(tmp_path):
    lines = [{"path": "u0.wav", "transcript": "ab", "split": "train"},
             {"path": "u1.wav", "transcript": "bz", "split": "test"}]
    dm = _dm(_manifest(tmp_path, lines), labels=["a", "b", "z"])
    assert dm.label_names == ["a", "b", "z"]
    with pytest.raises(ValueError, match=r"manifest.jsonl:1: token 'b' in the train split"):
        _dm(_manifest(tmp_path, lines), labels=["a", "z"])


def test_bad_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="tokens='letters'"):
        SpeechSequenceDataModule(tokens="letters")
    with pytest.raises(ValueError, match="needs manifest="):
        SpeechSequenceDataModule(source="manifest")


def test_the_built_in_corpus_gives_phone_strings_without_silence(tmp_path):
    dm = SpeechSequenceDataModule(data_dir=str(tmp_path), batch_size=4,
                                  synth={"n_train_speakers": 2, "n_val_speakers": 1, "n_test_speakers": 1,
                                         "utts_per_speaker": 3})
    dm.prepare_data()
    dm.setup()
    assert dm.label_names == [p for p in PHONES if p != "sil"]
    assert dm.split_sizes() == {"train": 6, "val": 3, "test": 3}
    item = dm.datasets["test"].items[0]
    want = [lab for i, (_, _, lab) in enumerate(item["segments"])
            if lab != "sil" and not (i and item["segments"][i - 1][2] == lab)]
    assert item["sequence"] == want and len(want) >= 3
    batch = next(iter(dm.test_dataloader()))
    assert bool(batch["subsets"]["unseen_speaker"].all())  # test speakers are never training speakers
    assert int(batch["label_lengths"].min()) >= 3


def test_predict_batches_carry_audio_and_ids_only(tmp_path):
    lines = [{"path": f"u{i}.wav", "transcript": "ab", "split": "train"} for i in range(3)]
    dm = SpeechSequenceDataModule(manifest=str(_manifest(tmp_path, lines)), data_dir=str(tmp_path))
    batch = next(iter(dm.predict_loader(tmp_path, batch_size=8)))
    assert set(batch) == {"waveform", "lengths", "ids"} and len(batch["ids"]) == 8
    items = dm.describe(batch)
    assert items[0].id == "u0" and items[0].fields == {"duration_s": 0.2}
