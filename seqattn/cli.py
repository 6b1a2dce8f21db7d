"""Command-line ``key=value`` arguments, parsed in one place for every entry point, and how an entry point exits.

``python -m seqattn.predict ckpt=a.ckpt input=x`` and ``python -m seqattn.export ...`` take Hydra-style
``key=value`` arguments without a Hydra config (the checkpoint carries its own); ``--key=value`` and
``batch-size`` spellings are accepted too. ``python -m seqattn.run`` is Hydra's.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence


def process_seconds() -> float | None:
    """Seconds since this process started (Linux ``/proc``: its start tick and the boot time, 10 ms
    resolution), or None where that is not available: a run's start-up (interpreter, imports, config,
    data) is this number when its training begins."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        start_ticks = int(fields[19])  # field 22 of proc(5), counted after the command name
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def parse_key_values(argv: Sequence[str], allowed: set[str], required: Sequence[str], usage: str) -> dict[str, str]:
    """Command-line ``key=value`` arguments (``--key=value`` and ``batch-size`` spellings too) ->
    ``{key: value}``; ValueError naming the bad argument or the missing keys, with ``usage``."""
    args: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("-").replace("-", "_")
        if not sep or key not in allowed:
            raise ValueError(f"unexpected argument {arg!r}; expected key=value with key in {sorted(allowed)}\n{usage}")
        args[key] = value
    missing = [k for k in required if not args.get(k)]
    if missing:
        raise ValueError(f"missing {missing}\n{usage}")
    return args


def exit_without_teardown(code: int = 0) -> None:
    """End the process as Python would, minus the teardown of the ~4,000 modules a run imports (torch,
    Lightning, PyG, ...: 1-3 s of every short run on 2 cores): the atexit handlers run (logging's flush among
    them), stdout and stderr are flushed, then ``os._exit``. Returns without exiting while another non-daemon
    thread is alive (Python's shutdown joins those first)."""
    import atexit
    import threading

    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()  # what interpreter shutdown runs first, in the same order
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to flush into
            pass
    os._exit(code)
