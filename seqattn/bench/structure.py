"""Structured-attention cells of ``python -m seqattn.bench core`` (``--cells``): today's dense-mask
path vs the planned kernel, forward + backward, side by side in one run, each cell in a fresh process.

- ``window``: one multi-head attention layer (width 256, 8 heads, batch 8), local window ±64 at
  L = 1024 and 4096: ``sdpa_mask`` = SDPA with the ``[L, L]`` bool window mask (what the encoder
  built before the planner) vs ``planned`` = the blocked band kernel (plan built inside the step).
- ``varlen``: the same layer, batch 8 with lengths spread evenly over 50..1000 (right padded):
  ``sdpa_padded`` = SDPA with the ``[B, 1, 1, L]`` padding mask vs ``planned`` = per-bucket dispatch.
- the cells a modality declares (see "A modality's cells" below): ``graph_bias`` (the graph attention
  of the ``task=molecule`` encoder with the graph adapter's learned edge biases, today's dense and edge
  paths vs the planner's; :mod:`seqattn.modalities.graph.structure_cells`);
- ``weights``: a training step (forward + backward) of a 4-layer encoder (width 256, 8 heads,
  batch 8, L 512) without weights, with ``return_attention=[-1]`` (the plotted layer, every
  sequence) and with ``attention_items=[0]`` too (the plotted layer and sequence: what a figure draws).

Time: median of N steps (3 to 100, as many as fit in ``--budget`` seconds) after a warm-up at the
cell's size; peak MB: growth of peak RSS during the first measured step after a warm-up on a small
input (the method of :mod:`seqattn.bench.core`).

A modality's cells: a module ``seqattn/modalities/<m>/structure_cells.py`` with
``STRUCTURE_CELLS = {name: cell}``, found at run time by walking ``seqattn.modalities`` (no file here
names a modality). A cell is a dict (the built-in cells below have the same form):

- ``impls``: the implementations compared, the first one is the reference of the ratio column;
- ``sizes(tiny) -> [cfg]``: the measured configurations (``tiny``: a few tokens, for tests);
- ``describe(cfg) -> str``: the configuration's row label;
- ``step(impl, cfg, small) -> (step, info)``: a no-argument forward + backward ``step`` and the facts
  of the report (``path``, ``heads``, ``head_dim``, ``allowed_pairs``, ...; ``small``: a warm-up size);
- ``targets(rows) -> [str]``: the target lines, from this cell's result rows (``cell``, ``impl``,
  ``config``, ``status``, ``time_ms``, ``peak_mb`` and the step's info);
- ``gflops`` (optional, default False): report attained attention GFLOP/s.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Callable

from seqattn.bench.measure import measure_step, sdpa_backends

#: ``window`` / ``varlen`` are timed at two scopes: ``attention`` = the attention function alone on
#: ``q, k, v [8, 8, L, 32]`` (the issue's own measurement), ``layer`` = the whole multi-head layer
#: (projections on every padded token included, which no attention kernel can skip)
SCOPES = ("attention", "layer")


# --------------------------------------------------------------------------- steps


def _layer_step(impl: str, cell: str, cfg: dict[str, Any], small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    import torch

    from seqattn.core.attention import MultiHeadAttention
    from seqattn.core.masks import local_window_mask
    from seqattn.core.plan import plan_attention

    batch, dim, heads = 8, 256, 8
    torch.manual_seed(0)
    info: dict[str, Any] = {}
    if cell == "window":
        length, window = (64, 4) if small else (cfg["length"], cfg["window"])
        lengths = [length] * batch
    else:
        low, high = (8, 64) if small else (cfg["low"], cfg["high"])
        lengths = [round(low + (high - low) * i / (batch - 1)) for i in range(batch)][::-1]
        length = max(lengths)
    x = torch.randn(batch, length, dim, requires_grad=True)
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]  # [B, L]
    scope = cfg.get("scope", "layer")
    if scope == "attention":  # the attention function alone: q, k, v [B, H, L, d]
        import torch.nn.functional as F

        q, k, v = (torch.randn(batch, heads, length, dim // heads, requires_grad=True) for _ in range(3))

        def layer(_x, attn_mask=None, mask=None, plan=None):
            if plan is not None:
                return plan.attend(q, k, v)[0]
            if mask is not None:
                attn_mask = mask[:, None, None, :]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    else:
        layer = MultiHeadAttention(dim, heads)
    allowed = sum(n * n for n in lengths) if cell == "varlen" else int(local_window_mask(length, window).sum()) * batch
    info.update(length=length, lengths=lengths if cell == "varlen" else None, batch=batch, heads=heads,
                head_dim=dim // heads, allowed_pairs=allowed)

    if impl in ("sdpa_mask", "sdpa_padded"):
        def call():
            if cell == "window":
                return layer(x, attn_mask=local_window_mask(length, window))
            return layer(x, mask=mask)
        info["pairs"] = batch * length * length
    else:
        def call():
            plan = plan_attention(batch, length, heads=heads, dim=dim, device=x.device, mask=None if cell == "window"
                                  else mask, window=window if cell == "window" else None)
            info["path"], info["pairs"] = plan.path, plan.pairs
            return layer(x, plan=plan)

    def step():
        call().sum().backward()
        if scope == "layer":
            layer.zero_grad(set_to_none=True)
        else:
            q.grad = k.grad = v.grad = None
        x.grad = None

    return step, info


def _weights_step(impl: str, cfg: dict[str, Any], small: bool) -> tuple[Callable[[], None], dict[str, Any]]:
    import torch

    from seqattn.core import Encoder

    torch.manual_seed(0)
    length = 16 if small else cfg["length"]
    enc = Encoder(256, depth=4, heads=8, dropout=0.0)
    x = torch.randn(8, length, 256)
    want = [-1] if impl in ("one_layer_weights", "one_layer_one_item") else False
    items = [0] if impl == "one_layer_one_item" else None

    def step():
        out = enc(x, return_attention=want, attention_items=items)
        out = out[0] if want else out
        out.square().mean().backward()
        enc.zero_grad(set_to_none=True)

    return step, {"length": length, "batch": 8, "heads": 8, "head_dim": 32}


def _window_sizes(tiny: bool) -> list[dict[str, Any]]:
    if tiny:
        return [{"length": 128, "window": 8, "scope": s} for s in SCOPES]
    return [{"length": n, "window": 64, "scope": s} for s in SCOPES for n in (1024, 4096)]


def _varlen_sizes(tiny: bool) -> list[dict[str, Any]]:
    return [{"low": 8, "high": 160, "scope": s} for s in SCOPES] if tiny else [
        {"low": 50, "high": 1000, "scope": s} for s in SCOPES]


def _find(rows: list[dict[str, Any]], impl: str, config: str | None = None) -> dict[str, Any] | None:
    """The first measured (status ok) row of ``impl`` (and ``config``), or None."""
    for r in rows:
        if r["impl"] == impl and r["status"] == "ok" and (config is None or r["config"] == config):
            return r
    return None


def _window_targets(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for cfg in sorted({r["config"] for r in rows}):
        a, b = _find(rows, "sdpa_mask", cfg), _find(rows, "planned", cfg)
        if a and b:
            ratio, mem = a["time_ms"] / b["time_ms"], b["peak_mb"] / max(a["peak_mb"], 1e-9)
            out.append(f"target {cfg}: planned >= 2.5x faster than the SDPA window mask, peak memory no higher: "
                       f"{'met' if ratio >= 2.5 and mem <= 1.0 else 'missed'} ({ratio:.2f}x, memory {mem:.2f}x)")
    return out


def _varlen_targets(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for cfg in sorted({r["config"] for r in rows}):
        a, b = _find(rows, "sdpa_padded", cfg), _find(rows, "planned", cfg)
        if a and b:
            ratio = a["time_ms"] / b["time_ms"]
            limit = a["pairs"] / b["allowed_pairs"]
            out.append(f"target {cfg}: planned >= 2x faster than padded SDPA: "
                       f"{'met' if ratio >= 2 else 'missed'} ({ratio:.2f}x; limit {limit:.2f}x = padded / real pairs)")
    return out


def _weights_targets(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    a = _find(rows, "no_weights")
    for impl, what in (("one_layer_weights", "the plotted layer"),
                       ("one_layer_one_item", "the plotted layer and sequence")):
        b = _find(rows, impl)
        if a and b:
            over = b["time_ms"] / a["time_ms"] - 1
            out.append(f"target training with weights for {what} within 5% of training without: "
                       f"{'met' if over <= 0.05 else 'missed'} ({100 * over:+.1f}%)")
    return out


def _scope(cfg: dict[str, Any]) -> str:
    return cfg.get("scope", "layer")


#: the attention core's own cells (the layer cells first, the encoder training step last)
LAYER_CELLS: dict[str, dict[str, Any]] = {
    "window": {"impls": ("sdpa_mask", "planned"), "sizes": _window_sizes, "gflops": True,
               "describe": lambda cfg: f"window ±{cfg['window']}, L={cfg['length']} ({_scope(cfg)})",
               "step": lambda impl, cfg, small: _layer_step(impl, "window", cfg, small), "targets": _window_targets},
    "varlen": {"impls": ("sdpa_padded", "planned"), "sizes": _varlen_sizes, "gflops": True,
               "describe": lambda cfg: f"lengths {cfg['low']}..{cfg['high']}, B=8 ({_scope(cfg)})",
               "step": lambda impl, cfg, small: _layer_step(impl, "varlen", cfg, small), "targets": _varlen_targets},
}
ENCODER_CELLS: dict[str, dict[str, Any]] = {
    "weights": {"impls": ("no_weights", "one_layer_weights", "one_layer_one_item"),
                "sizes": lambda tiny: [{"length": 32}] if tiny else [{"length": 512}],
                "describe": lambda cfg: f"encoder training step, L={cfg['length']}",
                "step": _weights_step, "targets": _weights_targets},
}
CELL_KEYS = ("impls", "sizes", "describe", "step", "targets")


def modality_cells() -> dict[str, dict[str, Any]]:
    """The cells every modality declares in its ``structure_cells`` module (``STRUCTURE_CELLS``), by
    modality name; ``ValueError`` naming a cell that lacks a key or reuses a name."""
    import importlib
    import pkgutil

    import seqattn.modalities

    found: dict[str, dict[str, Any]] = {}
    for info in sorted(pkgutil.iter_modules(seqattn.modalities.__path__), key=lambda m: m.name):
        folder = [str(Path(p) / info.name) for p in seqattn.modalities.__path__]
        if not info.ispkg or "structure_cells" not in {m.name for m in pkgutil.iter_modules(folder)}:
            continue
        module = f"{seqattn.modalities.__name__}.{info.name}.structure_cells"
        for name, cell in importlib.import_module(module).STRUCTURE_CELLS.items():
            missing = [k for k in CELL_KEYS if k not in cell]
            if missing or name in found or name in LAYER_CELLS or name in ENCODER_CELLS:
                raise ValueError(f"{module}: cell {name!r} " + (f"lacks {missing}" if missing else "is declared twice")
                                 + f"; a cell needs {', '.join(CELL_KEYS)} and a name of its own")
            found[name] = cell
    return found


def cells() -> dict[str, dict[str, Any]]:
    """Every structure cell, in report order: the layer cells, the modalities' cells, the encoder step."""
    return {**LAYER_CELLS, **modality_cells(), **ENCODER_CELLS}


def cell_of(name: str) -> dict[str, Any]:
    """The cell called ``name``; ``ValueError`` naming the known ones."""
    known = cells()
    if name not in known:
        raise ValueError(f"unknown cell {name!r}; expected one of {tuple(known)}")
    return known[name]


def build_step(name: str, impl: str, cfg: dict[str, Any], small: bool = False):
    return cell_of(name)["step"](impl, cfg, small)


# --------------------------------------------------------------------------- one cell in a fresh process


def measure_structure_cell(cell: str, impl: str, cfg: dict[str, Any], repeats: int | None = None,
                           budget: float = 3.0, threads: int | None = None) -> dict[str, Any]:
    import torch

    if threads:
        torch.set_num_threads(threads)

    small_step, _ = build_step(cell, impl, cfg, small=True)
    for _ in range(2):  # libraries loaded, no big buffer yet
        small_step()
    del small_step
    step, info = build_step(cell, impl, cfg)
    # at least 3 steps (a median), up to 100 for the 20 ms graph cells (their noise is ~15 % over 20)
    measured = measure_step(step, repeats, budget, min_steps=3, max_steps=100)
    backend = sdpa_backends(step)
    return {"status": "ok", **measured, "backend": backend, "threads": torch.get_num_threads(),
            **{k: v for k, v in info.items() if v is not None}}


def structure_entry(conn: Any, kwargs: dict[str, Any]) -> None:
    """Child-process entry (see :func:`seqattn.bench.measure.run_cell_isolated`)."""
    try:
        result = measure_structure_cell(**kwargs)
    except Exception as exc:  # noqa: BLE001 -- reported in the cell
        traceback.print_exc()
        msg = str(exc)
        oom = isinstance(exc, MemoryError) or "memory" in msg.lower()
        result = {"status": "OOM" if oom else "failed", "error": (msg.splitlines() or [repr(exc)])[0][:200]}
    conn.send(result)
    conn.close()


# --------------------------------------------------------------------------- report


def flops(cell: dict[str, Any], pairs_key: str = "allowed_pairs") -> float | None:
    """Attention fwd+bwd FLOPs counted as 14·H·d per allowed query-key pair (14·B·H·L·S·d·ρ)."""
    pairs = cell.get(pairs_key)
    if not pairs or "heads" not in cell:
        return None
    return 14.0 * cell["heads"] * cell["head_dim"] * pairs


def format_structure(results: list[dict[str, Any]], peak_gflops: float | None) -> tuple[list[str], list[str]]:
    """Markdown table (a row per cell and implementation) and the targets' lines."""
    known = cells()
    lines = ["| cell | impl | path | SDPA backend | ms | peak MB | attention GFLOP/s | vs first impl |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["cell"], r["config"]), []).append(r)
    for (cell, config), rows in groups.items():
        base = rows[0].get("time_ms") if rows[0]["status"] == "ok" else None
        for r in rows:
            if r["status"] != "ok":
                lines.append(f"| {config} | {r['impl']} | – | – | {r['status']} | – | – | – |")
                continue
            f = flops(r)
            gf = f"{f / (r['time_ms'] * 1e-3) / 1e9:.1f}" if f and known[cell].get("gflops") else "–"
            speed = f"{base / r['time_ms']:.2f}x" if base else "–"
            lines.append(f"| {config} | {r['impl']} | {r.get('path', '–')} | {r.get('backend', '–')} | "
                         f"{r['time_ms']:.1f} | {r['peak_mb']:.1f} | {gf} | {speed} |")
    targets = []
    for name in dict.fromkeys(r["cell"] for r in results):
        targets += known[name]["targets"]([r for r in results if r["cell"] == name])
    if peak_gflops:
        targets.append(f"(matmul peak measured in this run: {peak_gflops:.0f} GFLOP/s fp32; attention GFLOP/s above "
                       "count 14·H·d per allowed pair, fwd+bwd)")
    return lines, targets


def measure_matmul_peak(size: int = 2048, repeats: int = 5, threads: int | None = None,
                        device: str = "cpu") -> dict[str, Any]:
    """GFLOP/s of a square ``torch.matmul`` (fp32 and bf16), this process's threads, on ``device``
    (CUDA: synchronised around each product; fp32 at the matmul precision torch defaults to there, full
    fp32 without TF32)."""
    import torch

    if threads:
        torch.set_num_threads(threads)

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(size, size, dtype=dtype, device=device), torch.randn(size, size, dtype=dtype, device=device)
        a @ b
        times = []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            a @ b
            sync()
            times.append(time.perf_counter() - start)
        out[name] = 2 * size**3 / min(times) / 1e9
    out["threads"] = torch.get_num_threads()
    return out


def matmul_entry(conn: Any, kwargs: dict[str, Any]) -> None:
    try:
        result = {"status": "ok", **measure_matmul_peak(**kwargs)}
    except Exception as exc:  # noqa: BLE001
        result = {"status": "failed", "error": repr(exc)[:200]}
    conn.send(result)
    conn.close()
