"""Convolutions over ``[N, L, C]`` tokens: ``nn.Conv1d`` on the transposed view vs :mod:`seqattn.core.conv`.

``python -m seqattn.bench conv [--threads 1] [--repeats 200] [--out F.md]``: forward + backward of the
recipes' 1-d convolutions alone, at their shapes (the encoder's depthwise convolution on a mean LinES batch
and on an FSDD batch, the character CNN on a LinES batch's distinct words), and one whole training step of
the LinES tagging encoder (:func:`seqattn.bench.dropout.tagging_encoder_step` at width 64, 64 sentences of
up to 22 words: LinES' mean padded batch) with :data:`seqattn.core.conv.CHANNELS_LAST` off and on. The two
sides alternate within every round; the table gives the median per call and their ratio.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import torch
from torch import nn

from seqattn.bench.dropout import tagging_encoder_step
from seqattn.bench.measure import switch_side_by_side, switch_table
from seqattn.core import conv as fast

#: (cell, nn.Conv1d arguments, input [N, L, C_in])
CELLS = (
    ("depthwise, kernel 3: text_tagging on LinES (64 sentences × 22 words × 64: its mean padded batch)",
     {"in_channels": 64, "out_channels": 64, "kernel_size": 3, "padding": 1, "groups": 64}, (64, 22, 64)),
    ("depthwise, kernel 7: speech_cls on FSDD (32 clips × 50 tokens × 96)",
     {"in_channels": 96, "out_channels": 96, "kernel_size": 7, "padding": 3, "groups": 96}, (32, 50, 96)),
    ("character CNN, kernel 3: a LinES batch's distinct words (480 × 16 characters, 16 -> 128)",
     {"in_channels": 16, "out_channels": 128, "kernel_size": 3, "padding": 1}, (480, 16, 16)),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (the recipes' default on CPU: 1)")
    parser.add_argument("--repeats", type=int, default=200, help="calls per cell and side (steps: a tenth)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")


def _conv_call(kwargs, shape):
    torch.manual_seed(0)
    conv = nn.Conv1d(**kwargs)
    x = torch.randn(shape, requires_grad=True)
    grad = torch.randn(fast.conv1d_positions(conv, x).shape)

    def step():
        fast.conv1d_positions(conv, x).backward(grad)
    return step


def _switch(enabled: bool) -> None:
    fast.CHANNELS_LAST = enabled


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    rows = []
    for name, kwargs, shape in CELLS:
        slow, quick = switch_side_by_side(lambda k=kwargs, s=shape: _conv_call(k, s), _switch, args.repeats)
        rows.append((f"{name}, forward + backward", slow, quick))
    step = functools.partial(tagging_encoder_step, dim=64, batch=64, length=22)
    slow, quick = switch_side_by_side(step, _switch, max(10, args.repeats // 10))
    rows.append(("tagging encoder training step (64 wide, 3 layers, conv 3, 64×22 words)", slow, quick))
    switch_table(args, "conv", "nn.Conv1d", "seqattn channels-last", rows)
    return 0
