"""Blocked band attention: exact local attention (1-D windows, 2-D ``k×k`` grid windows, causal)
whose cost follows the allowed pairs, through the fused kernel.

Letters: b batch, h heads, l length (``g`` global tokens, then ``t`` structured tokens), n query
blocks, q queries per block, s keys per block (its span), d head width.

A dense mask does not make ``F.scaled_dot_product_attention`` cheaper: on CPU it skips no block for
a mask (only for ``is_causal``). Here the ``T`` structured queries are cut into blocks of ``q``
consecutive tokens; block ``n`` can only see the keys ``[n·q - left, n·q + q + right)`` (its span),
so the keys of every block are gathered once (``unfold``: a view, then one copy) and one fused call
attends ``[B·N, H, q, D]`` queries to ``[B·N, H, g + s, D]`` keys under a ``[B·N, 1, q, g + s]``
mask. The mask inside a span is the same for every block (a window is translation invariant), so it
is built once per forward, with the key padding, by :func:`band_layout`. Global tokens (CLS /
virtual node) are one more fused call over all keys, and every block also sees them.

Work: ``T·(g + s)`` pairs instead of ``L²``; the result, values and gradients, equals the dense
reference mask of :func:`seqattn.core.masks.structure_mask` (tests prove it). Padded queries
(``mask`` False) give zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class BandLayout:
    """Everything one forward's layers share (built once by :func:`band_layout`).

    Attributes:
        block: queries per block ``q``; ``left``/``right``: keys before/after the block in its span.
        tokens: ``T`` structured tokens; ``num_global``: ``G`` global tokens before them.
        blocks: ``N = ceil(T / q)``.
        allowed: bool ``[B·N, 1, q, G + s]`` (True = may attend; padded queries allow everything, their
            output is zeroed), ``global_keys``: bool ``[B, 1, 1, L]`` key padding for the global queries
            (None = all real).
    """

    block: int
    left: int
    right: int
    tokens: int
    num_global: int
    blocks: int
    batch: int
    allowed: torch.Tensor
    global_keys: torch.Tensor | None
    _float: dict = field(default_factory=dict, repr=False)

    @property
    def span(self) -> int:
        return self.block + self.left + self.right

    @property
    def pairs(self) -> int:
        """Query-key pairs the kernel computes per head (for cost and GFLOP/s)."""
        length = self.tokens + self.num_global
        return self.batch * (self.blocks * self.block * (self.num_global + self.span) + self.num_global * length)

    def mask_for(self, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask in ``dtype`` (0 / -inf), converted once per forward and dtype (the fused
        kernel would convert a bool mask on every call)."""
        if dtype not in self._float:
            self._float[dtype] = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device).masked_fill(
                ~self.allowed, float("-inf"))
        return self._float[dtype]


def window_relative_mask(block: int, left: int, right: int, window: int | None, causal: bool) -> torch.Tensor:
    """``[q, s]`` bool: query ``a`` of a block may attend to key ``c`` of its span (1-D positions:
    query ``n·q + a``, key ``n·q - left + c``), for ``|i - j| <= window`` and/or ``j <= i``."""
    a = torch.arange(block)[:, None]
    c = torch.arange(block + left + right)[None, :]
    rel = c - left - a  # j - i
    allowed = torch.ones(block, block + left + right, dtype=torch.bool)
    if window is not None:
        allowed &= rel.abs() <= window
    if causal:
        allowed &= rel <= 0
    return allowed


def grid_relative_mask(rows: int, width: int, half: int, causal: bool) -> torch.Tensor:
    """``[q, s]`` bool for blocks of ``rows`` full grid rows (``q = rows·width``) whose span starts
    ``half`` rows before the block: query ``(r, c)`` may attend to ``(r', c')`` iff ``|r - r'| <= half``
    and ``|c - c'| <= half`` (and ``j <= i`` when ``causal``)."""
    block, span = rows * width, (rows + 2 * half) * width
    a = torch.arange(block)[:, None]
    c = torch.arange(span)[None, :]
    dr = (c // width - half) - a // width
    dc = c % width - a % width
    allowed = (dr.abs() <= half) & (dc.abs() <= half)
    if causal:
        allowed &= (c - half * width) <= a
    return allowed


def band_layout(
    relative: torch.Tensor,
    block: int,
    left: int,
    right: int,
    tokens: int,
    num_global: int,
    batch: int,
    mask: torch.Tensor | None,
    device: torch.device,
) -> BandLayout:
    """The layout of one forward: ``relative [q, s]`` (from :func:`window_relative_mask` /
    :func:`grid_relative_mask`) combined with the key padding of ``mask [B, L]`` (True = real; None =
    all real) and the span's ends. No host synchronisation."""
    span = block + left + right
    assert relative.shape == (block, span), (relative.shape, block, span)
    blocks = -(-tokens // block)
    padded = blocks * block
    length = num_global + tokens
    real = mask if mask is not None else torch.ones(batch, length, dtype=torch.bool, device=device)
    # key validity in span coordinates: position p <-> token p - left
    keys = F.pad(real[:, num_global:], (left, padded - tokens + right), value=False)  # [B, left + N·q + right]
    keys = keys.unfold(1, span, block)  # [B, N, s]
    allowed = relative.to(device)[None, None] & keys[:, :, None, :]  # [B, N, q, s]
    queries = F.pad(real[:, num_global:], (0, padded - tokens), value=False).view(batch, blocks, block)  # [B, N, q]
    allowed = allowed | ~queries[..., None]  # padded queries: no dead rows (their output is zeroed)
    if num_global:
        glob = real[:, None, None, :num_global].expand(batch, blocks, block, num_global)  # [B, N, q, G]
        allowed = torch.cat([glob, allowed], dim=-1)  # [B, N, q, G + s]
    allowed = allowed.reshape(batch * blocks, 1, block, num_global + span)
    global_keys = mask[:, None, None, :] if (num_global and mask is not None) else None
    return BandLayout(block, left, right, tokens, num_global, blocks, batch, allowed, global_keys)


def _blocks_of(t: torch.Tensor, layout: BandLayout, before: int, after: int) -> torch.Tensor:
    """``[B, H, T, D]`` -> ``[B·N, H, width, D]`` with ``width = before + q + after`` tokens per block
    (block ``n`` covers ``[n·q - before, n·q + q + after)``; zeros outside ``[0, T)``)."""
    b, h, tokens, d = t.shape
    width = before + layout.block + after
    t = t.transpose(1, 2)  # [B, T, H, D]
    t = F.pad(t, (0, 0, 0, 0, before, layout.blocks * layout.block - tokens + after))  # [B, before + N·q + after, H, D]
    if before == 0 and after == 0:
        t = t.view(b, layout.blocks, layout.block, h, d)  # [B, N, q, H, D]
    else:
        t = t.unfold(1, width, layout.block).permute(0, 1, 4, 2, 3)  # [B, N, H, D, width] -> [B, N, width, H, D]
    return t.transpose(2, 3).reshape(b * layout.blocks, h, width, d)  # [B·N, H, width, D]


def band_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BandLayout,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """Exact band attention. ``q, k [B, H, L, D]``, ``v [B, H, L, E]`` -> ``[B, H, L, E]``
    (``L = G + T``; padded query rows are NOT zeroed here: the caller zeroes them once)."""
    b, h, length, _ = q.shape
    g, tokens = layout.num_global, layout.tokens
    assert length == g + tokens and b == layout.batch, (q.shape, g, tokens, layout.batch)
    qb = _blocks_of(q[:, :, g:], layout, 0, 0)  # [B·N, H, q, D]
    kb = _blocks_of(k[:, :, g:], layout, layout.left, layout.right)  # [B·N, H, s, D]
    vb = _blocks_of(v[:, :, g:], layout, layout.left, layout.right)  # [B·N, H, s, E]
    if g:
        def with_global(t: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
            glob = t[:, :, :g].unsqueeze(1).expand(b, layout.blocks, h, g, t.shape[-1])  # [B, N, H, G, D]
            return torch.cat([glob.reshape(b * layout.blocks, h, g, t.shape[-1]), blocked], dim=2)  # [B·N, H, G+s, D]

        kb, vb = with_global(k, kb), with_global(v, vb)
    mask = layout.mask_for(q.dtype)
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout_p, scale=scale)  # [B·N, H, q, E]
    e = out.shape[-1]
    out = out.view(b, layout.blocks, h, layout.block, e).transpose(2, 3)  # [B, N, q, H, E]
    out = out.reshape(b, layout.blocks * layout.block, h, e)[:, :tokens]  # [B, T, H, E]
    if g:
        gm = layout.global_keys
        glob = F.scaled_dot_product_attention(q[:, :, :g], k, v, attn_mask=gm, dropout_p=dropout_p, scale=scale)
        out = torch.cat([glob.transpose(1, 2), out], dim=1)  # [B, L, H, E]
    return out.transpose(1, 2)  # [B, H, L, E]
