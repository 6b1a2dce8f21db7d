"""Text DataModules: ``task=text_tagging`` (a tag per word) and ``task=text_cls`` (a label per sentence).

Sources: ``synthetic`` (the built-in corpora, :mod:`seqattn.modalities.text.corpus`), ``files``
(your CoNLL-U / token JSONL / CSV / TSV / JSONL files, :mod:`seqattn.modalities.text.readers`;
giving ``train_path`` selects it) and, for tagging, ``ud`` (a Universal Dependencies treebank by URL).

Batches hold **words** (``list[list[str]]``), not ids: the vocabulary is built from the training
split and travels in the data's spec (:meth:`_TextDataModule.spec`) into the model, which maps
words to ids itself.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch.utils.data import DataLoader

from seqattn.datakit.files import table_format
from seqattn.datakit.items import Item
from seqattn.datakit.module import ListDataset, TaskDataModule
from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import split
from seqattn.labels import IGNORE_INDEX, SPLITS
from seqattn.modalities.text.chars import build_char_vocabulary
from seqattn.modalities.text.corpus import CLS_LABELS, generate_classification_corpus, generate_tagging_corpus
from seqattn.modalities.text.readers import (
    UNLABELED,
    read_conllu,
    read_lines,
    read_text_labels,
    read_token_jsonl,
    ud_treebank,
)
from seqattn.modalities.text.vocab import TOKEN_PATTERN, Vocabulary, normalize, tokenize

log = logging.getLogger("seqattn.modalities.text")


# ---------------------------------------------------------------------------------------------
# batches


def collate_tagged(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Items ``{"tokens", "labels" [L] long?, "subsets"?, "id"}`` -> ``dict(words list[list[str]],
    labels [B, L] long padded with -100, subsets {name: [B, L] bool}, ids)``. Unlabeled items
    (prediction) give no ``labels``."""
    words = [list(b["tokens"]) for b in batch]
    length = max((len(w) for w in words), default=0)
    out: dict[str, Any] = {"words": words, "ids": [b["id"] for b in batch]}
    if batch and batch[0].get("labels") is not None:
        labels = torch.full((len(batch), length), IGNORE_INDEX, dtype=torch.long)  # [B, L]
        for i, b in enumerate(batch):
            labels[i, : len(b["labels"])] = b["labels"]
        out["labels"] = labels
    names = batch[0].get("subsets", {}).keys() if batch else ()
    if names:
        out["subsets"] = {}
        for name in names:
            mask = torch.zeros(len(batch), length, dtype=torch.bool)  # [B, L]
            for i, b in enumerate(batch):
                mask[i, : len(b["subsets"][name])] = b["subsets"][name]
            out["subsets"][name] = mask
    return out


def collate_labeled(batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Items ``{"tokens", "label" int?, "id"}`` -> ``dict(words, labels [B] long, ids)``."""
    out: dict[str, Any] = {"words": [list(b["tokens"]) for b in batch], "ids": [b["id"] for b in batch]}
    if batch and batch[0].get("label") is not None:
        out["labels"] = torch.tensor([b["label"] for b in batch], dtype=torch.long)  # [B]
    return out


# ---------------------------------------------------------------------------------------------
# DataModules


class _TextDataModule(TaskDataModule):
    """What tagging and classification share: sources, splits, vocabulary, label set, loaders,
    the predict protocol. Subclasses read items and turn them into dataset items."""

    sources: tuple[str, ...] = ()
    collate = staticmethod(collate_tagged)

    def __init__(
        self,
        source: str | None = None,
        data_dir: str | None = None,
        train_path: str | None = None,
        val_path: str | None = None,
        test_path: str | None = None,
        format: str = "auto",
        labels: Sequence[str] | None = None,
        lowercase: bool = True,
        token_pattern: str = TOKEN_PATTERN,
        min_freq: int = 1,
        max_size: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
        synth: Mapping[str, Any] | None = None,
        limit: int | None = None,
        encoding: str = "utf-8",
        bucket_by_length: bool = False,
        bucket_batches: int = 50,
        train_fraction: float = 1.0,
    ) -> None:
        if source is None:
            source = "files" if train_path else "synthetic"
        if source not in self.sources:
            raise ValueError(f"source={source!r} is not one of {self.sources}")
        if source == "files" and not train_path:
            raise ValueError("source='files' needs data.train_path (and optionally val_path / test_path)")
        if source != "files" and (train_path or val_path or test_path):
            raise ValueError(f"data.train_path / val_path / test_path are given but data.source={source} would ignore "
                             "them; drop data.source (a train_path selects the files source) or the paths")
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, limit=limit, labels=labels,
                         encoding=encoding, bucket_by_length=bucket_by_length, bucket_batches=bucket_batches,
                         train_fraction=train_fraction)
        self.source = source
        self.paths = {"train": train_path, "val": val_path, "test": test_path}
        self.format = format
        self.lowercase, self.token_pattern = bool(lowercase), token_pattern
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        self.min_freq, self.max_size = min_freq, max_size
        self.synth = dict(synth or {})
        self.vocab: Vocabulary | None = None
        self.chars: list[str] | None = None  # the training split's characters (case kept)
        self._given: dict[str, Any] | None = None  # use_vocabulary's (finetune.vocabulary=checkpoint)
        self._longest: dict[str, tuple[int, str]] = {}

    def use_vocabulary(self, vocab: Sequence[str], chars: Sequence[str] | None = None, lowercase: bool | None = None,
                       where: str = "the checkpoint") -> None:
        """Use these words (and characters) instead of building them from the training split in
        ``setup()`` (``finetune.vocabulary=checkpoint``: the ``init_from`` checkpoint's spec). Indices are
        kept: word ``i`` of ``vocab`` is index ``i``; ``data.min_freq`` / ``data.max_size`` no longer apply.

        Args:
            vocab: ``<pad>``, ``<unk>``, words (a :class:`Vocabulary` list).
            chars: the character table (spec ``chars``); None = built from the training split.
            lowercase: whether ``vocab`` was built lowercased (the checkpoint run's ``data.lowercase``;
                None = unknown, not checked).
            where: the vocabulary's origin, for messages.

        Raises:
            ValueError: called after ``setup()``, a malformed list, or ``lowercase`` other than this
                data's ``data.lowercase`` (naming both).
        """
        if self.datasets:
            raise ValueError("use_vocabulary() must come before setup(): the vocabulary is fixed there")
        if lowercase is not None and bool(lowercase) != self.lowercase:
            raise ValueError(f"the vocabulary of {where} was built with data.lowercase={bool(lowercase)}, this data has "
                             f"data.lowercase={self.lowercase}; set data.lowercase={bool(lowercase)} to use it")
        self._given = {"vocab": Vocabulary(vocab), "chars": None if chars is None else list(chars), "where": where}

    def item_length(self, dataset, index: int) -> int:
        """Tokens of sentence ``index`` (for ``bucket_by_length``)."""
        return len(dataset[index]["tokens"])

    # -- what the model needs ---------------------------------------------------------------
    def spec(self) -> DataSpec:
        """Label set and the vocabulary of the training split."""
        if self.vocab is None:
            raise RuntimeError("the vocabulary is built in setup() from the training split")
        return DataSpec(num_outputs=self.num_classes, labels=self.label_names, vocab=self.vocab.to_list(),
                        chars=self.chars, subsets=self.subset_names())

    def subset_names(self) -> tuple[str, ...]:
        return ()

    def longest(self) -> dict[str, tuple[int, str]]:
        """The longest sentence (in words = tokens) of each split and where it is."""
        return dict(self._longest)

    # -- to be defined ----------------------------------------------------------------------
    def read_splits(self) -> dict[str, list[dict[str, Any]]]:
        """Raw items per split, each with ``tokens`` and ``tag(s)``/``label``, ``id``, ``where``."""
        raise NotImplementedError

    def targets_of(self, item: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        raise NotImplementedError

    def read_unlabeled(self, path: Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """Items of a predict file; malformed lines go to ``skipped`` (``(file:line, reason)``) when it is a
        list, else raise."""
        raise NotImplementedError

    # -- lifecycle --------------------------------------------------------------------------
    def _split_files(self, reader) -> dict[str, list[dict[str, Any]]]:
        """Read the user's files: each given split from its file; missing val/test split off train."""
        splits = {name: reader(Path(p)) for name, p in self.paths.items() if p}
        if "val" not in splits or "test" not in splits:
            parts = split(splits["train"], 0.0 if "val" in splits else self.val_fraction,
                          0.0 if "test" in splits else self.test_fraction, self.seed, what="sentences")
            splits = {name: splits.get(name, parts[name]) for name in SPLITS}
            splits["train"] = parts["train"]
        return splits

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        splits = self.cap(self.read_splits())
        if not splits["train"]:
            raise ValueError(f"no training sentences in {self._train_source()}")
        self.set_labels({name: [(t, it["where"]) for it in items for t in self.targets_of(it) if t != UNLABELED]
                         for name, items in splits.items()}, source=f"{self.source} data {self.paths['train'] or ''}")
        if self._given is None:
            self.vocab = Vocabulary.build((it["tokens"] for it in splits["train"]), self.min_freq, self.max_size,
                                          self.lowercase)
        else:
            self.vocab = self._given["vocab"]
            words = {normalize(w, self.lowercase) for it in splits["train"] for w in it["tokens"]}
            log.info("vocabulary: the %d words of %s (finetune.vocabulary=checkpoint; data.min_freq / max_size not "
                     "applied): %d of the training split's %d distinct words are in it, %d more words are known only "
                     "from it", len(self.vocab), self._given["where"], sum(w in self.vocab for w in words), len(words),
                     len(self.vocab) - 2 - sum(w in self.vocab for w in words))
        if self._given is None or self._given["chars"] is None:
            self.chars = build_char_vocabulary(w for it in splits["train"] for w in it["tokens"])
        else:
            self.chars = list(self._given["chars"])
        self.prepare_items(splits)
        self._longest = {name: max(((len(it["tokens"]), it["where"]) for it in items), default=(0, ""))
                         for name, items in splits.items() if items}
        self.datasets = {name: ListDataset([self.make_item(it, name) for it in items])
                         for name, items in splits.items()}
        for name, data in self.datasets.items():
            if not len(data):
                log.warning("the %s split is empty", name)
        unk = self._unknown_rate(splits.get("test", []))
        log.info("%s data: %s sentences, %d labels, vocabulary %d words (test: %.1f%% of words unknown)",
                 self.source, {n: len(d) for n, d in self.datasets.items()}, len(self._labels), len(self.vocab),
                 100 * unk)

    def _train_source(self) -> str:
        """Where the training sentences come from, for messages: the file and the option naming it."""
        if self.source == "files":
            parted = "" if self.paths["val"] and self.paths["test"] else " (val / test split off it)"
            return f"data.train_path={self.paths['train']}{parted}: no sentence there has words"
        if self.source == "ud":
            treebank = getattr(self, "ud", {}).get("treebank")
            return f"the train file of the UD treebank {treebank!r} under {self.data_dir / 'ud'}"
        return f"the built-in {self.source} corpus (data.synth: {self.synth or 'defaults'})"

    def prepare_items(self, splits: dict[str, list[dict[str, Any]]]) -> None:
        """Hook: statistics from the train split before items are made (e.g. ambiguous words)."""

    def _unknown_rate(self, items: Iterable[dict[str, Any]]) -> float:
        words = [normalize(w, self.lowercase) for it in items for w in it["tokens"]]
        return sum(w not in self.vocab for w in words) / max(len(words), 1)

    def tokenize(self, text: str) -> list[str]:
        return tokenize(text, lowercase=False, pattern=self.token_pattern)  # the adapter lowercases

    def export_preprocessing(self) -> dict[str, Any]:
        """The word tokenizer of plain-text and table inputs (CoNLL-U / token JSONL give the words)."""
        return {"tokenizer": {"kind": "regex", "pattern": self.token_pattern,
                              "how": "words = re.findall(pattern, text), case kept (the vocabulary lookup "
                                     "lowercases when preprocessing.lowercase)"}}

    # -- predict protocol -------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of a user's unlabeled sentences (see the subclass for the formats): ``words``
        and ``ids``. Needs no setup(): the model maps the words with its own vocabulary. With
        ``on_error="skip"`` malformed lines (a bad CSV quote, a bad JSON line, a short CoNLL-U line) are
        left out and recorded (``predict_errors``), every readable sentence is predicted."""
        path = Path(source).expanduser()
        if not path.is_file():
            raise ValueError(f"predict source {path} is not a file")
        bad: list[tuple[str, str]] = []
        items = self.read_unlabeled(path, bad if self.on_error == "skip" else None)
        self.record_malformed(path, bad, len(items), "line(s)", "sentence(s)")
        if not items:
            raise ValueError(f"{path}: no sentences to predict" + (f" ({len(bad)} malformed line(s), first: "
                                                                   f"{bad[0][0]}: {bad[0][1]})" if bad else ""))
        data = ListDataset([{"tokens": it["tokens"], "id": it["id"]} for it in items])
        return self.predict_batches(data, batch_size, where=lambda i: items[i]["where"])


class TaggingDataModule(_TextDataModule):
    """A tag per word. ``source``: ``synthetic`` (built in) | ``files`` (CoNLL-U or token JSONL:
    ``train_path``, optional ``val_path``/``test_path``) | ``ud`` (a Universal Dependencies treebank
    downloaded by URL, see ``ud``).

    Batches: ``words`` (list of word lists), ``labels [B, L]`` (-100 = padding / unlabeled),
    ``subsets``: ``ambiguous [B, L]`` (words seen with more than one tag in the train split)
    and, for the built-in corpus, ``far [B, L]`` (ambiguous words decided more than 4 words
    away), ``ids``. The labeling objective reports ``test/acc_ambiguous`` and ``test/acc_far``.
    """

    sources = ("synthetic", "files", "ud")
    collate = staticmethod(collate_tagged)

    def __init__(self, *args, column: str = "upos", ud: Mapping[str, Any] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if column not in ("upos", "xpos"):
            raise ValueError(f"column={column!r} is not one of ('upos', 'xpos')")
        self.column = column
        self.ud = {"treebank": "en_ewt", "url": None, "sha256": None, **dict(ud or {})}
        self.ambiguous_words: set[str] = set()
        self.word_tags: dict[str, str] = {}  # word -> its most frequent tag in train (for plots)

    def _read_file(self, path: Path) -> list[dict[str, Any]]:
        fmt = table_format(path, self.format)
        if fmt == "conllu":
            return read_conllu(path, self.column, self.encoding)
        if fmt == "jsonl":
            return read_token_jsonl(path, encoding=self.encoding)
        raise ValueError(f"{path}: tagging data must be CoNLL-U (.conllu) or token JSONL (.jsonl); "
                         f"got format {fmt!r} (set data.format=conllu|jsonl)")

    def prepare_data(self) -> None:
        if self.source == "ud":
            ud_treebank(self.ud["treebank"], self.data_dir, self.ud.get("url"), self.ud.get("sha256"))

    def read_splits(self) -> dict[str, list[dict[str, Any]]]:
        if self.source == "synthetic":
            corpus = generate_tagging_corpus(**self.synth)
            return {name: [dict(it, where=f"synthetic {it['id']}") for it in items] for name, items in corpus.items()}
        if self.source == "ud":
            files = ud_treebank(self.ud["treebank"], self.data_dir, self.ud.get("url"), self.ud.get("sha256"))
            return {name: read_conllu(path, self.column, self.encoding) for name, path in files.items()}
        return self._split_files(self._read_file)

    def targets_of(self, item: dict[str, Any]) -> list[str]:
        return item["tags"]

    def prepare_items(self, splits: dict[str, list[dict[str, Any]]]) -> None:
        counts: dict[str, Counter] = defaultdict(Counter)
        for it in splits["train"]:
            for w, t in zip(it["tokens"], it["tags"]):
                if t != UNLABELED:
                    counts[normalize(w, self.lowercase)][t] += 1
        self.ambiguous_words = {w for w, c in counts.items() if len(c) > 1}
        self.word_tags = {w: c.most_common(1)[0][0] for w, c in counts.items()}
        unlabeled = sum(t == UNLABELED for items in splits.values() for it in items for t in it["tags"])
        if unlabeled:
            log.warning("%d words have no tag ('_', empty or null): ignored by the loss and the metrics", unlabeled)

    def subset_names(self) -> tuple[str, ...]:
        return ("ambiguous", "far") if self.source == "synthetic" else ("ambiguous",)

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """Per sentence: its ``tokens`` (rows get one tag per token)."""
        return [Item(id=str(i), fields={"tokens": list(words)}) for i, words in zip(batch["ids"], batch["words"])]

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        index = {name: i for i, name in enumerate(self._labels)}
        labels = torch.tensor([index.get(t, IGNORE_INDEX) for t in item["tags"]], dtype=torch.long)  # [L]
        words = [normalize(w, self.lowercase) for w in item["tokens"]]
        subsets = {"ambiguous": torch.tensor([w in self.ambiguous_words for w in words], dtype=torch.bool)}
        if self.source == "synthetic":
            subsets["far"] = torch.tensor(item["far"], dtype=torch.bool)
        return {"tokens": item["tokens"], "labels": labels, "subsets": subsets, "id": item["id"]}

    def read_unlabeled(self, path: Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """``.conllu`` (tags ignored), token ``.jsonl`` (``tokens``; ``tags`` optional) or plain text,
        one sentence per line (split into words with the regex tokenizer); chosen by the file suffix."""
        fmt = table_format(path, "auto")
        if fmt == "conllu":
            return read_conllu(path, self.column, self.encoding, skipped)
        if fmt == "jsonl":
            return read_token_jsonl(path, require_tags=False, encoding=self.encoding, skipped=skipped)
        return [dict(it, tokens=self.tokenize(it["text"])) for it in read_lines(path, self.encoding)]

class SentencesDataModule(TaggingDataModule):
    """Unlabelled sentences, for pretraining (``task=text_pretrain``). ``source``: ``synthetic`` (the
    built-in tagging corpus' sentences, tags unused) | ``files`` (``train_path``, optional
    ``val_path``/``test_path``: plain text with one sentence per line, split into words by the regex
    tokenizer; the words of a CoNLL-U file, its tags ignored; token JSONL, ``tokens`` only) | ``ud``.

    Batches: ``words`` (list of word lists), ``ids``; no labels. The spec carries the training
    split's vocabulary and characters; its ``num_outputs`` is the vocabulary size (what a masked-word
    model chooses among) and it has no label names.
    """

    def _read_file(self, path: Path) -> list[dict[str, Any]]:
        items = self.read_unlabeled(path)
        kept = [it for it in items if it["tokens"]]
        if len(kept) < len(items):
            log.warning("%s: skipped %d line(s) with no words", path, len(items) - len(kept))
        return kept

    def set_labels(self, splits, min_classes: int = 2, source: str = "the training data") -> list[str]:
        self._labels = []  # unlabelled: tags, if the files have any, are not read
        return []

    def targets_of(self, item: dict[str, Any]) -> list[str]:
        return []

    def prepare_items(self, splits: dict[str, list[dict[str, Any]]]) -> None:
        """Nothing: no tags to count."""

    def subset_names(self) -> tuple[str, ...]:
        return ()

    def spec(self) -> DataSpec:
        if self.vocab is None:
            raise RuntimeError("the vocabulary is built in setup() from the training split")
        return DataSpec(num_outputs=len(self.vocab), labels=None, vocab=self.vocab.to_list(), chars=self.chars)

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        return {"tokens": item["tokens"], "id": item["id"]}


class TextClassificationDataModule(_TextDataModule):
    """A label per sentence. ``source``: ``synthetic`` (built in) | ``files`` (CSV / TSV / JSONL with
    ``text_column`` and ``label_column``: ``train_path``, optional ``val_path``/``test_path``).

    Batches: ``words`` (list of word lists), ``labels [B]``, ``ids``.
    """

    sources = ("synthetic", "files")
    collate = staticmethod(collate_labeled)

    def __init__(self, *args, text_column: str = "text", label_column: str = "label",
                 id_column: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.text_column, self.label_column, self.id_column = text_column, label_column, id_column
        if self.source == "synthetic" and self._labels is None:
            self._labels = list(CLS_LABELS)

    def _with_tokens(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out, empty = [], 0
        for it in items:
            words = self.tokenize(it["text"])
            if not words:
                empty += 1  # e.g. text of only spaces or characters the pattern does not match
                continue
            out.append(dict(it, tokens=words))
        if empty:
            log.warning("skipped %d sentence(s) with no words", empty)
        return out

    def read_splits(self) -> dict[str, list[dict[str, Any]]]:
        if self.source == "synthetic":
            corpus = generate_classification_corpus(**self.synth)
            splits = {name: [dict(it, where=f"synthetic {it['id']}") for it in items]
                      for name, items in corpus.items()}
        else:
            splits = self._split_files(lambda p: read_text_labels(p, self.text_column, self.label_column,
                                                                  self.format, self.id_column, self.encoding))
        return {name: self._with_tokens(items) for name, items in splits.items()}

    def targets_of(self, item: dict[str, Any]) -> list[str]:
        return [item["label"]]

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """Per sentence: its ``text`` (the words joined by spaces)."""
        return [Item(id=str(i), fields={"text": " ".join(words)}) for i, words in zip(batch["ids"], batch["words"])]

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        return {"tokens": item["tokens"], "label": self._labels.index(item["label"]), "id": item["id"]}

    def read_unlabeled(self, path: Path, skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """CSV / TSV / JSONL with ``text_column`` (labels not needed) or plain text, one sentence per line;
        chosen by the file suffix."""
        fmt = table_format(path, "auto")
        if fmt in ("csv", "tsv", "jsonl"):
            items = read_text_labels(path, self.text_column, None, fmt, self.id_column, self.encoding, skipped)
        else:
            items = read_lines(path, self.encoding)
        return self._with_tokens(items)
