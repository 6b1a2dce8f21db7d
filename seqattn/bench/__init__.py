"""Benchmarks: ``python -m seqattn.bench SUITE [options]``.

Each suite is a module with ``add_arguments(parser)`` and ``run(args) -> exit code``:

- ``core`` (:mod:`seqattn.bench.core`): one attention layer, seqattn vs torch vs textbook,
  time and peak memory over sequence lengths;
- ``real`` (:mod:`seqattn.bench.real`): every recipe on real public data through the command a user
  types, against a reference model from a well-kept library on the same split;
- ``recipes`` (:mod:`seqattn.bench.recipes`): every recipe's wall time and test metrics, variants
  (precision switches, another revision) interleaved side by side;
- one suite per modality that has a ``bench`` module (``seqattn/modalities/<m>/bench.py``), named
  after the modality and found at run time: ``image`` (training throughput, pixels vs patches,
  sdpa vs math), ``graph`` (the edge kernel vs PyG ``TransformerConv``, dense vs edge on molecule
  batches).

An unknown suite exits with status 2 and a message naming the known ones. Speed is
reported as ratios measured side by side in one run, never as a timed test.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys

import seqattn.modalities


def _suites() -> dict[str, str]:
    """suite name -> module: the core suite, then every modality's ``bench`` module."""
    suites = {"core": "seqattn.bench.core", "real": "seqattn.bench.real", "recipes": "seqattn.bench.recipes"}
    for info in sorted(pkgutil.iter_modules(seqattn.modalities.__path__), key=lambda m: m.name):
        name = f"seqattn.modalities.{info.name}.bench"
        if info.ispkg and importlib.util.find_spec(name) is not None:
            suites[info.name] = name
    return suites


#: suite name -> module (imported only when that suite runs)
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
