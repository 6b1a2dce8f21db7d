"""Modalities as vertical slices: each folder holds one modality's adapter, readers and
DataModules, built-in corpus and figures (and benchmarks, when it has any).

- :mod:`~seqattn.modalities.audio`: speech as frames of a sliding window;
- :mod:`~seqattn.modalities.text`: words as embeddings;
- :mod:`~seqattn.modalities.image`: pixels / patches as vectors on a 2-D grid;
- :mod:`~seqattn.modalities.graph`: molecules and social networks as nodes with graph-masked attention.

A modality imports the core, the model protocols, the data kit and the label conventions --
never another modality, never an objective, never the training machinery.
"""
