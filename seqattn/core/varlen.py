"""Variable-length attention: a padded batch attended per length bucket, so the cost follows
``Σ len²`` instead of ``B·L²``.

Letters: b batch, h heads, l padded length, m a bucket's length, d head width.

A batch of sequences with lengths 50..1000 padded to 1000 spends most of a fused attention call
on padding (a mask saves nothing on CPU). Here the sequences (right-padded: ``mask`` a prefix of
each row) are sorted by length and grouped into buckets whose members are close in length
(:func:`varlen_layout`); each bucket is one fused call on its sequences cut to the bucket's
longest (with a key-padding mask only when lengths differ inside it), and the outputs are padded
back and put in batch order. Nested (jagged) tensors would do the same but fall back to the math
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


@dataclass
class VarlenLayout:
    buckets: list[Bucket]
    inverse: torch.Tensor  # [B] long: row r of the batch is row inverse[r] of the concatenated bucket outputs
    length: int  # L
    pairs: int  # query-key pairs per head computed (Σ n·m²)


def bucket_lengths(lengths: list[int], tolerance: float = 0.8) -> list[list[int]]:
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


def varlen_layout(lengths: list[int], length: int, device: torch.device, tolerance: float = 0.8) -> VarlenLayout:
    """The per-forward layout of a right-padded batch with host ``lengths`` (``[B]`` ints <= ``length``)."""
    buckets, order, pairs = [], [], 0
    for rows in bucket_lengths(lengths, tolerance):
        m = max(lengths[i] for i in rows)
        key_mask = None
        if any(lengths[i] != m for i in rows):
            lens = torch.tensor([lengths[i] for i in rows], device=device)
            key_mask = (torch.arange(m, device=device)[None, :] < lens[:, None])[:, None, None, :]  # [n, 1, 1, m]
        buckets.append(Bucket(torch.tensor(rows, dtype=torch.long, device=device), m, key_mask))
        order += rows
        pairs += len(rows) * m * m
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return VarlenLayout(buckets, inverse.to(device), length, pairs)


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
    outs = []
    e = v.shape[-1]
    for bucket in layout.buckets:
        m, rows = bucket.length, bucket.index
        if m == 0:  # sequences without a real token
            outs.append(v.new_zeros(rows.numel(), v.shape[1], layout.length, e))
            continue
        qb = q[:, :, :m].index_select(0, rows)  # [n, H, m, D]
        kb = k[:, :, :m].index_select(0, rows)
        vb = v[:, :, :m].index_select(0, rows)
        mask = None if causal else bucket.key_mask
        out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, dropout_p=dropout_p, scale=scale,
                                             is_causal=causal)  # [n, H, m, E]
        outs.append(F.pad(out, (0, 0, 0, layout.length - m)))  # [n, H, L, E]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)
    return out.index_select(0, layout.inverse)  # [B, H, L, E] in batch order
