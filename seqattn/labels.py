"""Label conventions shared by every part of seqattn. Imports nothing.

- :data:`IGNORE_INDEX` (-100, torch's cross-entropy default) marks a position without a label:
  padding, unlabeled frames, nodes outside the current split. Losses and metrics skip it.
- :data:`SPLITS` are the three split names; :func:`split_name` maps the spellings users write
  (``dev``, ``valid``, ``validation``, ``training``, ``eval``) onto them.
- :data:`MISSING_VALUES` are the cell texts every reader treats as "no value" (an empty cell,
  ``nan``, ``NA``, ``null``, ...): never a class named ``'nan'`` or ``'None'``.
- :func:`edit_distance` compares two label sequences (the token error rate of the CTC objective and
  the decoded-transcript figures of the audio modality both count with it).
"""

from __future__ import annotations

from typing import Sequence

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


def edit_distance(hyp: Sequence, ref: Sequence) -> int:
    """Levenshtein distance between two token sequences (unit costs): substitutions + deletions + insertions."""
    previous = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, start=1):
        current = [i] + [0] * len(ref)
        for j, r in enumerate(ref, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (h != r))
        previous = current
    return previous[-1]
