"""``python -m seqattn.bench graph`` on tiny sizes: the report's shape and the targets lines, no timing assertions."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_graph_suite_tiny(tmp_path):
    out, js = tmp_path / "graph.md", tmp_path / "graph.json"
    proc = subprocess.run(
        [sys.executable, "-m", "seqattn.bench", "graph", "--nodes", "300", "--edges", "2000", "--graphs", "4",
         "--hops", "1", "--repeats", "1", "--no-epoch", "--out", str(out), "--json", str(js)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = out.read_text()
    assert "| seqattn MultiHeadAttention(kernel=edge) |" in report and "| PyG TransformerConv(root_weight=False) |" in report
    assert "target seqattn edge time <= 1.0x TransformerConv: " in report
    assert "target auto within 10% of the faster path (hops=1): " in report
    data = json.loads(js.read_text())
    cells = data["cells"]
    assert {c["kind"] for c in cells} == {"large", "molecule"}
    assert all(c["status"] == "ok" and c["time_ms"] > 0 and c["peak_mb"] >= 0 for c in cells)
    auto = next(c for c in cells if c["kind"] == "molecule" and c["impl"] == "auto")
    assert auto["path"] in ("dense", "edge")
    forced = {c["impl"]: c["path"] for c in cells if c["kind"] == "molecule" and c["impl"] != "auto"}
    assert forced == {"dense": "dense", "edge": "edge"}
