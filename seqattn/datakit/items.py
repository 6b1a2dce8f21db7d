"""How a DataModule describes the items of a prediction batch (not the model's output).

``datamodule.describe(batch) -> list[Item]``: one :class:`Item` per batch item, saying what the item
is (its id, the text, SMILES or file it came from) and, for per-position predictions, what each
position is. The objective's typed prediction is turned into rows by kind
(:mod:`seqattn.objectives.rows`); the data never reads the objective's output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass
class Item:
    """One predicted item.

    Attributes:
        id: the item's id (file path relative to the input folder, ``file:line``, a node id...).
        fields: descriptive columns of its row, e.g. ``{"text": ...}``, ``{"smiles": ...}``,
            ``{"duration_s": 1.2}`` (JSON-able values).
        positions: for per-position predictions, a name per position (its word, node id...), or None.
        spans: for per-position predictions on a time axis, ``(start_s, end_s)`` of each position;
            rows then also get ``segments``, runs of equal labels as ``[start_s, end_s, label]``.
        select: the positions to report (e.g. the seed node of a sampled subgraph); None = every
            real position of the item.
        per_position: one row per reported position (node classification) instead of one row per
            item with lists.
    """

    id: str
    fields: dict[str, Any] = field(default_factory=dict)
    positions: Sequence[str] | None = None
    spans: Sequence[tuple[float, float]] | None = None
    select: Sequence[int] | None = None
    per_position: bool = False


def merge_runs(labels: Sequence[Any], spans: Sequence[tuple[float, float]]) -> list[list[Any]]:
    """Runs of equal labels over positions with time ``spans`` -> ``[[start_s, end_s, label], ...]``
    (a run starts where its first position's span starts and ends where its last one's ends)."""
    if len(labels) != len(spans):
        raise ValueError(f"{len(labels)} labels for {len(spans)} spans")
    out: list[list[Any]] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append([round(float(spans[start][0]), 6), round(float(spans[i - 1][1]), 6), labels[start]])
            start = i
    return out
