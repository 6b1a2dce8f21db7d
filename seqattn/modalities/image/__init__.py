"""Images: pixels (or patches) as vectors on a 2-D grid.

- :mod:`~seqattn.modalities.image.adapter`: :class:`ImageAdapter` (pixels / patches + 2-D positions, k×k windows);
- :mod:`~seqattn.modalities.image.readers`: image files, class folders, CSVs, fitting to one size;
- :mod:`~seqattn.modalities.image.data`: :class:`ImageDataModule` (shapes, folder, csv, CIFAR-10, MNIST);
- :mod:`~seqattn.modalities.image.shapes`: the built-in coloured shapes;
- :mod:`~seqattn.modalities.image.viz`: confusion matrix and attention overlays;
- its benchmark suite is :mod:`seqattn.bench.image` (``python -m seqattn.bench image``).
"""

from seqattn.modalities.image.adapter import ImageAdapter

__all__ = ["ImageAdapter"]
