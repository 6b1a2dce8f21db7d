"""Modalities as vertical slices: each folder holds one modality's adapter, readers and
DataModules, built-in corpus and figures (and the structure cells it declares for
``python -m seqattn.bench core``, in ``structure_cells.py``, when it has any).

- :mod:`~seqattn.modalities.audio`: speech as frames of a sliding window;
- :mod:`~seqattn.modalities.text`: words as embeddings;
- :mod:`~seqattn.modalities.image`: pixels / patches as vectors on a 2-D grid;
- :mod:`~seqattn.modalities.graph`: molecules and social networks as nodes with graph-masked attention.

A modality imports the core, the model protocols, the data kit and the label conventions --
never another modality, never an objective, the training machinery, the model internals or an
entry point (a benchmark suite that runs recipes is ``seqattn/bench/<m>.py``).
"""
