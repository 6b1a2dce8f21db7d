"""``python -m seqattn.bench threads`` and ``overhead``: the reports' structure, no timing assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqattn.bench import overhead, threads

ROOT = Path(__file__).resolve().parents[2]
TINY = ["data.synth.n_train=200", "data.synth.n_val=40", "data.synth.n_test=40", "data.batch_size=32",
        "model.dim=32", "model.depth=1", "model.heads=2"]


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    split = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    return split[0], split[1:]


def _threads_result(task, t, condition, wall, params=229_900, load=0.0):
    return {"task": task, "threads": t, "condition": condition, "status": "ok", "wall_s": wall, "cpu_s": wall,
            "other_load": load, "parameters": params, "fit_s": None, "command": "", "error": ""}


def test_threads_table_has_each_arm_its_ratios_and_what_auto_picks():
    results = [_threads_result("text_cls", "1", "alone", 87.0), _threads_result("text_cls", "2", "alone", 66.0),
               _threads_result("text_cls", "1", "busy", 120.0, load=1.9),
               _threads_result("text_cls", "2", "busy", 180.0, load=1.9),
               _threads_result("molecule", "1", "alone", 12.0, 137_300), _threads_result("molecule", "2", "alone", 14.0, 137_300),
               _threads_result("molecule", "1", "busy", 20.8, 137_300, 1.9),
               {**_threads_result("molecule", "2", "busy", 0.0, 137_300, 1.9), "status": "timeout"}]
    header, body = _table(threads.format_table(results, ["1", "2"], default_threads=2, cpus=2))
    assert header == ["task", "parameters", "1 thr alone s", "2 thr alone s", "1 thr busy s", "2 thr busy s",
                      "busy/alone 1 thr", "busy/alone 2 thr", "auto picks (alone/busy)", "auto alone / 2 thr alone",
                      "auto busy / auto alone"]
    text, mol = (dict(zip(header, row)) for row in body)
    assert (text["task"], text["parameters"], text["1 thr alone s"], text["2 thr busy s"]) == ("text_cls", "229.9k", "87.0", "180.0")
    assert text["busy/alone 1 thr"] == f"{120 / 87:.2f}x" and text["busy/alone 2 thr"] == f"{180 / 66:.2f}x"
    # a large network: both cores alone, one beside the busy process (it measured 1.9 CPUs taken)
    assert text["auto picks (alone/busy)"] == "2/1"
    assert text["auto alone / 2 thr alone"] == "1.00x" and text["auto busy / auto alone"] == f"{120 / 66:.2f}x"
    # a small one: one thread everywhere; a failed arm shows as "–", never as a number
    assert mol["auto picks (alone/busy)"] == "1/1" and mol["2 thr busy s"] == "–" and mol["busy/alone 2 thr"] == "–"
    assert mol["auto alone / 2 thr alone"] == f"{12 / 14:.2f}x" and mol["auto busy / auto alone"] == f"{20.8 / 12:.2f}x"
    assert "molecule 0.00/1.90" in threads.format_loads(results)
    # a small network whose task splits it anyway (cpu_threads_split_from=0 in its config.yaml): 2 alone, 1 busy
    split = [{**_threads_result("image", t, c, w, 101_700, load), "split_from": 0}
             for t, c, w, load in (("1", "alone", 17.5, 0.0), ("2", "alone", 14.9, 0.0), ("1", "busy", 24.0, 1.3),
                                   ("2", "busy", 68.3, 1.0))]
    _, (image,) = _table(threads.format_table(split, ["1", "2"], default_threads=2, cpus=2))
    image = dict(zip(header, image))
    assert image["auto picks (alone/busy)"] == "2/1" and image["auto alone / 2 thr alone"] == "1.00x"
    assert image["auto busy / auto alone"] == f"{24.0 / 14.9:.2f}x"


def test_threads_bounded_run_is_a_fixed_number_of_steps():
    assert threads.bounded(7) == ["budget.steps=null", "trainer.max_epochs=7", "++trainer.max_steps=7",
                                  "++trainer.limit_train_batches=7", "++trainer.limit_val_batches=2",
                                  "++trainer.limit_test_batches=2", "plot=false"]
    assert threads.bounded(0) == []  # --steps 0: the recipe's whole default run, as the user types it
    with pytest.raises(ValueError, match="-3"):
        threads.bounded(-3)
    # the command refuses both before any run, naming the value (a message, not a traceback)
    for bad, named in ((["--steps", "-3"], "got -3"), (["--threads", "x"], "got 'x'")):
        args = threads.argparse.ArgumentParser()
        threads.add_arguments(args)
        with pytest.raises(SystemExit, match=named):
            threads.run(args.parse_args(["--tasks", "social", *bad]))


def test_threads_busy_neighbour_in_this_session_or_its_own():
    """``--busy-session new`` starts the neighbour as another terminal's program would be: its own session."""
    import os

    for new_session in (False, True):
        busy = threads.Busy(1, new_session=new_session)
        try:
            assert busy.proc.poll() is None  # running
            assert (os.getsid(busy.proc.pid) != os.getsid(0)) is new_session
        finally:
            busy.stop()
        assert busy.proc.returncode is not None  # stopped


def test_threads_table_times_auto_itself_with_the_counts_its_runs_chose():
    """``--threads auto``: the picks are what the runs recorded (not re-derived), the ratio is auto's own walls."""
    results = [{**_threads_result("speech_cls", "auto", "alone", 75.8, 355_700, 0.0), "used_threads": 2},
               {**_threads_result("speech_cls", "auto", "busy", 143.0, 355_700, 1.5), "used_threads": 1},
               # a small network whose derived pick (1 alone) differs from what its run recorded (2)
               {**_threads_result("image", "auto", "alone", 140.0, 101_700, 0.0), "used_threads": 2},
               {**_threads_result("image", "auto", "busy", 0.0, 101_700, 1.5), "used_threads": 1, "status": "timeout"}]
    header, body = _table(threads.format_table(results, ["auto"], default_threads=2, cpus=2))
    assert header == ["task", "parameters", "auto alone s", "auto busy s", "busy/alone auto",
                      "auto picks (alone/busy)", "auto alone / 2 thr alone", "auto busy / auto alone"]
    speech, image = (dict(zip(header, row)) for row in body)
    assert speech["auto picks (alone/busy)"] == "2/1" and speech["auto busy / auto alone"] == f"{143.0 / 75.8:.2f}x"
    assert speech["auto alone / 2 thr alone"] == "–"  # the 2-thread arm was not timed
    assert image["auto picks (alone/busy)"] == "2/1" and image["auto busy / auto alone"] == "–"


@pytest.mark.slow
def test_threads_suite_tiny(tmp_path):
    """Two whole commands (alone, beside the busy process), a row with both, the busy process gone after."""
    js = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "seqattn.bench", "threads", "--tasks", "text_cls", "--threads", "1",
                           "--steps", "2", "--busy-threads", "1", "--work-dir", str(tmp_path / "w"), "--json", str(js),
                           "--overrides", *TINY], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("$ python -m seqattn.bench threads --tasks text_cls")  # the command, with the table
    cells = json.loads(js.read_text())["cells"]
    # an untimed warm-up first (2 steps: it builds the data caches), then the timed arms
    assert [(c["condition"], c["threads"], c["status"]) for c in cells] == [
        ("warmup", "1", "ok"), ("alone", "1", "ok"), ("busy", "1", "ok")]
    assert all(c["wall_s"] > 0 and c["parameters"] > 0 and "cpu_threads=1" in c["command"] for c in cells)
    assert all(c["split_from"] == 200_000 for c in cells)  # read back from each run's config.yaml
    assert "trainer.max_steps=2" in cells[0]["command"] and "not timed" in proc.stdout
    header, body = _table(proc.stdout)
    assert header[:4] == ["task", "parameters", "1 thr alone s", "1 thr busy s"] and body[0][0] == "text_cls"
    assert body[0][2] == f"{cells[1]['wall_s']:.1f}" and body[0][3] == f"{cells[2]['wall_s']:.1f}"  # not the warm-up's
    assert body[0][header.index("auto picks (alone/busy)")] == "1/1"  # the tiny network: one thread


def test_overhead_table_rows_and_ratios():
    ways = {"bare": 10.0, "bare+loader": 11.0, "recipe": 12.5, "recipe, no bar": 12.0}
    results = [{"task": "text_cls", "status": "ok", "threads": 1, "ways": {w: {"step_ms": v} for w, v in ways.items()}},
               {"task": "molecule", "status": "timeout"}]
    header, body = _table(overhead.format_table(results))
    assert header == ["task", "threads", "bare ms", "bare+loader ms", "recipe ms", "recipe, no bar ms", "recipe / bare",
                      "recipe / bare+loader", "recipe / no bar"]
    assert body[0] == ["text_cls", "1", "10.0", "11.0", "12.5", "12.0", "1.25x", f"{12.5 / 11:.2f}x", f"{12.5 / 12:.2f}x"]
    assert body[1][:2] == ["molecule", "timeout"] and len(body[1]) == len(header)
    assert overhead._step_times([0.0, 1.0, 3.0, 6.0], warmup=1) == [2.0, 3.0]  # the warm-up steps left out


@pytest.mark.slow
def test_overhead_suite_tiny(tmp_path):
    """One task in its own process: every way timed, the table's numbers are the JSON's."""
    js, out = tmp_path / "o.json", tmp_path / "o.md"
    proc = subprocess.run([sys.executable, "-m", "seqattn.bench", "overhead", "--tasks", "text_cls", "--steps", "3",
                           "--warmup", "1", "--rounds", "2", "--work-dir", str(tmp_path / "w"), "--json", str(js), "--out", str(out),
                           "--overrides", *TINY], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (cell,) = json.loads(js.read_text())["cells"]
    assert cell["status"] == "ok" and cell["threads"] == 1 and set(cell["ways"]) == set(overhead.WAYS)
    for way in overhead.WAYS:
        assert cell["ways"][way]["step_ms"] > 0 and len(cell["ways"][way]["steps_ms"]) == 2 * 3  # 2 rounds
        assert len(cell["ways"][way]["losses"]) == 5 and all(loss > 0 for loss in cell["ways"][way]["losses"])
    header, body = _table(out.read_text())
    assert body[0][0] == "text_cls"
    assert float(body[0][header.index("recipe ms")]) == pytest.approx(cell["ways"]["recipe"]["step_ms"], abs=0.051)
    assert out.read_text().startswith("Command: `python -m seqattn.bench overhead --tasks text_cls")
