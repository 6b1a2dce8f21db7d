"""Variable-length attention: a padded batch attended per length bucket, so the cost follows
``Σ len²`` instead of ``B·L²``.

Letters: b batch, h heads, l padded length, m a bucket's length, d head width.

A batch of sequences with lengths 50..1000 padded to 1000 spends most of a fused attention call
on padding (a mask saves nothing on CPU). Here the sequences (right-padded: ``mask`` a prefix of
each row) are sorted by length and grouped into buckets whose members are close in length
(:func:`varlen_layout`); each bucket is one fused call on its sequences cut to the bucket's
longest (with a key-padding mask only when lengths differ inside it; a bucket of one sequence
is a view, not a copy), written into the padded output. Nested (jagged) tensors would do the same but fall back to the math
path on CPU (~3 s vs 0.2 s measured); ``varlen_attn`` is CUDA-only.

The lengths must be known on the host: the planner (:mod:`seqattn.core.plan`) reads them once per forward
(one synchronisation per batch, none per layer). Padded query rows are NOT zeroed here (the caller
zeroes them once); everything else equals the dense reference, values and gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seqattn.core.checks import tracing
from seqattn.core.fused import cpu_flash_available
from seqattn.core.kernels import cpu_dropout_attention, takes_cpu_dropout
from seqattn.core.masks import additive_mask


@dataclass
class Bucket:
    index: torch.Tensor  # [n] long: batch rows of the bucket
    length: int  # m: the longest member
    key_mask: torch.Tensor | None  # [n, 1, 1, m] bool (True = real key) when lengths differ, else None
    row: int | None = None  # the batch row when the bucket holds one sequence (sliced, not gathered)


#: the layers project only the real tokens (packed) when they are at most this fraction of the
#: padded batch (below, the gather and scatter cost more than the padded rows' projections save)
PACK_MAX_FILL = 0.8


@dataclass
class VarlenLayout:
    buckets: list[Bucket]
    length: int  # L
    pairs: int  # query-key pairs per head computed (Σ n·m²)
    tokens: torch.Tensor | None = None  # [N] long: the real tokens' flattened positions b·L + l (None: no packing)


def bucket_lengths(lengths: list[int], tolerance: float = 0.9) -> list[list[int]]:
    """Group batch rows by length: sorted longest first, a row joins the current bucket while its
    length is at least ``tolerance`` × the bucket's longest (so a bucket computes at most
    ``1 / tolerance²`` of its members' own pairs). Returns lists of row indices."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    buckets: list[list[int]] = []
    top = None
    for i in order:
        if top is None or lengths[i] < tolerance * top:
            buckets.append([])
            top = lengths[i]
        buckets[-1].append(i)
    return buckets


def varlen_layout(lengths: list[int], length: int, device: torch.device, tolerance: float = 0.9) -> VarlenLayout:
    """The per-forward layout of a right-padded batch with host ``lengths`` (``[B]`` ints <= ``length``)."""
    buckets, pairs = [], 0
    for rows in bucket_lengths(lengths, tolerance):
        m = max(lengths[i] for i in rows)
        key_mask = None
        if any(lengths[i] != m for i in rows):
            lens = torch.tensor([lengths[i] for i in rows], device=device)
            key_mask = (torch.arange(m, device=device)[None, :] < lens[:, None])[:, None, None, :]  # [n, 1, 1, m]
        buckets.append(Bucket(torch.tensor(rows, dtype=torch.long, device=device), m, key_mask,
                              rows[0] if len(rows) == 1 else None))
        pairs += len(rows) * m * m
    tokens = None
    if sum(lengths) <= PACK_MAX_FILL * len(lengths) * length:
        tokens = torch.cat([torch.arange(n, device=device) + i * length for i, n in enumerate(lengths)])
    return VarlenLayout(buckets, length, pairs, tokens)


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: VarlenLayout,
    dropout_p: float = 0.0,
    scale: float | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """``q, k [B, H, L, D]``, ``v [B, H, L, E]`` -> ``[B, H, L, E]``: one fused call per bucket.

    ``causal``: ``j <= i`` inside each sequence (``is_causal``; with right padding a real query
    never reaches a padded key, so no key mask is needed then). On CPU without dropout through
    :class:`VarlenFlashCPU` (gradients written once into ``dq, dk, dv``); elsewhere through autograd
    (:func:`varlen_attention_autograd`)."""
    if not cpu_flash_available(q, dropout_p) or tracing():
        return varlen_attention_autograd(q, k, v, layout, dropout_p, scale, causal)
    return VarlenFlashCPU.apply(q, k, v, layout, scale, causal).transpose(1, 2)


def _bucket_views(bucket: Bucket, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """The bucket's rows of ``[B, H, L, X]`` tensors cut to its length: ``[n, H, m, X]`` (a view for
    one row, a copy otherwise)."""
    m = bucket.length
    if bucket.row is not None:
        return [t[bucket.row:bucket.row + 1, :, :m] for t in tensors]
    return [t[:, :, :m].index_select(0, bucket.index) for t in tensors]


def _bucket_store(target: torch.Tensor, bucket: Bucket, piece: torch.Tensor) -> None:
    """Write ``piece [n, H, m, X]`` into the bucket's rows of ``target [B, H, L, X]`` (a view)."""
    m = bucket.length
    if bucket.row is not None:
        target[bucket.row:bucket.row + 1, :, :m] = piece
    else:
        target[:, :, :m].index_copy_(0, bucket.index, piece)


class VarlenFlashCPU(torch.autograd.Function):
    """Per-bucket CPU flash calls: ``q, k [B, H, L, D]``, ``v [B, H, L, E]`` -> ``[B, L, H, E]``
    (token-major; padded tails zero). Backward calls the kernel's backward per bucket with the saved
    logsumexp and writes each bucket's gradient into ``dq, dk, dv`` once (autograd would add a
    full-size zero tensor per slice). No dropout."""

    @staticmethod
    def forward(ctx, q, k, v, layout: VarlenLayout, scale, causal):
        b, h, length, e = v.shape
        out = v.new_zeros(b, length, h, e)  # token-major, like the kernel's own output
        out_h = out.transpose(1, 2)  # [B, H, L, E] view
        lses = []
        for bucket in layout.buckets:
            if bucket.length == 0:  # sequences without a real token
                lses.append(None)
                continue
            qb, kb, vb = _bucket_views(bucket, q, k, v)
            mask = None if (causal or bucket.key_mask is None) else additive_mask(bucket.key_mask, q.dtype)
            piece, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                qb, kb, vb, 0.0, causal, attn_mask=mask, scale=scale)  # [n, H, m, E], [n, H, m]
            _bucket_store(out_h, bucket, piece)
            lses.append(lse)
        ctx.save_for_backward(q, k, v, out, *[t for t in lses if t is not None])
        ctx.has_lse = [t is not None for t in lses]
        ctx.layout, ctx.scale, ctx.causal = layout, scale, causal
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        q, k, v, out, *saved = ctx.saved_tensors
        layout, scale, causal = ctx.layout, ctx.scale, ctx.causal
        grad_h = grad.contiguous().transpose(1, 2)  # [B, H, L, E], token-major storage like out
        out_h = out.transpose(1, 2)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        lses = iter(saved)
        for bucket, has in zip(layout.buckets, ctx.has_lse):
            if not has:
                continue
            lse = next(lses)
            qb, kb, vb, ob, gb = _bucket_views(bucket, q, k, v, out_h, grad_h)
            mask = None if (causal or bucket.key_mask is None) else additive_mask(bucket.key_mask, q.dtype)
            dqb, dkb, dvb = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                gb, qb, kb, vb, ob, lse, 0.0, causal, attn_mask=mask, scale=scale)
            for target, piece in ((dq, dqb), (dk, dkb), (dv, dvb)):
                _bucket_store(target, bucket, piece)
        return dq, dk, dv, None, None, None


def varlen_attention_autograd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: VarlenLayout,
    dropout_p: float = 0.0,
    scale: float | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """:func:`varlen_attention` through autograd (dropout, GPU, tracing and compile)."""
    b, h, _, e = v.shape
    out = v.new_zeros(b, h, layout.length, e)  # rows of empty sequences and padded tails stay zero
    for bucket in layout.buckets:
        m, rows = bucket.length, bucket.index
        if m == 0:  # sequences without a real token
            continue
        if bucket.row is not None:  # one sequence: views, no gather
            r = bucket.row
            qb, kb, vb = q[r:r + 1, :, :m], k[r:r + 1, :, :m], v[r:r + 1, :, :m]  # [1, H, m, D]
        else:
            qb = q[:, :, :m].index_select(0, rows)  # [n, H, m, D]
            kb = k[:, :, :m].index_select(0, rows)
            vb = v[:, :, :m].index_select(0, rows)
        mask = None if causal else bucket.key_mask
        if takes_cpu_dropout(q, dropout_p) and not causal:
            # CPU training: the cheap dropout masks, not SDPA's math path with bernoulli draws
            piece = cpu_dropout_attention(qb, kb, vb, mask, dropout_p, scale)  # [n, H, m, E]
        else:
            piece = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout_p, scale=scale,
                                                   is_causal=causal)  # [n, H, m, E]
        if bucket.row is not None:
            out[bucket.row:bucket.row + 1, :, :m] = piece
        else:
            out[:, :, :m].index_copy_(0, rows, piece)
    return out  # [B, H, L, E] in batch order


class PackedLinear(torch.autograd.Function):
    """A linear layer on the real rows of a padded batch: ``x [R, I]`` (the batch flattened, ``R = B·L``), ``rows
    [N]`` (the real rows, distinct) -> ``y [R, O]`` with ``y[rows] = x[rows] Wᵀ + b`` and the other rows ``b``
    (``fill_bias``) or zero. Saves ``x`` and ``rows``, not the gathered ``[N, I]`` copy (``x`` is alive anyway:
    the layer's input, or the attention output its kernel keeps): backward gathers it again. The gradients equal
    ``index_select`` -> ``F.linear`` -> ``index_copy``'s; no double backward."""

    @staticmethod
    def forward(ctx, x, rows, weight, bias, fill_bias: bool):
        full = _packed_linear(x, rows, weight, bias, fill_bias)
        ctx.save_for_backward(x, rows, weight)
        ctx.fill_bias, ctx.has_bias = fill_bias, bias is not None
        return full

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, rows, weight = ctx.saved_tensors
        g = grad.index_select(0, rows)  # [N, O]
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = x.new_zeros(x.shape).index_copy_(0, rows, (g @ weight.to(g.dtype)).to(x.dtype))
        if ctx.needs_input_grad[2]:
            dw = (g.t() @ x.index_select(0, rows).to(g.dtype)).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[3]:
            db = (grad if ctx.fill_bias else g).sum(0).to(weight.dtype)
        return dx, None, dw, db, None


def _packed_linear(x: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   fill_bias: bool) -> torch.Tensor:
    """:class:`PackedLinear`'s arithmetic: gather, linear, and a scatter in place into one fresh ``[R, O]``."""
    y = F.linear(x.index_select(0, rows), weight, bias)  # [N, O] (in autocast's dtype under autocast)
    full = (bias.to(y.dtype).expand(x.shape[0], weight.shape[0]).clone() if fill_bias and bias is not None
            else y.new_zeros(x.shape[0], weight.shape[0]))
    return full.index_copy_(0, rows, y)


def packed_linear(x: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  fill_bias: bool = False) -> torch.Tensor:
    """:class:`PackedLinear` (under tracing or compile: the same arithmetic through autograd)."""
    if tracing():
        return _packed_linear(x, rows, weight, bias, fill_bias)
    return PackedLinear.apply(x, rows, weight, bias, fill_bias)
