"""`python -m seqattn.export ckpt=PATH format=onnx|torchscript`: the exported model computes what the original does,
and its sidecar JSON is enough to feed it without seqattn.

onnx and onnxruntime are test dependencies (``pip install -e ".[test]"`` installs ``seqattn[export]``): they
are imported plainly, so a test environment without them fails here instead of skipping the ONNX tests.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings

import onnx
import onnxruntime as ort
import pytest
import torch

import seqattn
from seqattn.export import main as export_main
from seqattn.export import parse_args
from tests.workflows import EXPORT_TASKS, TASKS, UNEXPORTABLE_TASKS, tiny_run, workflow_data_dir  # noqa: F401


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
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path, inputs = export(run.best, "torchscript", tmp_path / "model.ts", source)
    assert not [str(w.message) for w in seen if issubclass(w.category, (torch.jit.TracerWarning, FutureWarning))]
    sidecar = json.loads((tmp_path / "model.ts.json").read_text())
    assert [i["name"] for i in sidecar["inputs"]] == list(seqattn.load(run.best).model.net.export_input_names
                                                          or seqattn.load(run.best).model.net.input_names)
    assert [i["dtype"] for i in sidecar["inputs"]] == [str(x.dtype).removeprefix("torch.") for x in inputs]
    extra = {"seqattn.json": ""}
    loaded = torch.jit.load(str(path), _extra_files=extra)
    assert json.loads(extra["seqattn.json"]) == sidecar  # the file describes itself without the sidecar
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
def test_onnx_export_gives_the_same_outputs_in_onnxruntime(task, tiny_run, tmp_path, capfd, caplog):
    run = tiny_run(task)
    source = TASKS[task].predict_inputs(run.cfg, tmp_path / "inputs")
    out = tmp_path / "model.onnx"
    capfd.readouterr()
    caplog.set_level(logging.INFO)
    assert export_main([f"ckpt={run.best}", "format=onnx", f"output={out}", f"input={source}"]) == 0
    printed = capfd.readouterr()
    assert printed.out.strip() == str(out)  # the path only: the exporter's progress and optimiser log are kept out
    for chatter in ("[torch.onnx]", "onnxscript", "onnx_ir", "Warning"):
        assert chatter not in printed.err, printed.err
    assert not [r.getMessage() for r in caplog.records if r.name.startswith(("onnxscript", "onnx_ir"))]
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    predictor = seqattn.load(run.best)
    _check_sidecar(out, session, predictor)
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


_ORT_TYPES = {"tensor(int64)": "int64", "tensor(float)": "float32", "tensor(bool)": "bool"}


def _check_sidecar(path, session, predictor):
    """The sidecar beside an ONNX file, and the same JSON in its metadata_props, describe every input
    (name, dtype and rank as onnxruntime sees them, a meaning), the labels and the preprocessing."""
    sidecar = json.loads((path.parent / (path.name + ".json")).read_text())
    assert json.loads(session.get_modelmeta().custom_metadata_map["seqattn"]) == sidecar
    assert json.loads({p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
                      ["seqattn"]) == sidecar
    inputs = session.get_inputs()
    assert [i["name"] for i in sidecar["inputs"]] == [i.name for i in inputs]
    for spec, real in zip(sidecar["inputs"], inputs):
        assert spec["dtype"] == _ORT_TYPES[real.type] and len(spec["shape"]) == len(real.shape), (spec, real)
        assert spec["meaning"], spec
    assert [o["name"] for o in sidecar["outputs"]] == [o.name for o in session.get_outputs()]
    assert sidecar["labels"] == predictor.labels and sidecar["task"] == predictor.config["task_name"]
    assert sidecar["external_data"] is None or (path.parent / sidecar["external_data"]).is_file()
    adapter, prep = predictor.model.net.adapter, sidecar["preprocessing"]
    if "ids" in sidecar["inputs"][0]["name"]:  # text: the vocabulary (and character table) the ids index
        assert prep["vocabulary"] == adapter.vocab.words and prep["tokenizer"]["pattern"]
        assert ("char_ids" in [i.name for i in inputs]) == ("char_table" in prep)
    elif "waveform" in [i.name for i in inputs]:
        assert prep["sample_rate"] == adapter.features.sample_rate
    else:
        assert prep["image_size"] == list(predictor.datamodule.image_size) and prep["pixel_range"] == [0.0, 1.0]


#: labels new sentences with an exported text model, from the .onnx file and its sidecar alone
_STANDALONE = r"""
import json, re, sys
import numpy as np
import onnxruntime as ort

model, text_file = sys.argv[1], sys.argv[2]
side = json.load(open(model + ".json", encoding="utf-8"))
prep = side["preprocessing"]
index = {w: i for i, w in enumerate(prep["vocabulary"])}
sentences = [line.strip() for line in open(text_file, encoding="utf-8") if line.strip()]
words = [re.findall(prep["tokenizer"]["pattern"], s) for s in sentences]
B, L = len(words), max(len(w) for w in words)
ids = np.full((B, L), prep["pad_index"], dtype=np.int64)
mask = np.zeros((B, L), dtype=bool)
for i, sentence in enumerate(words):
    for j, w in enumerate(sentence):
        ids[i, j] = index.get(w.lower() if prep["lowercase"] else w, prep["unk_index"])
        mask[i, j] = True
feeds = {"ids": ids, "mask": mask}
if "char_table" in prep:
    table = prep["char_table"]
    chars = {c: k for k, c in enumerate(table["chars"])}
    W = min(table["max_chars"], max(len(w) + 2 for s in words for w in s))
    char_ids = np.zeros((B, L, W), dtype=np.int64)
    for i, sentence in enumerate(words):
        for j, w in enumerate(sentence):
            row = [table["begin"]] + [chars.get(c, table["unk"]) for c in w[: W - 2]] + [table["end"]]
            char_ids[i, j, : len(row)] = row
    feeds["char_ids"] = char_ids
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
assert [i.name for i in session.get_inputs()] == [s["name"] for s in side["inputs"]] == list(feeds)
logits, token_mask = session.run(["logits", "token_mask"], feeds)
probs = np.exp(logits - logits.max(-1, keepdims=True))
probs /= probs.sum(-1, keepdims=True)
best = logits.argmax(-1)
out = []
for i in range(B):
    if logits.ndim == 2:  # one label per sentence
        out.append({"label": side["labels"][best[i]], "prob": float(probs[i, best[i]])})
    else:  # one label per word
        real = np.nonzero(token_mask[i])[0]
        out.append({"labels": [side["labels"][best[i, j]] for j in real],
                    "probs": [float(probs[i, j, best[i, j]]) for j in real]})
assert "seqattn" not in sys.modules and "torch" not in sys.modules
print(json.dumps(out))
"""


@pytest.mark.parametrize("task", ["text_cls", "text_tagging"])
def test_an_onnx_export_and_its_sidecar_alone_label_new_text(task, tiny_run, tmp_path):
    """A plain onnxruntime + numpy script (no seqattn, no torch) tokenises with the sidecar's pattern,
    maps words with its vocabulary (lowercased, unknown words -> <unk>) and characters with its
    character table (text_tagging), runs the model and names the argmax: seqattn's own predict agrees."""
    run = tiny_run(task)
    out = tmp_path / "model.onnx"
    assert export_main([f"ckpt={run.best}", "format=onnx", f"output={out}"]) == 0
    sentences = tmp_path / "new.txt"
    sentences.write_text("The film was NOT bad , zqxunseen !\ngood but boring\nI saw a saw near the old boat .\n")
    script = tmp_path / "label.py"
    script.write_text(_STANDALONE)
    done = subprocess.run([sys.executable, "-I", str(script), str(out), str(sentences)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    want = seqattn.load(run.best).predict(sentences)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        if "label" in g:
            assert g["label"] == w["label"] and g["prob"] == pytest.approx(w["prob"], abs=1e-4)
        else:
            assert g["labels"] == w["labels"] and len(g["labels"]) == len(w["tokens"])
            assert g["probs"] == pytest.approx(w["probs"], abs=1e-4)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_exported_from_the_checkpoint_alone_runs_on_inputs_three_times_longer(task, fmt, tiny_run, tmp_path):
    """No input= and no data: the adapter's example exports; the exported model then takes an input 3x
    the example's length (nothing sized by the example is baked into the graph)."""
    from seqattn.export import export

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


def test_export_reads_its_example_input_with_data_options(tiny_run, tmp_path, capsys):
    """input= is read with data.KEY=VALUE over the run's data config; the hint of the failure without it
    names that option, as export accepts it."""
    run = tiny_run("text_cls")
    reviews = tmp_path / "reviews.csv"
    reviews.write_text("review\nthe film was not bad\ngood but boring\n")
    out = tmp_path / "model.ts"
    assert export_main([f"ckpt={run.best}", "format=torchscript", f"output={out}", f"input={reviews}"]) == 2
    assert "set data.text_column" in capsys.readouterr().err
    assert export_main([f"ckpt={run.best}", "format=torchscript", f"output={out}", f"input={reviews}",
                        "data.text_column=review"]) == 0
    assert out.is_file()
    assert parse_args(["ckpt=a", "format=onnx", "data.text_column=review"])["data"] == {"text_column": "review"}


def test_export_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"missing \['format'\]"):
        parse_args(["ckpt=a.ckpt"])
    with pytest.raises(ValueError, match="unexpected argument 'fmt=onnx'"):
        parse_args(["ckpt=a", "fmt=onnx"])
    bad = tmp_path / "bad.ckpt"
    bad.write_text("not a checkpoint")
    assert export_main([f"ckpt={bad}", "format=torchscript"]) == 2


@pytest.mark.parametrize("task", UNEXPORTABLE_TASKS)
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
