"""``python -m seqattn.bench image`` on tiny sizes: the report's shape, no timing assertions."""

import json
import subprocess
import sys
from pathlib import Path

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


def test_image_suite_rejects_an_unknown_layout():
    proc = subprocess.run([sys.executable, "-m", "seqattn.bench", "image", "--layouts", "pixels64"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "pixels64" in proc.stdout
