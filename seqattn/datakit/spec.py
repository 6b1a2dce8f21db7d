"""What the data tells the model: a small typed spec, saved in every checkpoint.

A DataModule learns things from its data that the network and the objective need to be built:
how many classes or targets, their names, a text vocabulary, feature widths, target statistics.
They travel as a :class:`DataSpec` -- plain data (lists of strings, numbers) -- never written into
another config group, so a vocabulary word such as ``???`` or ``${x}`` is never parsed as config.

Components declare which constructor arguments come from the spec with a class attribute
``spec_fields = {"constructor argument": "spec key"}`` (e.g. ``TokenHead.spec_fields =
{"num_outputs": "num_outputs"}``, ``TextAdapter.spec_fields = {"vocab": "vocab"}``); the network
builder (:func:`seqattn.model.build.build_network`) fills them. Keys are attribute names of the
spec, or ``sizes.<name>`` / ``provides.<name>`` for the two mappings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Sequence

_MISSING = object()


def _strings(value: Sequence[Any] | None, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"DataSpec.{name} must be a list of strings, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def _floats(value: Sequence[Any] | None, name: str) -> tuple[float, ...] | None:
    if value is None:
        return None
    out = tuple(float(v) for v in value)
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"DataSpec.{name} must be finite numbers, got {list(out)}")
    return out


@dataclass(frozen=True)
class DataSpec:
    """What a DataModule learned from its data (after ``setup()``), for building the model.

    Attributes:
        num_outputs: classes (labeling / classification) or targets (property prediction): the
            head's ``C`` or ``T``.
        labels: class names (index -> name), or target names for property prediction.
        vocab: a text vocabulary (``<pad>``, ``<unk>``, words...), or None.
        chars: a character vocabulary for character-level word features, or None.
        sizes: feature widths the adapter needs (e.g. ``node_features``, ``edge_features``; an int, or a
            list of ints such as ``image_size = [H, W]``).
        target_kinds, target_mean, target_std: per target, ``regression`` | ``classification`` and the
            training split's mean / std (property prediction).
        provides: extra batch inputs the data computes and how, e.g. ``{"pe": "laplacian/8"}``
            (an adapter checks they are what it reads).
        subsets: names of the boolean token subsets batches carry (``batch["subsets"]``), e.g.
            ``("ambiguous", "far")``: the labeling objective reports an accuracy on each.
        groups: named partitions of the items, each with its group names, e.g. ``{"speaker":
            ("spk01", ...)}``; batches carry ``batch["groups"][name]`` = ``[B]`` long indices into
            them (-1 = none): the labeling / classification objectives report the test accuracy
            per group (``acc_per_speaker`` in ``metrics.json``), summed across DDP processes.
    """

    num_outputs: int
    labels: tuple[str, ...] | None = None
    vocab: tuple[str, ...] | None = None
    chars: tuple[str, ...] | None = None
    sizes: Mapping[str, int | list[int]] = field(default_factory=dict)
    target_kinds: tuple[str, ...] | None = None
    target_mean: tuple[float, ...] | None = None
    target_std: tuple[float, ...] | None = None
    provides: Mapping[str, str] = field(default_factory=dict)
    subsets: tuple[str, ...] = ()
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.num_outputs, int) or isinstance(self.num_outputs, bool) or self.num_outputs <= 0:
            raise ValueError(f"DataSpec.num_outputs must be a positive int, got {self.num_outputs!r}")
        for name in ("labels", "vocab", "chars", "target_kinds", "subsets"):
            set_(self, name, _strings(getattr(self, name), name) if getattr(self, name) is not None else None)
        set_(self, "subsets", self.subsets or ())
        for name in ("target_mean", "target_std"):
            set_(self, name, _floats(getattr(self, name), name))
        set_(self, "sizes", {str(k): (list(int(x) for x in v) if isinstance(v, (list, tuple)) else int(v))
                             for k, v in dict(self.sizes or {}).items()})
        set_(self, "provides", {str(k): str(v) for k, v in dict(self.provides or {}).items()})
        set_(self, "groups", {str(k): _strings(v, f"groups[{k!r}]") for k, v in dict(self.groups or {}).items()})
        for name, members in self.groups.items():
            if len(set(members)) != len(members):
                raise ValueError(f"DataSpec.groups[{name!r}] names a group more than once: {list(members)}")
        if self.labels is not None and len(self.labels) != self.num_outputs:
            raise ValueError(f"DataSpec has {len(self.labels)} label names for num_outputs={self.num_outputs}")
        for name in ("target_kinds", "target_mean", "target_std"):
            value = getattr(self, name)
            if value is not None and len(value) != self.num_outputs:
                raise ValueError(f"DataSpec.{name} has {len(value)} values for num_outputs={self.num_outputs}")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """``spec.get("num_outputs")``, ``spec.get("sizes.node_features")``; a missing key raises
        ``KeyError`` naming what the spec has, unless ``default`` is given."""
        head, _, rest = key.partition(".")
        names = {f.name for f in fields(self)}
        if head not in names:
            if default is not _MISSING:
                return default
            raise KeyError(f"DataSpec has no field {head!r}; fields: {sorted(names)}")
        value = getattr(self, head)
        if rest:
            if not isinstance(value, Mapping) or rest not in value:
                if default is not _MISSING:
                    return default
                raise KeyError(f"DataSpec.{head} has no {rest!r}; it has {sorted(value) if isinstance(value, Mapping) else value}")
            value = value[rest]
        if value is None and default is not _MISSING:
            return default
        return value

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (lists, numbers, strings) for checkpoints."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        out["groups"] = {k: list(v) for k, v in self.groups.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | "DataSpec" | None) -> "DataSpec | None":
        if data is None or isinstance(data, DataSpec):
            return data
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown DataSpec field(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**dict(data))

    def describe(self) -> str:
        """One log line: what the data told the model."""
        parts = [f"{self.num_outputs} outputs"]
        if self.labels is not None:
            shown = ", ".join(self.labels[:12]) + (", ..." if len(self.labels) > 12 else "")
            parts.append(f"labels [{shown}]")
        if self.vocab is not None:
            parts.append(f"vocabulary {len(self.vocab)} words")
        if self.chars is not None:
            parts.append(f"{len(self.chars)} characters")
        if self.sizes:
            parts.append(", ".join(f"{k}={v}" for k, v in self.sizes.items()))
        if self.provides:
            parts.append("provides " + ", ".join(f"{k}={v}" for k, v in self.provides.items()))
        if self.groups:
            parts.append("groups " + ", ".join(f"{len(v)} {k}s" for k, v in self.groups.items()))
        return "; ".join(parts)
