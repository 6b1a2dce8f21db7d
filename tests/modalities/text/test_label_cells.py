"""Text readers: what a label cell becomes (issue 21): empty CoNLL-U tags, numeric labels, case."""

import json
import logging

import pytest

from seqattn.labels import IGNORE_INDEX
from seqattn.modalities.text.data import TaggingDataModule, TextClassificationDataModule
from seqattn.modalities.text.readers import read_conllu

TEXT_LOG = "seqattn.modalities.text"


def _conllu(rows):
    """Sentences of ``(word, upos)`` -> CoNLL-U text."""
    out = []
    for sentence in rows:
        for i, (word, tag) in enumerate(sentence, start=1):
            out.append(f"{i}\t{word}\t{word}\t{tag}\t_\t_\t0\tdep\t_\t_")
        out.append("")
    return "\n".join(out) + "\n"


def test_an_empty_upos_field_is_unlabeled_not_a_class(tmp_path, caplog):
    path = tmp_path / "t.conllu"
    path.write_text(_conllu([[("the", "DET"), ("dog", "")], [("a", "DET"), ("cat", "NOUN")], [("dogs", "NOUN")]]))
    with caplog.at_level(logging.WARNING, logger=TEXT_LOG):
        items = read_conllu(path)
    assert items[0]["tags"] == ["DET", "_"]
    assert "1 word(s) have an empty UPOS field (first at line 2)" in caplog.text
    dm = TaggingDataModule(train_path=str(path), val_path=str(path), test_path=str(path))
    dm.setup()
    assert dm.label_names == ["DET", "NOUN"]
    first = next(it for it in dm.datasets["train"] if it["tokens"] == ["the", "dog"])
    assert first["labels"].tolist() == [0, IGNORE_INDEX]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_integral_numeric_labels_are_one_class_each(tmp_path, caplog, fmt):
    rows = [("good film", 1), ("bad film", 0), ("fine film", 1.0), ("dull film", 0.0), ("great film", 1)]
    path = tmp_path / f"t.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    else:
        path.write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    dm = TextClassificationDataModule(train_path=str(path), val_path=str(path), test_path=str(path))
    with caplog.at_level(logging.INFO, logger=TEXT_LOG):
        dm.setup()
    assert dm.label_names == ["0", "1"]
    assert sorted(it["label"] for it in dm.datasets["train"]) == [0, 0, 1, 1, 1]
    assert "2 label(s) written as integral numbers are named by the integer" in caplog.text
    assert "'1.0' -> '1' (x1)" in caplog.text


def test_labels_differing_only_in_case_are_kept_with_a_warning(tmp_path, caplog):
    path = tmp_path / "t.csv"
    path.write_text("text,label\ngood film,pos\nbad film,neg\ndull film,Neg\nawful film,neg\n")
    dm = TextClassificationDataModule(train_path=str(path), val_path=str(path), test_path=str(path))
    with caplog.at_level(logging.WARNING, logger="seqattn.datakit"):
        dm.setup()
    assert dm.label_names == ["Neg", "neg", "pos"]
    warning = [r.getMessage() for r in caplog.records if "differ only in case" in r.getMessage()]
    assert len(warning) == 1
    assert f"'Neg': 1 (e.g. {path}:4), 'neg': 2 (e.g. {path}:3)" in warning[0]
    assert "pos" not in warning[0].split("training examples:")[1]


def test_no_training_sentences_names_the_file_and_option(tmp_path):
    path = tmp_path / "header_only.csv"
    path.write_text("text,label\n")
    with pytest.raises(ValueError, match=f"no training sentences in data.train_path={path}"):
        TextClassificationDataModule(train_path=str(path)).setup()
