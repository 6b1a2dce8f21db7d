"""The attention structure rules written out as a plain loop over pairs, independent of
:func:`seqattn.core.masks.structure_allows` (which both the dense reference and the flex mask_mod use)."""

from __future__ import annotations

import torch


def allowed_by_hand(length: int, num_global: int = 0, window: int | None = None,
                    grid: tuple[int, int] | None = None, grid_window: int | None = None,
                    causal: bool = False) -> torch.Tensor:
    """``[L, L]`` bool: the global tokens ``0 .. num_global-1`` see and are seen by everything; the other
    tokens ``t = i - num_global`` follow every given rule: ``|t_i - t_j| <= window``; on the row-major grid
    ``(h, w)``, row and column each within ``grid_window // 2``; ``t_j <= t_i`` when causal."""
    out = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(length):
            if i < num_global or j < num_global:
                out[i, j] = True
                continue
            ti, tj = i - num_global, j - num_global
            ok = True
            if window is not None:
                ok &= abs(ti - tj) <= window
            if grid_window is not None:
                w = grid[1]
                ok &= abs(ti // w - tj // w) <= grid_window // 2 and abs(ti % w - tj % w) <= grid_window // 2
            if causal:
                ok &= tj <= ti
            out[i, j] = ok
    return out
