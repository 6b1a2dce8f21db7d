"""``python -m seqattn.bench image`` on tiny sizes: the report's shape, no timing assertions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_image_suite_tiny(tmp_path):
    out, js = tmp_path / "image.md", tmp_path / "image.json"
    proc = subprocess.run(
        [sys.executable, "-m", "seqattn.bench", "image", "--batch", "2", "--dim", "16", "--depth", "1",
         "--heads", "2", "--warmup", "1", "--budget", "0", "--out", str(out), "--json", str(js)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")]
    assert rows[0].split("|")[1:-1] == [" input ", " tokens L ", " sdpa img/s ", " math img/s ", " cnn img/s ",
                                        " sdpa / math "]
    assert [r.split("|")[1].strip() for r in rows[1:]] == ["pixels 16×16", "pixels 32×32", "patches 32×32"]
    assert [r.split("|")[2].strip() for r in rows[1:]] == ["256", "1024", "64"]
    results = json.loads(js.read_text())["results"]
    assert len(results) == 9 and all(r["images_per_s"] > 0 and r["steps"] >= 2 for r in results)
    layouts = ["pixels16", "pixels32", "patches32"]
    assert {(r["layout"], r["encoder"]) for r in results} == {(lay, e) for lay in layouts for e in ("sdpa", "math", "cnn")}
    speed = {(r["layout"], r["encoder"]): r["images_per_s"] for r in results}
    for r in results:  # images per second is the batch over the step time
        assert r["images_per_s"] == pytest.approx(2 / (r["step_ms"] / 1000), rel=1e-6)
        assert r["tokens"] == {"pixels16": 256, "pixels32": 1024, "patches32": 64}[r["layout"]]
    for layout, row in zip(layouts, rows[1:]):  # the table shows the JSON's numbers, and their ratio
        cells = [c.strip() for c in row.split("|")[1:-1]]
        for col, encoder in ((2, "sdpa"), (3, "math"), (4, "cnn")):
            assert float(cells[col]) == pytest.approx(speed[(layout, encoder)], abs=0.051)
        ratio = speed[(layout, "sdpa")] / speed[(layout, "math")]
        assert float(cells[5].rstrip("×")) == pytest.approx(ratio, abs=0.006)


def test_image_suite_rejects_an_unknown_layout():
    proc = subprocess.run([sys.executable, "-m", "seqattn.bench", "image", "--layouts", "pixels64"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "pixels64" in proc.stdout
