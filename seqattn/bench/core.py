"""``python -m seqattn.bench core``: one attention layer, seqattn vs torch vs textbook.

Forward + backward of one full multi-head self-attention layer (q/k/v and output
projections included, same weight shapes everywhere), fp32 on CPU, for several
sequence lengths L, of four implementations:

- ``naive``: the textbook layer a student writes (:class:`NaiveSelfAttention` below:
  separate q/k/v ``nn.Linear``, ``softmax(q kᵀ / √head_dim) v``, concat heads, out ``nn.Linear``);
- ``torch_mha``: ``torch.nn.MultiheadAttention(batch_first=True)`` called with
  ``need_weights=False`` (its fastest setting: it then runs SDPA instead of bmm + softmax);
- ``seqattn_sdpa``: ``seqattn.core.MultiHeadAttention(kernel="sdpa")``;
- ``seqattn_linear``: ``seqattn.core.MultiHeadAttention(kernel="linear")``.

One step is ``layer(x).sum().backward()`` with ``x [B, L, D]`` requiring grad
(gradients of the input and of the parameters, as for a layer inside a network);
gradients are dropped (set to ``None``) between steps.

**Time**: median wall time of N steps after one warm-up step at the measured L.
N is adaptive (as many steps as fit in ``--budget`` seconds judging by the warm-up
step, clamped to [1, 20]: the big cells, whose one step takes longer than the budget,
get a single timed step), unless ``--repeats`` fixes it. ``torch.set_num_threads`` is left at its default.

**Peak memory**: torch has no CPU peak-memory counter, so every (implementation, L)
cell runs in its own fresh process, forked from a ``multiprocessing`` *forkserver*
that has only imported ``torch`` and this module (no tensor op has run in it, so the
child starts with no buffers of its own and a clean allocator). In the child:

1. build the layer and the input ``x [B, L, D]``, then run two warm-up steps on a
   *small* length (``L = 16``) so every library is loaded but no big buffer exists;
2. reset the kernel's peak-RSS high-water mark to the current RSS (write ``5`` to
   ``/proc/self/clear_refs``) and read the current RSS from ``/proc/self/statm``;
3. run one step at the measured L and read the peak again: ``ru_maxrss``
   (``resource.getrusage``, KiB on Linux) and ``VmHWM`` (``/proc/self/status``).

Reported "peak MB" = peak RSS after the step − RSS just before it (MiB). Linux
carries a parent's ``ru_maxrss`` across fork/exec and ``clear_refs`` does not
reset that inherited value, so when ``ru_maxrss`` did not move during the step
(the inherited value hides the child's peak) ``VmHWM`` — the same counter, reset —
is used; when it did move the two agree. The input ``x`` and the weights are
allocated before the baseline, so they are not counted; their gradients are.
A cell whose estimated peak exceeds ``--max-gb`` is skipped; a child killed by
the OOM killer (or any failure) is reported in its cell instead of a number.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import time
import traceback
from typing import Any, Callable

from seqattn.bench import structure
from seqattn.bench.measure import measure_step, run_cell_isolated, sdpa_backends, write_report

IMPLS = ("naive", "torch_mha", "seqattn_sdpa", "seqattn_linear")
DEVICES = ("cpu", "cuda")
#: ``--dtype`` choices: names of torch dtypes (the weights and the input of every cell)
DTYPE_NAMES = ("float32", "bfloat16")
DEFAULT_LENGTHS = (128, 512, 1024, 2048, 4096)
WARMUP_LENGTH = 16


# --------------------------------------------------------------------------- the layers


def _naive_layer(dim: int, heads: int) -> Any:
    """The textbook layer (built lazily so the driver process never imports torch)."""
    import torch
    from torch import nn

    class NaiveSelfAttention(nn.Module):
        """Letters: b batch, l length, h heads, k head width, d width."""

        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
            self.out_proj = nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, length, d = x.shape
            q = self.q_proj(x).view(b, length, self.heads, self.head_dim).transpose(1, 2)  # [B, H, L, K]
            k = self.k_proj(x).view(b, length, self.heads, self.head_dim).transpose(1, 2)  # [B, H, L, K]
            v = self.v_proj(x).view(b, length, self.heads, self.head_dim).transpose(1, 2)  # [B, H, L, K]
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # [B, H, L, L]
            weights = torch.softmax(scores, dim=-1)  # [B, H, L, L]
            out = (weights @ v).transpose(1, 2).reshape(b, length, d)  # [B, H, L, K] -> [B, L, D]
            return self.out_proj(out)  # [B, L, D]

    return NaiveSelfAttention(dim, heads)


def build_impl(impl: str, dim: int, heads: int) -> tuple[Any, Callable[[Any], Any]]:
    """``impl`` -> ``(module, call)`` where ``call(x [B, L, D]) -> [B, L, D]``."""
    import torch

    if impl == "naive":
        layer = _naive_layer(dim, heads)
        return layer, layer
    if impl == "torch_mha":
        layer = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        return layer, lambda x: layer(x, x, x, need_weights=False)[0]
    if impl in ("seqattn_sdpa", "seqattn_linear"):
        from seqattn.core.attention import MultiHeadAttention

        layer = MultiHeadAttention(dim, heads, kernel=impl.removeprefix("seqattn_"))
        return layer, layer
    raise ValueError(f"unknown implementation {impl!r}; expected one of {IMPLS}")


def estimate_peak_bytes(impl: str, length: int, batch: int, dim: int, heads: int) -> float:
    """Rough fwd+bwd peak of one cell (fp32), used only to skip cells that cannot fit."""
    per_token = 24.0 * batch * length * dim * 4  # projections, their grads, outputs (generous)
    if impl == "naive":
        # scores, softmax weights (saved) and their gradient: ~3 [B, H, L, L] matrices live at once
        return per_token + 3.0 * batch * heads * length * length * 4
    return per_token  # SDPA (flash kernel) and linear attention: O(L) memory


# --------------------------------------------------------------------------- one cell (in a fresh process)


def measure_cell(
    impl: str, length: int, batch: int, dim: int, heads: int, repeats: int | None = None, budget: float = 3.0,
    threads: int | None = None, device: str = "cpu", dtype: str = "float32",
) -> dict[str, Any]:
    """Peak memory growth and median fwd+bwd time of one (impl, L) on ``device`` at ``dtype`` (weights
    and input). Call it in a fresh process."""
    import torch

    if threads:
        torch.set_num_threads(threads)

    torch.manual_seed(0)
    layer, call = build_impl(impl, dim, heads)
    dtype_ = getattr(torch, dtype)  # "float32" / "bfloat16" (validated by the parser: DTYPE_NAMES)
    layer.to(device=device, dtype=dtype_)
    params = list(layer.parameters())
    like = {"device": device, "dtype": dtype_, "requires_grad": True}
    x = torch.randn(batch, length, dim, **like)  # [B, L, D]
    x_small = torch.randn(batch, min(WARMUP_LENGTH, length), dim, **like)

    def step(inp: torch.Tensor) -> None:
        call(inp).sum().backward()
        for p in params:
            p.grad = None
        inp.grad = None

    for _ in range(2):  # load libraries, no big buffer yet
        step(x_small)
    measured = measure_step(lambda: step(x), repeats, budget, device=device)
    backend = sdpa_backends(lambda: step(x))
    return {"backend": backend, "status": "ok", **measured, "threads": torch.get_num_threads(),
            "device_name": torch.cuda.get_device_name() if device != "cpu" else "CPU",
            "dtype": str(params[0].dtype).removeprefix("torch."), "input_dtype": str(x.dtype).removeprefix("torch.")}


def _cell_entry(conn: Any, kwargs: dict[str, Any]) -> None:
    """Child-process entry: measure one cell, send the result dict back."""
    try:
        result = measure_cell(**kwargs)
    except (MemoryError, RuntimeError) as exc:
        msg = str(exc)
        oom = isinstance(exc, MemoryError) or "memory" in msg.lower() or "allocate" in msg.lower()
        result = {"status": "OOM" if oom else "failed", "error": msg.splitlines()[0][:200] if msg else repr(exc)}
    except Exception as exc:  # report anything, the driver goes on with the next cell
        traceback.print_exc()
        result = {"status": "failed", "error": repr(exc)[:200]}
    conn.send(result)
    conn.close()


# --------------------------------------------------------------------------- core suite


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _impls(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in IMPLS]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"unknown implementation(s) {bad}; choose from {', '.join(IMPLS)}")
    return values


def _cells(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip() and v.strip() != "none"]
    known = structure.cells()
    bad = [v for v in values if v not in known]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown cell(s) {bad}; choose from {', '.join(known)} or none")
    return values


def add_core_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=_ints, default=list(DEFAULT_LENGTHS), help="comma-separated L values")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256, help="model width D")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--impls", type=_impls, default=list(IMPLS), help=f"comma-separated, from {','.join(IMPLS)}")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per cell (default: adaptive)")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of timed steps per cell when adaptive")
    parser.add_argument("--max-gb", type=float, default=20.0, help="skip cells estimated to need more")
    parser.add_argument("--cell-timeout", type=float, default=900.0, help="seconds before a cell is abandoned")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads in every cell (default: torch's; 1 on a shared machine)")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="where the layer cells run (cuda: synchronised timing, peak from torch.cuda's "
                             "allocator; the structured cells measure on CPU only)")
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default="float32", help="weights and input of the layer cells")
    cells = list(structure.cells())  # the core's and every modality's (seqattn.bench.structure)
    parser.add_argument("--cells", type=_cells, default=None,
                        help=f"structured-attention cells, comma-separated from {','.join(cells)}, or none "
                             "(default: all on CPU, none with --device cuda)")
    parser.add_argument("--cell-sizes", choices=("full", "tiny"), default="full",
                        help="tiny: a few tokens per structured cell (tests)")
    parser.add_argument("--out", metavar="FILE.md", help="also write caption, table and targets here")
    parser.add_argument("--json", metavar="FILE", help="write every measurement as JSON")


def measure_core(args: argparse.Namespace, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every (L, impl) cell, each in its own process. Returns one dict per cell."""
    if args.dim % args.heads:
        raise ValueError(f"--dim={args.dim} must be divisible by --heads={args.heads}")
    cells = []
    total = len(args.lengths) * len(args.impls)
    for length in args.lengths:
        for impl in args.impls:
            cell: dict[str, Any] = {"impl": impl, "length": length}
            estimate = estimate_peak_bytes(impl, length, args.batch, args.dim, args.heads)
            cell["estimate_gb"] = estimate / 2**30
            if estimate > args.max_gb * 2**30:
                cell.update(status="skipped", error=f"estimated {estimate / 2**30:.1f} GB > --max-gb {args.max_gb}")
            else:
                start = time.perf_counter()
                cell.update(
                    run_cell_isolated(
                        args.cell_timeout,
                        _cell_entry,
                        impl=impl,
                        length=length,
                        batch=args.batch,
                        dim=args.dim,
                        heads=args.heads,
                        repeats=args.repeats,
                        budget=args.budget,
                        threads=getattr(args, "threads", None),
                        device=getattr(args, "device", "cpu"),
                        dtype=getattr(args, "dtype", "float32"),
                    )
                )
                cell["wall_s"] = time.perf_counter() - start
            cells.append(cell)
            if cell["status"] == "ok":
                detail = f"{cell['time_ms']:.1f} ms (median of {cell['repeats']}), peak +{cell['peak_mb']:.1f} MB"
            else:
                detail = f"{cell['status']}: {cell.get('error', '')}"
            log(f"[{len(cells)}/{total}] {impl:>14} L={length:<5} {detail}")
    return cells


def _lookup(cells: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(c["impl"], c["length"]): c for c in cells}


def _value(table: dict, impl: str, length: int, key: str) -> float | None:
    cell = table.get((impl, length))
    return cell[key] if cell and cell["status"] == "ok" and cell[key] > 0 else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b is not None else "–"


def _ratio_columns(impls: list[str]) -> list[tuple[str, Callable[[dict, list[int], int], str]]]:
    """Ratio columns whose implementations were measured: (header, fn(table, lengths, i) -> text)."""
    cols: list[tuple[str, Callable[[dict, list[int], int], str]]] = []

    def ratio(num: tuple[str, str], den: tuple[str, str]) -> Callable[[dict, list[int], int], str]:
        return lambda t, ls, i: _ratio(_value(t, num[0], ls[i], num[1]), _value(t, den[0], ls[i], den[1]))

    if {"seqattn_sdpa", "torch_mha"} <= set(impls):
        cols.append(("sdpa/torch_mha time", ratio(("seqattn_sdpa", "time_ms"), ("torch_mha", "time_ms"))))
        cols.append(("sdpa/torch_mha mem", ratio(("seqattn_sdpa", "peak_mb"), ("torch_mha", "peak_mb"))))
    if {"seqattn_sdpa", "naive"} <= set(impls):
        cols.append(("naive/sdpa time (speed-up)", ratio(("naive", "time_ms"), ("seqattn_sdpa", "time_ms"))))
        cols.append(("sdpa/naive mem", ratio(("seqattn_sdpa", "peak_mb"), ("naive", "peak_mb"))))
    if "seqattn_linear" in impls:

        def growth(t: dict, ls: list[int], i: int) -> str:
            if i == 0:
                return "–"
            now, prev = _value(t, "seqattn_linear", ls[i], "time_ms"), _value(t, "seqattn_linear", ls[i - 1], "time_ms")
            return _ratio(now, prev) + f" (L×{ls[i] / ls[i - 1]:g})" if now and prev else "–"

        cols.append(("linear time(L)/time(L_prev)", growth))
    return cols


def format_core_table(cells: list[dict[str, Any]], impls: list[str], lengths: list[int]) -> str:
    """Markdown table: a row per L; time (ms) and peak MB per impl; ratio columns."""
    table = _lookup(cells)
    ratio_cols = _ratio_columns(impls)
    header = ["L"] + [f"{impl} {unit}" for impl in impls for unit in ("ms", "MB")] + [h for h, _ in ratio_cols]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for i, length in enumerate(lengths):
        row = [str(length)]
        for impl in impls:
            cell = table.get((impl, length))
            if cell and cell["status"] == "ok":
                row += [f"{cell['time_ms']:.1f}", f"{cell['peak_mb']:.1f}"]
            else:
                status = cell["status"] if cell else "–"
                row += [status, status]
        row += [fn(table, lengths, i) for _, fn in ratio_cols]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def core_caption(args: argparse.Namespace, threads: int | None, device_name: str | None = None) -> str:
    dtype = {"float32": "fp32", "bfloat16": "bf16"}.get(getattr(args, "dtype", "float32"), args.dtype)
    if getattr(args, "device", "cpu") == "cpu":
        where = f"CPU ({threads or '?'} torch threads)"
        peak = "Peak MB: growth of peak RSS during one step"
    else:
        where = f"CUDA ({device_name or '?'}; each timed step synchronised)"
        peak = "Peak MB: growth of `torch.cuda.max_memory_allocated` during one step"
    return (
        f"Forward+backward of one multi-head self-attention layer (q/k/v/out projections included), "
        f"batch {args.batch}, width {args.dim}, {args.heads} heads, {dtype}, {where}. "
        f"Time: median of N steps after a warm-up step (N in the JSON). {peak}, "
        "each cell in a fresh process (see `seqattn/bench/core.py`). `torch_mha` = "
        "`nn.MultiheadAttention(batch_first=True)` called with `need_weights=False`, its fastest setting."
    )


def core_targets(cells: list[dict[str, Any]]) -> list[str]:
    """The issue's targets: one 'met' / 'missed' / 'not measured' line each, with the number."""
    t = _lookup(cells)
    lines = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    lengths = sorted({c["length"] for c in cells})

    def sdpa_vs_torch(metric: str, what: str, limit: float) -> str:
        name = f"target sdpa {what} <= {limit}x torch_mha at every L"
        pairs = [(L, _value(t, "seqattn_sdpa", L, metric), _value(t, "torch_mha", L, metric)) for L in lengths]
        pairs = [(L, a / b) for L, a, b in pairs if a and b]
        if not pairs:
            return f"{name}: not measured"
        worst_l, worst = max(pairs, key=lambda p: p[1])
        return (f"{name}: {verdict(worst <= limit)} (worst {worst:.2f}x at L={worst_l}; "
                + ", ".join(f"{L}: {r:.2f}x" for L, r in pairs) + ")")

    lines.append(sdpa_vs_torch("time_ms", "time", 1.05))
    lines.append(sdpa_vs_torch("peak_mb", "peak memory", 1.1))
    naive_t, sdpa_t = _value(t, "naive", 2048, "time_ms"), _value(t, "seqattn_sdpa", 2048, "time_ms")
    if naive_t and sdpa_t:
        lines.append(f"target sdpa >= 3x faster than naive at L=2048: {verdict(naive_t / sdpa_t >= 3)} ({naive_t / sdpa_t:.2f}x)")
    else:
        lines.append("target sdpa >= 3x faster than naive at L=2048: not measured")
    naive_m, sdpa_m = _value(t, "naive", 2048, "peak_mb"), _value(t, "seqattn_sdpa", 2048, "peak_mb")
    if naive_m and sdpa_m:
        lines.append(
            f"target sdpa peak memory <= 1/8 of naive at L=2048: {verdict(sdpa_m / naive_m <= 1 / 8)} "
            f"(1/{naive_m / sdpa_m:.1f}: {sdpa_m:.1f} MB vs {naive_m:.1f} MB)"
        )
    else:
        lines.append("target sdpa peak memory <= 1/8 of naive at L=2048: not measured")
    lin_a, lin_b = _value(t, "seqattn_linear", 2048, "time_ms"), _value(t, "seqattn_linear", 4096, "time_ms")
    if lin_a and lin_b:
        lines.append(f"target linear time growth L=2048 -> 4096 <= 2.3x: {verdict(lin_b / lin_a <= 2.3)} ({lin_b / lin_a:.2f}x)")
    else:
        lines.append("target linear time growth L=2048 -> 4096 <= 2.3x: not measured")
    return lines


def run_core(args: argparse.Namespace) -> int:
    command = "python -m seqattn.bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", ["core"]))
    print(f"$ {command}", flush=True)
    device = getattr(args, "device", "cpu")
    resolve_cells(args)
    load_before = os.getloadavg()
    peak = run_cell_isolated(args.cell_timeout, entry=structure.matmul_entry, threads=args.threads, device=device)
    peak_fp32 = peak.get("fp32") if peak.get("status") == "ok" else None
    if peak_fp32:
        print(f"matmul peak: {peak_fp32:.0f} GFLOP/s fp32, {peak['bf16']:.0f} GFLOP/s bf16 "
              f"(torch.matmul 2048³ on {device}, {peak['threads']} threads)", flush=True)
    cells = measure_core(args, log=lambda line: print(line, flush=True))
    extra = measure_structure(args, log=lambda line: print(line, flush=True))
    load_after = os.getloadavg()
    first_ok = next((c for c in cells if c["status"] == "ok"), {})
    caption = core_caption(args, first_ok.get("threads"), first_ok.get("device_name"))
    table = format_core_table(cells, args.impls, args.lengths)
    targets = core_targets(cells)
    lines = [caption, "", table, ""]
    if peak_fp32:
        dtype_peak = peak_fp32 if getattr(args, "dtype", "float32") == "float32" else peak["bf16"]
        what = "this CPU" if device == "cpu" else f"this GPU ({first_ok.get('device_name', '?')})"
        lines += [f"Matmul peak of {what}, measured in this run: {peak_fp32:.0f} GFLOP/s fp32, {peak['bf16']:.0f} "
                  f"GFLOP/s bf16 (torch.matmul 2048³, {peak['threads']} threads). Attained attention GFLOP/s "
                  "(fwd+bwd = 14·B·H·L·S·d, projections not counted; % of the peak at the cells' dtype) and the "
                  "SDPA backend that ran:", "",
                  format_gflops_table(cells, args, dtype_peak), ""]
    if extra:
        s_lines, s_targets = structure.format_structure(extra, peak_fp32)
        lines += ["Structured attention, today's dense-mask path vs the planned kernel (fwd+bwd; "
                  "`python -m seqattn.bench core`, see `seqattn/bench/structure.py`):", "", *s_lines, ""]
        targets += s_targets
    write_report(args, command, [*lines, *targets], cells + extra, targets, load_before, load_after)
    return 0


def resolve_cells(args: argparse.Namespace) -> None:
    """``args.cells`` left at its default (None): every structured cell on CPU, none on CUDA. Explicit cells
    with ``--device cuda`` are an error (they build their inputs on CPU)."""
    device = getattr(args, "device", "cpu")
    if device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"--device {device}: torch.cuda.is_available() is False on this machine "
                             f"(torch {torch.__version__}); run without --device or on a machine with a GPU")
        if getattr(args, "cells", None):
            raise SystemExit(f"--cells {','.join(args.cells)} with --device {device}: the structured cells "
                             "measure on CPU only; pass --cells none")
    if getattr(args, "cells", None) is None:
        args.cells = list(structure.cells()) if device == "cpu" else []


def measure_structure(args: argparse.Namespace, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The ``--cells`` (seqattn.bench.structure), each (config, impl) in its own process."""
    results = []
    for cell in getattr(args, "cells", []):
        declared = structure.cell_of(cell)
        for cfg in declared["sizes"](getattr(args, "cell_sizes", "full") == "tiny"):
            for impl in declared["impls"]:
                start = time.perf_counter()
                result = run_cell_isolated(args.cell_timeout, entry=structure.structure_entry, cell=cell, impl=impl,
                                           cfg=cfg, repeats=args.repeats, budget=args.budget,
                                           threads=args.threads)
                result.update(cell=cell, impl=impl, config=declared["describe"](cfg),
                              wall_s=time.perf_counter() - start)
                results.append(result)
                detail = (f"{result['time_ms']:.1f} ms, peak +{result['peak_mb']:.1f} MB, path {result.get('path', '-')}, "
                          f"backend {result.get('backend')}" if result["status"] == "ok"
                          else f"{result['status']}: {result.get('error', '')}")
                log(f"[{cell}] {result['config']:>28} {impl:>18} {detail}")
    return results


def format_gflops_table(cells: list[dict[str, Any]], args: argparse.Namespace, peak: float) -> str:
    """A row per L: attained attention GFLOP/s (% of the matmul peak) and SDPA backend per impl."""
    table = _lookup(cells)
    head_dim = args.dim // args.heads
    header = ["L"] + [f"{impl} GFLOP/s (% peak), backend" for impl in args.impls]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for length in args.lengths:
        row = [str(length)]
        for impl in args.impls:
            c = table.get((impl, length))
            if not c or c["status"] != "ok":
                row.append("–")
                continue
            if impl == "seqattn_linear":
                row.append(f"– (O(L)), {c.get('backend', '–')}")
                continue
            gf = 14.0 * args.batch * args.heads * length * length * head_dim / (c["time_ms"] * 1e-3) / 1e9
            row.append(f"{gf:.1f} ({100 * gf / peak:.0f}%), {c.get('backend', '–')}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- suite interface

add_arguments = add_core_arguments
run = run_core


def _one(argv: list[str]) -> int:
    """Hidden ``_one IMPL L [--batch ..]``: measure one cell in this process, print JSON."""
    parser = argparse.ArgumentParser(prog="python -m seqattn.bench _one")
    parser.add_argument("impl", choices=IMPLS)
    parser.add_argument("length", type=int)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--budget", type=float, default=3.0)
    print(json.dumps(measure_cell(**vars(parser.parse_args(argv)))))
    return 0
