"""Graph files: a node CSV and an edge-list CSV, and the built-in graphs written in that format.

- node CSV: ``id,<feature columns...>,label[,split]`` (``label`` may be empty for unlabeled nodes;
  ``split`` in train/val/test, or the column absent: then a stratified split by seed);
- edge CSV: ``source,target[,<edge feature columns>]`` (e.g. a ``weight``).

Column names are configurable. A malformed row raises ``ValueError`` with ``file:line``; an edge
naming a node the node CSV lacks is an error listing the first such rows (or, with
``unknown_nodes=skip``, skipped and counted in the log); an edge CSV without edges is an error.
Zachary's karate club (from PyG) and a generated stochastic block model are written as the same
two files, so the built-in data goes through the same reader as yours.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from seqattn.datakit.files import read_table
from seqattn.labels import LabelNames, is_missing, split_name

log = logging.getLogger("seqattn.modalities.graph")


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


def _float(value: str | None, where: str, column: str) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: column {column!r} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{where}: column {column!r} must be finite, got {value!r}")
    return out


def read_node_csv(
    path: str | Path,
    id_column: str = "id",
    label_column: str | None = "label",
    split_column: str | None = "split",
    feature_columns: Sequence[str] | None = None,
    encoding: str = "utf-8",
) -> NodeTable:
    """Read a node CSV: one row per node, ``id`` unique, numeric feature columns, optional
    ``label`` (empty / ``nan`` / ``null`` = unlabeled) and ``split`` (train/val/test; empty = none).

    ``feature_columns=None``: every column except id/label/split. A missing label or split
    *column* is allowed (unlabeled graph for prediction; split by seed); missing *values* in
    feature columns, duplicate ids and unknown split names are errors naming ``file:line``.
    """
    table = read_table(path, "csv", encoding, [id_column], "node CSV",
                       hint="set data.id_column (and data.label_column / data.split_column)")
    header = table.header
    reserved = {id_column, label_column, split_column}
    if feature_columns is None:
        features = [c for c in header if c not in reserved]
    else:
        features = list(feature_columns)
        missing = [c for c in features if c not in header]
        if missing:
            raise ValueError(f"{table.path}:1: feature columns {missing} are not in the header {header}")
    has_label = label_column is not None and label_column in header
    has_split = split_column is not None and split_column in header
    ids, rows, labels, splits, where, names = [], [], [], [], [], LabelNames()
    seen: dict[str, str] = {}
    for line, row in table.rows:
        at = table.where(line)
        node = row[id_column]
        if not node:
            raise ValueError(f"{at}: empty node id in column {id_column!r}")
        if node in seen:
            raise ValueError(f"{at}: node id {node!r} repeats (first at {seen[node]})")
        seen[node] = at
        rows.append([_float(row[c], at, c) for c in features])
        label = row[label_column] if has_label else ""
        labels.append(None if is_missing(label) else names(label))
        splits.append(split_name(row[split_column], at) if has_split else None)
        ids.append(node)
        where.append(at)
    if not ids:
        raise ValueError(f"{table.path}: no nodes (the file has a header and no rows)")
    names.log(log, table.path)
    x = torch.tensor(rows, dtype=torch.float32).reshape(len(ids), len(features))  # [N, F]
    return NodeTable(ids, x, features, labels, splits, where)


def read_edge_csv(
    path: str | Path,
    node_index: dict[str, int],
    source_column: str = "source",
    target_column: str = "target",
    feature_columns: Sequence[str] | None = None,
    unknown_nodes: str = "error",
    encoding: str = "utf-8",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Read an edge list: ``source,target[,feature columns...]`` -> ``edge_index [2, E]`` (row 0
    source), ``edge_attr [E, Fe]`` or None.

    ``feature_columns=None``: every column except source/target (e.g. ``weight``).
    ``unknown_nodes``: ``error`` (an edge naming a node the node CSV lacks raises, listing the
    first rows and the count) or ``skip`` (such edges are left out; the count and first rows
    are logged). A file without any edge (a header only) is an error: attention over a graph
    without edges is attention over isolated nodes.
    """
    if unknown_nodes not in ("error", "skip"):
        raise ValueError(f"unknown_nodes={unknown_nodes!r} is not one of ('error', 'skip')")
    table = read_table(path, "csv", encoding, [source_column, target_column], "edge CSV",
                       hint="set data.source_column / data.target_column")
    header = table.header
    if feature_columns is None:
        features = [c for c in header if c not in (source_column, target_column)]
    else:
        features = list(feature_columns)
        missing = [c for c in features if c not in header]
        if missing:
            raise ValueError(f"{table.path}:1: edge feature columns {missing} are not in the header {header}")
    src, dst, attrs, unknown = [], [], [], []
    for line, row in table.rows:
        at = table.where(line)
        a, b = row[source_column], row[target_column]
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
                             "(add them to the node CSV, or set data.unknown_nodes=skip to leave these edges out)")
        log.warning("left out %d edge(s) naming nodes missing from the node CSV: %s", len(unknown), listing)
    if not src:
        raise ValueError(f"{table.path}: no edges" + (" left after skipping unknown nodes" if unknown else
                                                    " (the file has a header and no rows)")
                         + "; graph attention needs the graph's edges")
    edge_index = torch.tensor([src, dst], dtype=torch.long).reshape(2, len(src))  # [2, E]
    edge_attr = torch.tensor(attrs, dtype=torch.float32).reshape(len(src), len(features)) if features else None
    return edge_index, edge_attr


def coalesce_edges(edge_index: torch.Tensor, edge_attr: torch.Tensor | None, num_nodes: int, undirected: bool,
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
# built-in graphs, written in the user format



def _write_graph_csv(folder: Path, ids: Sequence[str], x: torch.Tensor, labels: Sequence[str],
                     edges: torch.Tensor, prefix: str = "f", splits: Sequence[str] | None = None) -> Path:
    """Write ``nodes.csv`` (``id,f0..,label[,split]``) and ``edges.csv`` (``source,target``) atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    with open(tmp / "nodes.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", *[f"{prefix}{j}" for j in range(x.shape[1])], "label"] + (["split"] if splits else []))
        for i, (node, row, label) in enumerate(zip(ids, x.tolist(), labels)):
            w.writerow([node, *[f"{v:.6g}" for v in row], label] + ([splits[i]] if splits else []))
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


PLANETOID = ("Cora", "CiteSeer", "PubMed")
#: the Planetoid training splits: ``public`` (20 labelled nodes per class) or ``full`` (every labelled node outside
#: the 500 validation and 1,000 test nodes; PyG's ``Planetoid(split="full")``); validation and test are the same
PLANETOID_SPLITS = ("public", "full")


def planetoid_csv(data_dir: str | Path, name: str = "Cora", root: str | Path | None = None,
                  split: str = "public") -> Path:
    """A Planetoid citation graph (Cora, CiteSeer, PubMed) with its standard split (20 labelled nodes
    per class for training, 500 validation, 1,000 test) as ``nodes.csv`` (with a ``split`` column) +
    ``edges.csv`` under ``data_dir/planetoid/<name>/csv``.

    ``split``: ``public`` (the standard split above) or ``full`` (PyG's ``split="full"``: every node outside the
    500 validation and 1,000 test nodes is a training node -- 1,208 on Cora; validation and test unchanged),
    written under ``data_dir/planetoid/<name>/csv-full`` so the two splits' files never mix.

    The raw files are the ones ``torch_geometric.datasets.Planetoid`` reads (``ind.<name>.x``, ``.tx``,
    ``.allx``, ``.y``, ``.ty``, ``.ally``, ``.graph``, ``.test.index``): from ``root/<name>/raw/`` when
    ``root`` is given (copied, since PyG writes its processed files next to them), else downloaded by
    PyG into ``data_dir/planetoid``; offline without them, the error names the files to place there.
    Labels are ``c0 .. c{k-1}`` (PyG's class indices) on the nodes of the three splits; the other nodes
    are the unlabelled rest of the semi-supervised setting. Features are the raw bag-of-words vectors.
    """
    import shutil

    match = {n.lower(): n for n in PLANETOID}.get(str(name).lower())
    if match is None:
        raise ValueError(f"unknown Planetoid graph {name!r}; expected one of {PLANETOID}")
    if split not in PLANETOID_SPLITS:
        raise ValueError(f"unknown Planetoid split {split!r} (data.planetoid_split); expected one of {PLANETOID_SPLITS}")
    base = Path(data_dir).expanduser() / "planetoid"
    folder = base / match / ("csv" if split == "public" else f"csv-{split}")
    if (folder / "nodes.csv").is_file() and (folder / "edges.csv").is_file():
        return folder
    raw = base / match / "raw"
    files = [f"ind.{match.lower()}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")]
    if root is not None and not all((raw / f).is_file() for f in files):
        source = Path(root).expanduser() / match / "raw"
        if not source.is_dir():
            source = Path(root).expanduser()  # the raw folder itself
        missing = [f for f in files if not (source / f).is_file()]
        if missing:
            raise ValueError(f"data.root={root}: {source} lacks the Planetoid raw files {missing}")
        raw.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(source / f, raw / f)
    from torch_geometric.datasets import Planetoid

    try:
        data = Planetoid(str(base), match, split=split)[0]
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 -- URLError, HTTP errors, a broken raw file
        raise ValueError(f"could not read or download Planetoid {match} ({type(err).__name__}: {err}); offline, place "
                         f"{', '.join(files)} into {raw} (or give data.root=<folder with {match}/raw/>)") from err
    ids = [str(i) for i in range(data.num_nodes)]
    splits = ["train" if t else "val" if v else "test" if s else "" for t, v, s in
              zip(data.train_mask.tolist(), data.val_mask.tolist(), data.test_mask.tolist())]
    once = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    log.info("Planetoid %s, %s split (%d train, %d val, %d test nodes): %d nodes, %d edges, %d features -> %s", match,
             split, *(splits.count(k) for k in ("train", "val", "test")), data.num_nodes,
             once.shape[1], data.x.shape[1], folder)
    # nodes outside the three splits are the unlabelled rest of the semi-supervised setting: no label
    labels = [f"c{int(c)}" if s else "" for c, s in zip(data.y.tolist(), splits)]
    return _write_graph_csv(folder, ids, data.x, labels, once, splits=splits)


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


