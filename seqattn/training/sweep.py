"""One summary table for a Hydra multirun: ``python -m seqattn.run -m model.heads=2,4,8``.

:class:`SweepSummary` (a Hydra callback, configured in conf/hydra/default.yaml) runs when the
sweep ends and writes ``summary.csv`` and ``summary.md`` into the sweep directory: one row per
job with its overrides and the scalar metrics of its ``metrics.json`` (test metrics, best
validation score, epochs, fit time). :func:`summarize` does the same for any sweep directory.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("seqattn.training.sweep")

_SKIP = ("output_dir", "best_checkpoint", "figure", "task")
FAILED = "failed.json"


def record_failure(job_dir: Path, err: BaseException) -> Path:
    """Write ``failed.json`` (the error and its traceback) into a sweep job's folder."""
    import traceback

    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / FAILED
    path.write_text(json.dumps({"error": f"{type(err).__name__}: {err}",
                                "traceback": "".join(traceback.format_exception(err))}, indent=2))
    return path


def _job_rows(sweep_dir: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    rows, override_keys, metric_keys = [], [], []
    jobs = [p.parent for p in sweep_dir.glob("*/metrics.json")] + [p.parent for p in sweep_dir.glob(f"*/{FAILED}")]
    for job in sorted(set(jobs), key=lambda p: (len(p.name), p.name)):
        metrics_path = job / "metrics.json"
        if metrics_path.is_file():
            metrics = {"status": "ok", **json.loads(metrics_path.read_text())}
        else:
            metrics = {"status": "failed: " + json.loads((job / FAILED).read_text())["error"].splitlines()[0][:200]}
        overrides_file = job / ".hydra" / "overrides.yaml"
        overrides = [str(o) for o in OmegaConf.load(overrides_file)] if overrides_file.is_file() else []
        row: dict[str, Any] = {"job": job.name}
        for override in overrides:
            key, _, value = override.partition("=")
            row[key] = value
            if key not in override_keys:
                override_keys.append(key)
        for key, value in metrics.items():
            if key in _SKIP or isinstance(value, (list, dict)):
                continue
            row[key] = value
            if key not in metric_keys:
                metric_keys.append(key)
        rows.append(row)
    return rows, override_keys, metric_keys


def summarize(sweep_dir: str | Path) -> Path | None:
    """Write ``summary.csv`` and ``summary.md`` for the jobs under ``sweep_dir`` (each a folder with a
    ``metrics.json``); returns the CSV path, or None when no job finished."""
    sweep_dir = Path(sweep_dir)
    rows, override_keys, metric_keys = _job_rows(sweep_dir)
    if not rows:
        log.warning("sweep %s: no job wrote metrics.json or failed.json, no summary", sweep_dir)
        return None
    # columns: job, the overrides that vary or not, then test metrics first
    varying = [k for k in override_keys if len({str(r.get(k)) for r in rows}) > 1] or override_keys
    metric_keys.sort(key=lambda k: (k != "status", not k.startswith("test/"), not k.startswith("best_"), k))
    columns = ["job", *varying, *metric_keys]
    csv_path = sweep_dir / "summary.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4f}"
        return "" if value is None else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    fixed = [k for k in override_keys if k not in varying]
    if fixed:
        lines += ["", "Same in every job: " + ", ".join(f"{k}={rows[0].get(k)}" for k in fixed)]
    (sweep_dir / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    log.info("sweep summary of %d runs: %s (and summary.md)", len(rows), csv_path)
    return csv_path


def failed_jobs(sweep_dir: str | Path) -> list[str]:
    """The job folders of a sweep that recorded a failure."""
    return sorted(p.parent.name for p in Path(sweep_dir).glob(f"*/{FAILED}"))


class SweepSummary(Callback):
    """Hydra callback: after a multirun, :func:`summarize` its sweep directory; when some jobs failed,
    list them and exit with status 1 (after the summary of the others is written)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        summarize(sweep_dir)
        failed = failed_jobs(sweep_dir)
        if failed:
            log.error("%d job(s) of the sweep failed: %s (see their failed.json); the others are summarised in %s",
                      len(failed), failed, sweep_dir / "summary.md")
            raise SystemExit(1)
