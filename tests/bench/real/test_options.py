"""Options of ``python -m seqattn.bench real`` that need no data: ``--set`` overrides reach every recipe run."""

from __future__ import annotations

import argparse

from seqattn.bench import real
from seqattn.bench.real import Result
from seqattn.bench.real import molecules as mol_case


def _args(tmp_path, *argv):
    parser = argparse.ArgumentParser()
    real.add_arguments(parser)
    return parser.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "work"), "--cases", "freesolv",
                              *argv])


def test_set_overrides_reach_the_case_and_bad_ones_are_refused(tmp_path, monkeypatch, capsys):
    seen = []

    def fake_case(ctx):
        seen.append(list(ctx.extra))
        return Result("freesolv", "test RMSE", True, [1.0], [1.0], "ref", [1.0], [1.0], "cmd")

    monkeypatch.setattr(mol_case, "case_freesolv", fake_case)
    assert real.run(_args(tmp_path, "--set", "head.pooling=gru", "--set", "cpu_threads=1")) == 0
    assert seen == [["head.pooling=gru", "cpu_threads=1"]]
    assert real.run(_args(tmp_path, "--set", "head.pooling")) == 2
    assert "--set takes KEY=VALUE, got ['head.pooling']" in capsys.readouterr().err
    assert len(seen) == 1  # nothing ran
