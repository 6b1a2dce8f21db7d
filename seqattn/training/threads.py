"""How many intra-op threads a CPU run uses (``cpu_threads``), and why.

torch splits every op of a step over its intra-op threads, and every op waits for all of them. A
small network's ops are too small to gain much from splitting, and when another process keeps a
core busy, one of the threads keeps losing its core and every op waits for it: a 2-thread run of
the molecule recipe took 2.5x its time alone beside a plain 2-thread matmul loop and 9x on a
machine shared with other jobs (issue 20), where one thread keeps a fair share.

``cpu_threads`` (conf/config.yaml):

- ``auto`` (the default): **1** thread when the network has fewer than ``cpu_threads_split_from``
  parameters (:data:`SMALL_MODEL_PARAMETERS` unless a task sets its own: its ops are too small to
  split), else one thread per core that other processes left free while the run read its data and
  built its model (measured from ``/proc/stat``: the machine's busy CPU time minus this process's
  own), at most torch's default (one per physical core, or ``OMP_NUM_THREADS``) and at least 1;
- ``N`` (an integer >= 1): exactly N threads (the override);
- ``null``: torch's default, untouched (what seqattn did before ``auto``).

A resumed run (``resume=RUN_DIR``) under ``auto`` keeps the count its first part chose (read back from its
``run_plan.json``), whatever the load now: the intra-op thread count can change the last bits of a sum, and
a resumed run continues the same training.

:func:`choose_threads` is the decision (pure: unit-tested); :class:`LoadProbe` measures the other
processes' load; ``seqattn.run`` logs the choice in one INFO line and records it in ``run_plan.json``
(key ``threads``). The count is decided once, at the start of a run: a run's numbers do not depend
on when a neighbour started (intra-op thread counts can change the last bits of a sum).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

#: networks below this many parameters train on one thread under ``cpu_threads=auto`` (the default of
#: ``cpu_threads_split_from``): it separates the molecule network (137k), measured slower at 2 threads even
#: alone, from text_cls (230k: 66 s at 2 threads vs 87 s at 1). The parameter count is a proxy for the work
#: of a step: a task whose batches are large for its network (image, the pretraining recipes of images,
#: molecules and graphs: measured faster at 2 threads alone, docs/benchmarks.md) sets 0 in its config
SMALL_MODEL_PARAMETERS = 200_000
#: a thread is given a core only when this much of it is free (other processes' load below 1 - this)
FREE_CORE = 0.5


@dataclass(frozen=True)
class ThreadChoice:
    """``threads`` intra-op threads; ``reason`` says why (the log line); ``setting`` is ``cpu_threads`` as
    given; ``other_load``: other processes' busy cores while the run started (None: not measured)."""

    threads: int
    reason: str
    setting: str
    other_load: float | None = None

    def describe(self) -> str:
        """The log line: ``cpu threads: 1 (cpu_threads=auto: ...)``."""
        return f"cpu threads: {self.threads} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _count(value: Any) -> int | None:
    """An int (not a bool) or a string of digits (a command line's) -> the int; anything else -> None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def parse_setting(value: Any) -> int | str | None:
    """``cpu_threads`` as given -> ``None`` (torch's default), ``"auto"`` or an int >= 1; ``ValueError`` otherwise."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none")):
        return None
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    count = _count(value)
    if count is None or count < 1:
        raise ValueError(f"cpu_threads must be auto, null or an integer >= 1, got {value!r}")
    return count


def parse_split_from(value: Any) -> int:
    """``cpu_threads_split_from`` as given -> an int >= 0 (None: :data:`SMALL_MODEL_PARAMETERS`); ``ValueError``
    naming the value otherwise."""
    if value is None:
        return SMALL_MODEL_PARAMETERS
    count = _count(value)
    if count is None or count < 0:
        raise ValueError(f"cpu_threads_split_from must be an integer >= 0 (a parameter count), got {value!r}")
    return count


def choose_threads(setting: Any, parameters: int, default_threads: int, cpus: int,
                   other_load: Callable[[], float | None] | float | None,
                   resumed: dict[str, Any] | None = None, split_from: Any = None) -> ThreadChoice:
    """The intra-op thread count of a run.

    Args:
        setting: ``cpu_threads`` (``"auto"``, ``None`` or an integer >= 1; see :func:`parse_setting`).
        parameters: the network's parameter count.
        default_threads: torch's default count (one per physical core, or ``OMP_NUM_THREADS``): the most
            ``auto`` uses.
        cpus: logical CPUs of the machine (``other_load`` is out of these).
        other_load: CPU cores other processes kept busy while the run started (None: unknown, taken as 0),
            or a function measuring it (:meth:`LoadProbe.other_load`), called only when the choice needs it.
        resumed: the choice recorded by the run being resumed (``run_plan.json``'s ``threads``; None for a
            new run): under ``auto`` it is returned as it was (count, reason, load seen), so a resumed run's
            plan equals its first part's.
        split_from: ``cpu_threads_split_from``: under ``auto``, a network with fewer parameters gets one thread
            (None: :data:`SMALL_MODEL_PARAMETERS`; 0: every network is split over the free cores).
    """
    parsed = parse_setting(setting)
    split_from = parse_split_from(split_from)
    shown = "null" if parsed is None else str(parsed)
    if parsed is None:
        return ThreadChoice(default_threads, "cpu_threads=null: torch's default", shown)
    if isinstance(parsed, int):
        return ThreadChoice(parsed, f"cpu_threads={parsed} given", shown)
    earlier = (resumed or {}).get("threads")
    if isinstance(earlier, int) and not isinstance(earlier, bool) and earlier >= 1:  # the recorded choice, as it was
        return ThreadChoice(earlier, str(resumed.get("reason") or "cpu_threads=auto"), shown, resumed.get("other_load"))
    if parameters < split_from:
        return ThreadChoice(1, f"cpu_threads=auto: {parameters / 1e3:.1f}k parameters < "
                               f"{split_from / 1e3:.0f}k (cpu_threads_split_from), ops too small to split over "
                               "threads; cpu_threads=N to choose", shown)
    if callable(other_load):
        other_load = other_load()
    if other_load is not None:
        other_load = round(float(other_load), 2)
    load = max(0.0, other_load or 0.0)
    free = max(0.0, cpus - load)
    count = max(1, min(default_threads, math.floor(free + FREE_CORE)))
    seen = "other processes' load not measured" if other_load is None else (
        f"other processes kept {load:.1f} of {cpus} CPUs busy at the start")
    why = ("one per free core" if count < default_threads else "torch's default, all cores free")
    return ThreadChoice(count, f"cpu_threads=auto: {parameters / 1e3:.1f}k parameters >= {split_from / 1e3:.0f}k "
                               f"(cpu_threads_split_from), {seen}: {why}; "
                               "cpu_threads=N to choose", shown, other_load)


def _machine_busy_seconds() -> float | None:
    """Busy CPU seconds of the whole machine since boot (``/proc/stat``), None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    busy = sum(values[:8]) - values[3] - (values[4] if len(values) > 4 else 0)  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


class LoadProbe:
    """Other processes' CPU load over an interval: the machine's busy CPU time minus this process's own,
    per wall second (``0.0`` = nothing else ran, ``2.0`` = two cores kept busy by others).
    ``LoadProbe()`` starts the interval; :meth:`other_load` ends it (waiting until at least ``min_seconds``
    have passed: ``/proc/stat`` counts in 10 ms ticks). None where ``/proc/stat`` is absent (not Linux)."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._own = time.process_time()
        self._busy = _machine_busy_seconds()

    def other_load(self, min_seconds: float = 0.5) -> float | None:
        if self._busy is None:
            return None
        elapsed = time.monotonic() - self._wall
        if elapsed < min_seconds:
            time.sleep(min_seconds - elapsed)
        busy = _machine_busy_seconds()
        if busy is None:
            return None
        wall = time.monotonic() - self._wall
        own = time.process_time() - self._own
        return max(0.0, (busy - self._busy - own) / max(wall, 1e-6))
