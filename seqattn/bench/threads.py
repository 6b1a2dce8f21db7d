"""``python -m seqattn.bench threads``: every recipe's whole command at 1 and 2 threads, alone and busy.

For each task (one per ``conf/task/*.yaml``) it runs the command a user types, ``python -m seqattn.run
task=T cpu_threads=N <bounded run>``, in a subprocess (progress bar on, as in a terminal), for every
thread count of ``--threads``: first alone, then beside **one busy process the cell starts itself** (a
plain matmul loop on ``--busy-threads`` threads, the shape of a neighbour's training; killed after
the task's busy runs). The bounded run is ``--steps`` training steps (one epoch of at most that many
batches; a task with fewer batches per epoch trains more epochs), two validation and two test
batches, no figures. The default, 150 steps, makes the steps (not the ~5 s of start-up) most of each
command's time for every recipe: at 20 or 40 steps the start-up hid a 1.13-1.24x difference between the
thread counts that 300 steps showed (docs/benchmarks.md, "Threads beside a busy process"). ``--steps 0`` runs
each recipe's whole default run instead (``python -m seqattn.run task=T cpu_threads=N``, figures included), and
``--threads auto`` times the default setting itself: each run's own choice, read back from its
``run_plan.json``, is the table's "auto picks" (``--threads auto --steps 0``: issue 20's "every recipe's default
run beside one other busy process", two timed runs per task after the warm-up).

The table has each arm's wall seconds (the whole command, start-up included), the ratios that the
thread choice is judged by, and what ``cpu_threads=auto`` picks in each condition: the
:func:`seqattn.training.threads.choose_threads` decision for the network's parameter count (and the
task's ``cpu_threads_split_from``) and the
other processes' load measured during that condition's runs (from ``/proc/stat``, this bench's and
the run's own CPU time taken out), with the time of the arm it picks. The goal (issue 20): ``auto``
alone at most the time of torch's default (all cores) alone, and ``auto`` beside the busy process
within 2x of ``auto`` alone.

Before a task's timed arms, one untimed warm-up run of the same command (``--warmup``, on by default; 2
steps, the first thread count): a recipe's first run on a machine builds its data caches (featurised
molecules, a converted graph, a vocabulary) and fills the page cache with the libraries, which would
otherwise be charged to whichever arm came first (the molecule pretraining recipe's first arm took 10.3 s
wall and 13.0 s CPU on one thread, its next 1-thread run 5.9 s). It is listed in the JSON (condition
``warmup``), never in the table.

On a machine other processes share, "alone" is not alone: the measured other load of each condition is
printed beside the table, so the reader sees how quiet the quiet runs were.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from seqattn.bench.measure import TERMINAL_ENV, write_report
from seqattn.configs import task_names

TASKS = tuple(task_names())

#: the neighbour: a plain matmul loop on N threads (``{threads}``), until killed
BUSY_SCRIPT = """
import torch
torch.set_num_threads({threads})
a = torch.randn(512, 512)
while True:
    b = a @ a
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {','.join(TASKS)}")
    parser.add_argument("--threads", default="1,2", help="comma-separated cpu_threads values to time")
    parser.add_argument("--steps", type=int, default=150,
                        help="training steps per run (the bounded run; below ~100 the start-up dominates); "
                             "0: each recipe's whole default run")
    parser.add_argument("--busy-threads", type=int, default=2, help="threads of the busy neighbour")
    parser.add_argument("--busy-session", choices=("same", "new"), default="same",
                        help="the neighbour in this bench's session (the scheduler shares the CPUs per thread) or "
                             "in a new one, as a program started from another terminal (with Linux's autogroups, "
                             "per session)")
    parser.add_argument("--overrides", nargs="*", default=[], help="more overrides for every run")
    parser.add_argument("--work-dir", default="outputs/bench_threads", help="run directories go here")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                        help="one untimed 2-step run per task first (builds its data caches)")
    parser.add_argument("--out", metavar="FILE.md")
    parser.add_argument("--json", metavar="FILE")


def bounded(steps: int) -> list[str]:
    """Overrides that make a recipe's run ``steps`` training steps: epochs of at most ``steps`` batches
    until ``steps`` optimizer steps, 2 validation and 2 test batches, no figures. ``steps == 0``: none (the
    recipe's whole default run)."""
    if steps == 0:
        return []
    if steps < 0:
        raise ValueError(f"--steps must be >= 0 (0: the whole default run), got {steps}")
    return ["budget.steps=null", f"trainer.max_epochs={steps}", f"++trainer.max_steps={steps}",
            f"++trainer.limit_train_batches={steps}", "++trainer.limit_val_batches=2", "++trainer.limit_test_batches=2",
            "plot=false"]


class Busy:
    """The busy neighbour: a subprocess running :data:`BUSY_SCRIPT` until :meth:`stop`. ``new_session``: started
    in a session of its own (``setsid``), as a program from another terminal is. Where the kernel groups CPU time
    by session (Linux's ``sched_autogroup_enabled``, on here), a neighbour in another session gets at most its
    group's share, whatever its thread count; in the same session every thread competes alone."""

    def __init__(self, threads: int, new_session: bool = False) -> None:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        self.proc = subprocess.Popen([sys.executable, "-c", BUSY_SCRIPT.format(threads=threads)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=new_session)
        time.sleep(2.0)  # torch imported, the loop running
        if self.proc.poll() is not None:
            raise RuntimeError(f"the busy process exited at once (code {self.proc.returncode})")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def _machine_busy() -> float | None:
    from seqattn.training.threads import _machine_busy_seconds

    return _machine_busy_seconds()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_one(task: str, threads: str, condition: str, args: argparse.Namespace, steps: int | None = None) -> dict[str, Any]:
    """One whole command, timed: wall seconds, the run's own CPU seconds, the other processes' load
    (busy cores) while it ran, its parameter count (metrics.json) and its ``cpu_threads_split_from``
    (config.yaml: from which parameter count ``auto`` splits ops; a task may set its own). ``steps``: the
    bounded run's training steps (default ``args.steps``)."""
    run_dir = Path(args.work_dir).resolve() / task / f"{condition}-{threads}"
    cmd = [sys.executable, "-m", "seqattn.run", f"task={task}", f"cpu_threads={threads}",
           *bounded(args.steps if steps is None else steps), *args.overrides, f"hydra.run.dir={run_dir}"]
    busy0, children0, own0 = _machine_busy(), _children_cpu(), time.process_time()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                              env=dict(os.environ, **TERMINAL_ENV))
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        tail = (proc.stdout + proc.stderr)[-2000:] if proc.returncode else ""
    except subprocess.TimeoutExpired:
        status, tail = "timeout", ""
    wall = time.perf_counter() - start
    cpu = _children_cpu() - children0
    busy1 = _machine_busy()
    other = None if busy0 is None or busy1 is None else max(
        0.0, (busy1 - busy0 - cpu - (time.process_time() - own0)) / wall)
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        metrics = {}
    try:
        split_from = OmegaConf.load(run_dir / "config.yaml").get("cpu_threads_split_from")
    except (OSError, ValueError):
        split_from = None
    try:  # the thread count the run itself chose (cpu_threads=auto decides at its start)
        used = json.loads((run_dir / "run_plan.json").read_text())["threads"]["threads"]
    except (OSError, ValueError, KeyError, TypeError):
        used = None
    return {"task": task, "threads": threads, "condition": condition, "status": status, "wall_s": wall,
            "cpu_s": cpu, "other_load": other, "parameters": metrics.get("parameters"),
            "split_from": split_from, "used_threads": used,
            "fit_s": metrics.get("fit_seconds"), "command": shlex.join(cmd), "error": tail}


def _wall(results: list[dict[str, Any]], task: str, threads: str, condition: str) -> float | None:
    rows = [r["wall_s"] for r in results if (r["task"], r["threads"], r["condition"], r["status"]) ==
            (task, threads, condition, "ok")]
    return statistics.median(rows) if rows else None


def _load(results: list[dict[str, Any]], task: str, condition: str) -> float | None:
    loads = [r["other_load"] for r in results if r["task"] == task and r["condition"] == condition
             and r["other_load"] is not None]
    return statistics.fmean(loads) if loads else None


def auto_pick(results: list[dict[str, Any]], task: str, condition: str, default_threads: int,
              cpus: int) -> int | None:
    """What ``cpu_threads=auto`` picks for ``task`` in ``condition``: where ``auto`` itself was timed, the count
    its runs chose (their ``run_plan.json``; the most common, if they differ); else the choice for its
    parameter count, its ``cpu_threads_split_from`` (the default where the run did not say) and the other load
    measured in that condition (None without a parameter count)."""
    from seqattn.training.threads import choose_threads

    used = [r.get("used_threads") for r in results if (r["task"], r["threads"], r["condition"]) ==
            (task, "auto", condition) and r.get("used_threads") is not None]
    if used:
        return statistics.mode(used)

    params = next((r["parameters"] for r in results if r["task"] == task and r["parameters"]), None)
    if params is None:
        return None
    split_from = next((r.get("split_from") for r in results if r["task"] == task and r.get("split_from") is not None),
                      None)
    return choose_threads("auto", int(params), default_threads, cpus, _load(results, task, condition),
                          split_from=split_from).threads


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def format_table(results: list[dict[str, Any]], threads: list[str], default_threads: int, cpus: int) -> str:
    """One row per task: wall seconds per thread count alone and busy, busy / alone per count, what auto
    picks in each condition, auto alone / torch's default alone and auto busy / auto alone."""
    default = str(default_threads)
    arm = {t: t if t == "auto" else f"{t} thr" for t in threads}
    head = (["task", "parameters"] + [f"{arm[t]} alone s" for t in threads] + [f"{arm[t]} busy s" for t in threads]
            + [f"busy/alone {arm[t]}" for t in threads]
            + ["auto picks (alone/busy)", f"auto alone / {default} thr alone", "auto busy / auto alone"])
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for task in dict.fromkeys(r["task"] for r in results):
        params = next((r["parameters"] for r in results if r["task"] == task and r["parameters"]), None)
        alone = {t: _wall(results, task, t, "alone") for t in threads}
        busy = {t: _wall(results, task, t, "busy") for t in threads}
        picks = {c: auto_pick(results, task, c, default_threads, cpus) for c in ("alone", "busy")}
        if "auto" in threads:  # timed as the default itself
            auto = {"alone": alone["auto"], "busy": busy["auto"]}
        else:  # the arm of the count auto would pick
            auto = {c: (alone if c == "alone" else busy).get(str(picks[c])) if picks[c] is not None else None
                    for c in picks}
        row = ([task, "–" if params is None else f"{params / 1e3:.1f}k"]
               + [_fmt(alone[t]) for t in threads] + [_fmt(busy[t]) for t in threads]
               + [_fmt(_ratio(busy[t], alone[t]), ".2f", "x") for t in threads]
               + [f"{_fmt(picks['alone'], 'd')}/{_fmt(picks['busy'], 'd')}",
                  _fmt(_ratio(auto["alone"], alone.get(default)), ".2f", "x"),
                  _fmt(_ratio(auto["busy"], auto["alone"]), ".2f", "x")])
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def format_loads(results: list[dict[str, Any]]) -> str:
    parts = []
    for task in dict.fromkeys(r["task"] for r in results):
        parts.append(f"{task} {_fmt(_load(results, task, 'alone'), '.2f')}/{_fmt(_load(results, task, 'busy'), '.2f')}")
    return ("Other processes' load (busy CPUs, mean over the runs; alone/busy), as `auto` measures it: "
            + ", ".join(parts))


def run(args: argparse.Namespace) -> int:
    import torch

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise SystemExit(f"unknown task(s) {bad}; choose from {', '.join(TASKS)}")
    threads = [t.strip() for t in args.threads.split(",") if t.strip()]
    from seqattn.training.threads import parse_setting

    try:  # before any run: a bad --threads value or a negative --steps, named without a traceback
        for t in threads:
            parse_setting(t)
        bounded(args.steps)
    except ValueError as err:
        raise SystemExit(f"python -m seqattn.bench threads: error: {err}") from None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # killed: the busy neighbour is stopped too (finally)
    command = "python -m seqattn.bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", ["threads"]))
    print(f"$ {command}", flush=True)
    default_threads, cpus = torch.get_num_threads(), os.cpu_count() or 1
    load_before = os.getloadavg()
    results = []
    for task in tasks:
        if getattr(args, "warmup", False):
            r = run_one(task, threads[0], "warmup", args, steps=2)
            results.append(r)
            print(f"[{task} warm-up cpu_threads={threads[0]}, 2 steps, not timed] {r['status']} wall "
                  f"{r['wall_s']:.1f} s", flush=True)
            if r["error"]:
                print(r["error"], flush=True)
        for condition in ("alone", "busy"):
            busy = Busy(args.busy_threads, new_session=args.busy_session == "new") if condition == "busy" else None
            try:
                for t in threads:
                    r = run_one(task, t, condition, args)
                    results.append(r)
                    print(f"[{task} {condition} cpu_threads={t}] {r['status']} wall {r['wall_s']:.1f} s, "
                          f"cpu {r['cpu_s']:.1f} s, other load {_fmt(r['other_load'], '.2f')}", flush=True)
                    if r["error"]:
                        print(r["error"], flush=True)
            finally:
                if busy is not None:
                    busy.stop()
    load_after = os.getloadavg()
    words = " ".join(["python -m seqattn.run task=T cpu_threads=N", *bounded(args.steps), *args.overrides])
    whole = " (each recipe's whole default run)" if args.steps == 0 else ""
    caption = (f"Whole commands `{words}`{whole} (progress bar on), wall seconds, "
               f"alone and beside one busy process (a {args.busy_threads}-thread matmul loop started by the bench"
               f"{', in a session of its own' if args.busy_session == 'new' else ', in its session'}); "
               f"torch's default here: {default_threads} threads, {cpus} CPUs.")
    write_report(args, command, [caption, "", format_table(results, threads, default_threads, cpus), "",
                                 format_loads(results)], results, [], load_before, load_after)
    return 0
