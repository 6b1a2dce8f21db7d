"""How every suite of ``python -m seqattn.bench`` measures: one cell in a fresh process, its peak RSS
growth and median step time, the SDPA backends a step ran, and the report written at the end.

**Peak memory**: torch has no CPU peak-memory counter, so every cell runs in its own fresh process,
forked from a ``multiprocessing`` *forkserver* that has only imported ``torch`` and the attention core
(:func:`run_cell_isolated`); :func:`measure_step` resets the kernel's peak-RSS high-water mark
(``/proc/self/clear_refs``) before the first step and reads ``ru_maxrss`` / ``VmHWM`` after it (see
:mod:`seqattn.bench.core` for the method and its caveats). Imports nothing of seqattn: the suites
(``core``, ``structure``, ``graph``, ...) import it, never the other way round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import time
from typing import Any, Callable

MIB = 2**20

#: environment of a timed ``seqattn.run`` subprocess whose output is captured: Rich (the progress bar)
#: draws as in an interactive terminal, so a bench times the command a user types in one
TERMINAL_ENV = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "120", "LINES": "40"}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vm_hwm_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _ru_maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def measure_step(step, repeats: int | None = None, budget: float = 3.0, min_steps: int = 1,
                 max_steps: int = 20, device: str = "cpu") -> dict[str, Any]:
    """Peak-RSS growth during the first ``step()`` (after a garbage collection; the caller warms up on
    a small input first) and the median time of ``N`` more steps: ``repeats``, or as many as fit in
    ``budget`` seconds judging by the first, clamped to ``[min_steps, max_steps]``.

    ``device="cuda"``: each timed step ends with ``torch.cuda.synchronize()`` (kernels run
    asynchronously: without it the clock would stop when they are queued), and the peak is the growth of
    ``torch.cuda.max_memory_allocated`` during the first step (the caching allocator's own counter: the
    tensors' bytes, not the driver's reservations)."""
    import gc

    if device != "cpu":
        return _measure_step_cuda(step, repeats, budget, min_steps, max_steps)
    gc.collect()
    reset = _reset_peak_rss()
    rss_before = _rss_bytes()
    ru_before = _ru_maxrss_bytes()
    start = time.perf_counter()
    step()  # the memory measurement, also the warm-up for timing
    first = time.perf_counter() - start
    ru_after = _ru_maxrss_bytes()
    hwm = _vm_hwm_bytes()
    if ru_after > ru_before or not reset or hwm is None:
        peak, source = ru_after, "ru_maxrss"
    else:
        peak, source = hwm, "VmHWM"  # ru_maxrss still shows the high-water mark inherited from the parent
    return {**_timed_steps(step, first, repeats, budget, min_steps, max_steps),
            "peak_mb": max(0, peak - rss_before) / MIB, "peak_source": source, "rss_before_mb": rss_before / MIB,
            "ru_maxrss_mb": ru_after / MIB, "vm_hwm_mb": None if hwm is None else hwm / MIB}


def switch_side_by_side(make: Callable[[], Callable[[], None]], switch: Callable[[bool], None], repeats: int,
                        rounds: int = 5) -> tuple[float, float]:
    """(off, on) median seconds of ``make()()`` with ``switch(False)`` / ``switch(True)`` in force: a fresh step
    per side and round (warmed up by its first call), the sides alternating within every round, and
    ``switch(True)`` (the default side) restored at the end, also after an error."""
    out: dict[bool, list[float]] = {False: [], True: []}
    try:
        for _ in range(rounds):
            for enabled in (False, True):
                switch(enabled)
                out[enabled].append(measure_step(make(), repeats=max(1, repeats // rounds))["time_ms"] / 1e3)
    finally:
        switch(True)
    return statistics.median(out[False]), statistics.median(out[True])


def switch_table(args: argparse.Namespace, suite: str, off_name: str, on_name: str,
                 rows: list[tuple[str, float, float]]) -> str:
    """Print (and write to ``args.out`` when set) a markdown table of :func:`switch_side_by_side` rows
    ``(cell, off s, on s)`` under the suite's command line; returns its text."""
    import torch

    lines = [f"`python -m seqattn.bench {suite} --threads {args.threads} --repeats {args.repeats}` (torch "
             f"{torch.__version__}, {args.threads} thread(s); medians, the sides alternating)", "",
             f"| cell | {off_name} ms | {on_name} ms | {off_name} / {on_name} |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {a * 1e3:.3f} | {b * 1e3:.3f} | {a / b:.2f}× |" for name, a, b in rows]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return text


def _timed_steps(step, first: float, repeats: int | None, budget: float, min_steps: int, max_steps: int,
                 sync: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The median of ``N`` timed ``step()`` calls (``sync()`` before the clock starts and before it stops):
    ``repeats``, or as many as fit in ``budget`` seconds judging by the ``first`` step's seconds, clamped to
    ``[min_steps, max_steps]``."""
    n = repeats if repeats else max(min_steps, min(max_steps, int(budget / max(first, 1e-6))))
    times = []
    for _ in range(n):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return {"time_ms": statistics.median(times) * 1e3, "times_ms": [t * 1e3 for t in times], "repeats": n}


def _measure_step_cuda(step, repeats: int | None, budget: float, min_steps: int, max_steps: int) -> dict[str, Any]:
    """:func:`measure_step` on the current CUDA device."""
    import gc

    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    step()  # the memory measurement, also the warm-up for timing
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated()
    return {**_timed_steps(step, first, repeats, budget, min_steps, max_steps, sync=torch.cuda.synchronize),
            "peak_mb": max(0, peak - before) / MIB, "peak_source": "torch.cuda.max_memory_allocated",
            "allocated_before_mb": before / MIB}



_CTX: Any = None


def _context() -> Any:
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        # preload torch (not __main__): each cell is a fork of a process that only imported these
        _CTX.set_forkserver_preload(["torch", "seqattn.core.attention", "seqattn.bench.structure"])
    return _CTX


def run_cell_isolated(timeout: float, entry: Callable[[Any, dict[str, Any]], None], **kwargs: Any) -> dict[str, Any]:
    """Run ``entry(conn, kwargs)`` (a suite's module-level function that measures one cell and sends its
    result dict, e.g. :func:`seqattn.bench.core._cell_entry`) in a fresh forked process; a dead child
    becomes a status."""
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=entry, args=(send, kwargs), daemon=True)
    proc.start()
    send.close()
    result = None
    try:
        if recv.poll(timeout):
            result = recv.recv()
    except EOFError:
        pass  # the child died without sending
    proc.join(5 if result is not None else 0.1)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return result or {"status": "timeout", "error": f"no result within {timeout:.0f} s"}
    if result is None:
        code = proc.exitcode
        if code == -9:
            return {"status": "OOM", "error": "killed by SIGKILL (out of memory?)"}
        return {"status": "failed", "error": f"child exited with code {code}"}
    return result


FUSED_SDPA = ("flash", "efficient", "cudnn")


def fused_sdpa_backend(op_name: str) -> str | None:
    """The fused SDPA backend an aten op's name is the forward of (``flash`` / ``efficient`` / ``cudnn``:
    ``aten._scaled_dot_product_{flash,efficient,cudnn}_attention[_for_cpu]``), or None (any other op,
    backward ops included)."""
    if "backward" in op_name:
        return None
    return next((b for b in FUSED_SDPA if f"{b}_attention" in op_name), None)


def sdpa_backends(step: Callable[[], None]) -> str:
    """Which SDPA backends one ``step`` ran: ``flash`` / ``efficient`` / ``cudnn`` (fused aten ops
    dispatched; cuDNN's is the one torch picks for bf16 on recent NVIDIA GPUs), ``math``
    (``F.scaled_dot_product_attention`` calls that dispatched no fused op: the unfused fallback), ``-``
    (no SDPA at all)."""
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"sdpa": 0, **dict.fromkeys(FUSED_SDPA, 0)}

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is F.scaled_dot_product_attention:
                counts["sdpa"] += 1
            return func(*args, **(kwargs or {}))

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            backend = fused_sdpa_backend(str(func))
            if backend:
                counts[backend] += 1
            return func(*args, **(kwargs or {}))

    with Calls(), Ops():
        step()
    found = [k for k in FUSED_SDPA if counts[k]]
    if counts["sdpa"] > sum(counts[k] for k in FUSED_SDPA):
        found.append("math")
    return "+".join(found) or "-"


def write_report(args: argparse.Namespace, command: str, lines: list[str], cells: list[dict[str, Any]],
                 targets: list[str], load_before: tuple[float, ...], load_after: tuple[float, ...]) -> None:
    """Print a suite's report (its lines + the load average around the run) and write it to
    ``--out`` (markdown) and ``--json`` (every measurement) when asked. Shared by every suite."""
    load = (f"load average (1/5/15 min) before: {'/'.join(f'{v:.2f}' for v in load_before)}, "
            f"after: {'/'.join(f'{v:.2f}' for v in load_after)} on {os.cpu_count()} CPUs "
            "(other processes share them: timings above the CPU count are disturbed)")
    report = "\n".join([*lines, "", load])
    print("\n" + report, flush=True)
    if getattr(args, "out", None):
        with open(args.out, "w") as f:
            f.write(f"Command: `{command}`\n\n{report}\n")
    if getattr(args, "json", None):
        config = {k: v for k, v in vars(args).items() if k not in ("func", "argv")}
        with open(args.json, "w") as f:
            json.dump({"command": command, "config": config, "cells": cells, "targets": targets,
                       "loadavg_before": load_before, "loadavg_after": load_after}, f, indent=2)
