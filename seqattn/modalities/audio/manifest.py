"""Audio manifests: which files, with which labels, in which split.

A manifest is JSONL, one utterance per line, or a CSV with a header. Relative paths resolve
against the manifest's folder. Keys / columns:

- ``path`` (required): the audio file (WAV, FLAC, OGG, ... anything soundfile reads);
- frame labels: ``segments`` (JSONL: inline ``[[start_s, end_s, label], ...]``) or ``labels`` (a
  label file, Audacity style: ``start<TAB>end<TAB>label`` per line);
- ``split`` (``train`` / ``val`` / ``test``; ``dev`` and ``valid`` mean ``val``), ``speaker``: optional.
- a whole-clip label (utterance classification, :func:`read_clip_manifest`): ``label``, or the
  column named by ``label_column`` (``speaker`` for speaker identification).

Example::

    {"path": "a.wav", "segments": [[0.0, 0.31, "sil"], [0.31, 0.42, "k"], ...]}
    {"path": "b.wav", "labels": "b.txt", "split": "val", "speaker": "spk1"}

    path,labels,split,speaker
    a.wav,a.txt,train,spk1

Segments of one file must not overlap (a frame has one label): overlapping ones are a ``ValueError``
naming both (``file:line`` of each). Labels are named by :func:`seqattn.labels.label_name` (``1`` and
``1.0`` are one class; the count renamed so is logged). A WAV file whose header declares more
frames than the file holds (a cut copy or download) is an error naming it
(:func:`check_complete_wav`), like any unreadable audio file.

Every error names ``file:line``. The built-in synthetic corpus
(:mod:`seqattn.modalities.audio.corpus`) is written in the same format.
"""

from __future__ import annotations

import logging
import math
import struct
from pathlib import Path
from typing import Any, Mapping, Sequence

from seqattn.datakit.files import existing_file, iter_lines, read_jsonl, read_table, table_format
from seqattn.labels import LabelNames, is_missing, split_name

log = logging.getLogger("seqattn.modalities.audio")

SOURCES = ("synthetic", "manifest")


def resolve_source(source: str | None, manifest: str | None) -> str:
    """The audio data source: ``source`` as given, or ``manifest`` when a manifest path is given and
    ``synthetic`` otherwise; a contradiction (``source=synthetic`` with a manifest, ``manifest``
    without one, an unknown name) is a ``ValueError`` saying what to change."""
    if source is None:
        source = "manifest" if manifest else "synthetic"
    if source not in SOURCES:
        raise ValueError(f"source={source!r} is not one of {SOURCES}")
    if source == "manifest" and not manifest:
        raise ValueError("source='manifest' needs manifest=<path to a .jsonl or .csv manifest>")
    if source == "synthetic" and manifest:
        raise ValueError(f"data.manifest={manifest!r} is given but data.source=synthetic would ignore it; "
                         "drop data.source (a manifest selects the manifest source) or the manifest")
    return source

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".au")


def read_label_file(path: str | Path, encoding: str = "utf-8", names: LabelNames | None = None
                    ) -> list[tuple[float, float, str]]:
    """Audacity label file -> ``[(start_s, end_s, label)]``.

    One ``start<TAB>end<TAB>label`` per line; blank lines and Audacity's spectral-selection lines
    (starting with a backslash) are skipped; overlapping segments raise ``ValueError`` naming both lines.
    ``names`` counts the labels it renames (:class:`~seqattn.labels.LabelNames`).
    """
    out, wheres = [], []
    for lineno, line in iter_lines(path, encoding, "label file"):
        if not line.strip() or line.lstrip().startswith("\\"):
            continue
        parts = line.split("\t") if "\t" in line else line.split(None, 2)
        where = f"{Path(path).expanduser()}:{lineno}"
        if len(parts) != 3 or not parts[2].strip():
            raise ValueError(f"{where}: expected 'start<TAB>end<TAB>label', got {line!r}")
        out.append(segment(parts, where, names))
        wheres.append(where)
    check_no_overlap(out, wheres)
    return out


#: segments may overlap by this much (seconds: rounding of written times) before it is an error
OVERLAP_TOLERANCE_S = 1e-6


def check_no_overlap(segments: Sequence[tuple[float, float, str]], wheres: Sequence[str]) -> None:
    """Segments ``[(start_s, end_s, label)]`` of one audio file, read at ``wheres`` (``file:line`` each):
    ``ValueError`` naming both places when two overlap (a frame would have two labels)."""
    order = sorted(range(len(segments)), key=lambda i: (segments[i][0], segments[i][1]))
    last = None  # the segment reaching furthest so far
    for i in order:
        if last is not None and segments[i][0] < segments[last][1] - OVERLAP_TOLERANCE_S:
            a, b = segments[last], segments[i]
            at = wheres[last] if wheres[last] == wheres[i] else f"{wheres[last]} and {wheres[i]}"
            raise ValueError(f"{at}: segments {list(a)} and {list(b)} overlap ({b[0]:g} s < {a[1]:g} s): each frame "
                             "takes one label, so segments of one file must not overlap (end one where the next "
                             "starts)")
        if last is None or segments[i][1] > segments[last][1]:
            last = i


def segment(seg: Any, where: str, names: LabelNames | None = None) -> tuple[float, float, str]:
    """``[start_s, end_s, label]`` -> checked ``(start, end, label)`` (the label named by ``names``, a
    :class:`~seqattn.labels.LabelNames`, or :func:`~seqattn.labels.label_name`); ``ValueError`` naming
    ``where``."""
    if not isinstance(seg, (list, tuple)) or len(seg) != 3:
        raise ValueError(f"{where}: a segment must be [start_s, end_s, label], got {seg!r}")
    try:
        start, end = float(seg[0]), float(seg[1])
    except (TypeError, ValueError):
        raise ValueError(f"{where}: segment times must be numbers (seconds), got {seg!r}") from None
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"{where}: segment times must be finite seconds, got {seg!r}")
    if seg[2] is None or is_missing(seg[2]):
        raise ValueError(f"{where}: segment {seg!r} has no label")
    label = (names or LabelNames())(seg[2])
    if start < 0 or end <= start:
        raise ValueError(f"{where}: segment {seg!r} needs 0 <= start < end (seconds)")
    return start, end, label


def wav_frames(path: str | Path) -> tuple[int, int] | None:
    """``(frames the header declares, whole frames the file holds)`` of a RIFF/WAVE file, from its
    ``fmt `` and ``data`` chunk headers; None for another format or a ``data`` size a streaming writer
    left open (0 or 0xFFFFFFFF)."""
    with open(path, "rb") as fh:
        head = fh.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        block = None
        while True:
            chunk = fh.read(8)
            if len(chunk) < 8:
                return None
            kind, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if kind == b"data":
                if not block or size in (0, 0xFFFFFFFF):
                    return None
                held = max(Path(path).stat().st_size - fh.tell(), 0)
                return size // block, held // block
            if kind == b"fmt ":
                fmt = fh.read(size + (size & 1))
                if len(fmt) < 14:
                    return None
                block = struct.unpack("<H", fmt[12:14])[0]  # bytes per frame, all channels
            else:
                fh.seek(size + (size & 1), 1)


def check_complete_wav(path: str | Path, where: str | None = None) -> None:
    """``ValueError`` (naming ``where``, the manifest line, when given) for a WAV file whose header
    declares more frames than the file holds: soundfile would read the part that is left without a word."""
    frames = wav_frames(path)
    if frames is None or frames[1] >= frames[0]:
        return
    declared, held = frames
    prefix = f"{where}: " if where else ""
    raise ValueError(f"{prefix}audio file {path} is truncated: its header declares {declared} frames, the file holds "
                     f"{held} ({held / declared:.0%}); copy or download it again, or remove it")


def _ident(audio: Path, base: Path) -> str:
    try:
        return str(audio.relative_to(base).with_suffix(""))
    except ValueError:
        return str(audio.with_suffix(""))


def _item(raw: Mapping[str, Any], base: Path, where: str, encoding: str, names: LabelNames) -> dict[str, Any]:
    path = raw.get("path")
    if path is None or is_missing(path):
        raise ValueError(f"{where}: missing key 'path' (the audio file)")
    audio = (base / str(path).strip()).expanduser()
    if not audio.is_file():
        raise ValueError(f"{where}: audio file {audio} does not exist")
    segments = None
    if raw.get("segments") is not None and not (isinstance(raw["segments"], str) and is_missing(raw["segments"])):
        if not isinstance(raw["segments"], list):
            raise ValueError(f"{where}: 'segments' must be a list of [start_s, end_s, label]")
        segments = [segment(s, where, names) for s in raw["segments"]]
        check_no_overlap(segments, [where] * len(segments))
    elif raw.get("labels") is not None and not is_missing(raw.get("labels")):
        label_path = (base / str(raw["labels"]).strip()).expanduser()
        if not label_path.is_file():
            raise ValueError(f"{where}: label file {label_path} does not exist")
        segments = read_label_file(label_path, encoding, names)
    speaker = raw.get("speaker")
    return {"path": str(audio), "segments": segments, "split": split_name(raw.get("split"), where),
            "speaker": None if speaker is None or is_missing(speaker) else str(speaker).strip(),
            "id": _ident(audio, base), "where": where, "raw": dict(raw)}


def read_manifest(path: str | Path, encoding: str = "utf-8", require_segments: bool = True,
                  skipped: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Read a JSONL or CSV manifest (see the module docstring).

    Returns one dict per utterance: ``path`` (absolute), ``segments`` ``[(start_s, end_s, label)]``
    (None without frame labels), ``split`` (``train``/``val``/``test`` or None), ``speaker`` (or
    None), ``id``, ``where`` (``file:line``) and ``raw`` (the line's fields). With
    ``require_segments`` a line without ``segments`` / ``labels`` is an error. With a ``skipped`` list,
    a line whose audio file is missing is left out and recorded there as ``(file:line, reason)``
    (prediction); otherwise it is an error.
    """
    path = existing_file(path, "manifest")
    base = path.parent
    fmt = table_format(path)
    if fmt in ("csv", "tsv"):
        table = read_table(path, fmt, encoding, ["path"] + (["labels"] if require_segments else []), "manifest",
                           hint="a manifest CSV has columns path,labels[,split][,speaker]")
        rows = [(table.where(line), row) for line, row in table.rows]
    else:
        rows = [(where, raw) for _, where, raw in read_jsonl(path, encoding, "manifest")]
    items, names = [], LabelNames()
    for where, raw in rows:
        try:
            items.append(_item(raw, base, where, encoding, names))
        except ValueError as err:
            if skipped is None or "does not exist" not in str(err):
                raise
            skipped.append((where, str(err).split(": ", 1)[-1]))
    if require_segments:
        for it in items:
            if it["segments"] is None:
                raise ValueError(f"{it['where']}: missing key 'segments' (inline [start_s, end_s, label] list) or "
                                 "'labels' (a label file)")
    if not items and not skipped:
        raise ValueError(f"manifest {path} lists no audio files")
    names.log(log, path)
    return items


def read_clip_manifest(path: str | Path, label_column: str = "label", encoding: str = "utf-8"
                       ) -> list[dict[str, Any]]:
    """A manifest with one label per clip: ``path,label[,speaker][,split]`` (CSV or JSONL).

    Returns the items of :func:`read_manifest` (frame labels not needed) with ``label``: the
    clip's ``label_column`` value as text. A manifest without that column, or a line without a
    value in it, is a ``ValueError`` naming ``file:line``.
    """
    items, names = read_manifest(path, encoding, require_segments=False), LabelNames()
    for it in items:
        raw = it["raw"]
        if label_column not in raw:
            raise ValueError(f"{it['where']}: no {label_column!r} (the clip's label, data.label_column); the line "
                             f"has {sorted(raw)}")
        value = raw[label_column]
        if value is None or is_missing(value) or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"{it['where']}: empty {label_column!r}: every clip needs a label")
        if isinstance(value, (list, dict)):
            raise ValueError(f"{it['where']}: {label_column!r} must be one label (text or number), got {value!r}")
        it["label"] = names(value)
    names.log(log, path)
    return items


def read_audio_list(source: str | Path, encoding: str = "utf-8",
                    skipped: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """What to predict on -> ``[{"path", "id", "where"}]``.

    ``source`` is an audio file, a folder (every file ending in one of ``AUDIO_SUFFIXES``, searched
    recursively, sorted; ids are paths relative to the folder without suffix) or a manifest
    (``.jsonl`` / ``.csv`` with a ``path`` column; labels are not needed and ignored). With a
    ``skipped`` list, manifest lines naming missing files are recorded there instead of raising.
    """
    source = Path(source).expanduser()
    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
        if not files:
            raise ValueError(f"folder {source} holds no audio files ({', '.join(AUDIO_SUFFIXES)})")
        return [{"path": str(p), "id": str(p.relative_to(source).with_suffix("")), "where": str(p)} for p in files]
    if not source.is_file():
        raise ValueError(f"input {source} does not exist (expected an audio file, a folder or a manifest)")
    if source.suffix.lower() not in (".jsonl", ".csv", ".tsv"):
        return [{"path": str(source), "id": source.stem, "where": str(source)}]
    items = read_manifest(source, encoding, require_segments=False, skipped=skipped)
    return [{"path": it["path"], "id": it["id"], "where": it["where"]} for it in items]


def describe_sources(items: Sequence[Mapping[str, Any]]) -> str:
    speakers = {it.get("speaker") for it in items if it.get("speaker")}
    return f"{len(items)} files" + (f", {len(speakers)} speakers" if speakers else "")
