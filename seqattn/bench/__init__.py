"""Benchmarks: ``python -m seqattn.bench SUITE [options]``.

Each suite is a module of this package with ``add_arguments(parser)`` and ``run(args) -> exit code``,
found at run time (a module or sub-package without both is a helper, e.g. ``measure``, ``structure``):

- ``core`` (:mod:`seqattn.bench.core`): one attention layer, seqattn vs torch vs textbook,
  time and peak memory over sequence lengths, and the structured-attention cells
  (:mod:`seqattn.bench.structure`: the core's, and those a modality declares in its folder);
- ``graph`` (:mod:`seqattn.bench.graph`): the edge kernel vs PyG ``TransformerConv``, dense vs edge
  on molecule batches, a ``task=molecule`` training epoch;
- ``image`` (:mod:`seqattn.bench.image`): image training throughput, pixels vs patches, sdpa vs math;
- ``real`` (:mod:`seqattn.bench.real`): every recipe on real public data through the command a user
  types, against a reference model from a well-kept library on the same split;
- ``recipes`` (:mod:`seqattn.bench.recipes`): every recipe (one per ``conf/task/*.yaml``) with its
  wall time and test metrics, variants (precision switches, another revision) interleaved side by side.
- ``threads`` (:mod:`seqattn.bench.threads`): every recipe's whole command at 1 and 2 threads, alone
  and beside a busy process the cell starts, and what ``cpu_threads=auto`` picks;
- ``dropout`` (:mod:`seqattn.bench.dropout`): torch's CPU dropout masks vs :mod:`seqattn.core.dropout`'s,
  per call and in a whole encoder training step;
- ``conv`` (:mod:`seqattn.bench.conv`): ``nn.Conv1d`` on ``[N, L, C]`` tokens vs :mod:`seqattn.core.conv`'s
  channels-last route, per layer and in a whole encoder training step;
- ``audio`` (:mod:`seqattn.bench.audio`): torchaudio's STFT power (``abs(z)²``) vs seqattn's (``re² + im²``),
  in the audio adapter's log-mel features and in a whole speech_ctc training step;
- ``overhead`` (:mod:`seqattn.bench.overhead`): every recipe's Lightning loop against a bare PyTorch
  loop on the same network and batches (the framework's cost per step, the progress bar's).

An unknown suite exits with status 2 and a message naming the known ones. Speed is
reported as ratios measured side by side in one run, never as a timed test.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def _suites() -> dict[str, str]:
    """suite name -> module: every module of this package that has ``add_arguments`` and ``run``."""
    suites = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if callable(getattr(module, "add_arguments", None)) and callable(getattr(module, "run", None)):
            suites[info.name] = module.__name__
    return suites


#: suite name -> module
SUITES: dict[str, str] = _suites()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m seqattn.bench", description="seqattn benchmarks")
    sub = parser.add_subparsers(dest="suite", metavar="suite", required=True, help=f"one of: {', '.join(SUITES)}")
    for name, module_name in SUITES.items():
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_one":  # hidden: one core cell in this process
        from seqattn.bench.core import _one

        return _one(argv[1:])
    if argv and not argv[0].startswith("-") and argv[0] not in SUITES:
        build_parser().error(f"unknown suite {argv[0]!r}; known suites: {', '.join(SUITES)}")  # exits 2
    args = build_parser().parse_args(argv)
    args.argv = argv
    return args.func(args)
