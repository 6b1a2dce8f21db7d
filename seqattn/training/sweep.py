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


def _job_rows(sweep_dir: Path) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    rows, override_keys, metric_keys = [], [], []
    for metrics_path in sorted(sweep_dir.glob("*/metrics.json"), key=lambda p: (len(p.parent.name), p.parent.name)):
        job = metrics_path.parent
        metrics = json.loads(metrics_path.read_text())
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
        log.warning("sweep %s: no job wrote metrics.json, no summary", sweep_dir)
        return None
    # columns: job, the overrides that vary or not, then test metrics first
    varying = [k for k in override_keys if len({str(r.get(k)) for r in rows}) > 1] or override_keys
    metric_keys.sort(key=lambda k: (not k.startswith("test/"), not k.startswith("best_"), k))
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


class SweepSummary(Callback):
    """Hydra callback: after a multirun, :func:`summarize` its sweep directory."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        summarize(Path(config.hydra.sweep.dir))
