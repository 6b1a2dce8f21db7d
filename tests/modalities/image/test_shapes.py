"""The built-in shapes: deterministic, balanced, and colour carries no class information."""

import numpy as np
import pytest

from seqattn.modalities.image.shapes import SHAPES, generate_shapes


def test_deterministic_and_splits_differ():
    a, la = generate_shapes(40, 16, seed=3, split="train")
    b, lb = generate_shapes(40, 16, seed=3, split="train")
    c, _ = generate_shapes(40, 16, seed=3, split="test")
    assert np.array_equal(a, b) and np.array_equal(la, lb)
    assert not np.array_equal(a, c)
    assert a.shape == (40, 3, 16, 16) and a.dtype == np.float32 and 0 <= a.min() and a.max() <= 1


def test_balanced_classes_and_32_pixels():
    images, labels = generate_shapes(50, 32, classes=("circle", "cross"))
    assert images.shape == (50, 3, 32, 32)
    assert np.bincount(labels).tolist() == [25, 25]


def _nearest_centroid_accuracy(train_x, train_y, test_x, test_y, classes):
    centroids = np.stack([train_x[train_y == k].mean(0) for k in range(classes)])
    pred = np.argmin(((test_x[:, None] - centroids[None]) ** 2).sum(-1), axis=1)
    return float((pred == test_y).mean())


def test_colour_does_not_give_the_class_away():
    """A classifier on colour statistics (mean and spread of each channel) stays near chance (the
    spread carries a little area information); the same classifier on a spatial feature is far above it."""
    x, y = generate_shapes(1500, 16, split="train")
    tx, ty = generate_shapes(500, 16, split="test")
    chance = 1 / len(SHAPES)

    def colour(images):  # order-free statistics of the pixel colours
        flat = images.reshape(len(images), 3, -1)
        return np.concatenate([flat.mean(-1), flat.std(-1)], axis=1)

    acc = _nearest_centroid_accuracy(colour(x), y, colour(tx), ty, len(SHAPES))
    assert acc < chance + 0.08, acc

    def spatial(images):  # the shape's mask around its centre: distance of foreground to the centroid
        gray = images.mean(1)
        bg = np.median(gray.reshape(len(gray), -1), axis=1)[:, None, None]
        fg = np.abs(gray - bg) > 0.15
        rows, cols = np.mgrid[:16, :16]
        feats = []
        for m in fg:
            r, c = rows[m], cols[m]
            d = np.hypot(r - r.mean(), c - c.mean()) if m.any() else np.zeros(1)
            feats.append([d.std() / (d.mean() + 1e-6), (d < 0.4 * d.max()).mean()])
        return np.asarray(feats)

    assert _nearest_centroid_accuracy(spatial(x), y, spatial(tx), ty, len(SHAPES)) > chance + 0.1


@pytest.mark.parametrize("kwargs, match", [
    ({"image_size": 4}, "image_size"),
    ({"split": "dev"}, "split"),
    ({"size_range": (0.3, 0.6)}, "size_range"),
    ({"classes": ("circle", "star")}, "classes"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate_shapes(4, **kwargs)
