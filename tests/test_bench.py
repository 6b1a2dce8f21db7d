"""``python -m seqattn.bench``: the core suite on tiny sizes, and the unknown-suite error.

No timing assertions: only the shape of the report (a row per L, columns per impl,
numbers where numbers belong). Tiny cells may legitimately grow the RSS by 0 MB
(the allocator reuses the warm-up's memory), so memory is only checked to be >= 0.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqattn.bench import SUITES, main
from seqattn.bench.core import IMPLS, format_core_table

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (16, 32)


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seqattn.bench", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The first markdown table of ``text``."""
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    split = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    header, body = split[0], [r for r in split[2:]]
    return header, body


def test_core_suite_tiny(tmp_path):
    out, js = tmp_path / "core.md", tmp_path / "core.json"
    proc = _run(
        "core", "--lengths", ",".join(map(str, LENGTHS)), "--batch", "2", "--dim", "32", "--heads", "2",
        "--repeats", "1", "--cells", "none", "--out", str(out), "--json", str(js),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n[") >= len(LENGTHS) * len(IMPLS)  # a progress line per cell
    for text in (proc.stdout, out.read_text()):
        header, body = _parse_table(text)
        assert header[0] == "L"
        assert [r[0] for r in body] == [str(L) for L in LENGTHS]
        for impl in IMPLS:
            t_col, m_col = header.index(f"{impl} ms"), header.index(f"{impl} MB")
            for row in body:
                assert float(row[t_col]) > 0
                assert float(row[m_col]) >= 0
        assert "sdpa/torch_mha time" in header and "naive/sdpa time (speed-up)" in header
    assert "target sdpa time <= 1.05x torch_mha" in proc.stdout
    data = json.loads(js.read_text())
    assert {(c["impl"], c["length"]) for c in data["cells"]} == {(i, L) for i in IMPLS for L in LENGTHS}
    assert all(c["status"] == "ok" and c["time_ms"] > 0 and c["repeats"] == 1 for c in data["cells"])
    assert all(c["times_ms"] == [c["time_ms"]] for c in data["cells"])  # one repeat: its time is the time
    # the ratio columns and the target line are the ratios of the cells' times
    time = {(c["impl"], c["length"]): c["time_ms"] for c in data["cells"]}
    header, body = _parse_table(out.read_text())
    ratios = {}
    for row in body:
        length = int(row[0])
        for impl in IMPLS:  # the table shows the JSON's times
            assert float(row[header.index(f"{impl} ms")]) == pytest.approx(time[(impl, length)], abs=0.051)
        ratios[length] = time[("seqattn_sdpa", length)] / time[("torch_mha", length)]
        assert float(row[header.index("sdpa/torch_mha time")].rstrip("x")) == pytest.approx(ratios[length], abs=0.006)
        speed_up = time[("naive", length)] / time[("seqattn_sdpa", length)]
        assert float(row[header.index("naive/sdpa time (speed-up)")].rstrip("x")) == pytest.approx(speed_up, abs=0.006)
    (target,) = [t for t in data["targets"] if t.startswith("target sdpa time <= 1.05x torch_mha")]
    worst = max(ratios, key=ratios.get)
    assert f"worst {ratios[worst]:.2f}x at L={worst}" in target
    assert target.split(": ", 1)[1].startswith("met" if ratios[worst] <= 1.05 else "missed")


def test_core_suite_structure_cells_tiny(tmp_path):
    """The structured cells (window / varlen / graph_bias / weights) at tiny sizes: a row per cell and
    implementation, the planned path named, one target line per cell, the matmul peak and backends."""
    js = tmp_path / "core.json"
    proc = _run("core", "--lengths", "16", "--batch", "2", "--dim", "32", "--heads", "2", "--impls", "seqattn_sdpa",
                "--repeats", "1", "--threads", "1", "--cell-sizes", "tiny", "--json", str(js), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Matmul peak of this CPU" in proc.stdout and "GFLOP/s (% peak), backend" in proc.stdout
    cells = [c for c in json.loads(js.read_text())["cells"] if "cell" in c]
    assert {(c["cell"], c["impl"]) for c in cells} == {
        ("window", "sdpa_mask"), ("window", "planned"), ("varlen", "sdpa_padded"), ("varlen", "planned"),
        ("graph_bias", "dense_sdpa"), ("graph_bias", "edge"), ("graph_bias", "biased"), ("graph_bias", "planned"),
        ("graph_layers", "padded"), ("graph_layers", "packed"),
        ("graph_fill", "dense"), ("graph_fill", "edge"), ("graph_fill", "planned"),
        ("propagation", "gathered"), ("propagation", "sparse"),
        ("weights", "no_weights"), ("weights", "one_layer_weights"), ("weights", "one_layer_one_item")}
    assert all(c["status"] == "ok" and c["time_ms"] > 0 for c in cells)
    paths = {(c["cell"], c["impl"]): c.get("path") for c in cells}
    assert paths[("window", "planned")] == "band" and paths[("varlen", "planned")] == "varlen"
    assert {c["backend"] for c in cells if c["cell"] == "window"} == {"flash"}
    assert paths[("graph_bias", "dense_sdpa")] == "dense" and next(
        c["backend"] for c in cells if c["impl"] == "dense_sdpa") == "math"  # the float bias with grad: math path
    assert paths[("graph_fill", "dense")] == "biased" and paths[("graph_fill", "edge")] == "edge"
    assert paths[("graph_layers", "padded")] == paths[("graph_layers", "packed")] == "edge"
    assert paths[("propagation", "gathered")] == "gathered" and paths[("propagation", "sparse")] == "sparse"
    for name in ("window ±8", "lengths 8..160", "graph attention with learned biases", "graph path choice",
                 "molecule encoder on the real atoms only", "propagation",
                 "training with weights for the plotted layer"):
        assert f"target {name}" in proc.stdout


def test_unknown_suite_names_known_ones():
    proc = _run("nosuch", timeout=60)
    assert proc.returncode != 0
    assert "nosuch" in proc.stderr
    for name in SUITES:
        assert name in proc.stderr


def test_table_marks_failed_and_skipped_cells():
    cells = [
        {"impl": "naive", "length": 8, "status": "OOM"},
        {"impl": "seqattn_sdpa", "length": 8, "status": "ok", "time_ms": 2.0, "peak_mb": 1.0},
        {"impl": "naive", "length": 16, "status": "skipped"},
    ]
    header, body = _parse_table(format_core_table(cells, ["naive", "seqattn_sdpa"], [8, 16]))
    assert body[0][header.index("naive ms")] == "OOM"
    assert body[1][header.index("naive MB")] == "skipped"
    assert body[0][header.index("naive/sdpa time (speed-up)")] == "–"


@pytest.mark.parametrize("bad", [["core", "--impls", "nope"], ["core", "--lengths", "0"]])
def test_bad_options_exit_nonzero(bad):
    from seqattn.bench import main

    with pytest.raises(SystemExit) as err:
        main(bad)
    assert err.value.code != 0


def test_structure_cells_come_from_the_core_and_the_modality_folders(monkeypatch):
    """The core's cells, then each modality's declared ones (graph: ``graph_bias``), then the encoder step;
    a declared cell that lacks a key of the form is refused, naming it."""
    from seqattn.bench import structure
    from seqattn.modalities.graph import structure_cells

    assert list(structure.cells()) == ["window", "varlen", "graph_bias", "graph_layers", "graph_fill", "propagation", "weights"]
    with pytest.raises(ValueError, match="unknown cell 'nope'"):
        structure.cell_of("nope")
    broken = {"impls": ("a",), "sizes": lambda tiny: [{}], "describe": str, "step": None}  # no "targets"
    monkeypatch.setitem(structure_cells.STRUCTURE_CELLS, "broken", broken)
    with pytest.raises(ValueError, match=r"cell 'broken' lacks \['targets'\]"):
        structure.cells()


@pytest.mark.parametrize("suite,cells", [("dropout", 5), ("conv", 4 + 3), ("audio", 4)])
def test_switch_suites_tiny(tmp_path, suite, cells):
    """``bench dropout`` / ``bench conv`` / ``bench audio``: every cell measured on both sides, the table written
    where asked, the switch left on."""
    from seqattn.core import conv, dropout
    from seqattn.modalities.audio import features

    out = tmp_path / f"{suite}.md"
    assert main([suite, "--repeats", "10", "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and " ms |" not in line]
    assert len(rows) == cells  # the layer cells and the encoder step
    for row in rows:
        off_ms, on_ms, ratio = (cell.strip() for cell in row.strip("|").split("|")[1:])
        assert float(off_ms) > 0 and float(on_ms) > 0
        assert float(ratio.rstrip("×")) == pytest.approx(float(off_ms) / float(on_ms), rel=0.02)
    assert dropout.ENABLED and conv.CHANNELS_LAST and conv.DEPTHWISE_GRAD and features.FAST_POWER


def test_recipes_step_variants_take_precision_and_dropout_switches_only():
    from seqattn.bench.recipes import _step_setting

    assert _step_setting([]) == ("highest", False, True)
    assert _step_setting(["matmul_precision=medium", "fast_dropout=false"]) == ("medium", False, False)
    assert _step_setting(["trainer.precision=bf16-mixed"]) == ("highest", True, True)
    with pytest.raises(SystemExit, match="fast_dropout must be true or false, got 'no'"):
        _step_setting(["fast_dropout=no"])
    with pytest.raises(SystemExit, match="these switches only.*model.depth=2"):
        _step_setting(["model.depth=2"])


def test_core_dtype_reaches_the_weights_and_the_input(tmp_path):
    js = tmp_path / "core.json"
    proc = _run("core", "--lengths", "16", "--batch", "1", "--dim", "16", "--heads", "2", "--repeats", "1",
                "--impls", "seqattn_sdpa,naive", "--dtype", "bfloat16", "--cells", "none", "--json", str(js))
    assert proc.returncode == 0, proc.stderr
    assert ", bf16, CPU (" in proc.stdout  # the caption says what ran
    cells = json.loads(js.read_text())["cells"]
    assert [(c["status"], c["dtype"], c["input_dtype"]) for c in cells] == [("ok", "bfloat16", "bfloat16")] * 2


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_core_device_cuda_without_cuda_says_so():
    proc = _run("core", "--lengths", "16", "--device", "cuda", "--cells", "none")
    assert proc.returncode != 0
    assert "--device cuda: torch.cuda.is_available() is False" in proc.stderr


def test_core_structured_cells_default_to_every_cell_on_cpu_and_none_on_cuda(monkeypatch):
    import argparse

    import torch

    from seqattn.bench import structure
    from seqattn.bench.core import resolve_cells

    args = argparse.Namespace(device="cpu", cells=None)
    resolve_cells(args)
    assert args.cells == list(structure.cells())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = argparse.Namespace(device="cuda", cells=None)
    resolve_cells(args)
    assert args.cells == []
    with pytest.raises(SystemExit, match="measure on CPU only; pass --cells none"):
        resolve_cells(argparse.Namespace(device="cuda", cells=["propagation"]))


def test_fused_sdpa_backends_are_named_from_their_aten_ops():
    """The CUDA backends cannot run here; their op names can (an H200 ran cuDNN's for bf16, which the
    report once called ``math``)."""
    import torch

    from seqattn.bench.measure import fused_sdpa_backend

    aten = torch.ops.aten
    assert fused_sdpa_backend(str(aten._scaled_dot_product_cudnn_attention.default)) == "cudnn"
    assert fused_sdpa_backend(str(aten._scaled_dot_product_efficient_attention.default)) == "efficient"
    assert fused_sdpa_backend(str(aten._scaled_dot_product_flash_attention.default)) == "flash"
    assert fused_sdpa_backend(str(aten._scaled_dot_product_flash_attention_for_cpu.default)) == "flash"
    assert fused_sdpa_backend(str(aten._scaled_dot_product_cudnn_attention_backward.default)) is None
    assert fused_sdpa_backend(str(aten.mm.default)) is None


def test_audio_suite_switch_selects_torchaudios_power_on_the_off_side(monkeypatch):
    """``bench audio``'s off side runs torchaudio's ``Spectrogram`` (the path it is compared against), its on side
    seqattn's; each side's step computes the same features to within float rounding."""
    import torch
    import torchaudio

    from seqattn.bench import audio
    from seqattn.modalities.audio import features

    calls = []
    original = torchaudio.transforms.Spectrogram.forward
    monkeypatch.setattr(torchaudio.transforms.Spectrogram, "forward",
                        lambda self, w: calls.append(1) or original(self, w))
    f = features.AudioFeatures(16000, 25.0, 10.0, "logmel", n_mels=40, f_max=4000.0)
    wav, lengths = audio._batch(16000, 4, 0.2)
    try:
        audio._switch(False)
        off = f(wav, lengths)[0]
        assert len(calls) == 1
        audio._switch(True)
        on = f(wav, lengths)[0]
        assert len(calls) == 1
    finally:
        features.FAST_POWER = True
    torch.testing.assert_close(on, off, rtol=1e-4, atol=1e-4)
