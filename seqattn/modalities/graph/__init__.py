"""Graphs: molecules and social networks as node vectors with graph-masked attention.

- :mod:`~seqattn.modalities.graph.adapter`: :class:`GraphAdapter` (nodes + k-hop edges + edge bias -> Tokens);
- :mod:`~seqattn.modalities.graph.positional`: Laplacian and random-walk encodings, once per graph;
- :mod:`~seqattn.modalities.graph.batching`: padding graphs into a batch;
- :mod:`~seqattn.modalities.graph.molecules`: SMILES -> atom graphs (RDKit), SMILES files, MoleculeNet;
- :mod:`~seqattn.modalities.graph.molecule_data`: :class:`MoleculeDataModule` (property prediction);
- :mod:`~seqattn.modalities.graph.social_files`: node / edge CSVs, karate club, block models;
- :mod:`~seqattn.modalities.graph.social`: :class:`SocialDataModule` (node classification, full or sampled);
- :mod:`~seqattn.modalities.graph.sampling`: disjoint ego-subgraph neighbour sampling;
- :mod:`~seqattn.modalities.graph.viz`: molecule and node-classification figures;
- :mod:`~seqattn.modalities.graph.structure_cells`: the ``graph_bias`` cell of ``python -m seqattn.bench core``
  (the ``graph`` suite itself is :mod:`seqattn.bench.graph`).
"""

from seqattn.modalities.graph.adapter import GraphAdapter, k_hop_edges
from seqattn.modalities.graph.batching import collate_graphs
from seqattn.modalities.graph.positional import graph_positional_encoding

__all__ = ["GraphAdapter", "collate_graphs", "graph_positional_encoding", "k_hop_edges"]
