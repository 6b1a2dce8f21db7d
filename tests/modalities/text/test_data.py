"""Text data: readers on files the tests write, the UD download, the built-in corpora, DataModules."""

import json
import logging

import pytest
import torch

from seqattn.modalities.text.vocab import PAD, UNK
from seqattn.labels import IGNORE_INDEX
from seqattn.datakit.download import download
from seqattn.modalities.text.data import TaggingDataModule, TextClassificationDataModule
from seqattn.modalities.text.readers import read_conllu, read_text_labels, read_token_jsonl, ud_treebank
from seqattn.modalities.text.corpus import FAR, TAKES_NOUN, generate_classification_corpus, generate_tagging_corpus

CONLLU = """\
# newdoc id = d1
# sent_id = s1
# text = I saw a saw.
1\tI\tI\tPRON\tPRP\t_\t2\tnsubj\t_\t_
2\tsaw\tsee\tVERB\tVBD\t_\t0\troot\t_\t_
3\ta\ta\tDET\tDT\t_\t4\tdet\t_\t_
4\tsaw\tsaw\tNOUN\tNN\t_\t2\tobj\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_

# sent_id = s2
# a multi-word token (1-2) and an empty node (2.1)
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
2.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t3:conj\t_
3\tfly\tfly\tVERB\t_\t_\t0\troot\t_\t_

# sent_id = only-comments

"""


def test_conllu_reads_upos_xpos_and_skips_ranges_empty_nodes_and_empty_sentences(tmp_path, caplog):
    path = tmp_path / "a.conllu"
    path.write_text(CONLLU)
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.text"):
        items = read_conllu(path)
    assert [it["id"] for it in items] == ["s1", "s2"]
    assert items[0]["tokens"] == ["I", "saw", "a", "saw", "."]
    assert items[0]["tags"] == ["PRON", "VERB", "DET", "NOUN", "PUNCT"]
    assert items[1]["tokens"] == ["do", "n't", "fly"] and items[1]["tags"] == ["AUX", "PART", "VERB"]
    assert "skipped 1 sentence(s) without words" in caplog.text
    xpos = read_conllu(path, column="xpos")
    assert xpos[0]["tags"] == ["PRP", "VBD", "DT", "NN", "."] and xpos[1]["tags"][-1] == "_"


def test_conllu_malformed_lines_name_file_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    lines = CONLLU.splitlines()
    lines[6] = "3\ta\ta\tDET"  # too few fields, line 7
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="bad.conllu:7: .*10 tab-separated fields"):
        read_conllu(path)
    lines = CONLLU.splitlines()
    lines[3] = lines[3].replace("1\tI", "x\tI", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="bad.conllu:4: bad word ID 'x'"):
        read_conllu(path)
    with pytest.raises(ValueError, match="column='lemma'"):
        read_conllu(path, column="lemma")


def test_token_jsonl_reader_and_errors(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    path.write_text('{"tokens": ["they", "can", "fish"], "tags": ["PRON", "AUX", "VERB"], "id": "x"}\n'
                    '\n{"tokens": [], "tags": []}\n')
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.text"):
        items = read_token_jsonl(path)
    assert items == [{"tokens": ["they", "can", "fish"], "tags": ["PRON", "AUX", "VERB"], "id": "x",
                      "where": f"{path}:1"}]
    assert "skipped 1 empty sentence" in caplog.text
    path.write_text('{"tokens": ["a"], "tags": ["DET"]}\n{"tokens": ["a", "b"], "tags": ["DET"]}\n')
    with pytest.raises(ValueError, match="t.jsonl:2: 'tags' must be a list as long"):
        read_token_jsonl(path)
    path.write_text('{"tokens": ["a"], "tags": ["DET"]}\n{"tokens": ["a", \n')
    with pytest.raises(ValueError, match="t.jsonl:2: invalid JSON"):
        read_token_jsonl(path)


def test_csv_with_quoted_comma_custom_columns_and_empty_text(tmp_path, caplog):
    path = tmp_path / "reviews.csv"
    path.write_text('review,stars\n"good, but boring",neg\n"not bad",pos\n"  ",pos\n"two\nlines",pos\n')
    with caplog.at_level(logging.WARNING, logger="seqattn.modalities.text"):
        items = read_text_labels(path, text_column="review", label_column="stars")
    assert [(it["text"], it["label"]) for it in items] == [("good, but boring", "neg"), ("not bad", "pos"),
                                                           ("two\nlines", "pos")]
    assert [it["where"].rsplit(":", 1)[1] for it in items] == ["2", "3", "5"]
    assert "skipped 1 row(s) with empty text" in caplog.text
    with pytest.raises(ValueError, match=r"missing \['text'"):
        read_text_labels(path)


def test_csv_malformed_line_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text('text,label\n"fine",pos\ntoo,many,fields\n')
    with pytest.raises(ValueError, match="bad.csv:3: expected 2 fields"):
        read_text_labels(path)
    path.write_text('text,label\n"fine",pos\n"no label",\n')
    with pytest.raises(ValueError, match="bad.csv:3: no value in label column 'label'"):
        read_text_labels(path)


def test_tsv_and_jsonl_text_labels(tmp_path):
    tsv = tmp_path / "a.tsv"
    tsv.write_text("text\tlabel\tid\ngood, really\tpos\tr1\n")
    assert read_text_labels(tsv, id_column="id")[0] == {"text": "good, really", "label": "pos", "id": "r1",
                                                        "where": f"{tsv}:2"}
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"sentence": "not bad", "y": "pos"}\n{"sentence": "dull"}\n')
    with pytest.raises(ValueError, match="a.jsonl:2: no value in label column 'y'"):
        read_text_labels(jsonl, text_column="sentence", label_column="y")
    assert len(read_text_labels(jsonl, text_column="sentence", label_column=None)) == 2


def test_download_offline_names_the_file_to_place_by_hand(tmp_path):
    dest = tmp_path / "ud" / "en_ewt-ud-train.conllu"
    with pytest.raises(RuntimeError, match=f"place it by hand at {dest}"):
        download("http://127.0.0.1:9/en_ewt-ud-train.conllu", dest, timeout=5)
    assert not dest.exists() and not list(dest.parent.glob("*.part"))
    with pytest.raises(RuntimeError, match="place it by hand at .*en_ewt-ud-train.conllu"):
        ud_treebank("en_ewt", tmp_path, url="http://127.0.0.1:9/en_ewt-ud-{split}.conllu")
    with pytest.raises(ValueError, match="unknown UD treebank"):
        ud_treebank("xx_none", tmp_path)


def test_download_caches_and_checks_sha256(tmp_path):
    source = tmp_path / "src.conllu"
    source.write_text(CONLLU)
    dest = tmp_path / "cache" / "a.conllu"
    assert download(source.as_uri(), dest) == dest and dest.read_text() == CONLLU
    assert dest.with_name("a.conllu.sha256").is_file()  # recorded on first download
    dest.write_text(CONLLU + "# changed\n")
    with pytest.raises(ValueError, match="SHA-256 .* does not match"):
        download(source.as_uri(), dest)
    with pytest.raises(ValueError, match="does not match the expected 00"):
        download(source.as_uri(), tmp_path / "b.conllu", sha256="00")


def test_tagging_corpus_is_deterministic_held_out_and_far_words_are_far():
    a = generate_tagging_corpus(600, 100, 200, seed=3)
    assert a == generate_tagging_corpus(600, 100, 200, seed=3)
    assert a != generate_tagging_corpus(600, 100, 200, seed=4)
    train = {" ".join(it["tokens"]) for it in a["train"]}
    assert not train & {" ".join(it["tokens"]) for it in a["test"] + a["val"]}  # held-out sentences
    n_far = 0
    for it in a["train"]:
        assert len(it["tokens"]) == len(it["tags"]) == len(it["far"])
        for i, far in enumerate(it["far"]):
            if far:
                n_far += 1
                cues = [j for j, (w, t) in enumerate(zip(it["tokens"], it["tags"]))
                        if t in ("AUX", "PART") or (t == "VERB" and w in TAKES_NOUN)]
                # nothing within the window tells VERB from NOUN: no modal, no noun-taking verb
                assert not [j for j in cues if abs(j - i) <= FAR], it["tokens"]
                cue = max(j for j in cues if j < i)
                assert i - cue > FAR
                assert it["tags"][i] == ("VERB" if it["tags"][cue] in ("AUX", "PART") else "NOUN")
    assert n_far > 50


def test_classification_corpus_needs_the_whole_sentence():
    c = generate_classification_corpus(800, 100, 200, seed=1)
    texts = {it["text"]: it["label"] for split in c.values() for it in split}
    assert not {it["text"] for it in c["train"]} & {it["text"] for it in c["test"]}
    labels = [it["label"] for it in c["train"]]
    assert 0.4 < labels.count("pos") / len(labels) < 0.6
    # contrast: the clause after "but" decides; negation flips
    shown = {t: lab for t, lab in texts.items() if t.count(" ") == 3}  # "good but boring ." and the like
    assert any(" but " in t for t in shown)
    for t, lab in shown.items():
        if " but " in t and "not" not in t and "never" not in t:
            last = t.split()[-2]
            from seqattn.modalities.text.corpus import POSITIVE
            assert lab == ("pos" if last in POSITIVE else "neg"), t


def _tiny_tagging(**kwargs):
    return TaggingDataModule(synth={"n_train": 300, "n_val": 50, "n_test": 80}, batch_size=16, **kwargs)


def test_tagging_datamodule_batches_vocab_from_train_and_subsets():
    dm = _tiny_tagging()
    dm.setup()
    assert dm.label_names == sorted(dm.label_names) and "NOUN" in dm.label_names
    vocab = list(dm.spec().vocab)
    assert vocab[:2] == [PAD, UNK]
    train_words = {w for it in dm.datasets["train"].items for w in it["tokens"]}
    assert set(vocab[2:]) == train_words  # train split only (lowercase corpus)
    batch = next(iter(dm.test_dataloader()))
    assert isinstance(batch["words"], list) and len(batch["words"]) == 16
    labels, amb, far = batch["labels"], batch["subsets"]["ambiguous"], batch["subsets"]["far"]
    assert labels.shape == amb.shape == far.shape
    lengths = torch.tensor([len(w) for w in batch["words"]])
    assert ((labels != IGNORE_INDEX).sum(1) == lengths).all()
    assert not (far & ~amb).any()  # far words are ambiguous words
    for i, words in enumerate(batch["words"]):
        for j, w in enumerate(words):
            assert bool(amb[i, j]) == (w in dm.ambiguous_words)
    assert {"saw", "can", "fish"} <= dm.ambiguous_words


def test_tagging_datamodule_reads_user_files_and_rejects_unknown_tags(tmp_path):
    train = tmp_path / "train.jsonl"
    rows = [{"tokens": ["they", "can", "fish"], "tags": ["PRON", "AUX", "VERB"]},
            {"tokens": ["a", "fish"], "tags": ["DET", "NOUN"]}] * 10
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    test = tmp_path / "test.conllu"
    test.write_text(CONLLU)
    dm = TaggingDataModule(source="files", train_path=str(train), test_path=str(test), val_fraction=0.2,
                           labels=["AUX", "DET", "NOUN", "PART", "PRON", "PUNCT", "VERB"])
    dm.setup()
    assert {n: len(d) for n, d in dm.datasets.items()} == {"train": 16, "val": 4, "test": 2}
    assert dm.ambiguous_words == {"fish"}
    dm = TaggingDataModule(source="files", train_path=str(train), test_path=str(test))
    with pytest.raises(ValueError, match="label 'PUNCT' in the test split is not in the label set"):
        dm.setup()
    with pytest.raises(ValueError, match="needs data.train_path"):
        TaggingDataModule(source="files")
    with pytest.raises(ValueError, match="source='web'"):
        TaggingDataModule(source="web")


def test_classification_datamodule_from_csv_and_predict_loader(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f'"good, {i}",pos\n"bad, {i}",neg\n' for i in range(10)))
    dm = TextClassificationDataModule(source="files", train_path=str(train), batch_size=4, test_fraction=0.2)
    dm.setup()
    assert dm.label_names == ["neg", "pos"] and len(dm.datasets["test"]) == 4
    batch = next(iter(dm.train_dataloader()))
    assert batch["labels"].shape == (4,) and batch["words"][0][1] == ","
    # prediction needs no setup(): a fresh datamodule reads plain text or a CSV without labels
    fresh = TextClassificationDataModule(source="files", train_path="unused.csv")
    lines = tmp_path / "in.txt"
    lines.write_text("Not bad, really.\n\nboring\n")
    batch = next(iter(fresh.predict_loader(lines, batch_size=8)))
    assert batch["words"] == [["Not", "bad", ",", "really", "."], ["boring"]] and "labels" not in batch
    assert batch["ids"] == ["in.txt:1", "in.txt:3"]
    with pytest.raises(ValueError, match="not a file"):
        fresh.predict_loader(tmp_path / "nope.txt")


def test_ud_source_downloads_once_and_reads_the_treebank(tmp_path):
    """source=ud through a file:// URL template (offline): train/dev/test are fetched, cached, read."""
    remote = tmp_path / "remote"
    remote.mkdir()
    for split in ("train", "dev", "test"):
        (remote / f"xx-ud-{split}.conllu").write_text(CONLLU)
    url = (remote / "xx-ud-{split}.conllu").as_uri().replace("%7B", "{").replace("%7D", "}")
    dm = TaggingDataModule(source="ud", data_dir=str(tmp_path / "cache"), ud={"treebank": "xx", "url": url})
    dm.prepare_data()
    assert sorted(p.name for p in (tmp_path / "cache" / "ud" / "xx").glob("*.conllu")) == [
        "xx-ud-dev.conllu", "xx-ud-test.conllu", "xx-ud-train.conllu"]
    dm.setup()
    assert {n: len(d) for n, d in dm.datasets.items()} == {"train": 2, "val": 2, "test": 2}
    assert "VERB" in dm.label_names and "saw" in dm.ambiguous_words


def test_vocabulary_options_reach_the_datamodule(tmp_path):
    """data.min_freq / data.max_size / data.lowercase shape the DataModule's vocabulary (train split only):
    train counts good 4, film 3, Bad 2 (+ bad 1), dull 1 -- worked out from the rows below."""
    train = tmp_path / "train.csv"
    rows = ["good film,pos", "good film,pos", "good film,pos", "good,pos", "Bad dull,neg", "Bad,neg", "bad,neg"]
    train.write_text("text,label\n" + "\n".join(rows) + "\n")
    test = tmp_path / "test.csv"
    test.write_text("text,label\nawful awful awful,neg\ngood,pos\n")

    def vocab(**kw):
        dm = TextClassificationDataModule(source="files", train_path=str(train), val_path=str(train),
                                          test_path=str(test), **kw)
        dm.setup()
        return list(dm.spec().vocab)

    assert vocab() == [PAD, UNK, "good", "bad", "film", "dull"]  # lowercase: bad 3; ties alphabetical
    assert vocab(min_freq=3) == [PAD, UNK, "good", "bad", "film"]
    assert vocab(max_size=2) == [PAD, UNK, "good", "bad"]
    assert vocab(lowercase=False) == [PAD, UNK, "good", "film", "Bad", "bad", "dull"]
