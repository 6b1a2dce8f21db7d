"""One split function for every modality: given, stratified, grouped or random -- seeded.

:func:`split` assigns every item to ``train`` / ``val`` / ``test``:

1. **given**: when items carry their own split (a ``split`` column), it is used -- on every item or
   on none (a mix is an error naming the first item without one);
2. **grouped** (``group=key function``): whole groups go to one split, so a speaker, a scaffold or
   a document never straddles train and test. ``group_order="random"`` shuffles the groups by
   ``seed`` (speakers); ``"largest_first"`` fills train with the largest groups (the largest one
   always), then val, then test, which then holds the rarest groups (the Bemis-Murcko scaffold
   split of MoleculeNet);
3. **stratified** (``stratify=key function``): each class contributes its share to every split
   (node classification with few labels per class); items whose key is None stay unassigned;
4. **random**: a seeded permutation.

With a fraction > 0 and at least three units (items, groups, or members of a class), each of val
and test gets at least one unit. The fraction checks are here, once.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Callable, Hashable, Sequence, TypeVar

import numpy as np

from seqattn.labels import SPLITS

log = logging.getLogger("seqattn.datakit.splits")

T = TypeVar("T")
GROUP_ORDERS = ("random", "largest_first")


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    """``ValueError`` unless both fractions are in [0, 1) and leave training data."""
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not isinstance(frac, (int, float)) or not 0.0 <= frac < 1.0:
            raise ValueError(f"{name}={frac!r} must be a number in [0, 1)")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction = {val_fraction + test_fraction} must be < 1 (training data "
                         "must remain)")


def _counts(n: int, val_fraction: float, test_fraction: float) -> tuple[int, int]:
    n_test, n_val = int(round(test_fraction * n)), int(round(val_fraction * n))
    if n >= 3:  # a positive fraction always gets one unit
        n_test = max(n_test, int(test_fraction > 0))
        n_val = max(n_val, int(val_fraction > 0))
    return n_val, n_test


def split_indices(
    n: int,
    val_fraction: float,
    test_fraction: float,
    seed: int,
    *,
    groups: Sequence[Hashable] | None = None,
    strata: Sequence[Hashable | None] | None = None,
    group_order: str = "random",
) -> dict[str, list[int]]:
    """Indices ``0..n-1`` -> ``{"train": [...], "val": [...], "test": [...]}`` (see the module docstring).

    ``groups``: a group key per item (grouped split). ``strata``: a class per item, None = leave the
    item out of every split (stratified split). At most one of the two.
    """
    check_fractions(val_fraction, test_fraction)
    if group_order not in GROUP_ORDERS:
        raise ValueError(f"group_order={group_order!r} is not one of {GROUP_ORDERS}")
    if groups is not None and strata is not None:
        raise ValueError("split by groups or by strata, not both")
    out: dict[str, list[int]] = {s: [] for s in SPLITS}
    rng = np.random.default_rng(seed)
    if strata is not None:
        if len(strata) != n:
            raise ValueError(f"strata has {len(strata)} entries for {n} items")
        by_class: dict[Hashable, list[int]] = defaultdict(list)
        for i, c in enumerate(strata):
            if c is not None:
                by_class[c].append(i)
        for c in sorted(by_class, key=str):
            members = np.asarray(by_class[c])[rng.permutation(len(by_class[c]))].tolist()
            n_val, n_test = _counts(len(members), val_fraction, test_fraction)
            out["test"] += members[:n_test]
            out["val"] += members[n_test:n_test + n_val]
            out["train"] += members[n_test + n_val:]
        return {s: sorted(v) for s, v in out.items()}
    if groups is not None:
        if len(groups) != n:
            raise ValueError(f"groups has {len(groups)} entries for {n} items")
        members: dict[Hashable, list[int]] = defaultdict(list)
        for i, g in enumerate(groups):
            members[g].append(i)
        keys = list(members)
        if group_order == "largest_first":
            ordered = sorted(keys, key=lambda k: (-len(members[k]), str(k)))
            train_cap, val_cap = n * (1 - val_fraction - test_fraction), n * (1 - test_fraction)
            for k in ordered:
                idx = members[k]
                if not out["train"] or len(out["train"]) + len(idx) <= train_cap:  # the largest always trains
                    out["train"] += idx
                elif len(out["train"]) + len(out["val"]) + len(idx) <= val_cap:
                    out["val"] += idx
                else:
                    out["test"] += idx
            return out
        keys = sorted(keys, key=str)
        order = [keys[i] for i in rng.permutation(len(keys))]
        n_val, n_test = _counts(len(keys), val_fraction, test_fraction)
        assign = {k: "test" for k in order[:n_test]}
        assign.update({k: "val" for k in order[n_test:n_test + n_val]})
        for i, g in enumerate(groups):
            out[assign.get(g, "train")].append(i)
        return out
    order = rng.permutation(n).tolist()
    n_val, n_test = _counts(n, val_fraction, test_fraction)
    out["test"], out["val"], out["train"] = order[:n_test], order[n_test:n_test + n_val], order[n_test + n_val:]
    return out


def split(
    items: Sequence[T],
    val_fraction: float,
    test_fraction: float,
    seed: int,
    *,
    given: Callable[[T], str | None] | None = None,
    group: Callable[[T], Hashable] | None = None,
    stratify: Callable[[T], Hashable | None] | None = None,
    group_order: str = "random",
    where: Callable[[T], str] | None = None,
    what: str = "items",
) -> dict[str, list[T]]:
    """Items -> ``{"train", "val", "test"}`` lists, in the items' order within each split.

    ``given(item)``: the item's own split (``train``/``val``/``test``) or None. ``group(item)`` /
    ``stratify(item)``: see :func:`split_indices`. ``where(item)``: ``file:line`` for messages.
    """
    check_fractions(val_fraction, test_fraction)
    items = list(items)
    if given is not None:
        marks = [given(it) for it in items]
        if any(m is not None for m in marks):
            if not all(m is not None for m in marks):
                first = items[marks.index(None)]
                at = f"{where(first)}: " if where else ""
                raise ValueError(f"{at}no split, but other {what} have one; give every one a split or none "
                                 "(then the data is split by seed)")
            bad = [m for m in marks if m not in SPLITS]
            if bad:
                raise ValueError(f"unknown split name {bad[0]!r}; expected one of {SPLITS}")
            return {s: [it for it, m in zip(items, marks) if m == s] for s in SPLITS}
    groups = [group(it) for it in items] if group is not None else None
    strata = [stratify(it) for it in items] if stratify is not None else None
    if groups is not None and any(g is None for g in groups):  # a group needs a key on every item
        groups = None
    idx = split_indices(len(items), val_fraction, test_fraction, seed, groups=groups, strata=strata,
                        group_order=group_order)
    out = {s: [items[i] for i in sorted(v)] for s, v in idx.items()}
    how = ("by group" if groups is not None else "stratified" if strata is not None else "at random")
    log.info("split %d %s %s (seed %d, val %.2f, test %.2f): %s", len(items), what, how, seed, val_fraction,
             test_fraction, {s: len(v) for s, v in out.items()})
    return out


def describe_sizes(splits: dict[str, Sequence[Any]]) -> str:
    return ", ".join(f"{s} {len(splits.get(s, ()))}" for s in SPLITS)
