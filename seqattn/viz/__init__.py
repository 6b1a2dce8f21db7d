"""Figures written into a run directory, one module per modality (matplotlib, ``Agg``).

Each ``plot_*`` takes ``(model, datamodule, out_dir)`` and returns the PNG path, so a
task config selects its figure with
``plot_fn: {_target_: seqattn.viz.<module>.plot_..., _partial_: true}``.
"""

from seqattn.viz.speech import plot_frame_labeling

__all__ = ["plot_frame_labeling"]
