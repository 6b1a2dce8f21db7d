"""``python -m seqattn.bench real``: every recipe on real public data, against a reference model.

Each case runs a recipe **exactly through the path a user types** -- ``python -m seqattn.run
task=... <the custom-data options of its task README>`` in a subprocess, one run per seed -- and, in
the same run, a plain reference model from a well-kept library on the **same split** (the split the
recipe's DataModule makes for that seed). It prints one markdown table: dataset, metric, seqattn
mean ± std, reference mean ± std, the ratio, wall times.

The data is the development copy in ``../shared/data`` (``--data``; the suite skips, saying why,
when it is absent). Cases live one per module of this package (``molecules``, ``cora``, ``lines``, ``pretrain``,
``spoken_words``) and are listed in :data:`CASES`; ``--cases`` picks some, ``--seeds`` overrides the
number of seeds (the defaults follow the issue: FreeSolv 5, Lipophilicity 3, Cora 10, ...).
``--set KEY=VALUE`` (repeatable) adds an override to every recipe run, to measure a variant beside the
reference on the same splits (``--set head.pooling=mha``); the printed commands include it.
``--quick`` is for development: each case takes fewer seeds and shorter training (``Context.quick`` /
``Context.choose``) and the table is titled as quick; the full mode (no flag) makes the README's table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

DEFAULT_DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data"

#: case name -> module of this package defining ``case_<name>(ctx) -> Result``
CASES: dict[str, str] = {
    "freesolv": "molecules",
    "lipophilicity": "molecules",
    "cora": "cora",
    "karate4": "cora",
    "lines": "lines",
    "lines_pretrain": "pretrain",
    "lines_pretrain_full": "pretrain",
    "fsdd_pretrain": "pretrain",
    "fsdd_pretrain_full": "pretrain",
    "freesolv_pretrain": "pretrain",
    "freesolv_pretrain_full": "pretrain",
    "cora_pretrain": "pretrain",
    "cora_pretrain_full": "pretrain",
    "spoken_words": "spoken_words",
    "fsdd": "fsdd",
    "fsdd_ctc": "fsdd",
}


@dataclass
class Context:
    """What a case gets: the data folder, a scratch folder, how many seeds, the time cap per recipe run."""

    data: Path
    work: Path
    seeds: int | None
    log: Callable[[str], None]
    extra: list[str] = field(default_factory=list)  # overrides added to every recipe run (e.g. trainer.max_time)
    #: ``--quick``: development mode; each case reads it (:meth:`choose`) for fewer seeds and shorter training
    #: on both sides, and says what it shortened in its notes; the table is titled as quick
    quick: bool = False
    #: every seqattn run :func:`compare_seeds` timed: ``(its metrics.json, wall seconds)``, for the breakdown
    runs: list[tuple[dict, float]] = field(default_factory=list)
    #: ``--first-seed``: the seeds run are ``first_seed, first_seed + 1, ...`` (to add seeds to an earlier run)
    first_seed: int = 0

    def sub(self, work: Path) -> "Context":
        """The same settings with scratch folder ``work`` and its own (empty) list of timed runs: one row's part
        of a case that gives several rows."""
        return replace(self, work=work, runs=[])

    def choose(self, full, quick):
        """``quick`` under ``--quick``, else ``full`` (a case's seed count, epochs, reference settings)."""
        return quick if self.quick else full

    def seed_list(self, count: int) -> list[int]:
        """The seeds of a case whose own count is ``count``: ``--seeds`` (when given) many, from ``--first-seed``."""
        return list(range(self.first_seed, self.first_seed + (self.seeds or count)))

    def seed_label(self, seeds: list[int]) -> str:
        """``seeds 0..4`` (or ``seed 2``) for a case's notes."""
        return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}..{seeds[-1]}"


def mean_sd(values: list[float]) -> str:
    """``"0.9522 ± 0.0084"`` (the sample standard deviation; ± 0 for one value), ``"–"`` for none."""
    if not values:
        return "–"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.4f}"


@dataclass
class Result:
    dataset: str
    metric: str
    lower_is_better: bool
    seqattn: list[float]
    reference: list[float]
    reference_name: str
    seqattn_seconds: list[float]
    reference_seconds: list[float]
    command: str
    notes: str = ""
    #: the modules the reference imports: its start-up as a command of its own is measured beside the table
    #: (the reference's wall column times its training inside the bench's process, imports already done)
    reference_imports: tuple[str, ...] = ()

    def ratio(self) -> float | None:
        if not self.seqattn or not self.reference or statistics.fmean(self.reference) == 0:
            return None  # (a reference that scored 0, e.g. a --quick run: no ratio)
        return statistics.fmean(self.seqattn) / statistics.fmean(self.reference)

    def row(self) -> str:
        ratio = self.ratio()
        target = ("lower is better" if self.lower_is_better else "higher is better")
        return (f"| {self.dataset} | {self.metric} ({target}) | {mean_sd(self.seqattn)} (n={len(self.seqattn)}) | "
                f"{self.reference_name}: {mean_sd(self.reference)} (n={len(self.reference)}) | "
                f"{'–' if ratio is None else f'{ratio:.3f}'} | {statistics.fmean(self.seqattn_seconds or [0]):.0f} s | "
                f"{statistics.fmean(self.reference_seconds or [0]):.0f} s |")


QUICK_TITLE = ("**bench real --quick: development mode** (fewer seeds, shorter training on both sides, as each row's "
               "notes say): not comparable with the full table; the README's numbers come from the full mode")

HEADER = ("| dataset | metric | seqattn mean ± std | reference mean ± std | ratio (seqattn / reference) | "
          "wall per seqattn run | wall per reference run |\n|---|---|---|---|---:|---:|---:|")


#: seconds between two progress lines of a running recipe (its latest epoch line) on the bench's stderr
PROGRESS_EVERY = 60.0
EPOCH_LINE = re.compile(r"\] - (epoch \d+/\S+[^\r\n]*)")


def run_recipe(overrides: list[str], out_dir: Path, timeout: float = 1800) -> tuple[dict, float]:
    """``python -m seqattn.run <overrides>`` in a subprocess (the user's command), writing into
    ``out_dir``; returns ``(metrics.json, wall seconds)``. Its output goes to ``out_dir/stdout.log`` as it runs;
    every :data:`PROGRESS_EVERY` seconds the bench prints the run's latest epoch line to stderr. A failure
    raises with the run's output tail; past ``timeout`` seconds the run is killed (``subprocess.TimeoutExpired``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "seqattn.run", *overrides, f"hydra.run.dir={out_dir}"]
    # the command as typed in a terminal: the progress bar on and drawn (bench.measure.TERMINAL_ENV)
    from seqattn.bench.measure import TERMINAL_ENV

    env = dict(os.environ, HYDRA_FULL_ERROR="1", **TERMINAL_ENV)
    log_path = out_dir / "stdout.log"
    _say(f"{out_dir}: {command_line(overrides)} (output: {log_path})")
    start = time.perf_counter()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        returncode = watch(proc, log_path, timeout, label=out_dir.name)
    seconds = time.perf_counter() - start
    if returncode != 0:
        output = log_path.read_text(errors="replace")
        raise RuntimeError(f"{' '.join(cmd)} failed ({returncode}):\n{output[-3000:]}")
    return json.loads((out_dir / "metrics.json").read_text()), seconds


def _say(message: str) -> None:
    print(f"[bench real] {message}", file=sys.stderr, flush=True)


def watch(proc: subprocess.Popen, log_path: Path, timeout: float, label: str, every: float | None = None,
          say: Callable[[str], None] = _say) -> int:
    """Wait for ``proc`` (writing its output to ``log_path``), saying ``label``'s latest epoch line (the
    ``epoch N/M ...`` line of :class:`seqattn.training.callbacks.EpochSummary`) every ``every`` seconds
    (default :data:`PROGRESS_EVERY`). Kills it past ``timeout`` seconds and raises ``subprocess.TimeoutExpired``;
    returns its exit code."""
    every = PROGRESS_EVERY if every is None else every
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(proc.args, timeout)
        try:
            return proc.wait(timeout=min(every, timeout - elapsed))
        except subprocess.TimeoutExpired:
            if time.monotonic() - start < timeout:
                line = last_epoch_line(log_path)
                say(f"{label}: {line or 'no epoch finished yet'} [{time.monotonic() - start:.0f} s]")


def last_epoch_line(log_path: Path, tail: int = 65536) -> str | None:
    """The last ``epoch N/M ...`` line in the last ``tail`` bytes of a run's output, or None."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found = EPOCH_LINE.findall(text)
    return found[-1].strip() if found else None


def compare_seeds(ctx: "Context", label: str, overrides: list[str], seeds: int, reference: Callable[[int], float],
                  reference_name: str, key: str = "test/acc") -> tuple[list[float], list[float], list[float], list[float]]:
    """Per seed: the seqattn recipe (``overrides`` + ``seed=``, its metric ``key`` of metrics.json) and
    ``reference(seed)`` (a metric), each timed; ``ctx.seeds`` (when set) overrides ``seeds`` and the seeds
    start at ``ctx.first_seed`` (:meth:`Context.seed_list`). Returns
    ``(seqattn, seqattn seconds, reference, reference seconds)``."""
    ours, ours_s, ref, ref_s = [], [], [], []
    for seed in ctx.seed_list(seeds):
        metrics, seconds = run_recipe(overrides + [f"seed={seed}", *ctx.extra], ctx.work / f"seqattn_{seed}")
        ctx.runs.append((metrics, seconds))
        ours.append(metrics[key])
        ours_s.append(seconds)
        start = time.perf_counter()
        ref.append(reference(seed))
        ref_s.append(time.perf_counter() - start)
        ctx.log(f"{label} seed {seed}: seqattn {ours[-1]:.4f}, {reference_name} {ref[-1]:.4f}")
    return ours, ours_s, ref, ref_s


def recipe_reference(ctx: "Context", overrides: list[str], name: str, key: str = "test/acc",
                     runs: list[dict] | None = None) -> Callable[[int], float]:
    """A reference that is itself a recipe run (``overrides`` + ``seed=``): its metric ``key`` (metrics.json); each
    run's whole metrics.json is appended to ``runs`` when given (for the notes' other metrics)."""
    def run_seed(seed: int) -> float:
        metrics = run_recipe(overrides + [f"seed={seed}", *ctx.extra], ctx.work / f"{name}_{seed}")[0]
        if runs is not None:
            runs.append(metrics)
        return metrics[key]

    return run_seed


def breakdown(runs: list[tuple[dict, float]]) -> str:
    """Where the seqattn runs' wall went, mean over ``runs`` (``(metrics.json, wall)`` pairs): start-up (process
    start to training: interpreter, imports, config, data, model), training, test and the rest (figures,
    files, exit); "" when the runs' metrics.json lack the timings (older runs)."""
    timed = [(m, w) for m, w in runs if m.get("startup_seconds") is not None and "fit_seconds" in m]
    if not timed:
        return ""
    wall = statistics.fmean(w for _, w in timed)
    start = statistics.fmean(m["startup_seconds"] for m, _ in timed)
    fit = statistics.fmean(m["fit_seconds"] for m, _ in timed)
    test = statistics.fmean(m.get("test_seconds") or 0.0 for m, _ in timed)
    return (f"seqattn wall {wall:.1f} s = start-up {start:.1f} s (interpreter, imports, config, data, model) + "
            f"training {fit:.1f} s + test {test:.1f} s + the rest {wall - start - fit - test:.1f} s "
            f"(figures, files, exit; mean of {len(timed)} runs)")


def startup_seconds(modules: tuple[str, ...], rounds: int = 2) -> float:
    """The fastest of ``rounds`` walls of ``python -c "import <modules>"`` (a fresh interpreter each): what a
    reference run started as a command of its own spends before its first line of work."""
    code = "import " + ", ".join(modules)
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def command_line(overrides: list[str]) -> str:
    return "python -m seqattn.run " + " ".join(overrides)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("SEQATTN_REAL_DATA", DEFAULT_DATA)),
                        help="the folder of real public data (default: ../shared/data beside the checkout)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from {', '.join(CASES)}")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per case (default: the case's own)")
    parser.add_argument("--first-seed", type=int, default=0, metavar="K",
                        help="run seeds K, K+1, ... (default 0): adds seeds to an earlier run of a case; "
                             "not for the *_pretrain cases")
    parser.add_argument("--work", type=Path, default=Path("outputs") / "bench_real", help="run folders")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="an override added to every recipe run (repeatable), e.g. --set head.pooling=gru: "
                             "a variant measured beside the reference; the printed commands include it")
    parser.add_argument("--quick", action="store_true",
                        help="development mode: fewer seeds and shorter training on both sides (each case says "
                             "what it shortened); the table is titled QUICK and is not the README's")


def run(args: argparse.Namespace) -> int:
    if not args.data.is_dir():
        print(f"seqattn bench real: skipped: no real data folder at {args.data} (give --data or SEQATTN_REAL_DATA)")
        return 0
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"seqattn bench real: unknown case(s) {unknown}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    if args.first_seed < 0:
        print(f"seqattn bench real: --first-seed must be >= 0, got {args.first_seed}", file=sys.stderr)
        return 2
    pretrain = [n for n in names if CASES[n] == "pretrain"]  # the cases of seqattn.bench.real.pretrain
    if args.first_seed and pretrain:
        print(f"seqattn bench real: --first-seed {args.first_seed} is not supported for {pretrain} (their "
              "pretraining and summaries are tied to seeds 0..N-1); run them without it", file=sys.stderr)
        return 2
    bad = [o for o in args.overrides if "=" not in o or o.startswith("=")]
    if bad:
        print(f"seqattn bench real: --set takes KEY=VALUE, got {bad}", file=sys.stderr)
        return 2
    results, lines = [], []

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    for name in names:
        module = importlib.import_module(f"seqattn.bench.real.{CASES[name]}")
        ctx = Context(data=args.data, work=args.work / name, seeds=args.seeds, log=log, extra=list(args.overrides),
                      quick=args.quick, first_seed=args.first_seed)
        start = time.perf_counter()
        try:
            result = getattr(module, f"case_{name}")(ctx)
        except FileNotFoundError as err:
            log(f"{name}: skipped ({err})")
            continue
        log(f"{name}: done in {time.perf_counter() - start:.0f} s")
        timing = [breakdown(ctx.runs)]
        if result.reference_imports:
            timing.append(f"the reference started as its own command: `python -c \"import "
                          f"{', '.join(result.reference_imports)}\"` {startup_seconds(result.reference_imports):.1f} s "
                          f"before its first line (its wall column starts after the imports)")
        timing = "; ".join(t for t in timing if t)
        if timing:
            result.notes = f"{result.notes}; {timing}" if result.notes else timing
        results.append(result)
        lines.append(result.row())
    table = HEADER + "\n" + "\n".join(lines)
    commands = "\n".join(f"- {r.dataset}: `{r.command}`" + (f" ({r.notes})" if r.notes else "") for r in results)
    report = f"{table}\n\nCommands (one run per seed, `seed=<s>`):\n{commands}\n"
    if args.quick:
        report = (f"{QUICK_TITLE}\n\n{report}")
    print(report)
    if args.out:
        args.out.write_text(report)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=2))
    return 0
