"""``python -m seqattn.bench recipes``: every recipe's wall time and test metrics, variants side by side.

Runs ``python -m seqattn.run task=T <common overrides> <variant overrides>`` in a subprocess for
every task and variant, interleaved (task by task, variant by variant, ``--rounds`` times), so that
a machine whose load drifts disturbs every variant alike, and writes one table: wall seconds (the
whole command: start-up, data, fit, test, figures), fit seconds, epochs and the test metrics, with
each variant's wall time as a ratio to the first variant's.

Variants are ``name=overrides`` (space-separated Hydra overrides; empty for the defaults), e.g. the
CPU precision switches::

    python -m seqattn.bench recipes --variants "fp32=" "medium=matmul_precision=medium" \\
        "bf16=trainer.precision=bf16-mixed"

``--before DIR`` adds a variant ``before`` that runs another source checkout of seqattn (e.g. the
revision before a change: ``git archive REV | tar -x -C DIR``) with the same overrides, for
before/after tables. ``--overrides trainer.max_epochs=2`` makes a quick speed-only run (the metrics
then are not the recipes'). Every run writes into ``--work-dir/<task>/<variant>-<round>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TASKS = ("speech", "text_tagging", "text_cls", "image", "molecule", "social")
QUIET = ("trainer.enable_progress_bar=false",)


def _variant(text: str) -> tuple[str, list[str]]:
    name, sep, overrides = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a variant is name=overrides (overrides may be empty), got {text!r}")
    return name, shlex.split(overrides)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {','.join(TASKS)}")
    parser.add_argument("--variants", nargs="+", type=_variant, default=[("default", [])],
                        help='name=overrides, e.g. "medium=matmul_precision=medium" (first = the reference)')
    parser.add_argument("--before", metavar="DIR", help="a source checkout of another revision: variant 'before'")
    parser.add_argument("--overrides", nargs="*", default=[], help="overrides for every run")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repetitions")
    parser.add_argument("--work-dir", default="outputs/bench_recipes", help="run directories go here")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--out", metavar="FILE.md")
    parser.add_argument("--json", metavar="FILE")


def _metrics(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def run_one(task: str, name: str, overrides: list[str], args: argparse.Namespace, round_: int,
            source: str | None) -> dict[str, Any]:
    run_dir = Path(args.work_dir).resolve() / task / f"{name}-{round_}"
    cmd = [sys.executable, "-m", "seqattn.run", f"task={task}", *QUIET, *args.overrides, *overrides,
           f"hydra.run.dir={run_dir}"]
    env = dict(os.environ)
    cwd = None
    if source:
        env["PYTHONPATH"] = str(Path(source).resolve())
        cwd = str(Path(source).resolve())
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=args.timeout)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        tail = proc.stderr[-2000:] if proc.returncode else ""
    except subprocess.TimeoutExpired:
        status, tail = "timeout", ""
    wall = time.perf_counter() - start
    m = _metrics(run_dir)
    tests = {k: v for k, v in m.items() if k.startswith("test/") and isinstance(v, (int, float)) and "_c" not in k}
    return {"task": task, "variant": name, "round": round_, "status": status, "wall_s": wall,
            "fit_s": m.get("fit_seconds"), "epochs": m.get("epochs"), "test": tests, "command": shlex.join(cmd),
            "cwd": cwd, "error": tail}


def _main_metrics(tests: dict[str, float]) -> str:
    keys = [k for k in tests if any(w in k for w in ("acc", "rmse", "mae"))][:3] or list(tests)[:2]
    return ", ".join(f"{k.removeprefix('test/')} {tests[k]:.4f}" for k in keys) or "–"


def format_table(results: list[dict[str, Any]], variants: list[str]) -> str:
    lines = ["| task | variant | wall s | fit s | epochs | test metrics | wall vs first |",
             "|---|---|---:|---:|---:|---|---:|"]
    for task in dict.fromkeys(r["task"] for r in results):
        ref = None
        for name in variants:
            rows = [r for r in results if r["task"] == task and r["variant"] == name]
            ok = [r for r in rows if r["status"] == "ok"]
            if not ok:
                lines.append(f"| {task} | {name} | {rows[0]['status'] if rows else '–'} | – | – | – | – |")
                continue
            wall = statistics.median(r["wall_s"] for r in ok)
            fit = statistics.median(r["fit_s"] for r in ok if r["fit_s"] is not None) if any(
                r["fit_s"] is not None for r in ok) else None
            ref = wall if ref is None else ref
            metrics = "; ".join(_main_metrics(r["test"]) for r in ok)
            lines.append(f"| {task} | {name} | {wall:.0f} | {'–' if fit is None else f'{fit:.0f}'} | "
                         f"{'/'.join(str(r['epochs']) for r in ok)} | {metrics} | {wall / ref:.2f}x |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from seqattn.bench.core import write_report

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise SystemExit(f"unknown task(s) {bad}; choose from {', '.join(TASKS)}")
    variants = [(name, ov, None) for name, ov in args.variants]
    if args.before:
        variants.insert(0, ("before", [], args.before))
    command = "python -m seqattn.bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", ["recipes"]))
    print(f"$ {command}", flush=True)
    load_before = os.getloadavg()
    results = []
    for round_ in range(args.rounds):
        for task in tasks:
            for name, overrides, source in variants:
                r = run_one(task, name, overrides, args, round_, source)
                results.append(r)
                print(f"[{task} {name} #{round_}] {r['status']} wall {r['wall_s']:.0f} s fit {r['fit_s']} s "
                      f"epochs {r['epochs']} {_main_metrics(r['test'])}", flush=True)
                if r["error"]:
                    print(r["error"], flush=True)
    load_after = os.getloadavg()
    caption = (f"Recipes, each `python -m seqattn.run task=T {' '.join(args.overrides)} <variant>` in its own "
               f"process, variants interleaved, {args.rounds} round(s); wall = the whole command.")
    table = format_table(results, [v[0] for v in variants])
    write_report(args, command, [caption, "", table], results, [], load_before, load_after)
    return 0
