"""Mask helpers: the mask convention of seqattn, written once.

Convention: a **bool** mask is ``True`` where attention is allowed / the token is real.
Float masks are **additive biases** (``-inf`` forbids). Padding masks are ``[B, L]``;
structure masks (graph adjacency, local window, causal) are ``[L, L]``, ``[B, L, L]``
or per head ``[B, H, L, L]``, and combine with padding by logical AND.

``torch.nn.MultiheadAttention`` uses the opposite bool meaning (``True`` = ignore);
:func:`from_torch_key_padding_mask` is the one place that converts.

Letters: b batch, h heads, l query length, s key length.
"""

from __future__ import annotations

import torch


def _check_bool_or_float(name: str, m: torch.Tensor) -> None:
    if m.dtype != torch.bool and not m.is_floating_point():
        raise ValueError(f"{name} must be bool (True = may attend) or a float bias, got dtype {m.dtype}")


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """``lengths [B]`` -> padding mask ``[B, max_len]`` bool (True = real token)."""
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D [B], got shape {tuple(lengths.shape)}")
    if not torch.compiler.is_exporting() and (lengths < 0).any():  # no value check under torch.export
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    max_len = int(lengths.max().item()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)  # [L]
    return positions[None, :] < lengths[:, None]  # [B, L]


def from_torch_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore) -> seqattn mask (True = real)."""
    if key_padding_mask.dtype != torch.bool:
        raise ValueError(f"expected a bool key_padding_mask, got {key_padding_mask.dtype}")
    return ~key_padding_mask


def local_window_mask(length: int, window: int, device: torch.device | None = None) -> torch.Tensor:
    """``[L, L]`` bool band: token ``i`` may attend to ``j`` iff ``|i - j| <= window``.

    This is the seed's "a CNN is self-attention with a fixed receptive field".
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    idx = torch.arange(length, device=device)
    return (idx[:, None] - idx[None, :]).abs() <= window  # [L, L]


def grid_window_mask(height: int, width: int, window: int, device: torch.device | None = None) -> torch.Tensor:
    """``[H·W, H·W]`` bool over a row-major grid: pixel ``(r, c)`` may attend to ``(r', c')`` iff
    ``|r - r'| <= window // 2`` and ``|c - c'| <= window // 2`` (a ``window × window`` neighbourhood).

    The 2-D counterpart of :func:`local_window_mask`: a CNN's fixed receptive field as an attention mask.
    ``window`` must be odd and >= 1 (the neighbourhood is centred on the query pixel).
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"grid size must be positive, got (H, W) = ({height}, {width})")
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be an odd size >= 1 (a k×k neighbourhood centred on the pixel), got {window}")
    half = window // 2
    rows = torch.arange(height, device=device).repeat_interleave(width)  # [H·W] row of each position
    cols = torch.arange(width, device=device).repeat(height)  # [H·W] column of each position
    near_rows = (rows[:, None] - rows[None, :]).abs() <= half  # [H·W, H·W]
    near_cols = (cols[:, None] - cols[None, :]).abs() <= half  # [H·W, H·W]
    return near_rows & near_cols


def structure_allows(
    i: torch.Tensor,
    j: torch.Tensor,
    *,
    num_global: int = 0,
    window: int | None = None,
    grid_width: int | None = None,
    grid_half: int | None = None,
    causal: bool = False,
) -> torch.Tensor | None:
    """The structure rules, written once: may query position ``i`` attend to key position ``j``?

    ``i``, ``j``: integer tensors that broadcast (``[L, 1]`` and ``[1, L]`` for a dense mask, or the
    scalar indices of a FlexAttention ``mask_mod``). Positions ``< num_global`` are global tokens
    (allowed with everything); the tokens after them follow, combined by logical AND: ``window``
    (``|i - j| <= window``), a grid window (``|row - row'| <= grid_half`` and the same for columns,
    on rows of ``grid_width`` tokens), ``causal`` (``j <= i``). Returns ``None`` when no rule is given.
    """
    ti, tj = i - num_global, j - num_global  # positions among the structured tokens
    ok = None

    def both(a: torch.Tensor | None, b: torch.Tensor) -> torch.Tensor:
        return b if a is None else a & b

    if window is not None:
        ok = both(ok, (ti - tj).abs() <= window)
    if grid_half is not None:
        w = grid_width
        ok = both(ok, ((ti // w - tj // w).abs() <= grid_half) & ((ti % w - tj % w).abs() <= grid_half))
    if causal:
        ok = both(ok, tj <= ti)
    if ok is None or not num_global:
        return ok
    return ok | (ti < 0) | (tj < 0)  # global rows and columns allow everything


def structure_mask(
    length: int,
    *,
    num_global: int = 0,
    window: int | None = None,
    grid: tuple[int, int] | None = None,
    grid_window: int | None = None,
    causal: bool = False,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """A structure description -> its dense ``[L, L]`` bool mask (True = may attend), or None when
    everything may attend: the reference that every planned kernel equals.

    Positions ``0 .. num_global-1`` are global tokens: their rows and columns allow everything. The
    ``T = L - num_global`` tokens after them follow the structure, combined by logical AND:
    ``window`` (``|i - j| <= window``), ``grid_window`` (``k×k`` neighbourhood on the row-major
    ``grid = (h, w)``, see :func:`grid_window_mask`), ``causal`` (``j <= i``): the rules of
    :func:`structure_allows` on every pair.
    """
    tokens = length - num_global
    if tokens < 0:
        raise ValueError(f"num_global={num_global} exceeds the length {length}")
    if window is not None and window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    width = half = None
    if grid_window is not None:
        if grid is None or grid[0] * grid[1] != tokens:
            raise ValueError(f"grid_window needs grid (h, w) with h·w = {tokens} tokens, got grid={grid}")
        if grid_window < 1 or grid_window % 2 == 0:
            raise ValueError(f"window must be an odd size >= 1 (a k×k neighbourhood centred on the pixel), "
                             f"got {grid_window}")
        width, half = grid[1], grid_window // 2
    idx = torch.arange(length, device=device)
    return structure_allows(idx[:, None], idx[None, :], num_global=num_global, window=window, grid_width=width,
                            grid_half=half, causal=causal)  # [L, L] | None


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """``[L, L]`` bool lower triangle: token ``i`` may attend to ``j <= i``."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def edge_index_to_mask(edge_index: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """Graph edges over flattened positions (``b * L + l``) -> dense ``[B, L, L]`` bool.

    ``edge_index[0]`` is the source (key), ``edge_index[1]`` the target (query):
    ``out[b, i, j]`` is True iff there is an edge ``j -> i`` inside graph ``b``.
    """
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    src, dst = edge_index
    if (src // length != dst // length).any():
        raise ValueError("edge_index has an edge between two different sequences of the batch")
    out = torch.zeros(batch * length, length, dtype=torch.bool, device=edge_index.device)
    out[dst, src % length] = True
    return out.view(batch, length, length)  # [B, L, L]


def mask_to_edge_index(mask: torch.Tensor) -> torch.Tensor:
    """Dense ``[B, L, L]`` bool (query, key) -> ``[2, E]`` edges over flattened positions."""
    if mask.dim() != 3 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool [B, L, L], got {mask.dtype} {tuple(mask.shape)}")
    b, i, j = mask.nonzero(as_tuple=True)
    length = mask.shape[-1]
    return torch.stack([b * length + j, b * length + i])  # [2, E] (source=key, target=query)


def as_4d(m: torch.Tensor, name: str = "attn_mask") -> torch.Tensor:
    """Structure mask ``[L, S]`` / ``[B, L, S]`` / ``[B, H, L, S]`` -> 4-D broadcastable to ``[B, H, L, S]``."""
    if m.dim() == 2:
        return m[None, None]  # [1, 1, L, S]
    if m.dim() == 3:
        return m[:, None]  # [B, 1, L, S]
    if m.dim() == 4:
        return m
    raise ValueError(f"{name} must be [L, L], [B, L, L] or [B, H, L, L], got shape {tuple(m.shape)}")


def combine_masks(base: torch.Tensor | None, other: torch.Tensor | None) -> torch.Tensor | None:
    """The one mask combiner: logical AND of two masks broadcastable to ``[B, H, L, S]`` (None = all
    allowed). Bool with bool: ``&``; a float bias with a bool mask: ``-inf`` where the bool forbids;
    two float biases: their sum (``-inf`` wins)."""
    if other is None:
        return base
    if base is None:
        return other
    if base.dtype == torch.bool and other.dtype == torch.bool:
        return base & other
    if base.dtype == torch.bool:
        base, other = other, base
    if other.dtype == torch.bool:
        return base.masked_fill(~other, float("-inf"))
    return base + other.to(base.dtype)


def build_attention_mask(
    mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    *,
    batch: int | None = None,
    length: int | None = None,
) -> torch.Tensor | None:
    """Combine a padding mask and a structure mask into one kernel mask (:func:`combine_masks`).

    Args:
        mask: ``[B, S]`` bool padding mask, True = real key.
        attn_mask: ``[L, S]`` / ``[B, L, S]`` / ``[B, H, L, S]`` bool (True = may attend)
            or float additive bias.
        batch, length: expected ``B`` and ``L`` (checked when given).

    Returns:
        ``None`` (everything allowed), or a 4-D mask broadcastable to ``[B, H, L, S]``:
        bool when both inputs are bool, else a float bias (``-inf`` = forbidden).
        A pure padding mask stays ``[B, 1, 1, S]`` (never materialised as ``[L, S]``).
    """
    key = None
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool [B, L] (True = real token), got dtype {mask.dtype}")
        if mask.dim() != 2:
            raise ValueError(f"mask must be [B, L], got shape {tuple(mask.shape)}")
        if batch is not None and mask.shape[0] != batch or length is not None and mask.shape[1] != length:
            raise ValueError(f"mask shape {tuple(mask.shape)} does not match the input [B={batch}, L={length}]")
        key = mask[:, None, None, :]  # [B, 1, 1, S]
    struct = None
    if attn_mask is not None:
        _check_bool_or_float("attn_mask", attn_mask)
        struct = as_4d(attn_mask, "attn_mask")
        if length is not None and (struct.shape[-1] != length or struct.shape[-2] != length):
            raise ValueError(
                f"attn_mask last two dims must be (L, L) = ({length}, {length}), got {tuple(attn_mask.shape)}"
            )
    return combine_masks(struct, key)  # [B|1, H|1, L|1, S]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool ``allowed`` (True = may attend), any shape -> the same shape in ``dtype``: 0 where allowed,
    ``-inf`` elsewhere (the form the fused CPU kernel takes; it would convert a bool mask per call)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def dead_rows(attn_mask: torch.Tensor) -> torch.Tensor:
    """Query rows with nothing to attend to: ``[..., L, S]`` mask -> ``[..., L, 1]`` bool."""
    if attn_mask.dtype == torch.bool:
        return ~attn_mask.any(dim=-1, keepdim=True)
    return ~(attn_mask > float("-inf")).any(dim=-1, keepdim=True)


def revive_dead_rows(attn_mask: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
    """Let fully masked rows attend everywhere (their output is zeroed afterwards).

    This keeps softmax finite in the forward *and* backward pass.
    """
    if attn_mask.dtype == torch.bool:
        return attn_mask | dead
    return attn_mask.masked_fill(dead, 0.0)
