"""Typed predictions, and their rows for CSV / JSONL, by kind.

Every objective's ``predict_step`` returns one :class:`Prediction`; :func:`prediction_rows` turns
it, with the data's description of the batch items (:class:`~seqattn.datakit.items.Item`, from
``datamodule.describe(batch)``), into JSON-able rows. The data never reads the objective's output
and the objective never knows what the items are.

Kinds and their rows:

- ``labels`` (a label per position: frames, words, nodes): one row per item with ``labels`` and
  ``probs`` (the chosen label's probability) per reported position, and ``segments`` (runs of
  equal labels ``[start_s, end_s, label]``) when the item gives time spans; or one row per
  position (``Item.per_position``) with ``label`` and ``prob``.
- ``label`` (one label per item): ``label``, ``prob`` and ``probs`` (every class's probability).
- ``properties`` (targets per item): one column per target (regression in the data's units,
  binary classification as the probability of 1).
- ``sequence`` (a label sequence whose length the model decides): ``sequence`` (the decoded labels).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from seqattn.datakit.items import Item, merge_runs

KINDS = ("labels", "label", "properties", "sequence")


@dataclass
class Prediction:
    """One batch of predictions.

    Attributes:
        kind: ``labels`` | ``label`` | ``properties`` | ``sequence`` (see the module docstring).
        values: ``labels``: ``[B, L]`` long class indices; ``label``: ``[B]`` long;
            ``properties``: ``[B, T]`` float; ``sequence``: ``[B, S]`` long, padded with -1.
        probs: ``labels``: ``[B, L, C]``; ``label``: ``[B, C]``; otherwise None.
        mask: ``[B, L]`` bool, the real positions (``labels``); None otherwise.
        names: class names (index -> name) or target names; None = indices.
    """

    kind: str
    values: torch.Tensor
    probs: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    names: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"prediction kind {self.kind!r} is not one of {KINDS}")

    def to(self, device: torch.device | str) -> "Prediction":
        move = (lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)  # noqa: E731
        return replace(self, values=move(self.values), probs=move(self.probs), mask=move(self.mask))

    @property
    def batch_size(self) -> int:
        return int(self.values.shape[0])


def _name(names: Sequence[str] | None, k: int) -> Any:
    return names[k] if names else k


def prediction_rows(pred: Prediction, items: Sequence[Item], digits: int = 6) -> list[dict[str, Any]]:
    """Rows of one batch (see the module docstring); ``items`` must describe every batch item."""
    pred = pred.to("cpu")
    if len(items) != pred.batch_size:
        raise ValueError(f"{len(items)} item descriptions for a batch of {pred.batch_size} predictions")
    rows: list[dict[str, Any]] = []
    names = list(pred.names) if pred.names else None
    for b, item in enumerate(items):
        base = {"id": item.id, **item.fields}
        if pred.kind == "labels":
            real = (pred.mask[b] if pred.mask is not None else torch.ones(pred.values.shape[1], dtype=torch.bool))
            shown = list(item.select) if item.select is not None else torch.nonzero(real).flatten().tolist()
            ks = [int(pred.values[b, p]) for p in shown]
            ps = [round(float(pred.probs[b, p, k]), digits) for p, k in zip(shown, ks)] if pred.probs is not None \
                else [None] * len(ks)
            labels = [_name(names, k) for k in ks]
            if item.per_position:
                for p, label, prob in zip(shown, labels, ps):
                    pid = item.positions[p] if item.positions is not None else f"{item.id}:{p}"
                    rows.append({"id": pid, **item.fields, "label": label, "prob": prob})
                continue
            row = {**base, "labels": labels, "probs": ps}
            if item.spans is not None:
                row["segments"] = merge_runs(labels, [item.spans[p] for p in shown])
            rows.append(row)
        elif pred.kind == "label":
            k = int(pred.values[b])
            row = {**base, "label": _name(names, k)}
            if pred.probs is not None:
                p = pred.probs[b].float()
                row["prob"] = round(float(p[k]), digits)
                row["probs"] = {str(_name(names, j)): round(float(v), digits) for j, v in enumerate(p)}
            rows.append(row)
        elif pred.kind == "properties":
            targets = names or [f"target{t}" for t in range(pred.values.shape[1])]
            rows.append({**base, **{str(n): float(v) for n, v in zip(targets, pred.values[b].tolist())}})
        else:  # sequence
            seq = [int(k) for k in pred.values[b].tolist() if int(k) >= 0]
            rows.append({**base, "sequence": [_name(names, k) for k in seq]})
    return rows
