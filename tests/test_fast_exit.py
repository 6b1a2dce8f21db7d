"""``python -m seqattn.run`` ends without tearing down its ~4,000 imported modules (seconds of a short run), yet
as Python would: atexit handlers run, buffered output is written, the exit code is kept, and a live non-daemon
thread is waited for (``seqattn.cli.exit_without_teardown``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered, as in a pipe
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env=env)


def test_atexit_handlers_run_buffered_output_is_written_and_the_code_kept():
    done = _python("""
        import atexit, sys
        from seqattn.cli import exit_without_teardown
        atexit.register(lambda: print("atexit ran"))
        print("buffered, no newline", end="")  # a pipe: block-buffered until flushed
        print("on stderr", file=sys.stderr, end="")
        exit_without_teardown(3)
        print("not reached")
    """)
    assert done.returncode == 3
    assert "buffered, no newline" in done.stdout and "atexit ran" in done.stdout
    assert "not reached" not in done.stdout and "on stderr" in done.stderr


def test_a_live_non_daemon_thread_is_left_to_python_to_join():
    done = _python("""
        import threading, time
        from seqattn.cli import exit_without_teardown
        threading.Thread(target=lambda: (time.sleep(0.5), print("thread done", flush=True))).start()
        exit_without_teardown(3)
        print("returned", flush=True)
    """)
    assert done.returncode == 0 and "returned" in done.stdout and "thread done" in done.stdout


def test_the_console_script_ends_without_the_module_teardown(monkeypatch):
    """``seqattn-run`` (pyproject's entry point) runs, then ends without the module teardown, as
    ``python -m seqattn.run`` does (both call ``seqattn.run.cli``)."""
    import importlib
    import tomllib
    from pathlib import Path

    import pytest

    import seqattn.cli
    import seqattn.run

    scripts = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["seqattn-run"].partition(":")
    entry = getattr(importlib.import_module(module), name)
    calls = []

    class Exited(Exception):
        pass

    def fake_exit(code):
        calls.append(("os._exit", code))
        raise Exited

    monkeypatch.setattr(seqattn.run, "main", lambda: calls.append(("main",)))
    monkeypatch.setattr(seqattn.cli.os, "_exit", fake_exit)
    monkeypatch.setattr("atexit._run_exitfuncs", lambda: None)  # not pytest's own handlers, now
    # a thread another test of this worker left running would make it return (tested on its own above): this test
    # is about the entry point, so it sees the main thread only
    import threading

    monkeypatch.setattr(threading, "enumerate", lambda: [threading.main_thread()])
    with pytest.raises(Exited):
        entry()
    assert calls == [("main",), ("os._exit", 0)]
