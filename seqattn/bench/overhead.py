"""``python -m seqattn.bench overhead``: the recipe's Lightning loop against a bare PyTorch loop, per task.

For each task (one per ``conf/task/*.yaml``), in a fresh process per task, the same network (same
seed, same config) is trained ``--steps`` steps four ways, in turn, ``--rounds`` times (every other
round in reverse order, so that a load that drifts disturbs every way alike):

- ``bare``: a plain loop over batches collated beforehand: ``net(batch)``, the objective's loss,
  ``backward()``, gradient clipping as the trainer config asks, the recipe's optimizer and
  learning-rate schedule, ``zero_grad``. Nothing else: the floor;
- ``bare+loader``: the same loop drawing its batches from the recipe's training DataLoader (what the
  data pipeline, collate included, adds);
- ``recipe``: ``trainer.fit`` through the Trainer and callbacks ``seqattn.run`` builds
  (:func:`seqattn.run.build_trainer`: progress bar drawn as in a terminal, logger, checkpoints, epoch
  summary, metrics and per-step logging in ``training_step``), validation off (and with it what acts
  on validation metrics: checkpoint choice, early stopping, the monitor guard);
- ``recipe, no bar``: the same with ``trainer.enable_progress_bar=false`` (the bar's cost).

Each way's step time is the median of the time between the ends of consecutive steps after
``--warmup`` steps (a Lightning step then includes fetching its batch and every hook). The table gives
ms per step and the ratios recipe / bare (the framework's overhead, issue 20's target: <= 1.15x),
recipe / bare+loader (Lightning's own share) and recipe / recipe-no-bar (the bar).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from seqattn.bench.measure import TERMINAL_ENV, write_report
from seqattn.configs import compose_config, task_names

TASKS = tuple(task_names())
WAYS = ("bare", "bare+loader", "recipe", "recipe, no bar")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {','.join(TASKS)}")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per way")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the timed ones")
    parser.add_argument("--rounds", type=int, default=2, help="the four ways in turn, this many times")
    parser.add_argument("--threads", default="1", help="cpu_threads of every way (1 on a shared machine)")
    parser.add_argument("--overrides", nargs="*", default=[], help="overrides for every task's config")
    parser.add_argument("--work-dir", default="outputs/bench_overhead", help="run directories go here")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per task")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one task in this process
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--out", metavar="FILE.md")
    parser.add_argument("--json", metavar="FILE")


def _step_times(ends: list[float], warmup: int) -> list[float]:
    """Durations between consecutive step ends, the first ``warmup`` steps left out."""
    return [b - a for a, b in zip(ends[warmup:], ends[warmup + 1:])]


def measure_task(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """The four ways of one task, in this process. ms per step (median), and the losses of the first steps."""
    import lightning as L
    import torch
    from hydra.utils import instantiate
    from omegaconf import open_dict

    from seqattn.run import build_objective, build_trainer, plan_run
    from seqattn.training.callbacks import MonitorGuard
    from seqattn.training.threads import parse_setting

    threads = parse_setting(args.threads)
    if isinstance(threads, int):
        torch.set_num_threads(threads)
    total = args.warmup + args.steps + 1
    cfg = compose_config([f"task={task}", *args.overrides])
    out_dir = Path(args.work_dir).resolve() / task
    with open_dict(cfg):
        cfg.paths.output_dir = str(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    plan = plan_run(cfg, datamodule)
    batches_per_epoch = len(datamodule.train_dataloader())

    def fresh_model():
        torch.manual_seed(cfg.seed)
        return build_objective(cfg, datamodule, plan)

    def loader_batches():
        while True:  # epochs, as many as the steps need
            yield from datamodule.train_dataloader()

    clip = cfg.trainer.get("gradient_clip_val")

    def bare(batches) -> tuple[list[float], list[float]]:
        model = fresh_model()
        model.train()
        optimizer = model.build_optimizer()  # the recipe's optimizer, as configure_optimizers builds it
        scheduler = instantiate(model.scheduler_cfg)(optimizer, total_steps=total) if model.scheduler_cfg else None
        ends, losses = [], []
        for _, batch in zip(range(total), batches):
            loss = model.loss(model(batch), batch)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), float(clip))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if scheduler is not None:
                scheduler.step()
            losses.append(float(loss.detach()))
            ends.append(time.perf_counter())
        return ends, losses

    class StepEnds(L.Callback):
        def __init__(self) -> None:
            self.ends: list[float] = []
            self.losses: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.ends.append(time.perf_counter())
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.losses.append(float(loss.detach()))

    def recipe(progress_bar: bool) -> tuple[list[float], list[float]]:
        run_cfg = cfg.copy()
        with open_dict(run_cfg):
            run_cfg.trainer.enable_progress_bar = progress_bar
            run_cfg.paths.output_dir = str(out_dir / ("recipe" if progress_bar else "recipe_no_bar"))
        model = fresh_model()
        timer = StepEnds()
        trainer, _ = build_trainer(run_cfg, plan, Path(run_cfg.paths.output_dir), max_epochs=-1, max_steps=total,
                                   limit_val_batches=0, num_sanity_val_steps=0)
        # validation is off: what acts on its metrics (checkpoint choice, early stopping, the monitor guard)
        # is left out, or a task whose epoch is one step (social) would stop at its first epoch's end
        watchers = (L.pytorch.callbacks.ModelCheckpoint, L.pytorch.callbacks.EarlyStopping, MonitorGuard)
        trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, watchers)] + [timer]
        try:
            trainer.fit(model, datamodule=datamodule)
        except Exception as err:  # noqa: BLE001 -- after the timed steps (e.g. a missing monitor at the end)
            if len(timer.ends) < total:
                raise
            print(f"{task}: fit ended with {type(err).__name__}: {err} after the timed steps", file=sys.stderr)
        return timer.ends, timer.losses

    fixed = [b for _, b in zip(range(total), loader_batches())]
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    first_losses: dict[str, list[float]] = {}
    for round_ in range(args.rounds):  # the ways in turn, every other round backwards: a load drift hits all
        for way in (WAYS if round_ % 2 == 0 else WAYS[::-1]):
            if way == "bare":
                ends, losses = bare(fixed)
            elif way == "bare+loader":
                ends, losses = bare(loader_batches())
            else:
                ends, losses = recipe(progress_bar=way == "recipe")
            times[way] += _step_times(ends, args.warmup)
            first_losses.setdefault(way, losses[:5])
    results: dict[str, Any] = {}
    for way in WAYS:
        results[way] = {"step_ms": statistics.median(times[way]) * 1e3, "steps_ms": [t * 1e3 for t in times[way]],
                        "losses": first_losses[way]}
        print(f"[{task} {way}] {results[way]['step_ms']:.1f} ms per step", file=sys.stderr, flush=True)
    parameters = sum(p.numel() for p in fresh_model().parameters())
    return {"task": task, "status": "ok", "threads": torch.get_num_threads(), "parameters": parameters,
            "batches_per_epoch": batches_per_epoch, "ways": results}


def _ratio(result: dict[str, Any], a: str, b: str) -> float | None:
    try:
        return result["ways"][a]["step_ms"] / result["ways"][b]["step_ms"]
    except (KeyError, ZeroDivisionError, TypeError):
        return None


def format_table(results: list[dict[str, Any]]) -> str:
    """One row per task: ms per step of each way, recipe / bare, recipe / bare+loader, recipe / no bar."""
    head = ["task", "threads", *(f"{w} ms" for w in WAYS), "recipe / bare", "recipe / bare+loader",
            "recipe / no bar"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for r in results:
        if r.get("status") != "ok":
            lines.append(f"| {r['task']} | {r.get('status', 'failed')} |" + " – |" * (len(head) - 2))
            continue
        cells = [f"{r['ways'][w]['step_ms']:.1f}" for w in WAYS]
        ratios = [_ratio(r, "recipe", "bare"), _ratio(r, "recipe", "bare+loader"), _ratio(r, "recipe", "recipe, no bar")]
        lines.append(f"| {r['task']} | {r['threads']} | " + " | ".join(cells) + " | "
                     + " | ".join("–" if x is None else f"{x:.2f}x" for x in ratios) + " |")
    return "\n".join(lines)


def _child(task: str, args: argparse.Namespace) -> dict[str, Any]:
    """One task in a fresh process (its output, the progress bar's included, discarded)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "seqattn.bench", "overhead", "--one", task, "--result", str(result),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
               "--rounds", str(args.rounds),
               "--work-dir", str(args.work_dir), "--overrides", *args.overrides]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  timeout=args.timeout, env=dict(os.environ, **TERMINAL_ENV))
        except subprocess.TimeoutExpired:
            return {"task": task, "status": "timeout"}
        sys.stderr.write("".join(line + "\n" for line in proc.stderr.splitlines() if line.startswith("[")))
        if proc.returncode != 0 or not result.is_file():
            return {"task": task, "status": f"exit {proc.returncode}", "error": proc.stderr[-2000:]}
        return json.loads(result.read_text())


def run(args: argparse.Namespace) -> int:
    if args.one:
        Path(args.result).write_text(json.dumps(measure_task(args.one, args)))
        return 0
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise SystemExit(f"unknown task(s) {bad}; choose from {', '.join(TASKS)}")
    command = "python -m seqattn.bench " + " ".join(shlex.quote(a) for a in getattr(args, "argv", ["overhead"]))
    print(f"$ {command}", flush=True)
    load_before = os.getloadavg()
    results = []
    for task in tasks:
        r = _child(task, args)
        results.append(r)
        if r.get("error"):
            print(r["error"], flush=True)
    caption = (f"Training steps of each recipe's network ({args.steps} timed after {args.warmup} per way and round, "
               f"{args.rounds} round(s) with the ways in turn, median ms per step, cpu_threads={args.threads}): bare PyTorch loop (batches collated beforehand / drawn from "
               "the recipe's DataLoader) vs the recipe's Lightning loop (seqattn.run's Trainer and callbacks, "
               "validation off; progress bar drawn as in a terminal / off), one process per task.")
    write_report(args, command, [caption, "", format_table(results)], results, [], load_before, os.getloadavg())
    return 0
