"""Text data: readers for the user's files, a Universal Dependencies download, and the
DataModules of ``task=text_tagging`` (a tag per word) and ``task=text_cls`` (a label per sentence).

File formats (errors name ``file:line``; empty sentences are skipped, counted and logged):

- CoNLL-U (``.conllu``): ``#`` comment lines, one word per line with 10 tab-separated
  fields, a blank line between sentences; multi-word token ranges (``1-2``) and empty
  nodes (``1.1``) are skipped (the syntactic words carry the tags); tags from UPOS
  (column 4, default) or XPOS (column 5); a ``_`` tag is unlabeled (ignored by the loss).
- token JSONL (``.jsonl``): ``{"tokens": [...], "tags": [...]}`` per line (``id`` optional).
- sentence labels: CSV / TSV / JSONL with a text column and a label column (names configurable).

Batches hold **words** (``list[list[str]]``), not ids: the vocabulary lives in the model
(:class:`seqattn.adapters.text.TextAdapter`), which the DataModule fills from the training
split through ``model_overrides()``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import shutil
import tempfile
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch.utils.data import DataLoader

from seqattn.adapters.text import TOKEN_PATTERN, Vocabulary, normalize, tokenize
from seqattn.core.tokens import IGNORE_INDEX
from seqattn.data.base import SplitDataModule
from seqattn.data.text_corpus import CLS_LABELS, generate_classification_corpus, generate_tagging_corpus

log = logging.getLogger("seqattn.data.text")

SPLITS = ("train", "val", "test")
UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X")
UNLABELED = "_"


# ---------------------------------------------------------------------------------------------
# readers


def read_conllu(path: str | Path, column: str = "upos") -> list[dict[str, Any]]:
    """CoNLL-U file -> ``[{"tokens", "tags", "id", "where"}]`` (tags from ``upos`` or ``xpos``).

    Comment lines (``#``) are read for ``# sent_id``; multi-word token ranges (``3-4``) and
    empty nodes (``5.1``) are skipped. A token line without 10 tab-separated fields or with
    a bad ID raises ValueError with ``file:line``. Sentences without words are skipped and counted.
    """
    if column not in ("upos", "xpos"):
        raise ValueError(f"column={column!r} is not one of ('upos', 'xpos')")
    field = 3 if column == "upos" else 4
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"CoNLL-U file {path} does not exist")
    out: list[dict[str, Any]] = []
    tokens: list[str] = []
    tags: list[str] = []
    sent_id, start, empty = None, None, 0

    def flush() -> None:
        nonlocal tokens, tags, sent_id, start, empty
        if start is not None:
            if tokens:
                out.append({"tokens": tokens, "tags": tags, "id": sent_id or f"{path.name}:{start}",
                            "where": f"{path}:{start}"})
            else:
                empty += 1
        tokens, tags, sent_id, start = [], [], None, None

    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                flush()
                continue
            if start is None:
                start = lineno
            if line.startswith("#"):
                key, _, value = line[1:].partition("=")
                if key.strip() == "sent_id" and value.strip():
                    sent_id = value.strip()
                continue
            fields = line.split("\t")
            if len(fields) != 10:
                raise ValueError(f"{path}:{lineno}: a CoNLL-U word line needs 10 tab-separated fields, got "
                                 f"{len(fields)}: {line[:80]!r}")
            ident = fields[0]
            if "-" in ident or "." in ident:
                a, _, b = ident.replace(".", "-", 1).partition("-")
                if not (a.isdigit() and b.isdigit()):
                    raise ValueError(f"{path}:{lineno}: bad word ID {ident!r} (expected 3, 3-4 or 3.1)")
                continue  # multi-word token range / empty node
            if not ident.isdigit():
                raise ValueError(f"{path}:{lineno}: bad word ID {ident!r} (expected 3, 3-4 or 3.1)")
            if not fields[1]:
                raise ValueError(f"{path}:{lineno}: empty word form")
            tokens.append(fields[1])
            tags.append(fields[field])
    flush()
    if empty:
        log.warning("%s: skipped %d sentence(s) without words", path, empty)
    return out


def _jsonl_records(path: Path):
    """Yield ``(lineno, "file:line", object)`` for every non-blank line of a JSONL file; a line that
    is not a JSON object raises ValueError naming file and line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from None
            if not isinstance(raw, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(raw).__name__}")
            yield lineno, where, raw


def read_token_jsonl(path: str | Path, tokens_key: str = "tokens", tags_key: str = "tags",
                     require_tags: bool = True) -> list[dict[str, Any]]:
    """Token JSONL -> ``[{"tokens", "tags", "id", "where"}]``. Each line: ``{"tokens": [...], "tags": [...]}``
    (equal lengths); ``id`` optional. Empty sentences are skipped and counted."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"token JSONL file {path} does not exist")
    out, empty = [], 0
    for lineno, where, raw in _jsonl_records(path):
        if not isinstance(raw.get(tokens_key), list):
            raise ValueError(f"{where}: expected an object with a list {tokens_key!r}")
        words = [str(w) for w in raw[tokens_key]]
        tags = raw.get(tags_key)
        if tags is None and require_tags:
            raise ValueError(f"{where}: missing {tags_key!r} (one tag per token)")
        if tags is not None and (not isinstance(tags, list) or len(tags) != len(words)):
            raise ValueError(f"{where}: {tags_key!r} must be a list as long as {tokens_key!r} "
                             f"({len(words)} tokens)")
        if not words:
            empty += 1
            continue
        out.append({"tokens": words, "tags": [str(t) for t in tags] if tags is not None else None,
                    "id": str(raw.get("id", f"{path.name}:{lineno}")), "where": where})
    if empty:
        log.warning("%s: skipped %d empty sentence(s)", path, empty)
    return out


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    return {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".conllu": "conllu",
            ".txt": "txt"}.get(suffix, "txt")


def read_text_labels(path: str | Path, text_column: str = "text", label_column: str | None = "label",
                     fmt: str = "auto", id_column: str | None = None) -> list[dict[str, Any]]:
    """CSV / TSV / JSONL of sentences with labels -> ``[{"text", "label", "id", "where"}]``.

    ``label_column=None`` reads unlabeled text (``label`` None). Quoted CSV fields may hold commas
    and newlines. A missing column or a bad line raises ValueError with ``file:line``; rows with
    empty text are skipped, counted and logged. ``fmt``: ``auto`` (by suffix) | csv | tsv | jsonl.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"text file {path} does not exist")
    fmt = _format_of(path, fmt)
    if fmt not in ("csv", "tsv", "jsonl"):
        raise ValueError(f"{path}: format {fmt!r} is not one of csv, tsv, jsonl")
    out, empty = [], 0

    def add(row: Mapping[str, Any], where: str, lineno: int) -> None:
        nonlocal empty
        if text_column not in row:
            raise ValueError(f"{where}: no column {text_column!r} (has {sorted(row)}); set data.text_column")
        text = row[text_column]
        if not isinstance(text, str):
            raise ValueError(f"{where}: {text_column!r} must be a string, got {text!r}")
        label = None
        if label_column is not None:
            if label_column not in row or row[label_column] is None or str(row[label_column]).strip() == "":
                raise ValueError(f"{where}: no value in label column {label_column!r}; set data.label_column")
            label = str(row[label_column]).strip()
        if not text.strip():
            empty += 1
            return
        ident = str(row[id_column]) if id_column and row.get(id_column) not in (None, "") else f"{path.name}:{lineno}"
        out.append({"text": text, "label": label, "id": ident, "where": where})

    if fmt == "jsonl":
        for lineno, where, raw in _jsonl_records(path):
            add(raw, where, lineno)
    else:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="," if fmt == "csv" else "\t")
            header = reader.fieldnames or []
            for name in (text_column, label_column):
                if name is not None and name not in header:
                    raise ValueError(f"{path}:1: header {header} has no column {name!r} "
                                     "(set data.text_column / data.label_column)")
            start = 2
            for row in reader:
                lineno, start = start, reader.line_num + 1  # a quoted field may span lines: the row's first
                where = f"{path}:{lineno}"
                if None in row or any(v is None for v in row.values()):
                    got = len(header) + len(row.get(None) or []) - sum(v is None for v in row.values())
                    raise ValueError(f"{where}: expected {len(header)} fields ({', '.join(header)}), got {got}")
                if not any((v or "").strip() for v in row.values()):
                    continue
                add(row, where, lineno)
    if empty:
        log.warning("%s: skipped %d row(s) with empty text", path, empty)
    return out


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    """A plain text file, one sentence per line -> ``[{"text", "id", "where"}]`` (blank lines skipped)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"text file {path} does not exist")
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                out.append({"text": line.strip(), "id": f"{path.name}:{lineno}", "where": f"{path}:{lineno}"})
    return out


# ---------------------------------------------------------------------------------------------
# download (public data)

#: Universal Dependencies treebanks by name: GitHub raw URL template ({split} = train/dev/test)
UD_TREEBANKS = {
    "en_ewt": "https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/r2.14/en_ewt-ud-{split}.conllu",
    "en_gum": "https://raw.githubusercontent.com/UniversalDependencies/UD_English-GUM/r2.14/en_gum-ud-{split}.conllu",
    "de_gsd": "https://raw.githubusercontent.com/UniversalDependencies/UD_German-GSD/r2.14/de_gsd-ud-{split}.conllu",
    "fr_gsd": "https://raw.githubusercontent.com/UniversalDependencies/UD_French-GSD/r2.14/fr_gsd-ud-{split}.conllu",
}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: str | Path, sha256: str | None = None, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``dest`` once (cached) and check its SHA-256.

    With ``sha256`` given, the file must match it. Without, the digest of the first download
    is recorded next to the file (``<name>.sha256``) and every later use is checked against it.
    When the download fails (offline), a RuntimeError names the file to place by hand.
    """
    dest = Path(dest).expanduser()
    record = dest.with_name(dest.name + ".sha256")
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        log.info("downloading %s -> %s", url, dest)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s) URLs)
                with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False, suffix=".part") as tmp:
                    shutil.copyfileobj(response, tmp)
            os.replace(tmp.name, dest)
        except (OSError, ValueError) as err:  # URLError, timeouts, refused connections
            if "tmp" in locals() and os.path.exists(tmp.name):
                os.unlink(tmp.name)
            raise RuntimeError(f"could not download {url} ({err}). Without network, download it elsewhere and "
                               f"place it by hand at {dest}") from err
    digest = _sha256(dest)
    expected = sha256 or (record.read_text().strip() if record.is_file() else None)
    if expected is None:
        record.write_text(digest + "\n")
    elif digest != expected.lower():
        raise ValueError(f"{dest}: SHA-256 {digest} does not match the expected {expected}; delete the file "
                         "to download it again")
    return dest


def ud_treebank(name: str, data_dir: str | Path, url: str | None = None,
                sha256: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Paths of a Universal Dependencies treebank's ``train/val/test`` CoNLL-U files, downloaded
    once into ``data_dir/ud/<name>/`` (``url``: a template with ``{split}``; default from
    :data:`UD_TREEBANKS`)."""
    if url is None:
        if name not in UD_TREEBANKS:
            raise ValueError(f"unknown UD treebank {name!r}; known: {sorted(UD_TREEBANKS)} (or give data.ud.url "
                             "with {split})")
        url = UD_TREEBANKS[name]
    if "{split}" not in url:
        raise ValueError(f"the UD url must contain '{{split}}' (train/dev/test), got {url!r}")
    folder = Path(data_dir).expanduser() / "ud" / name
    sha256 = dict(sha256 or {})
    out = {}
    for split, ud_split in (("train", "train"), ("val", "dev"), ("test", "test")):
        file_url = url.format(split=ud_split)
        out[split] = download(file_url, folder / file_url.rsplit("/", 1)[-1], sha256.get(ud_split))
    return out


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


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.items[index]


# ---------------------------------------------------------------------------------------------
# DataModules


def split_by_seed(items: list[dict[str, Any]], val_fraction: float, test_fraction: float, seed: int
                  ) -> dict[str, list[dict[str, Any]]]:
    """Seeded random split of items into train/val/test by the fractions."""
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= frac < 1.0:
            raise ValueError(f"{name}={frac} must be in [0, 1)")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction = {val_fraction + test_fraction} must be < 1")
    order = torch.randperm(len(items), generator=torch.Generator().manual_seed(seed)).tolist()
    n_test, n_val = round(test_fraction * len(items)), round(val_fraction * len(items))
    pick = lambda idx: [items[i] for i in idx]  # noqa: E731
    return {"test": pick(order[:n_test]), "val": pick(order[n_test : n_test + n_val]),
            "train": pick(order[n_test + n_val :])}


class _TextDataModule(SplitDataModule):
    """What tagging and classification share: sources, splits, vocabulary, label set, loaders,
    the predict protocol. Subclasses read items and turn them into dataset items."""

    sources: tuple[str, ...] = ()
    collate = staticmethod(collate_tagged)

    def __init__(
        self,
        source: str = "synthetic",
        data_dir: str | None = "~/.cache/seqattn",
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
    ) -> None:
        super().__init__()
        if source not in self.sources:
            raise ValueError(f"source={source!r} is not one of {self.sources}")
        if source == "files" and not train_path:
            raise ValueError("source='files' needs data.train_path (and optionally val_path / test_path)")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if limit is not None and limit <= 0:
            raise ValueError(f"limit must be a positive number of sentences per split or None, got {limit}")
        if data_dir is None:
            data_dir = os.environ.get("SEQATTN_DATA_DIR", "~/.cache/seqattn")
        self.source, self.data_dir = source, Path(data_dir).expanduser()
        self.paths = {"train": train_path, "val": val_path, "test": test_path}
        self.format = format
        self.lowercase, self.token_pattern = bool(lowercase), token_pattern
        self.min_freq, self.max_size = min_freq, max_size
        self.batch_size, self.num_workers = batch_size, num_workers
        self.val_fraction, self.test_fraction, self.seed = val_fraction, test_fraction, seed
        self.synth = dict(synth or {})
        self.limit = limit
        self._labels = list(labels) if labels is not None else None
        self.vocab: Vocabulary | None = None
        self.datasets: dict[str, _ListDataset] = {}

    # -- labels and vocabulary --------------------------------------------------------------
    @property
    def label_names(self) -> list[str]:
        if self._labels is None:
            raise RuntimeError("label_names are known after setup() (they come from the train split)")
        return list(self._labels)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def model_overrides(self) -> dict[str, dict[str, Any]]:
        """The vocabulary (from the train split) goes into the adapter config, hence the checkpoint."""
        if self.vocab is None:
            raise RuntimeError("the vocabulary is built in setup() from the training split")
        return {"adapter": {"vocab": self.vocab.to_list(), "lowercase": self.lowercase}}

    # -- to be defined ----------------------------------------------------------------------
    def read_splits(self) -> dict[str, list[dict[str, Any]]]:
        """Raw items per split, each with ``tokens`` and ``tag(s)``/``label``, ``id``, ``where``."""
        raise NotImplementedError

    def targets_of(self, item: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        raise NotImplementedError

    def read_unlabeled(self, path: Path) -> list[dict[str, Any]]:
        raise NotImplementedError

    # -- lifecycle --------------------------------------------------------------------------
    def _split_files(self, reader) -> dict[str, list[dict[str, Any]]]:
        """Read the user's files: each given split from its file; missing val/test split off train."""
        splits = {name: reader(Path(p)) for name, p in self.paths.items() if p}
        if "val" not in splits or "test" not in splits:
            parts = split_by_seed(splits["train"], 0.0 if "val" in splits else self.val_fraction,
                                  0.0 if "test" in splits else self.test_fraction, self.seed)
            splits = {name: splits.get(name, parts[name]) for name in SPLITS}
            splits["train"] = parts["train"]
            log.info("split %s at random (seed %d): %s", self.paths["train"], self.seed,
                     {n: len(v) for n, v in splits.items()})
        return splits

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        splits = self.read_splits()
        if self.limit is not None:
            splits = {name: items[: self.limit] for name, items in splits.items()}
        if not splits["train"]:
            raise ValueError(f"no training sentences ({self.source} data)")
        if self._labels is None:
            seen = {t for it in splits["train"] for t in self.targets_of(it) if t != UNLABELED}
            self._labels = sorted(seen)
        known = set(self._labels)
        for name, items in splits.items():
            for it in items:
                bad = [t for t in self.targets_of(it) if t not in known and t != UNLABELED]
                if bad:
                    raise ValueError(f"{it['where']}: label {bad[0]!r} in the {name} split is not in the label set "
                                     f"{self._labels} (labels come from the train split unless data.labels is set)")
        self.vocab = Vocabulary.build((it["tokens"] for it in splits["train"]), self.min_freq, self.max_size,
                                      self.lowercase)
        self.prepare_items(splits)
        self.datasets = {name: _ListDataset([self.make_item(it, name) for it in items])
                         for name, items in splits.items()}
        for name, data in self.datasets.items():
            if not len(data):
                log.warning("the %s split is empty", name)
        unk = self._unknown_rate(splits.get("test", []))
        log.info("%s data: %s sentences, %d labels, vocabulary %d words (test: %.1f%% of words unknown)",
                 self.source, {n: len(d) for n, d in self.datasets.items()}, len(self._labels), len(self.vocab),
                 100 * unk)

    def prepare_items(self, splits: dict[str, list[dict[str, Any]]]) -> None:
        """Hook: statistics from the train split before items are made (e.g. ambiguous words)."""

    def _unknown_rate(self, items: Iterable[dict[str, Any]]) -> float:
        words = [normalize(w, self.lowercase) for it in items for w in it["tokens"]]
        return sum(w not in self.vocab for w in words) / max(len(words), 1)

    def tokenize(self, text: str) -> list[str]:
        return tokenize(text, lowercase=False, pattern=self.token_pattern)  # the adapter lowercases

    # -- predict protocol -------------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches of a user's unlabeled sentences (see the subclass for the formats): ``words``
        and ``ids``. Needs no setup(): the model maps the words with its own vocabulary."""
        path = Path(source).expanduser()
        if not path.is_file():
            raise ValueError(f"predict source {path} is not a file")
        items = self.read_unlabeled(path)
        if not items:
            raise ValueError(f"{path}: no sentences to predict")
        data = _ListDataset([{"tokens": it["tokens"], "id": it["id"]} for it in items])
        return DataLoader(data, batch_size=batch_size or self.batch_size, shuffle=False, collate_fn=self.collate)


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
        fmt = _format_of(path, self.format)
        if fmt == "conllu":
            return read_conllu(path, self.column)
        if fmt == "jsonl":
            return read_token_jsonl(path)
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
            return {name: read_conllu(path, self.column) for name, path in files.items()}
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
            log.warning("%d words have no tag ('_'): ignored by the loss and the metrics", unlabeled)

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        index = {name: i for i, name in enumerate(self._labels)}
        labels = torch.tensor([index.get(t, IGNORE_INDEX) for t in item["tags"]], dtype=torch.long)  # [L]
        words = [normalize(w, self.lowercase) for w in item["tokens"]]
        subsets = {"ambiguous": torch.tensor([w in self.ambiguous_words for w in words], dtype=torch.bool)}
        if self.source == "synthetic":
            subsets["far"] = torch.tensor(item["far"], dtype=torch.bool)
        return {"tokens": item["tokens"], "labels": labels, "subsets": subsets, "id": item["id"]}

    def read_unlabeled(self, path: Path) -> list[dict[str, Any]]:
        """``.conllu`` (tags ignored), token ``.jsonl`` (``tokens``; ``tags`` optional) or plain text,
        one sentence per line (split into words with the regex tokenizer); chosen by the file suffix."""
        fmt = _format_of(path, "auto")
        if fmt == "conllu":
            return read_conllu(path, self.column)
        if fmt == "jsonl":
            return read_token_jsonl(path, require_tags=False)
        return [dict(it, tokens=self.tokenize(it["text"])) for it in read_lines(path)]

    def prediction_rows(self, batch: dict, output: dict, labels: list[str] | None) -> list[dict]:
        """One row per sentence: ``{"id", "tokens", "tags", "probs"}`` (``probs``: the chosen tag's probability)."""
        rows = []
        pred, prob = output["pred"].cpu(), output["prob"].cpu()  # [B, L], [B, L, C]
        for i, words in enumerate(batch["words"]):
            n = len(words)
            tags = pred[i, :n].tolist()
            rows.append({"id": batch["ids"][i], "tokens": list(words),
                         "tags": [labels[t] if labels else t for t in tags],
                         "probs": [round(float(prob[i, j, t]), 4) for j, t in enumerate(tags)]})
        return rows


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
                                                                  self.format, self.id_column))
        return {name: self._with_tokens(items) for name, items in splits.items()}

    def targets_of(self, item: dict[str, Any]) -> list[str]:
        return [item["label"]]

    def make_item(self, item: dict[str, Any], split: str) -> dict[str, Any]:
        return {"tokens": item["tokens"], "label": self._labels.index(item["label"]), "id": item["id"]}

    def read_unlabeled(self, path: Path) -> list[dict[str, Any]]:
        """CSV / TSV / JSONL with ``text_column`` (labels not needed) or plain text, one sentence per line;
        chosen by the file suffix."""
        fmt = _format_of(path, "auto")
        if fmt in ("csv", "tsv", "jsonl"):
            items = read_text_labels(path, self.text_column, None, fmt, self.id_column)
        else:
            items = read_lines(path)
        return self._with_tokens(items)

    def prediction_rows(self, batch: dict, output: dict, labels: list[str] | None) -> list[dict]:
        """One row per sentence: ``{"id", "text", "label", "prob"}``."""
        pred, prob = output["pred"].cpu(), output["prob"].cpu()  # [B], [B, C]
        return [{"id": batch["ids"][i], "text": " ".join(words),
                 "label": labels[int(pred[i])] if labels else int(pred[i]), "prob": round(float(prob[i, pred[i]]), 4)}
                for i, words in enumerate(batch["words"])]
