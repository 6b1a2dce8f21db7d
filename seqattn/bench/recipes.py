"""``python -m seqattn.bench recipes``: every recipe's wall time and test metrics, variants side by side.

Runs ``python -m seqattn.run task=T <common overrides> <variant overrides>`` in a subprocess for
every task (one per ``conf/task/<task>.yaml``, sorted) and variant, interleaved (task by task,
variant by variant, ``--rounds`` times), so that a machine whose load drifts disturbs every variant
alike, and writes one table: wall seconds (the whole command: start-up, data, fit, test, figures),
fit seconds, epochs and the test metrics, with each variant's wall time as a ratio to the first
variant's. The command is the one a user types: progress bar on, drawn as in a terminal.

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

from seqattn.bench.measure import TERMINAL_ENV, write_report
from seqattn.configs import compose_config, task_names

#: every recipe, one per ``conf/task/<task>.yaml`` (a new task is benchmarked without editing this file)
TASKS = tuple(task_names())
#: none: the command as a user types it, its progress bar drawn as in a terminal (TERMINAL_ENV)
QUIET: tuple[str, ...] = ()


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
    parser.add_argument("--steps", type=int, default=0,
                        help="instead of whole runs: N training steps (forward, backward, optimizer) of each "
                             "recipe's network on its first training batches, CPU time per step, variants "
                             "interleaved in one process (precision and fast_dropout variants only)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for --steps")
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
    env = dict(os.environ, **TERMINAL_ENV)
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


STEP_VARIANT_KEYS = ("matmul_precision", "trainer.precision", "fast_dropout")


def _step_setting(overrides: list[str]) -> tuple[str, bool, bool]:
    """(matmul precision, bf16 autocast, fast dropout masks) of a variant's overrides; anything else is refused."""
    precision, autocast, fast_dropout = "highest", False, True
    for o in overrides:
        key, _, value = o.partition("=")
        if key == "matmul_precision":
            precision = value
        elif key == "trainer.precision":
            autocast = value.startswith("bf16")
        elif key == "fast_dropout":
            if value not in ("true", "false"):
                raise SystemExit(f"fast_dropout must be true or false, got {value!r}")
            fast_dropout = value == "true"
        else:
            raise SystemExit(f"--steps measures these switches only ({', '.join(STEP_VARIANT_KEYS)}), got {o!r}")
    return precision, autocast, fast_dropout


def measure_steps(args: argparse.Namespace, tasks: list[str], variants: list[tuple[str, list[str]]]
                  ) -> list[dict[str, Any]]:
    """CPU time per training step of each recipe's network, each variant, interleaved."""
    import torch
    from hydra.utils import instantiate
    from omegaconf import open_dict

    from seqattn.core.dropout import set_fast_dropout
    from seqattn.run import build_objective

    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for task in tasks:
        cfg = compose_config([f"task={task}", *args.overrides])
        with open_dict(cfg):
            cfg.paths.output_dir = str(Path(args.work_dir).resolve() / task)
        torch.manual_seed(0)
        datamodule = instantiate(cfg.data)
        datamodule.prepare_data()
        datamodule.setup("fit")
        model = build_objective(cfg, datamodule)
        model.log = lambda *a, **k: None  # no trainer here
        batches = [b for _, b in zip(range(4), datamodule.train_dataloader())]
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        times: dict[str, list[float]] = {name: [] for name, _ in variants}
        settings = {name: _step_setting(ov) for name, ov in variants}

        def step(name: str, batch) -> None:
            precision, autocast, fast_dropout = settings[name]
            torch.set_float32_matmul_precision(precision)
            set_fast_dropout(fast_dropout)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = model.training_step(batch, 0)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        model.train()
        for name, _ in variants:  # warm-up
            step(name, batches[0])
        for i in range(args.steps):
            for name, _ in variants:
                batch = batches[i % len(batches)]
                start = time.process_time()
                step(name, batch)
                times[name].append(time.process_time() - start)
        torch.set_float32_matmul_precision("highest")
        set_fast_dropout(True)
        for name, _ in variants:
            results.append({"task": task, "variant": name, "status": "ok", "step_ms": statistics.median(times[name]) * 1e3,
                            "steps_ms": [t * 1e3 for t in times[name]], "threads": torch.get_num_threads()})
            print(f"[{task} {name}] {results[-1]['step_ms']:.1f} ms CPU per step", flush=True)
    return results


def format_steps(results: list[dict[str, Any]], variants: list[str]) -> str:
    lines = ["| task | " + " | ".join(f"{v} ms" for v in variants) + " | " +
             " | ".join(f"{v} / {variants[0]}" for v in variants[1:]) + " |",
             "|---|" + "---:|" * (2 * len(variants) - 1)]
    for task in dict.fromkeys(r["task"] for r in results):
        t = {r["variant"]: r["step_ms"] for r in results if r["task"] == task}
        lines.append(f"| {task} | " + " | ".join(f"{t[v]:.1f}" for v in variants) + " | " +
                     " | ".join(f"{t[v] / t[variants[0]]:.2f}x" for v in variants[1:]) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
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
    if args.steps:
        if args.before:
            raise SystemExit("--steps compares precision variants of this checkout; --before needs whole runs")
        results = measure_steps(args, tasks, [(n, ov) for n, ov, _ in variants])
        caption = (f"Training steps (forward, backward, AdamW) of each recipe's network on its first training "
                   f"batches: median CPU time of {args.steps} steps per variant, variants interleaved in one process.")
        write_report(args, command, [caption, "", format_steps(results, [v[0] for v in variants])], results, [],
                     load_before, os.getloadavg())
        return 0
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
