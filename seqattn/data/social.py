"""Node classification on social networks: one graph is one "sequence" of nodes.

Sources (``SocialDataModule(source=...)``):

- ``karate`` (default): Zachary's karate club as PyG ships it (34 members, 78 friendships,
  one-hot member features, 4 community labels), written once as the two CSV files below
  (so the built-in data goes through the same reader as yours) and split into
  train/val/test nodes by a deterministic stratified split.
- ``sbm``: a generated contextual stochastic block model (``num_nodes`` nodes in ``blocks``
  communities, noisy community-dependent features): big enough to need neighbour sampling,
  built so one node's own features give only a weak hint of its community.
- ``csv``: your files. A node CSV (``id,<feature columns...>,label,split``; ``label`` may be
  empty for unlabeled nodes, ``split`` in train/val/test, or the column absent: then a
  stratified split by ``seed``) and an edge-list CSV (``source,target[,<edge feature columns>]``,
  e.g. a ``weight``). Column names are configurable. A malformed row raises ValueError with
  ``file:line``; an edge naming a node the node CSV does not list is an error listing the
  first such rows (or, with ``unknown_nodes=skip``, skipped and counted in the log).

Batches (the graph batch convention of :mod:`seqattn.adapters.graph`):
``x [B, N, F]`` (zero padded), ``mask [B, N]``, ``edge_index [2, E]`` over flattened
``b * N + n`` (row 0 source, row 1 target: the target attends to the source),
``edge_attr [E, Fe]`` or None, ``labels [B, N]`` (``IGNORE_INDEX`` on padding, unlabeled nodes
and nodes outside the stage's split), ``seed_mask [B, N]`` (the nodes this item predicts),
``ids`` (one per item) and ``node_ids`` (per item, per position).

Two modes (``mode``): ``full`` -- the whole graph is one item, every loader yields it with
the stage's label mask; ``sampled`` -- PyG's ``NeighborLoader`` samples one ego subgraph per
seed node (``num_neighbors`` per hop), each subgraph one padded item whose only label is its
seed's. ``auto`` picks ``sampled`` above ``full_batch_max_nodes`` nodes.

Letters: b batch items, n nodes, e edges, f features.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

from seqattn.adapters.graph import GRAPH_POSITIONALS, graph_positional_encoding
from seqattn.core.tokens import IGNORE_INDEX
from seqattn.data.sampling import EgoNeighborSampler, ego_batch

log = logging.getLogger("seqattn.data.social")

SPLITS = ("train", "val", "test")
_SPLIT_ALIASES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                  "dev": "val", "test": "test", "eval": "test"}
SOURCES = ("karate", "sbm", "csv")
MODES = ("auto", "full", "sampled")


# ---------------------------------------------------------------------------------------------
# the graph in memory


@dataclass
class NodeTable:
    """What a node CSV holds. ``x [N, F]`` float; ``labels``/``splits`` per node (None = absent)."""

    ids: list[str]
    x: torch.Tensor
    feature_names: list[str]
    labels: list[str | None]
    splits: list[str | None]
    where: list[str]  # "file:line" per node

    @property
    def index(self) -> dict[str, int]:
        return {node: i for i, node in enumerate(self.ids)}


@dataclass
class SocialGraph:
    """One graph: ``x [N, F]``, ``y [N]`` (class index, ``IGNORE_INDEX`` = unlabeled),
    ``split [N]`` (0 train, 1 val, 2 test, -1 none), ``edge_index [2, E]``, ``edge_attr [E, Fe]``."""

    ids: list[str]
    x: torch.Tensor
    y: torch.Tensor
    split: torch.Tensor
    edge_index: torch.Tensor
    edge_attr: torch.Tensor | None
    label_names: list[str]

    @property
    def num_nodes(self) -> int:
        return len(self.ids)

    def nodes_of(self, stage: str) -> torch.Tensor:
        """Indices of the labeled nodes of ``stage`` (``train``/``val``/``test``)."""
        return torch.nonzero((self.split == SPLITS.index(stage)) & (self.y != IGNORE_INDEX)).squeeze(1)

    def to_data(self) -> Data:
        data = Data(x=self.x, y=self.y, edge_index=self.edge_index, num_nodes=self.num_nodes)
        if self.edge_attr is not None:
            data.edge_attr = self.edge_attr
        return data


# ---------------------------------------------------------------------------------------------
# CSV readers


def _open_csv(path: Path, what: str) -> tuple[Any, csv.DictReader]:
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist")
    f = open(path, newline="", encoding="utf-8")
    reader = csv.DictReader(f)
    if not reader.fieldnames:
        f.close()
        raise ValueError(f"{path}:1: empty file; expected a header row")
    return f, reader


def _float(value: str | None, where: str, column: str) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: column {column!r} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{where}: column {column!r} must be finite, got {value!r}")
    return out


def _check_row(row: dict, reader: csv.DictReader, where: str) -> None:
    if None in row:  # more fields than the header
        raise ValueError(f"{where}: {len(reader.fieldnames) + len(row[None])} fields, the header has "
                         f"{len(reader.fieldnames)}")
    short = [k for k, v in row.items() if v is None]
    if short:
        raise ValueError(f"{where}: too few fields; missing {short}")


def read_node_csv(
    path: str | Path,
    id_column: str = "id",
    label_column: str | None = "label",
    split_column: str | None = "split",
    feature_columns: Sequence[str] | None = None,
) -> NodeTable:
    """Read a node CSV: one row per node, ``id`` unique, numeric feature columns, optional
    ``label`` (empty = unlabeled) and ``split`` (train/val/test; empty = none).

    ``feature_columns=None``: every column except id/label/split. A missing label or split
    *column* is allowed (unlabeled graph for prediction; split by seed); missing *values* in
    feature columns, duplicate ids and unknown split names are errors naming ``file:line``.
    """
    path = Path(path).expanduser()
    f, reader = _open_csv(path, "node CSV")
    with f:
        header = list(reader.fieldnames)
        if id_column not in header:
            raise ValueError(f"{path}:1: node CSV has no id column {id_column!r}; columns are {header}")
        reserved = {id_column, label_column, split_column}
        if feature_columns is None:
            features = [c for c in header if c not in reserved]
        else:
            features = list(feature_columns)
            missing = [c for c in features if c not in header]
            if missing:
                raise ValueError(f"{path}:1: feature columns {missing} are not in the header {header}")
        has_label = label_column is not None and label_column in header
        has_split = split_column is not None and split_column in header
        ids, rows, labels, splits, where = [], [], [], [], []
        seen: dict[str, str] = {}
        for row in reader:
            at = f"{path}:{reader.line_num}"
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue  # blank line
            _check_row(row, reader, at)
            node = row[id_column].strip()
            if not node:
                raise ValueError(f"{at}: empty node id in column {id_column!r}")
            if node in seen:
                raise ValueError(f"{at}: node id {node!r} repeats (first at {seen[node]})")
            seen[node] = at
            rows.append([_float(row[c], at, c) for c in features])
            label = row[label_column].strip() if has_label else ""
            labels.append(label or None)
            split = row[split_column].strip().lower() if has_split else ""
            if split and split not in _SPLIT_ALIASES:
                raise ValueError(f"{at}: split {row[split_column]!r} is not one of {SPLITS} (or empty)")
            splits.append(_SPLIT_ALIASES[split] if split else None)
            ids.append(node)
            where.append(at)
    if not ids:
        raise ValueError(f"{path}: no nodes")
    x = torch.tensor(rows, dtype=torch.float32).reshape(len(ids), len(features))  # [N, F]
    return NodeTable(ids, x, features, labels, splits, where)


def read_edge_csv(
    path: str | Path,
    node_index: dict[str, int],
    source_column: str = "source",
    target_column: str = "target",
    feature_columns: Sequence[str] | None = None,
    unknown_nodes: str = "error",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Read an edge list: ``source,target[,feature columns...]`` -> ``edge_index [2, E]`` (row 0
    source), ``edge_attr [E, Fe]`` or None.

    ``feature_columns=None``: every column except source/target (e.g. ``weight``).
    ``unknown_nodes``: ``error`` (an edge naming a node the node CSV lacks raises, listing the
    first rows and the count) or ``skip`` (such edges are left out; the count and first rows
    are logged).
    """
    if unknown_nodes not in ("error", "skip"):
        raise ValueError(f"unknown_nodes={unknown_nodes!r} is not one of ('error', 'skip')")
    path = Path(path).expanduser()
    f, reader = _open_csv(path, "edge CSV")
    with f:
        header = list(reader.fieldnames)
        for col in (source_column, target_column):
            if col not in header:
                raise ValueError(f"{path}:1: edge CSV has no column {col!r}; columns are {header}")
        if feature_columns is None:
            features = [c for c in header if c not in (source_column, target_column)]
        else:
            features = list(feature_columns)
            missing = [c for c in features if c not in header]
            if missing:
                raise ValueError(f"{path}:1: edge feature columns {missing} are not in the header {header}")
        src, dst, attrs, unknown = [], [], [], []
        for row in reader:
            at = f"{path}:{reader.line_num}"
            if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                continue
            _check_row(row, reader, at)
            a, b = row[source_column].strip(), row[target_column].strip()
            if not a or not b:
                raise ValueError(f"{at}: empty {source_column if not a else target_column!r} node id")
            values = [_float(row[c], at, c) for c in features]
            bad = [n for n in (a, b) if n not in node_index]
            if bad:
                unknown.append(f"{at}: unknown node id {bad[0]!r}")
                continue
            src.append(node_index[a])
            dst.append(node_index[b])
            attrs.append(values)
    if unknown:
        listing = "; ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        if unknown_nodes == "error":
            raise ValueError(f"{len(unknown)} edge(s) name nodes missing from the node CSV: {listing} "
                             "(add them to the node CSV, or set unknown_nodes=skip to leave these edges out)")
        log.warning("left out %d edge(s) naming nodes missing from the node CSV: %s", len(unknown), listing)
    edge_index = torch.tensor([src, dst], dtype=torch.long).reshape(2, len(src))  # [2, E]
    edge_attr = torch.tensor(attrs, dtype=torch.float32).reshape(len(src), len(features)) if features else None
    return edge_index, edge_attr


def _coalesce(edge_index: torch.Tensor, edge_attr: torch.Tensor | None, num_nodes: int, undirected: bool,
              where: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Add reverse edges (``undirected``) and merge repeated edges (features averaged), with a log line."""
    from torch_geometric.utils import coalesce, to_undirected

    loops = edge_index[0] == edge_index[1]
    if bool(loops.any()):  # the graph adapter adds every node's self-loop itself
        log.info("%s: %d self-loop edge(s) left out (every node attends to itself anyway)", where, int(loops.sum()))
        edge_index = edge_index[:, ~loops]
        edge_attr = edge_attr[~loops] if edge_attr is not None else None
    n_in = edge_index.shape[1]
    if undirected:
        edge_index, edge_attr = to_undirected(edge_index, edge_attr, num_nodes=num_nodes, reduce="mean")
        expected = 2 * n_in
    else:
        edge_index, edge_attr = coalesce(edge_index, edge_attr, num_nodes=num_nodes, reduce="mean")
        expected = n_in
    if edge_index.shape[1] < expected:
        log.info("%s: %d repeated edge(s) merged (features averaged)%s", where, expected - edge_index.shape[1],
                 ", after adding reverse edges" if undirected else "")
    return edge_index, edge_attr


# ---------------------------------------------------------------------------------------------
# splitting


def stratified_split(labels: Sequence[int], val_fraction: float, test_fraction: float, seed: int) -> np.ndarray:
    """Per-class random split of labeled nodes: ``[N]`` of 0 train / 1 val / 2 test / -1 unlabeled.

    ``labels``: class index per node, negative = unlabeled. Each class contributes
    ``round(fraction * size)`` nodes to val and test (at least one each when the class has
    three or more nodes and the fraction is positive); the rest train. Deterministic in ``seed``.
    """
    for name, frac in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= frac < 1.0:
            raise ValueError(f"{name}={frac} must be in [0, 1)")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction = {val_fraction + test_fraction} must be < 1")
    labels = np.asarray(labels)
    out = np.full(labels.shape, -1, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for c in np.unique(labels[labels >= 0]):
        members = np.flatnonzero(labels == c)
        members = members[rng.permutation(members.size)]
        n_test = int(round(test_fraction * members.size))
        n_val = int(round(val_fraction * members.size))
        if members.size >= 3:
            n_test = max(n_test, int(test_fraction > 0))
            n_val = max(n_val, int(val_fraction > 0))
        out[members] = 0
        out[members[:n_test]] = 2
        out[members[n_test:n_test + n_val]] = 1
    return out


# ---------------------------------------------------------------------------------------------
# built-in graphs, written in the user format


def _write_graph_csv(folder: Path, ids: Sequence[str], x: torch.Tensor, labels: Sequence[str],
                     edges: torch.Tensor, prefix: str = "f") -> Path:
    """Write ``nodes.csv`` (``id,f0..,label``) and ``edges.csv`` (``source,target``) atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    with open(tmp / "nodes.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", *[f"{prefix}{j}" for j in range(x.shape[1])], "label"])
        for node, row, label in zip(ids, x.tolist(), labels):
            w.writerow([node, *[f"{v:.6g}" for v in row], label])
    with open(tmp / "edges.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["source", "target"])
        for a, b in edges.t().tolist():
            w.writerow([ids[a], ids[b]])
    for name in ("nodes.csv", "edges.csv"):
        os.replace(tmp / name, folder / name)
    tmp.rmdir()
    return folder


def karate_csv(data_dir: str | Path) -> Path:
    """Zachary's karate club from PyG (shipped with it, no download) as ``nodes.csv`` + ``edges.csv``
    under ``data_dir/karate``: ids ``0..33``, 34 one-hot features, labels ``c0..c3`` (PyG's four
    communities), each friendship once (``undirected`` adds the reverse)."""
    folder = Path(data_dir).expanduser() / "karate"
    if (folder / "nodes.csv").is_file() and (folder / "edges.csv").is_file():
        return folder
    from torch_geometric.datasets import KarateClub

    g = KarateClub()[0]
    ids = [str(i) for i in range(g.num_nodes)]
    once = g.edge_index[:, g.edge_index[0] < g.edge_index[1]]  # [2, 78]
    return _write_graph_csv(folder, ids, g.x, [f"c{int(c)}" for c in g.y], once)


def sbm_csv(data_dir: str | Path, num_nodes: int = 3000, blocks: int = 4, avg_degree: float = 10.0,
            homophily: float = 0.8, num_features: int = 8, feature_noise: float = 2.0, seed: int = 0) -> Path:
    """A contextual stochastic block model, written as ``nodes.csv`` + ``edges.csv``.

    ``blocks`` equal communities; each node has ``avg_degree`` expected neighbours, a fraction
    ``homophily`` of them in its own community (PyG ``stochastic_blockmodel_graph``). Features:
    the community's random unit-length mean plus Gaussian noise of std ``feature_noise`` per
    dimension, so a node alone is a weak hint and its neighbourhood a strong one.
    """
    if num_nodes < 2 * blocks:
        raise ValueError(f"num_nodes={num_nodes} must be at least 2 * blocks = {2 * blocks}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily={homophily} must be in [0, 1]")
    params = dict(num_nodes=num_nodes, blocks=blocks, avg_degree=avg_degree, homophily=homophily,
                  num_features=num_features, feature_noise=feature_noise, seed=seed)
    key = hashlib.sha1(repr(sorted(params.items())).encode()).hexdigest()[:10]
    folder = Path(data_dir).expanduser() / f"sbm-{key}"
    if (folder / "nodes.csv").is_file() and (folder / "edges.csv").is_file():
        return folder
    from torch_geometric.utils import stochastic_blockmodel_graph

    gen = torch.Generator().manual_seed(seed)
    sizes = [num_nodes // blocks + (i < num_nodes % blocks) for i in range(blocks)]
    size = num_nodes / blocks
    p_in = min(1.0, avg_degree * homophily / max(size - 1, 1))
    p_out = min(1.0, avg_degree * (1 - homophily) / max(num_nodes - size, 1))
    probs = [[p_in if i == j else p_out for j in range(blocks)] for i in range(blocks)]
    state = torch.get_rng_state()
    torch.manual_seed(seed)  # stochastic_blockmodel_graph draws from the global generator
    try:
        edge_index = stochastic_blockmodel_graph(sizes, probs, directed=False)  # [2, E], both directions
    finally:
        torch.set_rng_state(state)
    y = torch.repeat_interleave(torch.arange(blocks), torch.tensor(sizes))
    means = torch.randn(blocks, num_features, generator=gen)
    means = means / means.norm(dim=1, keepdim=True)
    x = means[y] + feature_noise * torch.randn(num_nodes, num_features, generator=gen) / math.sqrt(num_features)
    perm = torch.randperm(num_nodes, generator=gen)  # node order says nothing about the community
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(num_nodes)
    ids = [f"n{i}" for i in range(num_nodes)]
    once = inv[edge_index[:, edge_index[0] < edge_index[1]]]
    return _write_graph_csv(folder, ids, x[perm], [f"b{int(c)}" for c in y[perm]], once)


# ---------------------------------------------------------------------------------------------
# datasets


class _Repeat(Dataset):
    """The same prebuilt batch ``times`` times (full-graph mode: one step = the whole graph)."""

    def __init__(self, batch: dict[str, Any], times: int) -> None:
        self.batch, self.times = batch, times

    def __len__(self) -> int:
        return self.times

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.batch


def _first(items: list[dict[str, Any]]) -> dict[str, Any]:
    return items[0]


def item_positional_encoding(batch: dict[str, Any], kind: str, k: int) -> torch.Tensor:
    """``pe [B, N, k]`` of a padded batch, each item's encoding computed on its own graph (its real
    nodes and the edges inside it); zeros on padding."""
    b, n = batch["mask"].shape
    pe = torch.zeros(b, n, k)
    src, dst = batch["edge_index"]
    item = dst // n
    order = torch.argsort(item, stable=True)
    counts = torch.bincount(item, minlength=b).tolist()
    sizes = batch["mask"].sum(1).tolist()
    local = torch.stack([src, dst])[:, order] % n
    for i, edges in enumerate(torch.split(local, counts, dim=1)):
        pe[i, : sizes[i]] = graph_positional_encoding(kind, edges, sizes[i], k)
    return pe


def full_batch(graph: SocialGraph, labeled: torch.Tensor | None, name: str = "graph",
               pe: torch.Tensor | None = None) -> dict[str, Any]:
    """The whole graph as one item: ``x [1, N, F]``, ``mask [1, N]``, ``edge_index [2, E]``, ``labels [1, N]``
    (only ``labeled`` nodes keep their label), ``seed_mask [1, N]`` (every node), ``pe [1, N, K]``
    when given (``pe [N, K]``)."""
    n = graph.num_nodes
    labels = torch.full((n,), IGNORE_INDEX, dtype=torch.long)
    if labeled is not None:
        labels[labeled] = graph.y[labeled]
    batch = {
        "x": graph.x.unsqueeze(0),
        "mask": torch.ones(1, n, dtype=torch.bool),
        "edge_index": graph.edge_index,
        "edge_attr": graph.edge_attr,
        "labels": labels.unsqueeze(0),
        "seed_mask": torch.ones(1, n, dtype=torch.bool),
        "node_index": torch.arange(n).unsqueeze(0),
        "ids": [name],
        "node_ids": [list(graph.ids)],
    }
    if pe is not None:
        batch["pe"] = pe.unsqueeze(0)  # [1, N, K]
    return batch


class _WithIds:
    """NeighborLoader transform: sampled Data -> padded batch with ``ids`` / ``node_ids`` (and ``pe``,
    each subgraph's own positional encoding, when ``positional`` is not ``none``)."""

    def __init__(self, ids: Sequence[str], positional: str = "none", pe_dim: int = 8) -> None:
        self.ids = list(ids)
        self.positional, self.pe_dim = positional, pe_dim

    def __call__(self, data: Data) -> dict[str, Any]:
        batch = ego_batch(data)
        if self.positional != "none":
            batch["pe"] = item_positional_encoding(batch, self.positional, self.pe_dim)
        index = batch["node_index"].tolist()
        batch["node_ids"] = [[self.ids[i] if i >= 0 else None for i in row] for row in index]
        batch["ids"] = [row[0] for row in batch["node_ids"]]
        return batch


# ---------------------------------------------------------------------------------------------
# DataModule


class SocialDataModule(L.LightningDataModule):
    """Node classification on one graph (see the module docstring for sources, batches and modes).

    Args:
        source: ``karate`` | ``sbm`` | ``csv``.
        nodes, edges: the node and edge CSV files (``source=csv``).
        id_column, label_column, split_column, feature_columns: node CSV columns
            (``feature_columns=None``: every other column).
        source_column, target_column, edge_feature_columns: edge CSV columns
            (``edge_feature_columns=None``: every other column, e.g. ``weight``).
        undirected: add the reverse of every edge (friendships); ``False`` for follower graphs.
        unknown_nodes: ``error`` | ``skip`` for edges naming nodes the node CSV lacks.
        val_fraction, test_fraction: per-class fractions when the node CSV has no split column.
        mode: ``auto`` | ``full`` | ``sampled``; ``auto`` samples above ``full_batch_max_nodes``.
        num_neighbors: in-neighbours sampled per node and hop in ``sampled`` mode, ``-1`` = all.
        batch_size: seed subgraphs per batch (``sampled``); ignored in ``full`` mode.
        positional, pe_dim: the graph positional encoding the adapter reads (``pe``): ``none`` |
            ``laplacian`` | ``random_walk`` (the task config ties these to ``adapter.*``). Computed once
            for the whole graph (``full``) or per sampled subgraph (``sampled``).
        steps_per_epoch: in ``full`` mode, how often one epoch steps over the whole graph
            (fewer validation/checkpoint rounds per optimizer step on tiny graphs).
        sbm: parameters of :func:`sbm_csv` (``source=sbm``).
    """

    def __init__(
        self,
        source: str = "karate",
        data_dir: str | None = "~/.cache/seqattn",
        nodes: str | None = None,
        edges: str | None = None,
        id_column: str = "id",
        label_column: str | None = "label",
        split_column: str | None = "split",
        feature_columns: Sequence[str] | None = None,
        source_column: str = "source",
        target_column: str = "target",
        edge_feature_columns: Sequence[str] | None = None,
        undirected: bool = True,
        unknown_nodes: str = "error",
        labels: Sequence[str] | None = None,
        val_fraction: float = 0.2,
        test_fraction: float = 0.3,
        seed: int = 0,
        mode: str = "auto",
        full_batch_max_nodes: int = 50_000,
        num_neighbors: Sequence[int] = (10, 5),
        batch_size: int = 64,
        steps_per_epoch: int = 1,
        num_workers: int = 0,
        positional: str = "none",
        pe_dim: int = 8,
        sbm: dict | None = None,
    ) -> None:
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"source={source!r} is not one of {SOURCES}")
        if source == "csv" and (not nodes or not edges):
            raise ValueError("source='csv' needs nodes=<node CSV> and edges=<edge-list CSV>")
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not one of {MODES}")
        if unknown_nodes not in ("error", "skip"):
            raise ValueError(f"unknown_nodes={unknown_nodes!r} is not one of ('error', 'skip')")
        if batch_size <= 0 or steps_per_epoch <= 0:
            raise ValueError(f"batch_size ({batch_size}) and steps_per_epoch ({steps_per_epoch}) must be positive")
        num_neighbors = [int(k) for k in num_neighbors]
        if not num_neighbors or any(k == 0 or k < -1 for k in num_neighbors):
            raise ValueError(f"num_neighbors must be positive ints or -1 (all) per hop, got {num_neighbors}")
        if positional not in GRAPH_POSITIONALS:
            raise ValueError(f"positional={positional!r} is not one of {GRAPH_POSITIONALS}")
        if data_dir is None:
            data_dir = os.environ.get("SEQATTN_DATA_DIR", "~/.cache/seqattn")
        self.source = source
        self.data_dir = Path(data_dir).expanduser()
        self.nodes, self.edges = nodes, edges
        self.node_columns = dict(id_column=id_column, label_column=label_column, split_column=split_column,
                                 feature_columns=list(feature_columns) if feature_columns is not None else None)
        self.edge_columns = dict(source_column=source_column, target_column=target_column,
                                 feature_columns=list(edge_feature_columns)
                                 if edge_feature_columns is not None else None)
        self.undirected = undirected
        self.unknown_nodes = unknown_nodes
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        stratified_split([], val_fraction, test_fraction, seed)  # validates the fractions
        self.seed = seed
        self.mode = mode
        self.full_batch_max_nodes = int(full_batch_max_nodes)
        self.num_neighbors = num_neighbors
        self.batch_size = batch_size
        self.steps_per_epoch = steps_per_epoch
        self.num_workers = num_workers
        self.positional, self.pe_dim = positional, int(pe_dim)
        self.sbm = dict(sbm or {})
        self._pe: torch.Tensor | None = None  # [N, K] of the whole graph, computed once
        self._labels = list(labels) if labels is not None else None
        self.graph: SocialGraph | None = None

    # -- files ----------------------------------------------------------------------------
    def graph_files(self) -> tuple[Path, Path]:
        """``(nodes.csv, edges.csv)`` of this source (built-in graphs are written on first use)."""
        if self.source == "karate":
            folder = karate_csv(self.data_dir)
        elif self.source == "sbm":
            folder = sbm_csv(self.data_dir, **self.sbm)
        else:
            return Path(self.nodes).expanduser(), Path(self.edges).expanduser()
        return folder / "nodes.csv", folder / "edges.csv"

    def prepare_data(self) -> None:
        self.graph_files()

    # -- labels ---------------------------------------------------------------------------
    @property
    def label_names(self) -> list[str]:
        if self._labels is None:
            raise RuntimeError("label_names are known after setup() (they come from the train nodes)")
        return list(self._labels)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def num_features(self) -> int:
        if self.graph is None:
            raise RuntimeError("num_features is known after setup()")
        return int(self.graph.x.shape[1])

    def model_overrides(self) -> dict[str, dict[str, Any]]:
        """Feature widths from the data, into the adapter config (saved with the checkpoint)."""
        g = self.graph
        if g is None:
            raise RuntimeError("model_overrides() needs setup() first")
        return {"adapter": {"node_features": int(g.x.shape[1]),
                            "edge_features": int(g.edge_attr.shape[1]) if g.edge_attr is not None else 0}}

    # -- reading --------------------------------------------------------------------------
    def read_graph(self, nodes_path: str | Path, edges_path: str | Path) -> tuple[NodeTable, torch.Tensor,
                                                                                torch.Tensor | None]:
        """Read the two CSVs: the node table and ``edge_index [2, E]`` / ``edge_attr`` after
        symmetrising (``undirected``) and merging repeats."""
        table = read_node_csv(nodes_path, **self.node_columns)
        edge_index, edge_attr = read_edge_csv(edges_path, table.index, unknown_nodes=self.unknown_nodes,
                                              **self.edge_columns)
        edge_index, edge_attr = _coalesce(edge_index, edge_attr, len(table.ids), self.undirected, str(edges_path))
        return table, edge_index, edge_attr

    def setup(self, stage: str | None = None) -> None:
        if self.graph is not None:
            return
        nodes_path, edges_path = self.graph_files()
        table, edge_index, edge_attr = self.read_graph(nodes_path, edges_path)
        given = [s is not None for s in table.splits]
        if any(given) and not all(g or lab is None for g, lab in zip(given, table.labels)):
            at = next(w for w, g, lab in zip(table.where, given, table.labels) if not g and lab is not None)
            raise ValueError(f"{at}: labeled node without a split, but other rows have one; give every labeled "
                             "node a split or none (then the nodes are split by seed)")
        if any(given):
            split = np.array([SPLITS.index(s) if s is not None else -1 for s in table.splits])
            train_labels = {lab for lab, s in zip(table.labels, table.splits) if s == "train" and lab is not None}
        else:
            train_labels = {lab for lab in table.labels if lab is not None}
        if self._labels is None:
            if not train_labels:
                raise ValueError(f"{nodes_path}: no labeled training nodes")
            self._labels = sorted(train_labels)
        to_index = {name: i for i, name in enumerate(self._labels)}
        for lab, s, at in zip(table.labels, table.splits, table.where):
            if lab is not None and lab not in to_index:
                raise ValueError(f"{at}: label {lab!r} ({s or 'no'} split) is not among the training labels "
                                 f"{self._labels}")
        y = torch.tensor([to_index[lab] if lab is not None else IGNORE_INDEX for lab in table.labels])
        if not any(given):
            split = stratified_split(y.numpy(), self.val_fraction, self.test_fraction, self.seed)
            how = f"stratified by class, seed {self.seed}, val {self.val_fraction}, test {self.test_fraction}"
        else:
            how = f"from the {self.node_columns['split_column']!r} column"
        self.graph = SocialGraph(table.ids, table.x, y, torch.as_tensor(split, dtype=torch.long), edge_index,
                                 edge_attr, list(self._labels))
        counts = {s: int(self.graph.nodes_of(s).numel()) for s in SPLITS}
        log.info("graph %s: %d nodes, %d edges, %d features, labels %s; labeled nodes %s (%s); %s mode",
                 nodes_path.parent, self.graph.num_nodes, edge_index.shape[1], table.x.shape[1], self._labels,
                 counts, how, self.resolved_mode(self.graph.num_nodes))
        if counts["train"] == 0:
            raise ValueError(f"{nodes_path}: no labeled training nodes")

    def resolved_mode(self, num_nodes: int) -> str:
        if self.mode != "auto":
            return self.mode
        return "sampled" if num_nodes > self.full_batch_max_nodes else "full"

    # -- loaders --------------------------------------------------------------------------
    def _sampled_loader(self, data: Data, seeds: torch.Tensor, ids: Sequence[str], shuffle: bool,
                        batch_size: int, hash_seed: int | None) -> NeighborLoader:
        sampler = EgoNeighborSampler(data, self.num_neighbors, hash_seed=hash_seed)
        generator = torch.Generator().manual_seed(self.seed) if shuffle else None
        return NeighborLoader(data, num_neighbors=self.num_neighbors, input_nodes=seeds, batch_size=batch_size,
                              shuffle=shuffle, generator=generator, neighbor_sampler=sampler,
                              transform=_WithIds(ids, self.positional, self.pe_dim), num_workers=self.num_workers,
                              persistent_workers=self.num_workers > 0)

    def _graph_pe(self, graph: SocialGraph) -> torch.Tensor | None:
        if self.positional == "none":
            return None
        return graph_positional_encoding(self.positional, graph.edge_index, graph.num_nodes, self.pe_dim)

    def _loader(self, stage: str) -> DataLoader:
        if self.graph is None:
            self.setup()
        g = self.graph
        labeled = g.nodes_of(stage)
        if self.resolved_mode(g.num_nodes) == "full":
            if self._pe is None:
                self._pe = self._graph_pe(g)
            times = self.steps_per_epoch if stage == "train" else 1
            return DataLoader(_Repeat(full_batch(g, labeled, pe=self._pe), times), batch_size=1, collate_fn=_first)
        if labeled.numel() == 0:
            log.warning("the %s split has no labeled nodes", stage)
        train = stage == "train"
        return self._sampled_loader(g.to_data(), labeled, g.ids, shuffle=train, batch_size=self.batch_size,
                                    hash_seed=None if train else self.seed)

    def node_loader(self, nodes: torch.Tensor | None = None, batch_size: int | None = None) -> DataLoader:
        """Evaluation batches that predict ``nodes`` (default: all) of the set-up graph, with every
        labeled node's label: in ``full`` mode the whole graph (``seed_mask`` marks every node), in
        ``sampled`` mode one deterministic ego subgraph per node of ``nodes``."""
        if self.graph is None:
            self.setup()
        g = self.graph
        labeled = torch.nonzero(g.y != IGNORE_INDEX).squeeze(1)
        if self.resolved_mode(g.num_nodes) == "full":
            if self._pe is None:
                self._pe = self._graph_pe(g)
            return DataLoader(_Repeat(full_batch(g, labeled, pe=self._pe), 1), batch_size=1, collate_fn=_first)
        nodes = torch.arange(g.num_nodes) if nodes is None else torch.as_tensor(nodes, dtype=torch.long)
        return self._sampled_loader(g.to_data(), nodes, g.ids, shuffle=False,
                                    batch_size=batch_size or self.batch_size, hash_seed=self.seed)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    # -- predict protocol -----------------------------------------------------------------
    def predict_loader(self, source: str | Path, batch_size: int | None = None) -> DataLoader:
        """Batches over the graph of a node CSV (``source``) and the configured edge list
        (``edges``; for the built-in sources, their own edge list when ``edges`` is unset).

        Labels and splits in the node CSV are ignored. ``full`` mode (small graphs): one item,
        the whole graph, every node predicted. ``sampled`` mode: one ego subgraph per node
        (neighbours chosen by a fixed hash, so a node's prediction does not depend on its batch),
        ``batch_size`` nodes per batch. Needs no ``setup()``.
        """
        source = Path(source).expanduser()
        edges = Path(self.edges).expanduser() if self.edges else self.graph_files()[1]
        table, edge_index, edge_attr = self.read_graph(source, edges)
        n = len(table.ids)
        graph = SocialGraph(table.ids, table.x, torch.full((n,), IGNORE_INDEX, dtype=torch.long),
                            torch.full((n,), -1, dtype=torch.long), edge_index, edge_attr, [])
        if self.resolved_mode(n) == "full":
            batch = full_batch(graph, None, name=source.stem, pe=self._graph_pe(graph))
            return DataLoader(_Repeat(batch, 1), batch_size=1, collate_fn=_first)
        return self._sampled_loader(graph.to_data(), torch.arange(n), table.ids, shuffle=False,
                                    batch_size=batch_size or self.batch_size, hash_seed=self.seed)

    def prediction_rows(self, batch: dict, output: dict, labels: list[str] | None) -> list[dict]:
        """One row per predicted node: ``{"id", "label", "prob"}`` (``prob`` of the predicted label),
        from ``SequenceLabeling.predict_step``'s ``pred [B, N]`` / ``prob [B, N, C]``."""
        pred, prob = output["pred"].cpu(), output["prob"].cpu()
        seed_mask = batch["seed_mask"].cpu()
        rows = []
        for b, node_ids in enumerate(batch["node_ids"]):
            for n in torch.nonzero(seed_mask[b]).squeeze(1).tolist():
                k = int(pred[b, n])
                rows.append({"id": node_ids[n], "label": labels[k] if labels else k,
                             "prob": round(float(prob[b, n, k]), 6)})
        return rows
