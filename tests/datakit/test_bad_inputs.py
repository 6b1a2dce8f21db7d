"""The bad-input matrix: every reader × the ways a user's file goes wrong -> a clear error naming the
file (and the line, where there is one) and what was expected, or a documented, counted decision.

Generated inputs (hypothesis) for the CSV / JSONL / CoNLL-U / SMILES / node readers: any byte string
gives a result or a ``ValueError`` -- never another exception.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import soundfile as sf
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqattn.datakit.files import read_jsonl, read_table
from seqattn.modalities.audio.manifest import read_label_file, read_manifest
from seqattn.modalities.graph.molecules import read_smiles_lines, read_smiles_table
from seqattn.modalities.graph.social_files import read_edge_csv, read_node_csv
from seqattn.modalities.image.readers import load_images, read_image_csv, read_image_folder
from seqattn.modalities.text.readers import read_conllu, read_lines, read_text_labels, read_token_jsonl
from seqattn.modalities.text.vocab import read_word_vectors

LATIN1 = "caf\xe9".encode("latin-1")  # "café" in latin-1: byte e9 is not UTF-8


def _wav(path: Path, seconds: float = 0.3) -> Path:
    sf.write(path, np.zeros(int(16000 * seconds), dtype=np.float32), 16000)
    return path


# every reader, as (name, file name, a valid text, the reader)
READERS: dict[str, tuple[str, str, Callable[[Path], object]]] = {
    "table_csv": ("t.csv", "a,b\n1,2\n", lambda p: read_table(p, "csv", required=["a", "b"])),
    "table_tsv": ("t.tsv", "a\tb\n1\t2\n", lambda p: read_table(p, "tsv", required=["a", "b"])),
    "jsonl": ("t.jsonl", '{"a": 1}\n', lambda p: list(read_jsonl(p))),
    "text_labels_csv": ("r.csv", "text,label\ngood film,pos\n", lambda p: read_text_labels(p)),
    "text_labels_tsv": ("r.tsv", "text\tlabel\ngood film\tpos\n", lambda p: read_text_labels(p)),
    "text_labels_jsonl": ("r.jsonl", '{"text": "good", "label": "pos"}\n', lambda p: read_text_labels(p)),
    "token_jsonl": ("k.jsonl", '{"tokens": ["I", "saw"], "tags": ["PRON", "VERB"]}\n', lambda p: read_token_jsonl(p)),
    "conllu": ("c.conllu", "1\tI\tI\tPRON\t_\t_\t0\t_\t_\t_\n\n", lambda p: read_conllu(p)),
    "lines": ("l.txt", "one sentence\n", lambda p: read_lines(p)),
    "smiles_csv": ("m.csv", "smiles,y\nCCO,1.0\n", lambda p: read_smiles_table(p, "smiles", ["y"])),
    "smiles_lines": ("m.smi", "CCO ethanol\n", lambda p: read_smiles_lines(p)),
    "node_csv": ("n.csv", "id,f,label\na,1,x\n", lambda p: read_node_csv(p)),
    "edge_csv": ("e.csv", "source,target\na,b\n", lambda p: read_edge_csv(p, {"a": 0, "b": 1})),
    "label_file": ("lab.txt", "0\t0.3\tx\n", lambda p: read_label_file(p)),
    "word_vectors": ("v.txt", "the 0.1 0.2\n", lambda p: read_word_vectors(p)),
}
NAMED = sorted(READERS)


def _write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def _plain(reader: str, result) -> list:
    """A reader's result as plain rows, to compare with the rows written out by hand below."""
    if reader.startswith("table"):
        return [(line, row) for line, row in result.rows]
    if reader == "jsonl":
        return [(line, obj) for line, _, obj in result]
    if reader in ("conllu", "token_jsonl"):
        return [(r["tokens"], r["tags"], r["where"].rsplit("/", 1)[-1]) for r in result]
    if reader.startswith("text_labels"):
        return [(r["text"], r["label"], r["where"].rsplit("/", 1)[-1]) for r in result]
    if reader == "lines":
        return [(r["text"], r["where"].rsplit("/", 1)[-1]) for r in result]
    if reader.startswith("smiles"):
        return [(r["smiles"], r["id"], list(r["targets"])) for r in result]
    if reader == "node_csv":
        return [result.ids, result.x.tolist(), result.feature_names, result.labels, result.splits]
    if reader == "edge_csv":
        edge_index, attr = result
        return [edge_index.tolist(), None if attr is None else attr.tolist()]
    if reader == "label_file":
        return list(result)
    if reader == "word_vectors":
        vectors, dim = result
        return [dim, {w: [round(x, 6) for x in v.tolist()] for w, v in vectors.items()}]
    raise AssertionError(reader)


# reader -> a valid file of two items (a comment / blank line where the format has them), and the rows
# it must give, written out by hand
TWO_ITEMS: dict[str, tuple[str, list]] = {
    "table_csv": ("a,b\n1,2\n3,4\n", [(2, {"a": "1", "b": "2"}), (3, {"a": "3", "b": "4"})]),
    "table_tsv": ("a\tb\n1\t2\n3\t4\n", [(2, {"a": "1", "b": "2"}), (3, {"a": "3", "b": "4"})]),
    "jsonl": ('{"a": 1}\n\n{"a": [2, "x"]}\n', [(1, {"a": 1}), (3, {"a": [2, "x"]})]),
    "text_labels_csv": ("text,label\ngood film,pos\ndull,neg\n",
                        [("good film", "pos", "r.csv:2"), ("dull", "neg", "r.csv:3")]),
    "text_labels_tsv": ("text\tlabel\ngood film\tpos\ndull\tneg\n",
                        [("good film", "pos", "r.tsv:2"), ("dull", "neg", "r.tsv:3")]),
    "text_labels_jsonl": ('{"text": "good", "label": "pos"}\n{"text": "bad", "label": "neg"}\n',
                          [("good", "pos", "r.jsonl:1"), ("bad", "neg", "r.jsonl:2")]),
    "token_jsonl": ('{"tokens": ["I", "saw"], "tags": ["PRON", "VERB"]}\n{"tokens": ["go"], "tags": ["VERB"]}\n',
                    [(["I", "saw"], ["PRON", "VERB"], "k.jsonl:1"), (["go"], ["VERB"], "k.jsonl:2")]),
    "conllu": ("# sent_id = 1\n1\tI\tI\tPRON\t_\t_\t0\t_\t_\t_\n2\tsaw\tsee\tVERB\t_\t_\t0\t_\t_\t_\n\n"
               "1\tgo\tgo\tVERB\t_\t_\t0\t_\t_\t_\n\n",
               [(["I", "saw"], ["PRON", "VERB"], "c.conllu:1"), (["go"], ["VERB"], "c.conllu:5")]),
    "lines": ("one sentence\n\ntwo words\n", [("one sentence", "l.txt:1"), ("two words", "l.txt:3")]),
    "smiles_csv": ("smiles,y\nCCO,1.5\nc1ccccc1,-2\n", [("CCO", "CCO", [1.5]), ("c1ccccc1", "c1ccccc1", [-2.0])]),
    "smiles_lines": ("CCO ethanol\nC methane\n", [("CCO", "ethanol", []), ("C", "methane", [])]),
    "node_csv": ("id,f,label\na,1,x\nb,2.5,y\n", [["a", "b"], [[1.0], [2.5]], ["f"], ["x", "y"], [None, None]]),
    "edge_csv": ("source,target\na,b\nb,a\n", [[[0, 1], [1, 0]], None]),
    "label_file": ("0\t0.3\tx\n0.3\t0.5\ty\n", [(0.0, 0.3, "x"), (0.3, 0.5, "y")]),
    "word_vectors": ("the 0.1 0.2\ncat -1 3\n", [2, {"the": [0.1, 0.2], "cat": [-1.0, 3.0]}]),
}


@pytest.mark.parametrize("reader", NAMED)
def test_valid_input_reads(reader, tmp_path):
    """The reader gives exactly the items of the file (count, content, order, ``file:line``)."""
    name, _, read = READERS[reader]
    two, want = TWO_ITEMS[reader]
    assert _plain(reader, read(_write(tmp_path, name, two))) == want


@pytest.mark.parametrize("reader", NAMED)
def test_a_byte_order_mark_is_read_as_if_absent(reader, tmp_path):
    """What spreadsheet programs write: UTF-8 with a BOM. The header (or first word) is unchanged."""
    name, text, read = READERS[reader]
    plain = read(_write(tmp_path, name, text))
    with_bom = read(_write(tmp_path, "bom_" + name, "\ufeff" + text))
    plain_text, bom_text = repr(plain), repr(with_bom)
    assert "\ufeff" not in bom_text and "\\ufeff" not in bom_text
    assert bom_text.replace("bom_", "") == plain_text


@pytest.mark.parametrize("reader", NAMED)
def test_bytes_that_are_not_utf8_name_the_file_line_and_byte(reader, tmp_path):
    name, text, read = READERS[reader]
    lines = text.encode("utf-8").split(b"\n")
    lines.insert(1 if len(lines) > 2 else 0, LATIN1 if reader != "conllu" else b"2\t" + LATIN1 + b"\t_\tX\t_\t_\t0\t_\t_\t_")
    path = _write(tmp_path, name, b"\n".join(lines))
    line = 2 if len(text.encode().split(b"\n")) > 2 else 1
    with pytest.raises(ValueError, match=rf"{re.escape(name)}:{line}: byte\(s\) e9 at column \d+ are not valid utf-8.*encoding"):
        read(path)


@pytest.mark.parametrize("reader", NAMED)
def test_a_missing_file_is_named(reader, tmp_path):
    _, _, read = READERS[reader]
    with pytest.raises(ValueError, match=r"nope\.\w+ does not exist"):
        read(tmp_path / ("nope." + READERS[reader][0].rsplit(".", 1)[1]))


EMPTY = {  # reader -> what an empty file gives: an error message, or "empty" (nothing to read, no error)
    "table_csv": "empty file; expected a header row", "table_tsv": "empty file; expected a header row",
    "jsonl": "empty", "text_labels_csv": "empty file", "text_labels_tsv": "empty file", "text_labels_jsonl": "empty",
    "token_jsonl": "empty", "conllu": "empty", "lines": "empty", "smiles_csv": "empty file", "smiles_lines": "empty",
    "node_csv": "empty file", "edge_csv": "empty file", "label_file": "empty", "word_vectors": "holds no vectors",
}


@pytest.mark.parametrize("reader", NAMED)
def test_an_empty_file(reader, tmp_path):
    name, _, read = READERS[reader]
    path = _write(tmp_path, name, "")
    if EMPTY[reader] == "empty":  # documented: nothing to read is an empty result; the DataModule then says so
        assert len(read(path)) == 0
    else:
        with pytest.raises(ValueError, match=rf"{re.escape(name)}.*{EMPTY[reader]}"):
            read(path)


HEADER_ONLY = {"smiles_csv": "no molecules", "node_csv": "no nodes", "edge_csv": "no edges"}


@pytest.mark.parametrize("reader", sorted(HEADER_ONLY))
def test_a_header_without_rows_is_an_error_where_rows_are_needed(reader, tmp_path):
    name, text, read = READERS[reader]
    with pytest.raises(ValueError, match=rf"{re.escape(name)}: {HEADER_ONLY[reader]}"):
        read(_write(tmp_path, name, text.split("\n")[0] + "\n"))


@pytest.mark.parametrize("reader", ["table_csv", "text_labels_csv", "smiles_csv", "node_csv", "edge_csv"])
def test_a_missing_column_names_the_header(reader, tmp_path):
    name, text, read = READERS[reader]
    header, *rest = text.split("\n")
    path = _write(tmp_path, name, "zzz," + header.split(",", 1)[1] + "\n" + "\n".join(rest))
    with pytest.raises(ValueError, match=rf"{re.escape(name)}:1: the header lacks column\(s\): missing \["):
        read(path)


@pytest.mark.parametrize("reader", ["table_csv", "text_labels_csv", "smiles_csv", "node_csv", "edge_csv",
                                    "text_labels_tsv"])
def test_a_row_with_extra_or_missing_fields_names_its_line(reader, tmp_path):
    name, text, read = READERS[reader]
    sep = "\t" if name.endswith(".tsv") else ","
    header, row, *_ = text.split("\n")
    for bad in (row + sep + "extra", row.split(sep)[0]):
        with pytest.raises(ValueError, match=rf"{re.escape(name)}:3: expected \d+ fields .*, got \d+"):
            read(_write(tmp_path, name, f"{header}\n{row}\n{bad}\n"))


def test_an_unbalanced_quote_is_an_error_at_its_line_not_swallowed_rows(tmp_path):
    rows = ["text,label"] + [f"film {i},pos" for i in range(5)] + ['"Great film, really,pos'] + \
           [f"film {i},neg" for i in range(25)]
    path = _write(tmp_path, "r.csv", "\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"r\.csv:7: malformed CSV"):
        read_text_labels(path)
    path = _write(tmp_path, "q.csv", 'text,label\n"Great" film,pos\n')  # a quote inside a field
    with pytest.raises(ValueError, match=r"q\.csv:2: malformed CSV.*quoted whole"):
        read_text_labels(path)
    ok = _write(tmp_path, "ok.csv", 'text,label\n"a ""quoted"" word, with a comma",pos\n')
    assert read_text_labels(ok)[0]["text"] == 'a "quoted" word, with a comma'


def test_tsv_keeps_quotes_as_written_and_counts_every_row(tmp_path):
    rows = ["text\tlabel"] + ['"Great film, really\tpos'] + [f"film {i}\tneg" for i in range(25)] + ['"Great" film\tpos']
    items = read_text_labels(_write(tmp_path, "r.tsv", "\n".join(rows) + "\n"))
    assert len(items) == 27 and items[0]["text"] == '"Great film, really' and items[-1]["text"] == '"Great" film'


@pytest.mark.parametrize("value", ["", "nan", "NaN", "null", "None", "NA"])
def test_missing_label_values_are_never_a_class(value, tmp_path):
    with pytest.raises(ValueError, match=r"r\.csv:2: no value in label column 'label'"):
        read_text_labels(_write(tmp_path, "r.csv", f"text,label\ngood,{value}\n"))
    tagged = read_token_jsonl(_write(tmp_path, "k.jsonl", '{"tokens": ["a", "b"], "tags": ["X", null]}\n'))
    assert tagged[0]["tags"] == ["X", "_"]  # a JSON null tag is unlabeled, like "_"
    nodes = read_node_csv(_write(tmp_path, "n.csv", f"id,f,label\na,1,x\nb,2,{value}\n"))
    assert nodes.labels == ["x", None]  # an unlabeled node
    mols = read_smiles_table(_write(tmp_path, "m.csv", f"smiles,y\nCCO,{value}\n"), "smiles", ["y"])
    assert np.isnan(mols[0]["targets"][0])  # a missing target, masked out of the loss


@pytest.mark.parametrize("value", ["inf", "-inf", "abc"])
def test_non_finite_or_non_numeric_values_name_their_line(value, tmp_path):
    with pytest.raises(ValueError, match=r"m\.csv:3: target 'y' = .* (is not finite|is not a number)"):
        read_smiles_table(_write(tmp_path, "m.csv", f"smiles,y\nCCO,1\nCCN,{value}\n"), "smiles", ["y"])
    with pytest.raises(ValueError, match=r"n\.csv:3: column 'f' must be (finite|a number)"):
        read_node_csv(_write(tmp_path, "n.csv", f"id,f,label\na,1,x\nb,{value},y\n"))
    with pytest.raises(ValueError, match=r"lab\.txt:1: segment times must be (finite seconds|numbers)"):
        read_label_file(_write(tmp_path, "lab.txt", f"0\t{value}\tx\n"))


def test_duplicates_are_errors_naming_both_lines(tmp_path):
    with pytest.raises(ValueError, match=r"n\.csv:3: node id 'a' repeats \(first at .*n\.csv:2\)"):
        read_node_csv(_write(tmp_path, "n.csv", "id,f\na,1\na,2\n"))
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"i\.csv:3: image 'x.png' is listed again \(first at .*i\.csv:2\)"):
        read_image_csv(_write(tmp_path, "i.csv", "path,label\nx.png,cat\nx.png,dog\n"))
    with pytest.raises(ValueError, match=r"t\.csv:1: the header names column\(s\) \['a'\] more than once"):
        read_table(_write(tmp_path, "t.csv", "a,a\n1,2\n"))


def test_missing_or_corrupt_referenced_files(tmp_path):
    _wav(tmp_path / "a.wav")
    with pytest.raises(ValueError, match=r"m\.jsonl:1: audio file .*gone\.wav does not exist"):
        read_manifest(_write(tmp_path, "m.jsonl", '{"path": "gone.wav", "segments": [[0, 0.1, "x"]]}\n'))
    with pytest.raises(ValueError, match=r"m\.jsonl:1: label file .*gone\.txt does not exist"):
        read_manifest(_write(tmp_path, "m.jsonl", '{"path": "a.wav", "labels": "gone.txt"}\n'))
    (tmp_path / "img" / "cat").mkdir(parents=True)
    (tmp_path / "img" / "cat" / "broken.png").write_bytes(b"not a png")
    items = read_image_folder(tmp_path / "img")
    with pytest.raises(ValueError, match=r"1 of 1 image file\(s\) cannot be read:\n  .*broken\.png"):
        load_images(items, (4, 4), "resize", "error")
    loaded, kept, bad = load_images(items, (4, 4), "resize", "skip")  # documented: skipped, counted, listed
    assert kept == [] and len(bad) == 1


def test_speech_segments_must_lie_inside_the_audio(tmp_path):
    from seqattn.modalities.audio.data import SpeechDataModule

    for i in range(3):
        _wav(tmp_path / f"{i}.wav", 1.0)
    ms = _write(tmp_path, "ms.jsonl", "".join(
        f'{{"path": "{i}.wav", "segments": [[0, 500, "a"], [500, 1000, "b"]], "split": "{s}"}}\n'
        for i, s in enumerate(("train", "val", "test"))))
    with pytest.raises(ValueError, match=r"ms\.jsonl:1: segments end at 1000 s but .*0\.wav lasts 1\.000 s.*milliseconds"):
        SpeechDataModule(manifest=str(ms)).setup()
    sf.write(tmp_path / "0.wav", np.zeros(4640, dtype=np.float32), 16000)  # truncated: 0.29 s of a 1.0 s label file
    trunc = _write(tmp_path, "t.jsonl", "".join(
        f'{{"path": "{i}.wav", "segments": [[0, 0.5, "a"], [0.5, 1.0, "b"]], "split": "{s}"}}\n'
        for i, s in enumerate(("train", "val", "test"))))
    with pytest.raises(ValueError, match=r"t\.jsonl:1: segments end at 1 s but .*lasts 0\.290 s.*truncated"):
        SpeechDataModule(manifest=str(trunc)).setup()
    with pytest.raises(ValueError, match=r"m\.jsonl:1: segment times must be finite"):
        read_manifest(_write(tmp_path, "m.jsonl", '{"path": "1.wav", "segments": [[0, NaN, "a"]]}\n'))


def test_a_single_class_says_what_is_wrong_with_the_data(tmp_path):
    from PIL import Image

    from seqattn.modalities.image.data import ImageDataModule
    from seqattn.modalities.text.data import TaggingDataModule, TextClassificationDataModule

    (tmp_path / "img" / "cat").mkdir(parents=True)
    for i in range(5):
        Image.new("RGB", (4, 4), (i * 40, 0, 0)).save(tmp_path / "img" / "cat" / f"{i}.png")
    with pytest.raises(ValueError, match=r"has 1 distinct labels \['cat'\].*at least 2"):
        ImageDataModule(path=str(tmp_path / "img"), image_size=4).setup()
    reviews = _write(tmp_path, "r.csv", "text,label\n" + "".join(f"film {i},pos\n" for i in range(20)))
    with pytest.raises(ValueError, match=r"has 1 distinct labels \['pos'\]"):
        TextClassificationDataModule(train_path=str(reviews)).setup()
    xpos = _write(tmp_path, "x.conllu", "".join(f"1\tw{i}\tw\tNOUN\t_\t_\t0\t_\t_\t_\n\n" for i in range(20)))
    with pytest.raises(ValueError, match=r"has 0 distinct labels \[\]"):
        TaggingDataModule(train_path=str(xpos), column="xpos").setup()


def test_an_unknown_label_in_val_or_test_names_its_line(tmp_path):
    from seqattn.modalities.text.data import TextClassificationDataModule

    train = _write(tmp_path, "train.csv", "text,label\n" + "".join(f"film {i},{'pos' if i % 2 else 'neg'}\n"
                                                                   for i in range(10)))
    test = _write(tmp_path, "test.csv", "text,label\nfilm a,pos\nfilm b,meh\n")
    with pytest.raises(ValueError, match=r"test\.csv:3: label 'meh' in the test split is not in the label set"):
        TextClassificationDataModule(train_path=str(train), val_path=str(train), test_path=str(test)).setup()


def test_too_long_for_the_model_is_found_before_training(tmp_path):
    from tests.workflows import QUIET, compose

    from seqattn.run import train

    lines = [f'{{"tokens": {["w"] * n}, "tags": {["X", "Y"] * (n // 2)}}}'.replace("'", '"') for n in (4, 6, 8)]
    train_file = _write(tmp_path, "train.jsonl", "\n".join(lines * 5) + "\n")
    long_test = _write(tmp_path, "test.jsonl", '{"tokens": ' + str(["w"] * 40).replace("'", '"') + ', "tags": '
                       + str(["X", "Y"] * 20).replace("'", '"') + "}\n")
    cfg = compose(["task=text_tagging", f"data.train_path={train_file}", f"data.test_path={long_test}",
                   "model.positional=learned", "model.max_len=16", "model.dim=16", "model.depth=1", "model.heads=2"]
                  + QUIET, tmp_path / "run", tmp_path / "data")
    with pytest.raises(ValueError, match=r"test\.jsonl:1: the test split has an item of 40 tokens, longer than the "
                                         r"model takes \(16"):
        train(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()  # refused before any training


# ---------------------------------------------------------------------------------------------
# any bytes: a result or a ValueError, never another exception

FUZZED = ["table_csv", "table_tsv", "jsonl", "text_labels_csv", "text_labels_jsonl", "token_jsonl", "conllu",
          "smiles_csv", "node_csv", "edge_csv", "label_file", "lines"]


@pytest.mark.parametrize("reader", FUZZED)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200),
                      st.text(alphabet=st.sampled_from(list(',\t"\n\r{}[]:#1a x_-.\ufeff\\')), max_size=120)
                      .map(lambda s: s.encode("utf-8"))),
       after_valid=st.booleans())
def test_any_bytes_give_a_result_or_a_value_error(reader, data, after_valid, tmp_path):
    """Any bytes (alone, or after the reader's valid example so that many reads succeed): a
    ``ValueError``, or a result of the reader's documented shape."""
    name, valid, read = READERS[reader]
    path = tmp_path / name
    path.write_bytes(valid.encode("utf-8") + data if after_valid else data)
    try:
        result = read(path)
    except ValueError:
        return
    RESULT_SHAPE[reader](result)


def _records(result, keys: dict[str, type]) -> None:
    assert isinstance(result, list)
    for r in result:
        for key, kind in keys.items():
            assert isinstance(r[key], kind), (key, r)
        assert re.search(r":\d+$", r["where"]), r


def _tagged(result) -> None:
    _records(result, {"tokens": list, "tags": list, "where": str})
    for r in result:
        assert len(r["tokens"]) == len(r["tags"]) >= 1 and all(isinstance(t, str) for t in r["tokens"]), r


def _table(result) -> None:
    assert all(isinstance(h, str) for h in result.header) and len(set(result.header)) == len(result.header)
    lines = [line for line, _ in result.rows]
    assert lines == sorted(lines) and all(line >= 2 for line in lines)
    assert all(list(row) == result.header for _, row in result.rows)


def _nodes(result) -> None:
    n = len(result.ids)
    assert n >= 1 and len(set(result.ids)) == n
    assert result.x.shape == (n, len(result.feature_names)) and torch.isfinite(result.x).all()
    assert len(result.labels) == len(result.splits) == len(result.where) == n


def _edges(result) -> None:
    edge_index, attr = result
    assert edge_index.dtype == torch.long and edge_index.shape[0] == 2 and edge_index.shape[1] >= 1
    assert ((edge_index == 0) | (edge_index == 1)).all()  # only the two nodes the test names
    assert attr is None or attr.shape[0] == edge_index.shape[1]


def _segments(result) -> None:
    for start, end, label in result:
        assert 0 <= start < end and isinstance(label, str) and label.strip() == label != ""


def _smiles(result) -> None:
    _records(result, {"smiles": str, "targets": list, "where": str})
    assert all(len(r["targets"]) == 1 for r in result)


# reader -> what a successful read of any bytes must look like
RESULT_SHAPE: dict[str, Callable[[object], None]] = {
    "table_csv": _table, "table_tsv": _table,
    "jsonl": lambda r: all(isinstance(line, int) and where.endswith(f":{line}") for line, where, _ in r),
    "text_labels_csv": lambda r: _records(r, {"text": str, "label": str, "where": str}),
    "text_labels_jsonl": lambda r: _records(r, {"text": str, "label": str, "where": str}),
    "token_jsonl": _tagged, "conllu": _tagged,
    "smiles_csv": _smiles, "node_csv": _nodes, "edge_csv": _edges, "label_file": _segments,
    "lines": lambda r: _records(r, {"text": str, "where": str}),
}
