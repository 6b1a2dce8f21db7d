"""Reading the files users bring, written once for every modality.

Every reader here reports a bad line as ``file:line: what was wrong, what was expected``:

- :func:`read_text` decodes UTF-8 (a leading byte-order mark, as spreadsheet programs write it,
  is dropped); bytes that are not valid in the file's ``encoding`` raise a ``ValueError`` naming
  the file, the line, the column and the byte, and pointing at the ``encoding`` option.
- :func:`read_table` reads CSV (RFC 4180 quoting, checked strictly: a stray or unbalanced quote is
  an error at its line, never a field that silently swallows the following rows) and TSV (no
  quoting at all: quotes are kept as written). Rows with more or fewer fields than the header are
  errors; blank rows are skipped.
- :func:`read_jsonl` reads one JSON object per line.
- :func:`resolve_data_dir` is where built-in and downloaded data is cached.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

DEFAULT_DATA_DIR = "~/.cache/seqattn"
ENCODING_HINT = "set data.encoding to the file's encoding (e.g. latin-1, cp1252, utf-16), or re-save it as UTF-8"


def resolve_data_dir(value: str | os.PathLike | None = None) -> Path:
    """The cache folder for built-in and downloaded data: ``value``, else ``$SEQATTN_DATA_DIR``,
    else ``~/.cache/seqattn`` (user ``~`` expanded)."""
    if value is None or str(value) == "":
        value = os.environ.get("SEQATTN_DATA_DIR") or DEFAULT_DATA_DIR
    return Path(value).expanduser()


def existing_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``Path(path)`` (``~`` expanded) when it is a file; else ``ValueError`` naming it."""
    p = Path(path).expanduser()
    if not p.is_file():
        if p.is_dir():
            raise ValueError(f"{what} {p} is a folder, expected a file")
        raise ValueError(f"{what} {p} does not exist")
    return p


def _decode_error(path: Path, data: bytes, err: UnicodeDecodeError, encoding: str) -> ValueError:
    line = data.count(b"\n", 0, err.start) + 1
    column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
    bad = data[err.start:err.end]
    return ValueError(f"{path}:{line}: byte(s) {bad.hex(' ')} at column {column} are not valid {encoding} "
                      f"({err.reason}); {ENCODING_HINT}")


def read_text(path: str | os.PathLike, encoding: str = "utf-8", what: str = "file") -> str:
    """The whole text of a file. UTF-8 by default, with a leading BOM dropped; undecodable bytes
    raise ``ValueError`` with ``file:line``, the column and the bytes."""
    p = existing_file(path, what)
    data = p.read_bytes()
    codec = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding
    try:
        text = data.decode(codec)
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r} (data.encoding); use a Python codec name such as "
                         "utf-8, latin-1 or cp1252") from None
    except UnicodeDecodeError as err:
        raise _decode_error(p, data, err, encoding) from None
    if text.startswith("\ufeff"):  # a BOM in another codec (utf-16 handles its own)
        text = text[1:]
    return text


def iter_lines(path: str | os.PathLike, encoding: str = "utf-8", what: str = "file") -> Iterator[tuple[int, str]]:
    """``(line number from 1, line without its newline)`` for every line of a text file."""
    text = read_text(path, encoding, what)
    for number, line in enumerate(text.splitlines(), start=1):
        yield number, line


@dataclass
class Table:
    """A CSV / TSV file: its ``header`` and ``rows`` as ``(line, {column: value})`` (``line`` = the
    row's first physical line; values are the cells as written, stripped of surrounding spaces)."""

    path: Path
    header: list[str]
    rows: list[tuple[int, dict[str, str]]]

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"


def table_format(path: str | os.PathLike, fmt: str = "auto") -> str:
    """``csv`` | ``tsv`` | ``jsonl`` | ``conllu`` | ``txt`` from ``fmt`` or the file suffix."""
    if fmt != "auto":
        return fmt
    suffix = Path(path).suffix.lower()
    return {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
            ".conllu": "conllu", ".txt": "txt"}.get(suffix, "txt")


def read_table(
    path: str | os.PathLike,
    fmt: str = "csv",
    encoding: str = "utf-8",
    required: Sequence[str] = (),
    what: str = "CSV file",
    hint: str = "",
    header: Sequence[str] | None = None,
    comment: str | None = None,
    skipped: list[tuple[str, str]] | None = None,
) -> Table:
    """Read a CSV (``fmt="csv"``) or TSV (``fmt="tsv"``) file with a header row.

    Args:
        required: columns that must be in the header (else ``ValueError`` at line 1 listing the header).
        header: the column names when the file has no header row (every line is data).
        comment: lines starting with this text (after spaces) are skipped, e.g. ``"#"``.
        hint: appended to a missing-column error (e.g. which option names the columns).

    CSV quoting is strict: ``"Great" film`` (a quote inside an unquoted field or after a closing
    quote) and a quote that is never closed are errors naming the line where the field starts.
    A quoted field may hold commas and newlines. TSV has no quoting: quotes are kept as data.

    ``skipped``: a list to collect malformed data rows in (``("file:line", reason)``) instead of raising
    (prediction reads every readable row); a quote left open skips only the line it opens on.
    """
    if fmt not in ("csv", "tsv"):
        raise ValueError(f"read_table reads csv or tsv, got format {fmt!r}")
    p = existing_file(path, what)
    text = read_text(p, encoding, what)
    lines = text.splitlines(keepends=True)

    def reader_from(offset: int):  # a reader of the text after its first ``offset`` lines
        rest = io.StringIO("".join(lines[offset:]), newline="")
        if fmt == "csv":
            return csv.reader(rest, delimiter=",", strict=True)
        return csv.reader(rest, delimiter="\t", quoting=csv.QUOTE_NONE)

    reader, offset = reader_from(0), 0
    columns = [c.strip() for c in header] if header is not None else None
    rows: list[tuple[int, dict[str, str]]] = []
    start = 1

    def skip(line: int, reason: str) -> None:  # record a malformed row, read on from the line after it
        nonlocal reader, offset, start
        skipped.append((f"{p}:{line}", reason))
        reader, offset, start = reader_from(line), line, line + 1

    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as err:
            reason = (f"malformed CSV ({err}): a field that contains a quote must be quoted whole, with inner "
                      'quotes doubled ("a ""quoted"" word"), and every opening quote closed')
            if skipped is None or columns is None:
                raise ValueError(f"{p}:{start}: {reason}") from None
            skip(start, reason)
            continue
        line, start = start, offset + reader.line_num + 1
        if not fields or all(not f.strip() for f in fields):
            continue
        if comment and fields[0].lstrip().startswith(comment):
            continue
        if columns is None:
            columns = [c.strip() for c in fields]
            dup = sorted({c for c in columns if columns.count(c) > 1})
            if dup:
                raise ValueError(f"{p}:{line}: the header names column(s) {dup} more than once: {columns}")
            missing = [c for c in required if c not in columns]
            if missing:
                raise ValueError(f"{p}:{line}: the header lacks column(s): missing {missing} (header: {columns})"
                                 + (f"; {hint}" if hint else ""))
            continue
        if len(fields) != len(columns):
            spans = offset + reader.line_num - line + 1
            extra = (f"; the row spans {spans} lines: a quote opened at line {line} closes only at line "
                     f"{offset + reader.line_num}" if fmt == "csv" and spans > 1 else "")
            reason = f"expected {len(columns)} fields ({', '.join(columns)}), got {len(fields)}{extra}"
            if skipped is None:
                raise ValueError(f"{p}:{line}: {reason}")
            skip(line, reason)
            continue
        rows.append((line, {c: f.strip() for c, f in zip(columns, fields)}))
    if columns is None:
        raise ValueError(f"{p}: empty file; expected a header row" + (f" with columns {list(required)}" if required
                                                                        else ""))
    if header is not None:
        missing = [c for c in required if c not in columns]
        if missing:
            raise ValueError(f"{p}: the columns lack: missing {missing} (columns: {columns})" + (f"; {hint}" if hint else ""))
    return Table(p, columns, rows)


def read_jsonl(path: str | os.PathLike, encoding: str = "utf-8", what: str = "JSONL file",
               skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """``(line, "file:line", object)`` for every non-blank line of a JSON-lines file; a line that is
    not a JSON object raises ``ValueError`` naming the file, line and column (or, given a ``skipped``
    list, is recorded there as ``("file:line", reason)`` and left out)."""
    p = existing_file(path, what)
    for number, line in iter_lines(p, encoding, what):
        if not line.strip():
            continue
        where = f"{p}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raw, reason = None, f"invalid JSON ({err.msg} at column {err.colno})"
        else:
            reason = None if isinstance(raw, dict) else f"expected a JSON object ({{...}}), got {type(raw).__name__}"
        if reason is not None:
            if skipped is None:
                raise ValueError(f"{where}: {reason}")
            skipped.append((where, reason))
            continue
        yield number, where, raw


def read_records(path: str | os.PathLike, fmt: str = "auto", encoding: str = "utf-8", required: Sequence[str] = (),
                 what: str = "file", hint: str = "", skipped: list[tuple[str, str]] | None = None
                 ) -> list[tuple[str, dict[str, Any]]]:
    """A CSV / TSV / JSONL file as ``[("file:line", {column: value})]``; ``required`` columns (keys)
    must be present (CSV/TSV: in the header; JSONL: in every object). Given a ``skipped`` list, malformed
    rows (and JSON objects lacking a required key) are recorded there and left out instead of raising."""
    fmt = table_format(path, fmt)
    if fmt in ("csv", "tsv"):
        table = read_table(path, fmt, encoding, required, what, hint, skipped=skipped)
        return [(table.where(line), row) for line, row in table.rows]
    if fmt != "jsonl":
        raise ValueError(f"{path}: format {fmt!r} is not one of csv, tsv, jsonl (set the format option)")
    out = []
    for _, where, raw in read_jsonl(path, encoding, what, skipped):
        missing = [c for c in required if c not in raw]
        if missing:
            reason = f"the object has no key(s) {missing} (has {sorted(raw)})" + (f"; {hint}" if hint else "")
            if skipped is None:
                raise ValueError(f"{where}: {reason}")
            skipped.append((where, reason))
            continue
        out.append((where, raw))
    return out
