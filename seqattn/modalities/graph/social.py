"""Node classification on social networks: one graph is one "sequence" of nodes.

Sources (``SocialDataModule(source=...)``):

- ``karate`` (default): Zachary's karate club as PyG ships it (34 members, 78 friendships,
  one-hot member features, 4 community labels), written once as the two CSV files below
  (so the built-in data goes through the same reader as yours) and split into
  train/val/test nodes by a deterministic stratified split.
- ``sbm``: a generated contextual stochastic block model (``num_nodes`` nodes in ``blocks``
  communities, noisy community-dependent features): big enough to need neighbour sampling,
  built so one node's own features give only a weak hint of its community.
- ``csv``: your files (giving ``nodes`` selects it). A node CSV (``id,<feature columns...>,label,split``; ``label`` may be
  empty for unlabeled nodes, ``split`` in train/val/test, or the column absent: then a
  stratified split by ``seed``) and an edge-list CSV (``source,target[,<edge feature columns>]``,
  e.g. a ``weight``). Column names are configurable. A malformed row raises ValueError with
  ``file:line``; an edge naming a node the node CSV does not list is an error listing the
  first such rows (or, with ``unknown_nodes=skip``, skipped and counted in the log).
- ``planetoid``: a citation graph (``name``: Cora, CiteSeer, PubMed) with its standard split, read
  offline from the raw files PyG's ``Planetoid`` reads (``root``), written as the same two CSVs;
  ``planetoid_split=full``: every labelled node outside the validation and test nodes trains.

File formats: :mod:`seqattn.modalities.graph.social_files`.

Batches (the graph batch convention of :mod:`seqattn.modalities.graph.adapter`):
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

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.utils.data import DataLoader, Dataset
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

from seqattn.datakit.items import Item
from seqattn.datakit.module import TaskDataModule
from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import split
from seqattn.labels import IGNORE_INDEX, SPLITS
from seqattn.modalities.graph.positional import GRAPH_POSITIONALS, graph_positional_encoding
from seqattn.modalities.graph.sampling import EgoNeighborSampler, ego_batch
from seqattn.modalities.graph.social_files import (
    PLANETOID_SPLITS,
    NodeTable,
    coalesce_edges,
    karate_csv,
    planetoid_csv,
    read_edge_csv,
    read_node_csv,
    sbm_csv,
)

log = logging.getLogger("seqattn.modalities.graph")

SOURCES = ("karate", "sbm", "csv", "planetoid")
MODES = ("auto", "full", "sampled")


# ---------------------------------------------------------------------------------------------
# the graph in memory


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


def _world_size() -> int:
    """Processes in the running ``torch.distributed`` group (1 outside one)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


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


class SocialDataModule(TaskDataModule):
    """Node classification on one graph (see the module docstring for sources, batches and modes).

    Args:
        source: ``karate`` | ``sbm`` | ``csv`` | ``planetoid``; None: ``csv`` when ``nodes`` is given, else
            ``karate``.
        name, root: ``planetoid``: the graph (Cora, CiteSeer, PubMed) and a folder holding ``<name>/raw/``
            (the files PyG's Planetoid reads; read offline), None = PyG's download into ``data_dir``.
        planetoid_split: ``planetoid``: ``public`` (20 training nodes per class) | ``full`` (every node outside
            the 500 validation and 1,000 test nodes trains: 1,208 on Cora; validation and test unchanged).
        normalize_features: ``none`` | ``row`` (each node's features divided by their sum).
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
        sbm: parameters of :func:`~seqattn.modalities.graph.social_files.sbm_csv` (``source=sbm``).
    """

    def __init__(
        self,
        source: str | None = None,
        data_dir: str | None = None,
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
        encoding: str = "utf-8",
        name: str = "Cora",
        root: str | None = None,
        normalize_features: str = "none",
        planetoid_split: str = "public",
    ) -> None:
        if source is None:
            source = "csv" if nodes or edges else "karate"
        if source not in SOURCES:
            raise ValueError(f"source={source!r} is not one of {SOURCES}")
        if source == "csv" and (not nodes or not edges):
            raise ValueError("source='csv' needs nodes=<node CSV> and edges=<edge-list CSV>")
        if source != "csv" and nodes:
            raise ValueError(f"data.nodes={nodes!r} is given but data.source={source} would ignore it; drop data.source "
                             "(a node CSV selects the csv source) or data.nodes")
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not one of {MODES}")
        if planetoid_split not in PLANETOID_SPLITS:
            raise ValueError(f"planetoid_split={planetoid_split!r} is not one of {PLANETOID_SPLITS}")
        if unknown_nodes not in ("error", "skip"):
            raise ValueError(f"unknown_nodes={unknown_nodes!r} is not one of ('error', 'skip')")
        if steps_per_epoch <= 0:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
        num_neighbors = [int(k) for k in num_neighbors]
        if not num_neighbors or any(k == 0 or k < -1 for k in num_neighbors):
            raise ValueError(f"num_neighbors must be positive ints or -1 (all) per hop, got {num_neighbors}")
        if positional not in GRAPH_POSITIONALS:
            raise ValueError(f"positional={positional!r} is not one of {GRAPH_POSITIONALS}")
        super().__init__(batch_size=batch_size, num_workers=num_workers, seed=seed, data_dir=data_dir,
                         val_fraction=val_fraction, test_fraction=test_fraction, labels=labels, encoding=encoding)
        self.source = source
        self.nodes, self.edges = nodes, edges
        self.node_columns = dict(id_column=id_column, label_column=label_column, split_column=split_column,
                                 feature_columns=list(feature_columns) if feature_columns is not None else None)
        self.edge_columns = dict(source_column=source_column, target_column=target_column,
                                 feature_columns=list(edge_feature_columns)
                                 if edge_feature_columns is not None else None)
        self.undirected = undirected
        self.unknown_nodes = unknown_nodes
        self.mode = mode
        self.full_batch_max_nodes = int(full_batch_max_nodes)
        self.num_neighbors = num_neighbors
        self.steps_per_epoch = steps_per_epoch
        self.positional, self.pe_dim = positional, int(pe_dim)
        self.sbm = dict(sbm or {})
        self.name, self.root = name, root
        self.planetoid_split = planetoid_split
        if normalize_features not in ("none", "row"):
            raise ValueError(f"normalize_features={normalize_features!r} is not one of ('none', 'row')")
        self.normalize_features = normalize_features
        self._pe: torch.Tensor | None = None  # [N, K] of the whole graph, computed once
        self.graph: SocialGraph | None = None

    # -- files ----------------------------------------------------------------------------
    def graph_files(self) -> tuple[Path, Path]:
        """``(nodes.csv, edges.csv)`` of this source (built-in graphs are written on first use)."""
        if self.source == "karate":
            folder = karate_csv(self.data_dir)
        elif self.source == "sbm":
            folder = sbm_csv(self.data_dir, **self.sbm)
        elif self.source == "planetoid":
            folder = planetoid_csv(self.data_dir, self.name, self.root, self.planetoid_split)
            log.info("Planetoid %s, %s split: %s", self.name, self.planetoid_split, folder)
        else:
            return Path(self.nodes).expanduser(), Path(self.edges).expanduser()
        return folder / "nodes.csv", folder / "edges.csv"

    def prepare_data(self) -> None:
        self.graph_files()

    # -- what the model needs ----------------------------------------------------------------
    @property
    def num_features(self) -> int:
        if self.graph is None:
            raise RuntimeError("num_features is known after setup()")
        return int(self.graph.x.shape[1])

    def spec(self) -> DataSpec:
        """Classes, node / edge feature widths (from the files) and the ``pe`` the data computes."""
        g = self.graph
        if g is None:
            raise RuntimeError("spec() needs setup() first")
        return DataSpec(num_outputs=self.num_classes, labels=self.label_names,
                        sizes={"node_features": int(g.x.shape[1]),
                               "edge_features": int(g.edge_attr.shape[1]) if g.edge_attr is not None else 0},
                        provides={"pe": "none" if self.positional == "none" else f"{self.positional}/{self.pe_dim}"})

    # -- reading --------------------------------------------------------------------------
    def read_graph(self, nodes_path: str | Path, edges_path: str | Path) -> tuple[NodeTable, torch.Tensor,
                                                                                torch.Tensor | None]:
        """Read the two CSVs: the node table and ``edge_index [2, E]`` / ``edge_attr`` after
        symmetrising (``undirected``) and merging repeats."""
        table = read_node_csv(nodes_path, **self.node_columns, encoding=self.encoding)
        if self.normalize_features == "row":  # each node's features sum to 1 (bag-of-words counts, GAT/GCN)
            table.x = table.x / table.x.sum(dim=1, keepdim=True).clamp_min(1e-12)
        edge_index, edge_attr = read_edge_csv(edges_path, table.index, unknown_nodes=self.unknown_nodes,
                                              **self.edge_columns, encoding=self.encoding)
        edge_index, edge_attr = coalesce_edges(edge_index, edge_attr, len(table.ids), self.undirected,
                                               str(edges_path))
        return table, edge_index, edge_attr

    def setup(self, stage: str | None = None) -> None:
        if self.graph is not None:
            return
        nodes_path, edges_path = self.graph_files()
        table, edge_index, edge_attr = self.read_graph(nodes_path, edges_path)
        nodes = list(range(len(table.ids)))
        labeled = [i for i in nodes if table.labels[i] is not None]
        given = any(s is not None for s in table.splits)
        parts = split(labeled, self.val_fraction, self.test_fraction, self.seed,
                      given=(lambda i: table.splits[i]) if given else None,
                      stratify=None if given else (lambda i: table.labels[i]),
                      where=lambda i: table.where[i], what="labeled nodes")
        if given:  # unlabeled nodes may carry a split: they are never in a split's labels anyway
            how = f"from the {self.node_columns['split_column']!r} column"
        else:
            how = f"stratified by class, seed {self.seed}, val {self.val_fraction}, test {self.test_fraction}"
        self.set_labels({name: [(table.labels[i], table.where[i]) for i in idx] for name, idx in parts.items()},
                        source=str(nodes_path))
        to_index = {name: i for i, name in enumerate(self._labels)}
        y = torch.tensor([to_index[lab] if lab is not None else IGNORE_INDEX for lab in table.labels], dtype=torch.long)
        split_of = torch.full((len(nodes),), -1, dtype=torch.long)
        for k, name in enumerate(SPLITS):
            split_of[torch.as_tensor(parts[name], dtype=torch.long)] = k
        self.graph = SocialGraph(table.ids, table.x, y, split_of, edge_index, edge_attr, list(self._labels))
        counts = {s: int(self.graph.nodes_of(s).numel()) for s in SPLITS}
        log.info("graph %s: %d nodes, %d edges, %d features, labels %s; labeled nodes %s (%s); %s mode",
                 nodes_path.parent, self.graph.num_nodes, edge_index.shape[1], table.x.shape[1], self._labels,
                 counts, how, self.resolved_mode(self.graph.num_nodes))
        if counts["train"] == 0:
            raise ValueError(f"{nodes_path}: no labeled training nodes")

    def split_sizes(self) -> dict[str, int]:
        """Labeled nodes per split (after ``setup()``)."""
        if self.graph is None:
            self.setup()
        return {s: int(self.graph.nodes_of(s).numel()) for s in SPLITS}

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

    def stage_nodes(self, stage: str) -> torch.Tensor:
        """The nodes ``stage``'s batches score: its labeled nodes."""
        return self.graph.nodes_of(stage)

    def full_item(self, graph: SocialGraph, nodes: torch.Tensor) -> dict[str, Any]:
        """The whole graph as one item that scores ``nodes`` (full mode): their labels, every node predicted."""
        return full_batch(graph, nodes, pe=self._pe)

    def eval_parts(self, graph: SocialGraph, nodes: torch.Tensor, world: int) -> list[dict[str, Any]]:
        """Full mode, evaluation: one item per process (``world`` of them), each scoring every
        ``world``-th node of ``nodes`` (a split's labeled nodes)."""
        return [self.full_item(graph, nodes[rank::world]) for rank in range(world)]

    def _loader(self, stage: str) -> DataLoader:
        if self.graph is None:
            self.setup()
        g = self.graph
        labeled = self.stage_nodes(stage)
        if self.resolved_mode(g.num_nodes) == "full":
            if self._pe is None:
                self._pe = self._graph_pe(g)
            if stage == "train":
                return DataLoader(_Repeat(self.full_item(g, labeled), self.steps_per_epoch), batch_size=1,
                                  collate_fn=_first)
            # evaluation: one item per process, each scoring its own share of the split's nodes, so that
            # under DDP the distributed sampler hands each process one item and no node is counted twice
            return DataLoader(self.eval_parts(g, labeled, _world_size()), batch_size=1, collate_fn=_first)
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

    def describe(self, batch: Mapping[str, Any]) -> list[Item]:
        """One row per predicted node (``seed_mask``): its node id."""
        seed_mask = batch["seed_mask"].cpu()
        return [Item(id=str(name), positions=node_ids, select=torch.nonzero(seed_mask[b]).flatten().tolist(),
                     per_position=True)
                for b, (name, node_ids) in enumerate(zip(batch["ids"], batch["node_ids"]))]
