"""`python -m seqattn.export ckpt=PATH format=onnx|torchscript`: the exported model computes what the original does."""

from __future__ import annotations

import pytest
import torch

import seqattn
from seqattn.export import main as export_main
from seqattn.export import parse_args
from tests.workflows import EXPORT_TASKS, TASKS, WORKFLOW_TASKS, tiny_run, workflow_data_dir  # noqa: F401


def _reference(run, inputs):
    model = seqattn.load(run.best).model
    names = list(getattr(model.net.adapter, "export_inputs", None) or model.net.adapter.inputs)
    with torch.no_grad():
        out = model.net(dict(zip(names, inputs)))
    return out["logits"], out["mask"]


@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_torchscript_export_gives_the_same_outputs(task, tiny_run, tmp_path):
    from seqattn.export import export

    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    path, inputs = export(run.best, "torchscript", tmp_path / "model.ts", source)
    loaded = torch.jit.load(str(path))
    logits, mask = loaded(*inputs)
    want_logits, want_mask = _reference(run, inputs)
    assert logits.shape == want_logits.shape and len(inputs[0]) > 1
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
    assert torch.equal(mask, want_mask)


def test_torchscript_traced_on_one_file_handles_a_padded_batch(tiny_run, tmp_path):
    """Traced without padding on the shortest file, the module still applies the padding mask of a
    padded batch of longer files (the all-real-tokens fast path is not taken while tracing, and no
    positional table of the example's length is baked in)."""
    from seqattn.export import export

    run = tiny_run("speech")
    source = TASKS["speech"].predict_inputs(run.cfg, tmp_path / "inputs")
    predictor = seqattn.load(run.best)
    names = list(predictor.model.net.adapter.inputs)
    loader = predictor.datamodule.predict_loader(source, batch_size=64)
    batch = next(iter(loader))
    shortest = int(batch["lengths"].argmin())
    one = sorted(source.glob("*.wav"))[shortest]  # the loader reads the folder sorted
    path, example = export(run.best, "torchscript", tmp_path / "one.ts", one)
    assert len(example[0]) == 1
    inputs = tuple(batch[n] for n in names)
    logits, mask = torch.jit.load(str(path))(*inputs)
    want_logits, want_mask = _reference(run, inputs)
    assert not bool(want_mask.all())  # the batch is padded
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
    assert torch.equal(mask, want_mask)


@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_onnx_export_gives_the_same_outputs_in_onnxruntime(task, tiny_run, tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: pip install 'seqattn[export]'")
    pytest.importorskip("onnx", reason="onnx not installed: pip install 'seqattn[export]'")
    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    out = tmp_path / "model.onnx"
    assert export_main([f"ckpt={run.best}", "format=onnx", f"output={out}", f"input={source}"]) == 0
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    predictor = seqattn.load(run.best)
    example = next(iter(predictor.datamodule.predict_loader(source)))  # the batch export traced with
    smaller = next(iter(predictor.datamodule.predict_loader(source, batch_size=2)))  # other B and length
    adapter = predictor.model.net.adapter
    assert names == list(getattr(adapter, "export_inputs", None) or adapter.inputs)
    for batch in (example, smaller):
        if hasattr(adapter, "export_inputs_from"):  # text: words -> ids, mask
            batch = {**batch, **adapter.export_inputs_from(batch)}
        inputs = tuple(batch[n] for n in names)
        logits, mask = session.run(None, {n: x.numpy() for n, x in zip(names, inputs)})
        want_logits, want_mask = _reference(run, inputs)
        # ONNX decomposes the STFT of log-mel features differently: ~1e-4 after the log
        torch.testing.assert_close(torch.from_numpy(logits), want_logits, rtol=1e-3, atol=1e-3)
        assert torch.equal(torch.from_numpy(mask), want_mask)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_exported_from_the_checkpoint_alone_runs_on_inputs_three_times_longer(task, fmt, tiny_run, tmp_path):
    """No input= and no data: the adapter's example exports; the exported model then takes an input 3x
    the example's length (nothing sized by the example is baked into the graph)."""
    from seqattn.export import export

    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: pip install 'seqattn[export]'")
    run = tiny_run(task)
    path, example = export(run.best, fmt, tmp_path / f"model.{fmt}")
    predictor = seqattn.load(run.best)
    net = predictor.model.net
    names = list(net.export_input_names or net.input_names)
    longer = net.adapter.example_inputs(batch=3, scale=3)
    inputs = tuple(longer[n] for n in names)
    assert inputs[0].shape[-1] >= 3 * example[0].shape[-1] - 2  # time, words or pixels per row
    if fmt == "torchscript":
        logits, mask = torch.jit.load(str(path))(*inputs)
    else:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        logits, mask = (torch.from_numpy(a) for a in session.run(None, {n: x.numpy() for n, x in zip(names, inputs)}))
    want_logits, want_mask = _reference(run, inputs)
    assert logits.shape == want_logits.shape
    torch.testing.assert_close(logits, want_logits, rtol=1e-3, atol=1e-3)
    assert torch.equal(mask, want_mask)


def test_export_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"missing \['format'\]"):
        parse_args(["ckpt=a.ckpt"])
    with pytest.raises(ValueError, match="unexpected argument 'fmt=onnx'"):
        parse_args(["ckpt=a", "fmt=onnx"])
    bad = tmp_path / "bad.ckpt"
    bad.write_text("not a checkpoint")
    assert export_main([f"ckpt={bad}", "format=torchscript"]) == 2


@pytest.mark.parametrize("task", [t for t in WORKFLOW_TASKS if t not in EXPORT_TASKS])
@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_graph_models_are_refused_with_a_reason(task, fmt, tiny_run, tmp_path):
    from seqattn.export import export

    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    with pytest.raises(ValueError, match="cannot be exported"):
        export(run.best, fmt, tmp_path / "model.out", source)
    assert not (tmp_path / "model.out").exists()


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_exported_clip_classifier_handles_inputs_three_times_longer_than_its_example(fmt, tiny_run, tmp_path):
    """Exported on one short clip, the model gives the original's outputs on a batch whose longest
    clip is 3x longer (no length from the example is baked into the graph: framing, mask, positions,
    attention pooling)."""
    import soundfile as sf

    from seqattn.export import export

    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime", reason="onnxruntime not installed: pip install 'seqattn[export]'")
        pytest.importorskip("onnx", reason="onnx not installed: pip install 'seqattn[export]'")
    run = tiny_run("speech_cls")
    folder = TASKS["speech_cls"].predict_inputs(run.cfg, tmp_path / "inputs")
    clips = sorted(folder.iterdir())
    waves = [sf.read(c, dtype="float32")[0] for c in clips[:3]]
    shortest = min(range(len(clips)), key=lambda i: sf.info(clips[i]).frames)
    path, example = export(run.best, fmt, tmp_path / f"model.{fmt}", clips[shortest])
    long = torch.cat([torch.from_numpy(waves[0])] * 3)  # one clip spoken three times
    assert long.numel() >= 3 * example[0].shape[1]
    batch = torch.zeros(2, long.numel())
    batch[0], batch[1, : len(waves[2])] = long, torch.from_numpy(waves[2])
    inputs = (batch, torch.tensor([long.numel(), len(waves[2])]))
    want_logits, want_mask = _reference(run, inputs)
    if fmt == "torchscript":
        logits, mask = torch.jit.load(str(path))(*inputs)
        tol = 1e-5
    else:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        logits, mask = (torch.from_numpy(a) for a in session.run(None, {n: x.numpy() for n, x in zip(names, inputs)}))
        tol = 1e-3  # ONNX decomposes the STFT differently: ~1e-4 after the log
    assert mask.shape == want_mask.shape and torch.equal(mask, want_mask)
    torch.testing.assert_close(logits, want_logits, rtol=tol, atol=tol)
