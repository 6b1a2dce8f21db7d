"""Dropout masks on CPU: torch's ``F.dropout`` (``bernoulli_``) vs :mod:`seqattn.core.dropout`.

``python -m seqattn.bench dropout [--threads 1] [--repeats 200] [--out F.md]``: forward + backward of
dropout alone at the shapes the recipes' layers have, and one whole training step of the tagging encoder
(width 96, 3 layers, the convolution module, dropout 0.3, batch 32 × 24 words) with the fast masks on and
off. The two sides alternate within every round; the table gives the median per call and their ratio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from seqattn.bench.measure import switch_side_by_side, switch_table
from seqattn.core import dropout as fast

SHAPES = ((32, 24, 96), (32, 24, 192), (2708, 64), (2708, 1433))  # text layers, their FFN, Cora's layer, its input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (the recipes' default on CPU: 1)")
    parser.add_argument("--repeats", type=int, default=200, help="calls per shape and side (steps: a tenth)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")


def _dropout_call(shape):
    x = torch.randn(shape, requires_grad=True)
    grad = torch.randn(shape)

    def step():
        fast.dropout(x, 0.3).backward(grad)
    return step


def tagging_encoder_step(dim: int = 96, batch: int = 32, length: int = 24, conv_kernel: int = 3,
                         dropout: float = 0.3):
    """One training step (forward, backward, AdamW) of a tagging encoder: width ``dim``, 3 layers, 4 heads,
    rotary positions, the convolution module (``conv_kernel`` wide), ``dropout``, ``batch`` sentences of up to
    ``length`` words (at least half of it) and 17 tags. Seeded: the same step for every side of a comparison."""
    from seqattn.core import Encoder
    torch.manual_seed(0)
    encoder = Encoder(dim, 3, 4, ff_mult=2, dropout=dropout, positional="rotary", conv_kernel=conv_kernel)
    head = torch.nn.Linear(dim, 17)
    optimizer = torch.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=1e-3)
    lengths = torch.randint(length // 2, length + 1, (batch,))
    lengths[0] = length
    mask = torch.arange(length)[None] < lengths[:, None]  # [batch, length]
    x, y = torch.randn(batch, length, dim), torch.randint(0, 17, (batch * length,))

    def step():
        loss = F.cross_entropy(head(encoder(x, mask=mask)).reshape(-1, 17), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    rows = []
    for shape in SHAPES:
        slow, quick = switch_side_by_side(lambda s=shape: _dropout_call(s), fast.set_fast_dropout, args.repeats)
        rows.append((f"dropout p=0.3, forward + backward, {'×'.join(map(str, shape))}", slow, quick))
    slow, quick = switch_side_by_side(tagging_encoder_step, fast.set_fast_dropout, max(10, args.repeats // 10))
    rows.append(("tagging encoder training step (96 wide, 3 layers, conv 3, 32×24 words)", slow, quick))
    switch_table(args, "dropout", "torch F.dropout", "seqattn dropout", rows)
    return 0
