"""Convolutions over ``[N, L, C]`` tokens: ``nn.Conv1d`` on the transposed view vs :mod:`seqattn.core.conv`.

``python -m seqattn.bench conv [--threads 1] [--repeats 200] [--out F.md]``: forward + backward of the
recipes' 1-d convolutions alone, at their shapes (the encoder's depthwise convolution on a mean LinES batch
and on an FSDD batch, the character CNN on a LinES batch's distinct words), and one whole training step of
the LinES tagging encoder (:func:`seqattn.bench.dropout.tagging_encoder_step` at width 64, 64 sentences of
up to 22 words: LinES' mean padded batch) with :data:`seqattn.core.conv.CHANNELS_LAST` off and on (the
depthwise backward off on both sides: the layout alone). A second table times oneDNN's backward of the
depthwise convolutions against seqattn's (:data:`seqattn.core.conv.DEPTHWISE_GRAD` off and on, channels-last on
both sides): speech_cls's and speech_ctc's layers at their FSDD shapes, and a training step of an encoder with
speech_ctc's convolution module (width 96, 3 layers, kernel 15, 32 clips of up to 27 tokens). The two sides
alternate within every round; the tables give the median per call and their ratio.
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
#: (cell, nn.Conv1d arguments, input [N, L, C_in]) of the depthwise-backward table
DEPTHWISE_CELLS = (
    ("depthwise, kernel 7: speech_cls on FSDD (32 clips × 50 tokens × 96)",
     {"in_channels": 96, "out_channels": 96, "kernel_size": 7, "padding": 3, "groups": 96}, (32, 50, 96)),
    ("depthwise, kernel 15: speech_ctc on FSDD (32 clips × 27 tokens × 96)",
     {"in_channels": 96, "out_channels": 96, "kernel_size": 15, "padding": 7, "groups": 96}, (32, 27, 96)),
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


def _switch_depthwise(enabled: bool) -> None:
    fast.DEPTHWISE_GRAD = enabled


def _layer_rows(cells, switch, repeats: int) -> list[tuple[str, float, float]]:
    """One row per ``(cell, nn.Conv1d arguments, input shape)``: forward + backward with ``switch`` off and on."""
    return [(f"{name}, forward + backward", *switch_side_by_side(lambda k=kwargs, s=shape: _conv_call(k, s), switch,
                                                                 repeats))
            for name, kwargs, shape in cells]


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    steps = max(10, args.repeats // 10)
    fast.DEPTHWISE_GRAD = False  # the first table: the layout alone
    try:
        rows = _layer_rows(CELLS, _switch, args.repeats)
        step = functools.partial(tagging_encoder_step, dim=64, batch=64, length=22)
        rows.append(("tagging encoder training step (64 wide, 3 layers, conv 3, 64×22 words)",
                     *switch_side_by_side(step, _switch, steps)))
    finally:
        fast.DEPTHWISE_GRAD = True
    printed = argparse.Namespace(**{**vars(args), "out": None})  # both tables go to the file, one after the other
    layout = switch_table(printed, "conv", "nn.Conv1d", "seqattn channels-last", rows)
    rows = _layer_rows(DEPTHWISE_CELLS, _switch_depthwise, args.repeats)
    step = functools.partial(tagging_encoder_step, dim=96, batch=32, length=27, conv_kernel=15, dropout=0.1)
    rows.append(("encoder training step (96 wide, 3 layers, conv 15, 32×27 tokens)",
                 *switch_side_by_side(step, _switch_depthwise, steps)))
    depthwise = switch_table(printed, "conv", "oneDNN depthwise backward", "seqattn depthwise backward", rows)
    if args.out is not None:
        args.out.write_text(layout + "\n\n" + depthwise + "\n")
    return 0
