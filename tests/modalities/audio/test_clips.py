"""Clip manifests (one label per clip), the clip DataModule's splits, batches and predict protocol,
and the built-in spoken-word corpus."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from seqattn.modalities.audio.clips import ClipDataModule, collate_clips
from seqattn.modalities.audio.manifest import read_clip_manifest
from seqattn.modalities.audio.words import WORDS, generate_words_corpus, word_phones

SR = 16000


def _wav(path: Path, seconds: float = 0.3) -> Path:
    rng = np.random.default_rng(abs(hash(path.name)) % 2**32)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR)
    return path


def _csv(path: Path, rows: list[str], header: str = "path,label,speaker") -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@pytest.fixture
def clips(tmp_path) -> Path:
    """36 clips: 3 words x 6 speakers x 2 takes, no split column."""
    rows = []
    for s in range(6):
        for word in ("yes", "no", "stop"):
            for take in range(2):
                _wav(tmp_path / "wav" / f"{word}_s{s}_{take}.wav", 0.2 + 0.05 * take)
                rows.append(f"wav/{word}_s{s}_{take}.wav,{word},s{s}")
    return _csv(tmp_path / "manifest.csv", rows)


def _module(manifest, **kwargs) -> ClipDataModule:
    kwargs = {"batch_size": 4, "val_fraction": 0.2, "test_fraction": 0.2, **kwargs}
    dm = ClipDataModule(manifest=str(manifest), **kwargs)
    dm.setup()
    return dm


def _speakers(dm, split):
    return {it["speaker"] for it in dm.datasets[split].items}


def test_read_clip_manifest_csv_and_jsonl(tmp_path, clips):
    items = read_clip_manifest(clips)
    assert len(items) == 36 and items[0]["label"] == "yes" and items[0]["speaker"] == "s0"
    assert Path(items[0]["path"]).is_absolute() and items[0]["where"] == f"{clips}:2"
    lines = [json.dumps({"path": str(Path(it["path"])), "word": it["label"], "speaker": it["speaker"]})
             for it in items[:3]]
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    assert [it["label"] for it in read_clip_manifest(jsonl, label_column="word")] == ["yes", "yes", "no"]


def test_bad_manifest_lines_name_the_file_and_line(tmp_path, clips):
    _wav(tmp_path / "a.wav")
    cases = {
        "path,label\na.wav,yes\nmissing.wav,no\n": r"m\.csv:3: audio file .*missing\.wav does not exist",
        "path,label\na.wav,yes\na.wav,\n": r"m\.csv:3: empty 'label'",
        "path,word\na.wav,yes\n": r"m\.csv:2: no 'label' \(the clip's label, data\.label_column\)",
        "path,label,split\na.wav,yes,train\na.wav,no,later\n": r"m\.csv:3: split 'later' is not one of",
        'path,label\na.wav,"yes\n': r"m\.csv:2: malformed CSV",
    }
    for text, message in cases.items():
        (tmp_path / "m.csv").write_text(text)
        with pytest.raises(ValueError, match=message):
            read_clip_manifest(tmp_path / "m.csv")
    (tmp_path / "m.jsonl").write_text('{"path": "a.wav", "label": "yes"}\n{"path": "a.wav", "label": ["a"]}\n')
    with pytest.raises(ValueError, match=r"m\.jsonl:2: 'label' must be one label"):
        read_clip_manifest(tmp_path / "m.jsonl")


def test_a_label_missing_from_the_training_split_is_an_error_at_its_line(tmp_path):
    rows = []
    for i, (label, split) in enumerate([("yes", "train"), ("no", "train"), ("yes", "val"), ("maybe", "test")]):
        _wav(tmp_path / f"c{i}.wav")
        rows.append(f"c{i}.wav,{label},{split}")
    manifest = _csv(tmp_path / "m.csv", rows, header="path,label,split")
    with pytest.raises(ValueError, match=r"m\.csv:5: label 'maybe' in the test split is not in the label set "
                                         r"\['no', 'yes'\]"):
        _module(manifest)
    dm = _module(manifest, labels=["maybe", "no", "yes"])  # a fixed label set accepts it
    assert dm.spec().labels == ("maybe", "no", "yes")


def test_without_a_split_column_speakers_are_split_so_test_speakers_are_unseen(clips):
    dm = _module(clips)
    train, val, test = (_speakers(dm, s) for s in ("train", "val", "test"))
    assert train and val and test and not (train & val) and not (train & test) and not (val & test)
    assert sum(dm.split_sizes().values()) == 36
    again = _module(clips)
    assert _speakers(again, "test") == test  # seeded
    other = _module(clips, seed=5)
    assert [_speakers(other, s) for s in ("train", "val", "test")] != [train, val, test]
    assert dm.spec().groups == {"speaker": tuple(f"s{i}" for i in range(6))}


def test_speaker_identification_splits_the_clips_of_each_speaker(clips):
    dm = _module(clips, label_column="speaker")
    assert dm.label_names == [f"s{i}" for i in range(6)]
    for split in ("train", "val", "test"):
        assert _speakers(dm, split) == set(dm.label_names), split  # every speaker in every split
    counts = Counter(it["label"] for it in dm.datasets["test"].items)
    assert set(counts.values()) == {1}  # stratified: each speaker gives 20 % of its 6 clips (rounded)


def test_speaker_identification_with_a_split_by_speaker_explains_what_to_do(tmp_path):
    rows = []
    for i, (speaker, split) in enumerate([("a", "train"), ("b", "train"), ("c", "test"), ("a", "val")]):
        _wav(tmp_path / f"c{i}.wav")
        rows.append(f"c{i}.wav,w,{speaker},{split}")
    manifest = _csv(tmp_path / "m.csv", rows, header="path,label,speaker,split")
    with pytest.raises(ValueError, match=r"m\.csv:4: label 'c' in the test split.*split_column=null"):
        _module(manifest, label_column="speaker")
    dm = _module(manifest, label_column="speaker", split_column=None, val_fraction=0.0, test_fraction=0.0)
    assert dm.label_names == ["a", "b", "c"]


def test_given_split_is_used_and_without_speakers_clips_are_split_at_random(tmp_path):
    rows = []
    for i in range(20):
        _wav(tmp_path / f"c{i}.wav")
        rows.append(f"c{i}.wav,{'ab'[i % 2]},{['train', 'train', 'val', 'test'][i % 4]}")
    dm = _module(_csv(tmp_path / "m.csv", rows, header="path,label,split"))
    assert dm.split_sizes() == {"train": 10, "val": 5, "test": 5}
    assert dm.split_method.startswith("given")
    dm = _module(_csv(tmp_path / "m.csv", rows, header="path,label,split"), split_column=None)
    assert dm.split_method == "by clip at random" and dm.split_sizes() == {"train": 12, "val": 4, "test": 4}
    assert dm.spec().groups == {}


def _split_manifest(tmp_path) -> Path:
    """6 speakers x 3 words x 3 takes with a split column: s0-s3 train (take 2 val), s4-s5 test."""
    rows = []
    for s in range(6):
        for word in ("yes", "no", "stop"):
            for take in range(3):
                _wav(tmp_path / "wav" / f"{word}_s{s}_{take}.wav")
                split = "test" if s >= 4 else ("val" if take == 2 else "train")
                rows.append(f"wav/{word}_s{s}_{take}.wav,{word},s{s},{split}")
    return _csv(tmp_path / "split.csv", rows, header="path,label,speaker,split")


def test_val_speakers_validate_on_unseen_speakers_and_lose_no_clip(tmp_path, caplog):
    manifest = _split_manifest(tmp_path)
    plain = _module(manifest)
    assert _speakers(plain, "val") == {"s0", "s1", "s2", "s3"}  # the manifest's val: takes of training speakers
    with caplog.at_level("INFO"):
        dm = _module(manifest, val_speakers=["s1", "s3"])
    assert _speakers(dm, "val") == {"s1", "s3"} and _speakers(dm, "train") == {"s0", "s2"}
    assert len(dm.datasets["val"].items) == 18 and len(dm.datasets["train"].items) == 18  # every take of s1, s3
    paths = lambda d: sorted(it["path"] for name in ("train", "val") for it in d.datasets[name].items)  # noqa: E731
    assert paths(dm) == paths(plain)  # the other speakers' val takes went back to training: nothing dropped
    assert [it["path"] for it in dm.datasets["test"].items] == [it["path"] for it in plain.datasets["test"].items]
    assert "validation speakers s1, s3" in dm.split_method
    assert "12 of their training clips moved to val, 6 val clips of other speakers moved to training" in caplog.text
    assert _speakers(_module(manifest, val_speakers="s2"), "val") == {"s2"}  # one name on the command line


def test_val_speakers_are_checked(tmp_path):
    manifest = _split_manifest(tmp_path)
    with pytest.raises(ValueError, match=r"val_speakers \['s4'\] have test clips.*test speakers are \['s4', 's5'\]"):
        _module(manifest, val_speakers=["s4"])
    with pytest.raises(ValueError, match=r"val_speakers \['bob'\] have no train or val clip.*\['s0', 's1', 's2', 's3'\]"):
        _module(manifest, val_speakers=["s0", "bob"])
    with pytest.raises(ValueError, match="leave no training clips"):
        _module(manifest, val_speakers=["s0", "s1", "s2", "s3"])
    with pytest.raises(ValueError, match="needs speakers that are not the label"):
        ClipDataModule(manifest=str(manifest), val_speakers=["s0"], label_column="speaker")
    with pytest.raises(ValueError, match="needs speakers that are not the label"):
        ClipDataModule(manifest=str(manifest), val_speakers=["s0"], speaker_column=None)


def test_train_fraction_keeps_a_stratified_share_of_the_training_clips(clips):
    full = _module(clips)
    half = _module(clips, train_fraction=0.5)
    assert len(half.datasets["train"]) == len(full.datasets["train"]) // 2
    assert Counter(it["label"] for it in half.datasets["train"].items) == Counter(
        {w: len(full.datasets["train"]) // 6 for w in ("yes", "no", "stop")})
    assert [it["id"] for it in half.datasets["test"].items] == [it["id"] for it in full.datasets["test"].items]
    with pytest.raises(ValueError, match="train_fraction"):
        ClipDataModule(manifest=str(clips), train_fraction=0.0)


def test_short_clips_are_skipped_and_counted(tmp_path, caplog):
    rows = []
    for i in range(8):
        _wav(tmp_path / f"c{i}.wav", 0.01 if i == 3 else 0.3)  # 10 ms < the 25 ms window
        rows.append(f"c{i}.wav,{'ab'[i % 2]},train")
    dm = _module(_csv(tmp_path / "m.csv", rows, header="path,label,split"))
    assert len(dm.datasets["train"]) == 7
    assert "skipped 1 train clip(s) shorter than one 400-sample window" in caplog.text


def test_batches_hold_padded_waveforms_labels_and_speaker_indices(clips):
    dm = _module(clips)
    batch = next(iter(dm.test_dataloader()))
    assert batch["waveform"].dim() == 2 and batch["labels"].shape == batch["lengths"].shape
    assert int(batch["lengths"].max()) == batch["waveform"].shape[1]
    speakers = dm.spec().groups["speaker"]
    items = dm.datasets["test"].items[: len(batch["ids"])]
    assert [speakers[i] for i in batch["groups"]["speaker"].tolist()] == [it["speaker"] for it in items]
    for i, n in enumerate(batch["lengths"].tolist()):
        assert not batch["waveform"][i, n:].any()
    unlabeled = collate_clips([{"waveform": torch.ones(5), "id": "x"}])
    assert set(unlabeled) == {"waveform", "lengths", "ids"}


def test_predict_loader_reads_files_folders_and_manifests_without_setup(clips, tmp_path):
    dm = ClipDataModule(manifest=str(clips))
    folder = clips.parent / "wav"
    batch = next(iter(dm.predict_loader(folder, batch_size=50)))
    assert len(batch["ids"]) == 36 and "labels" not in batch and batch["ids"][0] == "no_s0_0"
    items = dm.describe(batch)
    assert items[0].id == "no_s0_0" and items[0].fields["duration_s"] == pytest.approx(0.2, abs=1e-4)
    one = next(iter(dm.predict_loader(folder / "yes_s1_1.wav")))
    assert one["ids"] == ["yes_s1_1"]
    assert len(next(iter(dm.predict_loader(clips, batch_size=64)))["ids"]) == 36


def test_source_arguments_are_checked(clips):
    with pytest.raises(ValueError, match="needs manifest="):
        ClipDataModule(source="manifest")
    with pytest.raises(ValueError, match="would ignore it"):
        ClipDataModule(source="synthetic", manifest=str(clips))
    with pytest.raises(ValueError, match="not one of"):
        ClipDataModule(source="folder")


# ---------------------------------------------------------------------------------------------
# the built-in corpus


TINY = dict(n_train_speakers=2, n_val_speakers=1, n_test_speakers=1, clips_per_word={"train": 2, "val": 1, "test": 1})


def test_words_are_spelt_in_phones_and_anagram_groups_share_their_phones():
    assert word_phones("shafi") == ["sh", "a", "f", "i"] and word_phones("kasu") == ["k", "a", "s", "u"]
    with pytest.raises(ValueError, match="'xa' does not start with a phone"):
        word_phones("kaxa")
    groups = [WORDS[i:i + 4] for i in range(0, len(WORDS), 4)]
    for group in groups:
        bags = {tuple(sorted(word_phones(w))) for w in group}
        assert len(bags) == 1, group  # same phones ...
        assert len({tuple(word_phones(w)) for w in group}) == 4  # ... in a different order
    assert len(WORDS) == 16


def test_word_corpus_is_deterministic_cached_and_has_unseen_test_speakers(tmp_path):
    a = generate_words_corpus(tmp_path / "a", seed=1, **TINY)
    b = generate_words_corpus(tmp_path / "b", seed=1, **TINY)
    assert a.read_bytes() == b.read_bytes()
    lines = [json.loads(line) for line in a.read_text().splitlines()]
    assert len(lines) == 16 * (2 * 2 + 1 + 1)
    assert (a.parent / lines[0]["path"]).read_bytes() == (b.parent / lines[0]["path"]).read_bytes()
    assert generate_words_corpus(tmp_path / "a", seed=1, **TINY) == a  # cached: no second folder
    assert len(list((tmp_path / "a").iterdir())) == 1
    speakers = {s: {line["speaker"] for line in lines if line["split"] == s} for s in ("train", "val", "test")}
    assert not (speakers["train"] & speakers["test"]) and not (speakers["train"] & speakers["val"])
    line = lines[0]
    assert set(line) == {"path", "label", "speaker", "split", "phones", "segments"}
    assert " ".join(s[2] for s in line["segments"][1:-1]) == line["phones"]
    wav, sr = sf.read(a.parent / line["path"])
    assert sr == SR and line["segments"][-1][1] == pytest.approx(len(wav) / sr, abs=1e-4)
    c = generate_words_corpus(tmp_path / "c", seed=2, **TINY)
    assert (c.parent / lines[0]["path"]).read_bytes() != (a.parent / lines[0]["path"]).read_bytes()


def test_fewer_training_clips_keep_val_and_test_identical(tmp_path):
    small = generate_words_corpus(tmp_path, seed=0, **{**TINY, "clips_per_word": {"train": 1, "val": 1, "test": 1}})
    big = generate_words_corpus(tmp_path, seed=0, **TINY)
    for split in ("val", "test"):
        for path in sorted((small.parent / split).rglob("*.wav")):
            assert path.read_bytes() == (big.parent / path.relative_to(small.parent)).read_bytes()


def test_the_synthetic_source_reads_the_built_in_corpus(tmp_path):
    dm = ClipDataModule(data_dir=str(tmp_path), synth=TINY, batch_size=8)
    dm.prepare_data()
    dm.setup()
    assert dm.label_names == sorted(WORDS) and dm.split_sizes() == {"train": 64, "val": 16, "test": 16}
    assert set(dm.spec().groups["speaker"]) == {"spk00", "spk01", "spk02", "spk03"}
