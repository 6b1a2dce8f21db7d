"""FlexAttention block masks for described structure (CUDA, behind a check).

Letters: b batch, h heads, l length, g global tokens.

On CUDA, ``torch.nn.attention.flex_attention`` skips whole blocks that a ``mask_mod`` forbids, forward
and backward: windows, grid windows, causal and padding then cost their allowed pairs. On CPU it is
forward-only (its backward raises) and slow to compile, so the planner uses it only when
:func:`flex_available` (CUDA, torch with FlexAttention) and the encoder asks for it
(``Encoder(flex_attention=True)``); the blocked band kernel (:mod:`seqattn.core.band`) is the CPU
path. :func:`flex_attention_for` also runs eagerly on CPU without gradients (tests compare it with
the reference there).
"""

from __future__ import annotations

from typing import Callable

import torch

from seqattn.core.masks import structure_allows

_COMPILED: dict = {}


def flex_available(device: torch.device) -> bool:
    """FlexAttention can train here: a CUDA device and a torch that has it."""
    if device.type != "cuda":
        return False
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def structure_mask_mod(
    length: int,
    *,
    num_global: int = 0,
    window: int | None = None,
    grid: tuple[int, int] | None = None,
    grid_window: int | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> Callable:
    """``mask_mod(b, h, q_idx, kv_idx) -> bool`` of a structure description: the rules of
    :func:`seqattn.core.masks.structure_allows` (the same function that builds
    :func:`~seqattn.core.masks.structure_mask`) AND the key padding of ``mask [B, L]``; padded queries
    allow everything (their output is zeroed by the caller)."""
    width = grid[1] if grid is not None else None
    half = (grid_window // 2) if grid_window is not None else None

    def mask_mod(b, h, q_idx, kv_idx):
        ok = structure_allows(q_idx, kv_idx, num_global=num_global, window=window, grid_width=width, grid_half=half,
                              causal=causal)
        if ok is None:
            ok = (q_idx >= 0) | True  # a tensor of the broadcast shape
        if mask is not None:
            ok = (ok & mask[b, kv_idx]) | ~mask[b, q_idx]
        return ok

    return mask_mod


def flex_block_mask(mask_mod: Callable, batch: int, length: int, device: torch.device):
    """The block mask of ``mask_mod`` for ``batch`` sequences of ``length`` (built once per forward)."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(mask_mod, batch, None, length, length, device=device)


def flex_attention_for(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask, scale: float | None = None,
                       compiled: bool | None = None) -> torch.Tensor:
    """``[B, H, L, D]`` -> ``[B, H, L, E]`` through FlexAttention (compiled on CUDA; eager elsewhere)."""
    from torch.nn.attention.flex_attention import flex_attention

    compiled = q.is_cuda if compiled is None else compiled
    fn = flex_attention
    if compiled:
        if "fn" not in _COMPILED:
            _COMPILED["fn"] = torch.compile(flex_attention, dynamic=False)
        fn = _COMPILED["fn"]
    return fn(q, k, v, block_mask=block_mask, scale=scale)
