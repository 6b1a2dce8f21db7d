"""Text files users bring, and Universal Dependencies treebanks by URL.

Formats (errors name ``file:line``; empty sentences are skipped, counted and logged):

- CoNLL-U (``.conllu``): ``#`` comment lines, one word per line with 10 tab-separated
  fields, a blank line between sentences; multi-word token ranges (``1-2``) and empty
  nodes (``1.1``) are skipped (the syntactic words carry the tags); tags from UPOS
  (column 4, default) or XPOS (column 5); a ``_`` or empty tag is unlabeled (ignored by the loss;
  empty fields are counted in a log line).
- token JSONL (``.jsonl``): ``{"tokens": [...], "tags": [...]}`` per line (``id`` optional); a
  ``null`` tag is unlabeled.
- sentence labels: CSV / TSV / JSONL with a text column and a label column (names configurable).
  CSV quoting is strict (:func:`seqattn.datakit.files.read_table`); TSV has no quoting.
- plain text: one sentence per line (prediction).

Labels and tags are named by :func:`seqattn.labels.label_name` (``1`` and ``1.0`` are one class; the
count of cells renamed so is logged). Every reader takes an ``encoding`` (UTF-8 with or without a
byte-order mark by default), and a ``skipped`` list (prediction): malformed lines are recorded there as
``("file:line", reason)`` and left out (a CoNLL-U sentence with a bad line is left out whole) instead of
raising.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from seqattn.datakit.download import download
from seqattn.datakit.files import existing_file, iter_lines, read_jsonl, read_records, table_format
from seqattn.labels import LabelNames, is_missing

log = logging.getLogger("seqattn.modalities.text")

UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN", "PUNCT",
        "SCONJ", "SYM", "VERB", "X")
UNLABELED = "_"


def read_conllu(path: str | Path, column: str = "upos", encoding: str = "utf-8",
                skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """CoNLL-U file -> ``[{"tokens", "tags", "id", "where"}]`` (tags from ``upos`` or ``xpos``).

    Comment lines (``#``) are read for ``# sent_id``; multi-word token ranges (``3-4``) and
    empty nodes (``5.1``) are skipped. A token line without 10 tab-separated fields or with
    a bad ID raises ValueError with ``file:line``. Sentences without words are skipped and counted.
    A tag field that is ``_`` or empty is unlabeled (:data:`UNLABELED`); empty ones are counted in a
    log line.
    """
    if column not in ("upos", "xpos"):
        raise ValueError(f"column={column!r} is not one of ('upos', 'xpos')")
    field = 3 if column == "upos" else 4
    path = existing_file(path, "CoNLL-U file")
    out: list[dict[str, Any]] = []
    tokens: list[str] = []
    tags: list[str] = []
    sent_id, start, empty, broken = None, None, 0, False
    names, blank_tags = LabelNames(), []  # blank_tags: lines of words with an empty tag field

    def flush() -> None:
        nonlocal tokens, tags, sent_id, start, empty, broken
        if start is not None and not broken:
            if tokens:
                out.append({"tokens": tokens, "tags": tags, "id": sent_id or f"{path.name}:{start}",
                            "where": f"{path}:{start}"})
            else:
                empty += 1
        tokens, tags, sent_id, start, broken = [], [], None, None, False

    for lineno, line in iter_lines(path, encoding, "CoNLL-U file"):
        line = line.rstrip("\r")
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
        problem = _word_line_problem(fields, line)
        if problem:
            if skipped is None:
                raise ValueError(f"{path}:{lineno}: {problem}")
            skipped.append((f"{path}:{lineno}", f"{problem} (its sentence is left out)"))
            broken = True
            continue
        if "-" in fields[0] or "." in fields[0]:
            continue  # multi-word token range / empty node
        tokens.append(fields[1])
        tag = fields[field].strip()
        if not tag:
            blank_tags.append(lineno)
        tags.append(names(tag) if tag else UNLABELED)
    flush()
    if empty:
        log.warning("%s: skipped %d sentence(s) without words", path, empty)
    if blank_tags:
        log.warning("%s: %d word(s) have an empty %s field (first at line %d): unlabeled, like '_' (ignored by the "
                    "loss and the metrics)", path, len(blank_tags), column.upper(), blank_tags[0])
    names.log(log, path)
    return out


def _word_line_problem(fields: list[str], line: str) -> str | None:
    """What is wrong with a CoNLL-U word line split at tabs, or None."""
    if len(fields) != 10:
        return f"a CoNLL-U word line needs 10 tab-separated fields, got {len(fields)}: {line[:80]!r}"
    ident = fields[0]
    a, _, b = ident.replace(".", "-", 1).partition("-")
    if not (a.isdigit() and (b.isdigit() or ident == a)):
        return f"bad word ID {ident!r} (expected 3, 3-4 or 3.1)"
    if not fields[1]:
        return "empty word form"
    return None


def read_token_jsonl(path: str | Path, tokens_key: str = "tokens", tags_key: str = "tags",
                     require_tags: bool = True, encoding: str = "utf-8",
                     skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Token JSONL -> ``[{"tokens", "tags", "id", "where"}]``. Each line: ``{"tokens": [...], "tags": [...]}``
    (equal lengths); ``id`` optional; a ``null`` tag is unlabeled (``_``). Empty sentences are skipped
    and counted."""
    path = existing_file(path, "token JSONL file")
    out, empty, names = [], 0, LabelNames()
    for lineno, where, raw in read_jsonl(path, encoding, "token JSONL file", skipped):
        problem = _token_record_problem(raw, tokens_key, tags_key, require_tags)
        if problem:
            if skipped is None:
                raise ValueError(f"{where}: {problem}")
            skipped.append((where, problem))
            continue
        words = [str(w) for w in raw[tokens_key]]
        tags = raw.get(tags_key)
        if not words:
            empty += 1
            continue
        out.append({"tokens": words,
                    "tags": [UNLABELED if is_missing(t) else names(t) for t in tags] if tags is not None else None,
                    "id": str(raw.get("id", f"{path.name}:{lineno}")), "where": where})
    if empty:
        log.warning("%s: skipped %d empty sentence(s)", path, empty)
    names.log(log, path)
    return out


def _token_record_problem(raw: dict[str, Any], tokens_key: str, tags_key: str, require_tags: bool) -> str | None:
    """What is wrong with a token JSONL object, or None."""
    if not isinstance(raw.get(tokens_key), list):
        return f"expected an object with a list {tokens_key!r}"
    bad = [w for w in raw[tokens_key] if not isinstance(w, (str, int, float)) or isinstance(w, bool)]
    if bad:
        return f"every token must be a string, got {bad[0]!r}"
    tags = raw.get(tags_key)
    if tags is None and require_tags:
        return f"missing {tags_key!r} (one tag per token)"
    if tags is not None and (not isinstance(tags, list) or len(tags) != len(raw[tokens_key])):
        return f"{tags_key!r} must be a list as long as {tokens_key!r} ({len(raw[tokens_key])} tokens)"
    return None


def read_text_labels(path: str | Path, text_column: str = "text", label_column: str | None = "label",
                     fmt: str = "auto", id_column: str | None = None, encoding: str = "utf-8",
                     skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """CSV / TSV / JSONL of sentences with labels -> ``[{"text", "label", "id", "where"}]``.

    ``label_column=None`` reads unlabeled text (``label`` None). A missing column, a missing label
    (empty, ``nan``, ``null``) or a bad line raises ValueError with ``file:line``; rows with empty text
    are skipped, counted and logged. ``fmt``: ``auto`` (by suffix) | csv | tsv | jsonl.
    """
    fmt = table_format(path, fmt)
    if fmt not in ("csv", "tsv", "jsonl"):
        raise ValueError(f"{path}: format {fmt!r} is not one of csv, tsv, jsonl (set data.format)")
    # a CSV / TSV header names both columns; a JSON object without the label says so below, at its line
    required = [text_column] + ([label_column] if label_column is not None and fmt != "jsonl" else [])
    records = read_records(path, fmt, encoding, required, "text file",
                           hint="set data.text_column / data.label_column", skipped=skipped)
    out, empty, names = [], 0, LabelNames()
    for where, row in records:
        text = row.get(text_column)
        if text is not None and not isinstance(text, str):
            if skipped is None:
                raise ValueError(f"{where}: {text_column!r} must be a string, got {text!r}")
            skipped.append((where, f"{text_column!r} must be a string, got {text!r}"))
            continue
        label = None
        if label_column is not None:
            value = row.get(label_column)
            if value is None or is_missing(value) or isinstance(value, (list, dict)):
                raise ValueError(f"{where}: no value in label column {label_column!r} (got {value!r}); every training "
                                 "row needs one (set data.label_column if it is another column)")
            label = names(value)
        if text is None or not text.strip():
            empty += 1
            continue
        ident = str(row[id_column]) if id_column and not is_missing(row.get(id_column)) else where.rsplit("/", 1)[-1]
        out.append({"text": text, "label": label, "id": ident, "where": where})
    if empty:
        log.warning("%s: skipped %d row(s) with empty text", path, empty)
    names.log(log, path)
    return out


def read_lines(path: str | Path, encoding: str = "utf-8") -> list[dict[str, Any]]:
    """A plain text file, one sentence per line -> ``[{"text", "id", "where"}]`` (blank lines skipped)."""
    path = existing_file(path, "text file")
    return [{"text": line.strip(), "id": f"{path.name}:{n}", "where": f"{path}:{n}"}
            for n, line in iter_lines(path, encoding, "text file") if line.strip()]


# ---------------------------------------------------------------------------------------------
# Universal Dependencies (public data)

#: Universal Dependencies treebanks by name: GitHub raw URL template ({split} = train/dev/test)
UD_TREEBANKS = {
    "en_ewt": "https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/r2.14/en_ewt-ud-{split}.conllu",
    "en_gum": "https://raw.githubusercontent.com/UniversalDependencies/UD_English-GUM/r2.14/en_gum-ud-{split}.conllu",
    "en_lines": "https://raw.githubusercontent.com/UniversalDependencies/UD_English-LinES/r2.14/"
                "en_lines-ud-{split}.conllu",
    "de_gsd": "https://raw.githubusercontent.com/UniversalDependencies/UD_German-GSD/r2.14/de_gsd-ud-{split}.conllu",
    "fr_gsd": "https://raw.githubusercontent.com/UniversalDependencies/UD_French-GSD/r2.14/fr_gsd-ud-{split}.conllu",
}


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
