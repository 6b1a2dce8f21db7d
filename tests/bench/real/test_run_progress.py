"""A recipe run by ``bench real`` shows its progress while it runs (its latest epoch line), and one that runs past
its time limit is killed (``seqattn.bench.real.watch``)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from seqattn.bench.real import last_epoch_line, watch

CHILD = """
import sys, time
for epoch in (1, 2):
    print(f"[2026-12-03 06:25:21,068][seqattn.train][INFO] - epoch {epoch}/2 val/acc=0.{epoch} ({epoch} s)", flush=True)
    time.sleep(0.8)
print("Epoch 2/2 ━━━━ 1/1 (a progress bar line, not an epoch line)", flush=True)
sys.exit(int(sys.argv[1]))
"""


def _start(tmp_path, *args: str) -> tuple[subprocess.Popen, object]:
    log = tmp_path / "stdout.log"
    out = open(log, "w")  # noqa: SIM115 -- closed by the caller
    return subprocess.Popen([sys.executable, "-c", *args], stdout=out, stderr=subprocess.STDOUT), out


def test_a_running_recipe_reports_its_latest_epoch_line_and_its_exit_code(tmp_path):
    said: list[str] = []
    proc, out = _start(tmp_path, CHILD, "3")
    try:
        code = watch(proc, tmp_path / "stdout.log", timeout=60, label="seqattn_0", every=0.3, say=said.append)
    finally:
        out.close()
    assert code == 3
    assert said and all(line.startswith("seqattn_0: ") for line in said)
    shown = [line for line in said if "epoch " in line]
    assert "epoch 1/2 val/acc=0.1 (1 s)" in shown[0] and any("epoch 2/2 val/acc=0.2" in line for line in shown)
    assert last_epoch_line(tmp_path / "stdout.log") == "epoch 2/2 val/acc=0.2 (2 s)"  # not the bar's line


def test_a_run_past_its_time_limit_is_killed(tmp_path):
    proc, out = _start(tmp_path, "import time; time.sleep(60)")
    start = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            watch(proc, tmp_path / "stdout.log", timeout=1.0, label="seqattn_0", every=0.3, say=lambda line: None)
    finally:
        out.close()
    assert proc.poll() is not None and time.monotonic() - start < 10  # dead, not waited for


def test_no_epoch_line_yet_reads_as_none(tmp_path):
    (tmp_path / "stdout.log").write_text("loading data\n")
    assert last_epoch_line(tmp_path / "stdout.log") is None
    assert last_epoch_line(tmp_path / "missing.log") is None
