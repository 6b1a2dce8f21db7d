"""The built-in image data: coloured shapes on noisy backgrounds, generated deterministically.

Each image shows one shape -- ``circle``, ``square``, ``triangle``, ``cross`` or ``ring`` -- at a
random position, size (radius ``size_range`` × image side) and rotation, in a random colour, on a
background of another random colour with per-pixel Gaussian noise on top. Colours are drawn
independently of the class (foreground and background alike), and sizes vary so much that the
number of foreground pixels overlaps between classes: the label needs the spatial arrangement
of the pixels (the shape), not their colours.

Shapes are rendered with ``supersample²`` samples per pixel (anti-aliased edges). Same
arguments -> the same arrays, on any machine (numpy ``default_rng`` streams per split).

Letters: n images, c channels (RGB), h/w rows/columns.
"""

from __future__ import annotations

import numpy as np

SHAPES = ("circle", "square", "triangle", "cross", "ring")
SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}


def _inside(kind: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Membership of shape-local coordinates (unit = the shape's radius) in shape ``SHAPES[kind]``."""
    name = SHAPES[kind]
    if name == "circle":
        return u * u + v * v <= 1.0
    if name == "ring":
        r2 = u * u + v * v
        return (r2 <= 1.0) & (r2 >= 0.5**2)
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) <= 0.8
    if name == "cross":
        return ((np.abs(u) <= 0.32) & (np.abs(v) <= 1.0)) | ((np.abs(v) <= 0.32) & (np.abs(u) <= 1.0))
    if name == "triangle":  # equilateral, circumradius 1, inradius 0.5
        inside = np.ones_like(u, dtype=bool)
        for angle in (-np.pi / 2, np.pi / 6, 5 * np.pi / 6):  # outward edge normals
            inside &= u * np.cos(angle) + v * np.sin(angle) <= 0.5
        return inside
    raise AssertionError(name)


def generate_shapes(
    n: int,
    image_size: int = 16,
    seed: int = 0,
    split: str = "train",
    size_range: tuple[float, float] = (0.3, 0.45),
    noise: float = 0.05,
    min_contrast: float = 0.4,
    supersample: int = 4,
    classes: tuple[str, ...] = SHAPES,
) -> tuple[np.ndarray, np.ndarray]:
    """Render ``n`` images.

    Args:
        n: number of images (classes balanced: ``i % C`` before shuffling).
        image_size: side in pixels (16 by default; 32 works too).
        seed, split: the random stream (``train``/``val``/``test`` are disjoint streams of one seed).
        size_range: shape radius as a fraction of the image side, uniform in this range.
        noise: std of the per-pixel Gaussian noise added to every channel.
        min_contrast: minimum Euclidean RGB distance between shape and background colours.
        supersample: samples per pixel side for anti-aliasing.
        classes: the shape names to draw (a subset of :data:`SHAPES`), in label order.

    Returns:
        ``images [n, 3, H, W] float32`` in [0, 1] and ``labels [n] int64`` (indices into ``classes``).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if image_size < 8:
        raise ValueError(f"image_size must be >= 8 pixels, got {image_size}")
    if split not in SPLIT_SEEDS:
        raise ValueError(f"split must be one of {tuple(SPLIT_SEEDS)}, got {split!r}")
    lo, hi = size_range
    if not 0 < lo <= hi < 0.5:
        raise ValueError(f"size_range must satisfy 0 < low <= high < 0.5 (fraction of the side), got {size_range}")
    unknown = [c for c in classes if c not in SHAPES]
    if unknown or len(classes) < 2:
        raise ValueError(f"classes must be >= 2 of {SHAPES}, got {list(classes)}")
    kinds = [SHAPES.index(c) for c in classes]
    rng = np.random.default_rng([seed, SPLIT_SEEDS[split]])
    labels = rng.permutation(np.arange(n) % len(classes)).astype(np.int64)
    side = image_size
    radius = rng.uniform(lo, hi, n) * side  # [n] pixels
    centre = rng.uniform(radius[:, None], side - radius[:, None], (n, 2))  # [n, 2] (x, y): the shape fits
    angle = rng.uniform(0, 2 * np.pi, n)
    background = rng.uniform(0, 1, (n, 3))
    foreground = rng.uniform(0, 1, (n, 3))
    for _ in range(100):  # redraw foreground colours too close to their background
        close = np.linalg.norm(foreground - background, axis=1) < min_contrast
        if not close.any():
            break
        foreground[close] = rng.uniform(0, 1, (int(close.sum()), 3))
    pixel_noise = rng.normal(0, noise, (n, 3, side, side))

    s = supersample
    grid = (np.arange(side * s) + 0.5) / s  # sample positions in pixel units
    gx, gy = np.meshgrid(grid, grid)  # [H·s, W·s] (x = column, y = row)
    alpha = np.empty((n, side, side), dtype=np.float64)
    for i in range(n):
        dx, dy = gx - centre[i, 0], gy - centre[i, 1]
        cos, sin = np.cos(angle[i]), np.sin(angle[i])
        u = (dx * cos + dy * sin) / radius[i]
        v = (-dx * sin + dy * cos) / radius[i]
        cover = _inside(kinds[labels[i]], u, v).astype(np.float64)  # [H·s, W·s]
        alpha[i] = cover.reshape(side, s, side, s).mean(axis=(1, 3))  # [H, W] coverage
    a = alpha[:, None]  # [n, 1, H, W]
    images = a * foreground[:, :, None, None] + (1 - a) * background[:, :, None, None] + pixel_noise
    return np.clip(images, 0.0, 1.0).astype(np.float32), labels
