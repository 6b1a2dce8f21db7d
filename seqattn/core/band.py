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

On CPU without dropout (:class:`BandFlashCPU`) the blocks go through the flash kernel in chunks
(:func:`_tiles`, :data:`CHUNK_ELEMENTS`) and backward gathers each chunk's spans again instead of
keeping every span from the forward: only ``q, k, v``, the output and the logsumexp are saved, so
peak memory stays below the dense mask's (the gathered spans are ``s / q`` times the keys). On GPU,
with dropout and under ``torch.compile`` one call over all blocks goes through autograd
(:func:`band_attention_autograd`).

Work: ``T·(g + s)`` pairs instead of ``L²``; the result, values and gradients, equals the dense
reference mask of :func:`seqattn.core.masks.structure_mask` (tests prove it). Padded queries
(``mask`` False) give zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from seqattn.core.checks import tracing
from seqattn.core.fused import cpu_flash_available
from seqattn.core.masks import additive_mask

#: the fused CPU path works through the blocks in chunks whose gathered keys hold at most this many
#: elements (times 4 buffers: keys, values and their gradients), so the gathered spans never all
#: live at once: peak memory stays below the dense-mask path's (python -m seqattn.bench core)
CHUNK_ELEMENTS = 1 << 17


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
            self._float[dtype] = additive_mask(self.allowed, dtype)
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
    (``L = G + T``; padded query rows are NOT zeroed here: the caller zeroes them once).

    On CPU without dropout the structured queries go through :class:`BandFlashCPU` (the fused
    kernel called directly, chunk by chunk, the gathered spans recomputed in backward instead of
    kept); elsewhere through :func:`band_attention_autograd`."""
    b, h, length, _ = q.shape
    g, tokens = layout.num_global, layout.tokens
    assert length == g + tokens and b == layout.batch, (q.shape, g, tokens, layout.batch)
    if not cpu_flash_available(q, dropout_p) or tracing():
        return band_attention_autograd(q, k, v, layout, dropout_p, scale)
    out = BandFlashCPU.apply(q[:, :, g:], k, v, layout, scale)  # [B, N·q, H, E]
    out = out[:, :tokens]  # [B, T, H, E]
    if g:
        glob = F.scaled_dot_product_attention(q[:, :, :g], k, v, attn_mask=layout.global_keys, scale=scale)
        out = torch.cat([glob.transpose(1, 2), out], dim=1)  # [B, L, H, E]
    return out.transpose(1, 2)  # [B, H, L, E]


def _tiles(layout: BandLayout, heads: int, width: int):
    """Chunks ``(b0, b1, n0, n1)`` of (batch rows, blocks) whose gathered keys ``[.., H, G + s, D]``
    hold about :data:`CHUNK_ELEMENTS` elements: whole rows when one row fits, else block ranges."""
    per_block = heads * (layout.num_global + layout.span) * width
    blocks_per_chunk = max(1, CHUNK_ELEMENTS // per_block)
    if blocks_per_chunk >= layout.blocks:
        rows = max(1, blocks_per_chunk // layout.blocks)
        for b0 in range(0, layout.batch, rows):
            yield b0, min(layout.batch, b0 + rows), 0, layout.blocks
    else:
        for b0 in range(layout.batch):
            for n0 in range(0, layout.blocks, blocks_per_chunk):
                yield b0, b0 + 1, n0, min(layout.blocks, n0 + blocks_per_chunk)


def _gather(t: torch.Tensor, layout: BandLayout, b0: int, b1: int, n0: int, n1: int, before: int, after: int,
            offset: int = 0, glob: torch.Tensor | None = None) -> torch.Tensor:
    """Tokens of blocks ``n0..n1`` of rows ``b0..b1`` from ``t [B, H, offset + T, D]`` (structured
    tokens from ``offset``): ``[(b1-b0)·(n1-n0), H, (G +) width, D]`` with ``width = before + q +
    after`` (block ``n`` covers ``[n·q - before, n·q + q + after)``; zeros outside ``[0, T)``), a copy
    of the tile only; the ``G`` global tokens ``glob [B, H, G, D]`` first when given."""
    nb, nn, block, tokens = b1 - b0, n1 - n0, layout.block, layout.tokens
    h, d = t.shape[1], t.shape[3]
    start, stop = n0 * block - before, n1 * block + after
    lo, hi = max(0, start), min(tokens, stop)
    part = t[b0:b1, :, offset + lo: offset + max(lo, hi)]  # [nb, H, hi - lo, D] (a view)
    if lo - start or stop - hi:
        part = F.pad(part, (0, 0, lo - start, stop - max(lo, hi)))  # [nb, H, stop - start, D]
    if before == 0 and after == 0:
        part = part.reshape(nb, h, nn, block, d)  # [nb, H, n, q, D]
    else:
        part = part.unfold(2, before + block + after, block).transpose(-1, -2)  # [nb, H, n, width, D]
    if glob is not None:
        part = torch.cat([glob[b0:b1, :, None].expand(nb, h, nn, *glob.shape[2:]), part], dim=3)
    return part.transpose(1, 2).reshape(nb * nn, h, part.shape[3], d)  # [nb·n, H, (G+)width, D]


class BandFlashCPU(torch.autograd.Function):
    """The structured queries of :func:`band_attention` through the CPU flash kernel, chunk by chunk
    (:func:`_tiles`): ``q [B, H, T, D]`` (structured queries), ``k [B, H, G + T, D]``, ``v [B, H, G + T, E]``
    -> ``[B, N·q, H, E]`` (token-major; rows past ``T`` are padding). Only ``q, k, v``, the output and
    the logsumexp are kept for backward; each chunk's key/value spans are gathered again there and
    their gradients added back into ``dk, dv`` (overlap-add). No dropout."""

    @staticmethod
    def forward(ctx, q, k, v, layout: BandLayout, scale):
        b, h, tokens, d = q.shape
        g, e = layout.num_global, v.shape[-1]
        glob_k, glob_v = (k[:, :, :g], v[:, :, :g]) if g else (None, None)
        out = q.new_empty(b * layout.blocks, layout.block, h, e)  # [B·N, q, H, E]
        lse = None  # [B·N, H, q], in the dtype the kernel returns
        for b0, b1, n0, n1 in _tiles(layout, h, max(d, e)):
            rows = _rows(layout, b0, b1, n0, n1)
            qc = _gather(q, layout, b0, b1, n0, n1, 0, 0)
            kc = _gather(k, layout, b0, b1, n0, n1, layout.left, layout.right, g, glob_k)
            vc = _gather(v, layout, b0, b1, n0, n1, layout.left, layout.right, g, glob_v)
            oc, lc = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                qc, kc, vc, 0.0, False, attn_mask=_chunk_mask(layout, rows, q.dtype), scale=scale)
            out[rows] = oc.transpose(1, 2)
            if lse is None:
                lse = lc.new_empty(b * layout.blocks, h, layout.block)
            lse[rows] = lc
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.layout, ctx.scale = layout, scale
        return out.view(b, layout.blocks * layout.block, h, e)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        layout, scale = ctx.layout, ctx.scale
        b, h, tokens, d = q.shape
        g, e = layout.num_global, v.shape[-1]
        left, right, block, span = layout.left, layout.right, layout.block, layout.span
        glob_k, glob_v = (k[:, :, :g], v[:, :, :g]) if g else (None, None)
        grad = grad.reshape(b * layout.blocks, block, h, e)  # [B·N, q, H, E]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for b0, b1, n0, n1 in _tiles(layout, h, max(d, e)):
            rows = _rows(layout, b0, b1, n0, n1)
            nb, nn = b1 - b0, n1 - n0
            qc = _gather(q, layout, b0, b1, n0, n1, 0, 0)
            kc = _gather(k, layout, b0, b1, n0, n1, left, right, g, glob_k)
            vc = _gather(v, layout, b0, b1, n0, n1, left, right, g, glob_v)
            dqc, dkc, dvc = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                grad[rows].transpose(1, 2), qc, kc, vc, out[rows].transpose(1, 2), lse[rows], 0.0, False,
                attn_mask=_chunk_mask(layout, rows, q.dtype), scale=scale)
            stop = min(tokens, n1 * block)
            dq[b0:b1, :, n0 * block:stop] = dqc.reshape(nb, nn, h, block, d).transpose(1, 2).reshape(
                nb, h, nn * block, d)[:, :, :stop - n0 * block]
            for acc, grad_c, width in ((dk, dkc, d), (dv, dvc, e)):
                grad_c = grad_c.reshape(nb, nn, h, g + span, width)
                if g:
                    acc[b0:b1, :, :g] += grad_c[:, :, :, :g].sum(1)
                # overlap-add: block n's span starts at token n·q - left (parts outside [0, T) dropped)
                for j in range(nn):
                    start = (n0 + j) * block - left
                    lo, hi = max(0, start), min(tokens, start + span)
                    if hi > lo:
                        acc[b0:b1, :, g + lo:g + hi] += grad_c[:, j, :, g + lo - start:g + hi - start]
        return dq, dk, dv, None, None


def _rows(layout: BandLayout, b0: int, b1: int, n0: int, n1: int) -> torch.Tensor | slice:
    """Indices into the ``B·N`` block axis of the tile."""
    if n0 == 0 and n1 == layout.blocks:
        return slice(b0 * layout.blocks, b1 * layout.blocks)
    return slice(b0 * layout.blocks + n0, b0 * layout.blocks + n1)  # one row


def _chunk_mask(layout: BandLayout, rows: slice, dtype: torch.dtype) -> torch.Tensor:
    """The tile's additive mask ``[nb·n, 1, q, G + s]`` (0 / -inf) in ``dtype``."""
    return additive_mask(layout.allowed[rows], dtype)


def band_attention_autograd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BandLayout,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """:func:`band_attention` through autograd (dropout, GPU, tracing and compile): every block's
    span gathered at once (``[B·N, H, G + s, D]`` keys and values, kept for backward)."""
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
