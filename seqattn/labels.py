"""Label conventions shared by every part of seqattn. Imports nothing.

- :data:`IGNORE_INDEX` (-100, torch's cross-entropy default) marks a position without a label:
  padding, unlabeled frames, nodes outside the current split. Losses and metrics skip it.
- :data:`SPLITS` are the three split names; :func:`split_name` maps the spellings users write
  (``dev``, ``valid``, ``validation``, ``training``, ``eval``) onto them.
- :data:`MISSING_VALUES` are the cell texts every reader treats as "no value" (an empty cell,
  ``nan``, ``NA``, ``null``, ...): never a class named ``'nan'`` or ``'None'``.
- :func:`label_name` turns a label cell into its class name, the same way in every reader: a number
  that is integral (``1``, ``1.0``, the text ``"1.0"``) is the integer's text (``"1"``), anything
  else its text without surrounding spaces, so ``0`` and ``0.0`` are one class. :class:`LabelNames`
  does the same and counts the cells whose text it changed (readers log the count).
- :func:`case_collisions` finds labels that differ only in case (``Neg`` / ``neg``): the DataModules
  warn about them with their counts (they stay separate classes).
- :func:`edit_distance` compares two label sequences (the token error rate of the CTC objective and
  the decoded-transcript figures of the audio modality both count with it).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    import logging

IGNORE_INDEX = -100
SPLITS = ("train", "val", "test")
SPLIT_ALIASES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                 "dev": "val", "test": "test", "eval": "test"}
MISSING_VALUES = frozenset({"", "nan", "NaN", "NAN", "NA", "N/A", "na", "n/a", "null", "NULL", "None", "none"})


def split_name(value: object, where: str = "") -> str | None:
    """A user's split cell -> ``train`` | ``val`` | ``test``, or None when empty / missing.

    Raises ValueError naming ``where`` (``file:line``) for anything else.
    """
    if value is None:
        return None
    text = str(value).strip()
    if text in MISSING_VALUES:
        return None
    key = text.lower()
    if key not in SPLIT_ALIASES:
        prefix = f"{where}: " if where else ""
        raise ValueError(f"{prefix}split {text!r} is not one of {SPLITS} (or dev/valid/validation/training/eval)")
    return SPLIT_ALIASES[key]


def is_missing(value: object) -> bool:
    """True for ``None``, a float NaN and the texts of :data:`MISSING_VALUES`."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return isinstance(value, str) and value.strip() in MISSING_VALUES


_INTEGRAL_TEXT = re.compile(r"[+-]?\d+\.0*")  # "1.0", "-2.00", "3." (not "01", "1e3", "1.5")


def label_name(value: object) -> str:
    """A label cell -> its class name: an integral number (``1``, ``1.0``, ``"1.0"``) -> ``"1"``;
    ``True`` / ``False`` and every other value -> ``str(value)`` without surrounding spaces.

    Missing values are the reader's to reject before (:func:`is_missing`)."""
    text = str(value).strip()  # a float 1.0 is "1.0" here
    if _INTEGRAL_TEXT.fullmatch(text):
        return str(int(text.split(".")[0]))
    return text


class LabelNames:
    """:func:`label_name` that counts the cells whose written text it changed.

    ``names = LabelNames(); label = names(cell); ...; names.log(logger, path)``: logs nothing when
    nothing changed, else one line such as ``"<path>: 2 label(s) written as integral numbers are named
    by the integer (one class for 1 and 1.0): '1.0' -> '1' (x2)"``.
    """

    def __init__(self) -> None:
        self.changed: Counter = Counter()  # (written, name) -> cells

    def __call__(self, value: object) -> str:
        name = label_name(value)
        written = str(value).strip()
        if written != name:
            self.changed[(written, name)] += 1
        return name

    def report(self) -> str | None:
        if not self.changed:
            return None
        shown = ", ".join(f"{w!r} -> {n!r} (x{c})" for (w, n), c in self.changed.most_common(10))
        more = ", ..." if len(self.changed) > 10 else ""
        return (f"{sum(self.changed.values())} label(s) written as integral numbers are named by the integer "
                f"(one class for 1 and 1.0): {shown}{more}")

    def log(self, logger: "logging.Logger", source: object) -> None:
        """Log :meth:`report` (info) prefixed with ``source`` (the file), when there is one."""
        report = self.report()
        if report:
            logger.info("%s: %s", source, report)


def case_collisions(counts: Mapping[str, int]) -> list[dict[str, int]]:
    """Labels that differ only in case: ``{"Neg": 1, "neg": 5, "pos": 4}`` -> ``[{"Neg": 1, "neg": 5}]``
    (each group's labels sorted; groups in the order of their first label)."""
    groups: dict[str, list[str]] = {}
    for label in sorted(counts):
        groups.setdefault(label.casefold(), []).append(label)
    return [{label: int(counts[label]) for label in group} for group in groups.values() if len(group) > 1]


def edit_distance(hyp: Sequence, ref: Sequence) -> int:
    """Levenshtein distance between two token sequences (unit costs): substitutions + deletions + insertions."""
    previous = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, start=1):
        current = [i] + [0] * len(ref)
        for j, r in enumerate(ref, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (h != r))
        previous = current
    return previous[-1]
