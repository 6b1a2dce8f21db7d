"""``python -m seqattn.bench image``: image-classification training throughput (images/s), sdpa vs math.

One training step of the whole ``task=image`` network -- :class:`~seqattn.modalities.image.adapter.ImageAdapter`
(2-D sinusoidal positions) -> :class:`~seqattn.core.Encoder` -> mean-pooled
:class:`~seqattn.model.heads.PooledHead` -> cross-entropy -> backward -> AdamW step -- on random
images, for each input layout:

- ``pixels16``: 16×16 pixels, a token per pixel (L = 256);
- ``pixels32``: 32×32 pixels, a token per pixel (L = 1024);
- ``patches32``: 32×32 pixels in ``--patch-size``² patches (L = 64 for p = 4);

and each encoder: ``sdpa`` (``F.scaled_dot_product_attention``), ``math`` (the reference
softmax(QKᵀ/√d)V kernel) and, for scale, ``cnn`` (:class:`~seqattn.model.baselines.ConvEncoder`, the
``model=cnn`` baseline with the same width and depth). All cells run in this one process, one
after the other; each gets ``--warmup`` untimed steps, then as many timed steps as fit in
``--budget`` seconds (at least 2, at most 50). Reported: images/s = batch × steps / time, and
the sdpa / math ratio of the same layout. Threads: torch's default (set ``OMP_NUM_THREADS`` to pin).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

LAYOUTS = {"pixels16": ("pixels", 16), "pixels32": ("pixels", 32), "patches32": ("patches", 32)}
ENCODERS = ("sdpa", "math", "cnn")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma list of {', '.join(LAYOUTS)}")
    parser.add_argument("--encoders", default=",".join(ENCODERS), help=f"comma list of {', '.join(ENCODERS)}")
    parser.add_argument("--batch", type=int, default=16, help="images per step")
    parser.add_argument("--dim", type=int, default=64, help="model width (task=image default: 64)")
    parser.add_argument("--depth", type=int, default=3, help="layers (task=image default: 3)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--patch-size", type=int, default=4)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per cell")
    parser.add_argument("--budget", type=float, default=6.0, help="seconds of timed steps per cell")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")


def _network(layout: str, encoder: str, args: argparse.Namespace):
    from seqattn.modalities.image.adapter import ImageAdapter
    from seqattn.model.baselines import ConvEncoder
    from seqattn.core import Encoder
    from seqattn.model.heads import PooledHead
    from seqattn.model.network import SequenceModel

    mode, _ = LAYOUTS[layout]
    adapter = ImageAdapter(args.dim, mode=mode, patch_size=args.patch_size)
    if encoder == "cnn":
        body = ConvEncoder(args.dim, depth=args.depth)
    else:
        body = Encoder(args.dim, depth=args.depth, heads=args.heads, ff_mult=2, kernel=encoder, positional="none")
    return SequenceModel(adapter, body, PooledHead(args.dim, args.classes))


def measure(layout: str, encoder: str, args: argparse.Namespace) -> dict[str, Any]:
    """Images/s of training steps for one (layout, encoder) cell."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    _, side = LAYOUTS[layout]
    net = _network(layout, encoder, args).train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    batch = {"images": torch.rand(args.batch, 3, side, side), "pixel_mask": None,
             "labels": torch.randint(0, args.classes, (args.batch,))}

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(batch)["logits"], batch["labels"])
        loss.backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    times = []
    start = time.perf_counter()
    while len(times) < 50 and (len(times) < 2 or time.perf_counter() - start < args.budget):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    total = sum(times)
    tokens = net.adapter(batch["images"][:1]).x.shape[1]
    return {"layout": layout, "encoder": encoder, "tokens": tokens, "steps": len(times),
            "images_per_s": args.batch * len(times) / total, "step_ms": 1000 * total / len(times)}


def format_table(results: list[dict[str, Any]], encoders: list[str], batch: int) -> str:
    by = {(r["layout"], r["encoder"]): r for r in results}
    layouts = list(dict.fromkeys(r["layout"] for r in results))
    header = ["input", "tokens L"] + [f"{e} img/s" for e in encoders]
    if "sdpa" in encoders and "math" in encoders:
        header.append("sdpa / math")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for layout in layouts:
        mode, side = LAYOUTS[layout]
        row = [f"{mode} {side}×{side}", str(by[(layout, encoders[0])]["tokens"])]
        row += [f"{by[(layout, e)]['images_per_s']:.1f}" for e in encoders]
        if "sdpa" in encoders and "math" in encoders:
            row.append(f"{by[(layout, 'sdpa')]['images_per_s'] / by[(layout, 'math')]['images_per_s']:.2f}×")
        lines.append("| " + " | ".join(row) + " |")
    lines.append(f"\nbatch {batch}; training step = forward + backward + AdamW step; higher is better.")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import torch

    layouts = [s for s in args.layouts.split(",") if s]
    encoders = [s for s in args.encoders.split(",") if s]
    bad = [s for s in layouts if s not in LAYOUTS] + [s for s in encoders if s not in ENCODERS]
    if bad or not layouts or not encoders:
        print(f"unknown layout/encoder {bad}; layouts: {', '.join(LAYOUTS)}; encoders: {', '.join(ENCODERS)}")
        return 2
    print(f"seqattn bench image: torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
          f"dim {args.dim}, depth {args.depth}, heads {args.heads}, patch {args.patch_size}")
    results = []
    for layout in layouts:
        for encoder in encoders:
            result = measure(layout, encoder, args)
            print(f"  {layout:10s} {encoder:5s} L={result['tokens']:5d} {result['images_per_s']:8.1f} img/s "
                  f"({result['steps']} steps, {result['step_ms']:.0f} ms/step)", flush=True)
            results.append(result)
    table = format_table(results, encoders, args.batch)
    print()
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items() if k != "func"},
                                         "results": results}, indent=2))
    return 0
