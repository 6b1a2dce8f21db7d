"""``data.train_fraction``: a seeded share of the TRAINING split only (few-label runs), in datakit so
every DataModule built on :class:`~seqattn.datakit.module.TaskDataModule` has it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqattn.modalities.text.data import SentencesDataModule, TaggingDataModule


def _files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for split, n in (("train", 60), ("val", 7), ("test", 9)):
        path = tmp_path / f"{split}.jsonl"
        lines = [json.dumps({"tokens": [f"{split}{i}", "the", "cat"], "tags": ["X", "DET", "NOUN"]})
                 for i in range(n)]
        path.write_text("\n".join(lines) + "\n")
        out[f"{split}_path"] = str(path)
    return out


def _kept(dm) -> list[str]:
    return [dm.datasets["train"][i]["tokens"][0] for i in range(len(dm.datasets["train"]))]


def _setup(cls, tmp_path, **kw):
    dm = cls(**_files(tmp_path), **kw)
    dm.setup()
    return dm


@pytest.mark.parametrize("cls", [TaggingDataModule, SentencesDataModule])
def test_train_fraction_keeps_a_share_of_train_only(tmp_path, cls):
    dm = _setup(cls, tmp_path, train_fraction=0.1, seed=0)
    assert dm.split_sizes() == {"train": 6, "val": 7, "test": 9}  # val / test untouched
    kept = _kept(dm)
    assert kept == sorted(kept, key=lambda w: int(w[5:]))  # file order kept
    assert len(set(kept)) == 6
    # the vocabulary is the kept training sentences' words only
    vocab = set(dm.vocab.to_list())
    assert {w for w in vocab if w.startswith("train")} == set(kept)


def test_train_fraction_is_deterministic_by_seed(tmp_path):
    a = _kept(_setup(TaggingDataModule, tmp_path, train_fraction=0.25, seed=3))
    b = _kept(_setup(TaggingDataModule, tmp_path, train_fraction=0.25, seed=3))
    c = _kept(_setup(TaggingDataModule, tmp_path, train_fraction=0.25, seed=4))
    assert a == b and len(a) == 15
    assert a != c  # another seed, another sample
    assert _kept(_setup(TaggingDataModule, tmp_path, seed=3)) == [f"train{i}" for i in range(60)]  # 1.0: all


def test_train_fraction_keeps_at_least_one(tmp_path):
    assert _setup(TaggingDataModule, tmp_path, train_fraction=0.001).split_sizes()["train"] == 1


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, "half", True])
def test_bad_train_fraction_names_the_value(tmp_path, bad):
    with pytest.raises(ValueError, match=r"train_fraction=.*\(0, 1\]"):
        TaggingDataModule(**_files(tmp_path), train_fraction=bad)
