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

The lengths must be known on the host: :mod:`seqattn.core.planning` reads them once per forward
(one synchronisation per batch, none per layer). Padded query rows are NOT zeroed here (the caller
zeroes them once); everything else equals the dense reference, values and gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Bucket:
    index: torch.Tensor  # [n] long: batch rows of the bucket
    length: int  # m: the longest member
    key_mask: torch.Tensor | None  # [n, 1, 1, m] bool (True = real key) when lengths differ, else None
    row: int | None = None  # the batch row when the bucket holds one sequence (sliced, not gathered)


@dataclass
class VarlenLayout:
    buckets: list[Bucket]
    length: int  # L
    pairs: int  # query-key pairs per head computed (Σ n·m²)


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
    return VarlenLayout(buckets, length, pairs)


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
    never reaches a padded key, so no key mask is needed then)."""
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
        piece = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout_p, scale=scale,
                                               is_causal=causal)  # [n, H, m, E]
        if bucket.row is not None:
            out[bucket.row:bucket.row + 1, :, :m] = piece
        else:
            out[:, :, :m].index_copy_(0, rows, piece)
    return out  # [B, H, L, E] in batch order
