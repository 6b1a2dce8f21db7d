"""One graph without labels, for masked-node pretraining (``task=social_pretrain``).

:class:`UnlabelledGraphDataModule` reads the graph of ``task=social`` (the same sources and options: the
built-in karate club, a generated block model, your node + edge CSVs, a Planetoid citation graph) and never
reads its labels (a node CSV may have no label column). Its nodes are split at random (``val_fraction``,
``test_fraction`` of all nodes, by ``seed``) into the nodes whose features each stage scores: every stage
sees the whole graph (all features and edges; full mode) or ego subgraphs around its nodes (sampled mode),
and a batch's ``seed_mask [B, N]`` marks the nodes it may hide and score (the graph adapter's
``token_targets`` reads it). So training hides and predicts only training nodes' features, and
``val/loss`` is measured on nodes whose features were never a training target.

Batches: the graph batch of :mod:`seqattn.modalities.graph.social` (``labels`` all ``IGNORE_INDEX``).

Letters: b batch items, n nodes, f features.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from seqattn.datakit.spec import DataSpec
from seqattn.datakit.splits import split_indices
from seqattn.labels import IGNORE_INDEX, SPLITS
from seqattn.modalities.graph.social import SocialDataModule, SocialGraph, full_batch

log = logging.getLogger("seqattn.modalities.graph")


class UnlabelledGraphDataModule(SocialDataModule):
    """:class:`SocialDataModule`'s graph, its labels unread, its nodes split at random into the nodes each
    stage scores (see the module docstring). Same arguments, but ``source=None`` without ``nodes`` is the
    generated block model (``sbm``: karate's features are one-hot member ids, which no other node could tell);
    ``val_fraction`` / ``test_fraction`` are fractions of all nodes; ``labels`` is ignored, and so are the values
    of ``label_column`` and ``split_column`` (when the node CSV has them they are not features either)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("source") is None and not (kwargs.get("nodes") or kwargs.get("edges")):
            kwargs["source"] = "sbm"  # karate's features are one-hot member ids: no node's could be predicted
        super().__init__(*args, **kwargs)

    def setup(self, stage: str | None = None) -> None:
        if self.graph is not None:
            return
        nodes_path, edges_path = self.graph_files()
        table, edge_index, edge_attr = self.read_graph(nodes_path, edges_path)
        n = len(table.ids)
        parts = split_indices(n, self.val_fraction, self.test_fraction, self.seed)
        split_of = torch.full((n,), -1, dtype=torch.long)
        for k, name in enumerate(SPLITS):
            split_of[torch.as_tensor(parts[name], dtype=torch.long)] = k
        y = torch.full((n,), IGNORE_INDEX, dtype=torch.long)
        self._labels = []
        self.graph = SocialGraph(table.ids, table.x, y, split_of, edge_index, edge_attr, [])
        counts = self.split_sizes()
        log.info("graph %s (no labels read): %d nodes, %d edges, %d features; nodes scored per split %s (random, "
                 "seed %d); %s mode", nodes_path.parent, n, edge_index.shape[1], table.x.shape[1], counts, self.seed,
                 self.resolved_mode(n))
        if counts["train"] == 0:
            raise ValueError(f"{nodes_path}: {n} nodes leave none to train on with val_fraction={self.val_fraction}, "
                             f"test_fraction={self.test_fraction}")

    def stage_nodes(self, stage: str) -> torch.Tensor:
        """The nodes whose features ``stage`` hides and scores (its share of the random node split)."""
        return torch.nonzero(self.graph.split == SPLITS.index(stage)).squeeze(1)

    def split_sizes(self) -> dict[str, int]:
        """Nodes scored per split (after ``setup()``)."""
        if self.graph is None:
            self.setup()
        return {s: int(self.stage_nodes(s).numel()) for s in SPLITS}

    def full_item(self, graph: SocialGraph, nodes: torch.Tensor) -> dict[str, Any]:
        """The whole graph (every feature and edge) as one item whose ``seed_mask`` marks ``nodes``."""
        item = full_batch(graph, None, pe=self._pe)
        seeds = torch.zeros(1, graph.num_nodes, dtype=torch.bool)
        seeds[0, nodes] = True
        item["seed_mask"] = seeds  # [1, N]: the nodes this stage may hide and score
        return item

    def eval_parts(self, graph: SocialGraph, nodes: torch.Tensor, world: int) -> list[dict[str, Any]]:
        """Full mode, evaluation: one item per process, each the whole graph with the stage's nodes
        hideable (``seed_mask``), so every process hides the same nodes a single process would, and
        ``score_mask [1, N]`` marking the every-``world``-th share of them this process scores."""
        item = self.full_item(graph, nodes)
        parts = []
        for rank in range(world):
            share = torch.zeros(1, graph.num_nodes, dtype=torch.bool)
            share[0, nodes[rank::world]] = True
            parts.append(dict(item, score_mask=share))  # the same graph tensors, its own share
        return parts

    def spec(self) -> DataSpec:
        """Node / edge feature widths and the ``pe`` computed; no labels (``num_outputs``: the feature width,
        what a hidden node's target holds)."""
        g = self.graph
        if g is None:
            raise RuntimeError("spec() needs setup() first")
        return DataSpec(num_outputs=int(g.x.shape[1]), labels=None,
                        sizes={"node_features": int(g.x.shape[1]),
                               "edge_features": int(g.edge_attr.shape[1]) if g.edge_attr is not None else 0},
                        provides={"pe": "none" if self.positional == "none" else f"{self.positional}/{self.pe_dim}"})

    def node_loader(self, nodes=None, batch_size=None):
        raise ValueError("a pretraining graph has nothing to predict: fine-tune it first (task=social "
                         "init_from=<checkpoint>)")

    def predict_loader(self, source, batch_size=None):
        return self.node_loader()
