"""grid_window_mask: a k×k neighbourhood on a row-major grid, checked against a loop."""

import pytest
import torch

from seqattn.core.masks import grid_window_mask


def _reference(h, w, k):
    out = torch.zeros(h * w, h * w, dtype=torch.bool)
    for r in range(h):
        for c in range(w):
            for r2 in range(h):
                for c2 in range(w):
                    out[r * w + c, r2 * w + c2] = abs(r - r2) <= k // 2 and abs(c - c2) <= k // 2
    return out


@pytest.mark.parametrize("h, w, k", [(1, 1, 1), (3, 4, 1), (4, 5, 3), (5, 3, 5), (2, 6, 7)])
def test_matches_the_loop_reference(h, w, k):
    assert torch.equal(grid_window_mask(h, w, k), _reference(h, w, k))


def test_neighbourhood_sizes():
    mask = grid_window_mask(6, 7, 3)
    counts = mask.sum(1).view(6, 7)
    assert counts[3, 3] == 9 and counts[0, 0] == 4 and counts[0, 3] == 6  # interior, corner, edge
    assert torch.equal(mask, mask.T)
    assert grid_window_mask(4, 4, 9).all()  # a window larger than the grid: global attention


@pytest.mark.parametrize("k", [0, 2, -1])
def test_even_or_non_positive_window_is_rejected(k):
    with pytest.raises(ValueError, match="odd"):
        grid_window_mask(4, 4, k)


def test_empty_grid_is_rejected():
    with pytest.raises(ValueError, match="grid size"):
        grid_window_mask(0, 4, 3)
