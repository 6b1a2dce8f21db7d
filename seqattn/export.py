"""Export a trained network: ``python -m seqattn.export ckpt=PATH format=onnx|torchscript [output=FILE]``.

Arguments are ``key=value``:

    ckpt=PATH                 a checkpoint written by ``seqattn.run``
    format=onnx|torchscript   ``onnx`` needs ``pip install "seqattn[export]"`` (onnx, onnxscript, onnxruntime)
    output=FILE               default: next to the checkpoint, ``<ckpt stem>.onnx`` / ``.ts``
    input=PATH                optional: example inputs in the task's predict format (else the adapter's
                              own example inputs: the checkpoint alone is enough)
    data.KEY=VALUE            data options for reading input= over the checkpoint's (as in seqattn.predict,
                              e.g. data.text_column=review)

The exported model's inputs are the adapter's inputs, in ``adapter.inputs`` order (speech:
``waveform [B, T]`` float32 and ``lengths [B]`` int64; image: ``images [B, 3, H, W]`` float32 in
[0, 1] and ``pixel_mask [B, H, W]`` bool), or its ``export_inputs`` when its own inputs are not
tensors (text: ``ids [B, L]`` int64 from the vocabulary and ``mask [B, L]`` bool, plus
``char_ids [B, L, W]`` int64 -- each word's characters -- when the model has character features,
``adapter.char_dim > 0``; see ``TextAdapter.export_inputs_from``). Graph adapters are refused (see
``GraphAdapter``). Its outputs are ``logits`` (``[B, L, C]`` per token or ``[B, C]`` pooled) and
``token_mask [B, L]``. ONNX (``torch.export``) keeps batch size and length dynamic; TorchScript is
traced on the example batch. Input checks that branch on tensor values are skipped while exporting or
tracing, and positional tables are computed from the input's own length there, so an exported model
runs on inputs of any length (tests: 3x the example's).

Files written (the summary printed on stderr lists them with the inputs):

    <output>              the model (``.onnx`` / ``.ts``)
    <output>.data         ONNX only: the weights, stored beside the graph (ONNX's external data); keep it
                          in the same folder under the same name, onnxruntime reads it from there
    <output>.json         the sidecar: inputs (name, dtype, shape, meaning) and outputs in order, the
                          label names, and the preprocessing that turns a raw input into the inputs
                          (text: tokenizer pattern, vocabulary, lowercasing, character table; image: size,
                          resize rule, pixel range; speech: sample rate, mono, the in-model features)

The ONNX file carries the same JSON in its ``metadata_props`` (key ``seqattn``), so
``onnx.load(path).metadata_props`` or onnxruntime's ``session.get_modelmeta().custom_metadata_map``
read it without the sidecar; a TorchScript file carries it as the extra file ``seqattn.json``
(``extra = {"seqattn.json": ""}; torch.jit.load(path, _extra_files=extra)`` fills it in). A plain onnxruntime script can label new inputs from these alone
(``tests/test_export.py`` does it without importing seqattn).

Messages: the ONNX exporter's progress and optimisation log (about a hundred lines) is kept out of the
output (shown in the error when the export fails). Tracing (TorchScript) warns about every Python
``if`` on a tensor shape ("Converting a tensor to a Python boolean"); those in seqattn are input and
plan consistency checks (shapes, dtypes), constant for the traced shapes, and the attention plan's
path choice, which under tracing always takes the dense path that handles any length (the varlen path
is never traced), so they are filtered; any other tracer warning is shown. What a traced model does
not do is re-check its inputs' shapes: feed it what the sidecar describes.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import nn

import seqattn
from seqattn.cli import parse_key_values
from seqattn.model.protocols import head_pooling
from seqattn.predict import build_datamodule, override_data_config, parse_data_overrides
from seqattn.training.checkpoint import build_model, read_checkpoint

log = logging.getLogger("seqattn.export")

FORMATS = {"onnx": ".onnx", "torchscript": ".ts"}
#: the name of the sidecar JSON inside an exported TorchScript file (``torch.jit.load(..., _extra_files=...)``)
TORCHSCRIPT_EXTRA = "seqattn.json"


class ExportableNet(nn.Module):
    """``SequenceModel`` with positional tensor inputs (``adapter.inputs`` order) and tuple outputs
    ``(logits, mask)``: the form tracers and ONNX want."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.input_names = list(net.export_input_names or net.input_names)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(dict(zip(self.input_names, inputs)))
        return out["logits"], out["mask"]


def example_batch(datamodule: Any, net: nn.Module, source: str | Path | None = None) -> dict[str, Any]:
    """A batch to trace with: the first batch of ``source`` through the datamodule's ``predict_loader``,
    else the adapter's own example inputs (from the checkpoint alone: no data needed)."""
    if source is not None:
        return next(iter(datamodule.predict_loader(source)))
    return net.adapter.example_inputs()


def sidecar_path(output: str | Path) -> Path:
    """``model.onnx`` -> ``model.onnx.json`` (the sidecar beside an exported model)."""
    output = Path(output)
    return output.with_name(output.name + ".json")


def describe_export(model: nn.Module, datamodule: Any, names: Sequence[str], inputs: Sequence[torch.Tensor],
                    fmt: str, output: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The sidecar JSON of an exported model: what to feed it and how to read what it returns."""
    net = model.net
    described = net.adapter.export_description() if hasattr(net.adapter, "export_description") else {}
    meaning = described.get("inputs", {})
    per_token = bool(net.head.per_token)
    labels = list(model.labels) if getattr(model, "labels", None) else None
    external = output.with_name(output.name + ".data")
    crf = getattr(model, "crf", None)  # objective.crf=true: the prediction is a decoded sequence, not an argmax
    reading = ("; the class of index c is labels[c]; the prediction is the best label sequence under `crf` "
               "(Viterbi over the real positions), not each position's argmax" if crf is not None else
               "; the class of index c is labels[c] (argmax = the prediction)")
    extra = {} if crf is None else {"crf": {
        "meaning": "a linear-chain CRF over logits: a label sequence y of a row's n real positions scores "
                   "start[y_0] + sum_t logits[t, y_t] + sum_t transitions[y_(t-1)][y_t] + end[y_(n-1)]",
        "transitions": crf.transitions.detach().cpu().tolist(),  # [from][to]
        "start": crf.start.detach().cpu().tolist(), "end": crf.end.detach().cpu().tolist()}}
    return {
        "seqattn_version": seqattn.__version__,
        "task": config.get("task_name"),
        "objective": type(model).__name__,
        "format": fmt,
        "file": output.name,
        "external_data": external.name if fmt == "onnx" and external.exists() else None,
        "inputs": [{"name": name, "dtype": str(x.dtype).removeprefix("torch."),
                    "shape": meaning.get(name, {}).get("shape", [f"d{i}" for i in range(x.dim())]),
                    "meaning": meaning.get(name, {}).get("meaning", "")}
                   for name, x in zip(names, inputs)],
        "outputs": [
            {"name": "logits", "dtype": "float32", "shape": ["B", "L", "C"] if per_token else ["B", "C"],
             "meaning": ("a score per output position and class" if per_token else
                         f"a score per class for the whole input (pooling: {head_pooling(net.head)})")
                        + reading},
            {"name": "token_mask", "dtype": "bool", "shape": ["B", "L"],
             "meaning": "True on the output positions that are real (False on padding)"},
        ],
        "labels": labels,
        "preprocessing": {**datamodule.export_preprocessing(), **described.get("preprocessing", {})},
        **extra,
    }


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[io.StringIO]:
    """Keep the ONNX exporter's progress prints and its INFO log (onnxscript / onnx_ir optimisation
    passes, ~100 lines) and the reviewed tracer warnings (see the module docstring) out of the output;
    yields what was captured, for an error message."""
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    loggers = [logging.getLogger(name) for name in ("onnxscript", "onnx_ir")]  # torch logs through its own handler
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.INFO)
        lg.propagate = False
        lg.addHandler(handler)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(captured):
            # shape / dtype checks and the plan's path choice in seqattn: constant for the traced shapes (docstring)
            warnings.filterwarnings("ignore", message="Converting a tensor to a Python boolean",
                                    category=torch.jit.TracerWarning, module=r"seqattn\.")
            warnings.filterwarnings("ignore", message=r"`torch\.jit\.trace(_method)?` is deprecated",
                                    category=FutureWarning)
            yield captured
    finally:
        for lg, (level, propagate) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate


def export(ckpt: str | Path, fmt: str, output: str | Path | None = None, source: str | Path | None = None,
           data: dict[str, Any] | None = None) -> tuple[Path, tuple[torch.Tensor, ...]]:
    """Export the checkpoint's network; returns ``(path, example inputs)``. ``data``: data options over
    the checkpoint's for reading ``source`` (see :func:`seqattn.predict.override_data_config`)."""
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r} is not one of {sorted(FORMATS)}")
    checkpoint = read_checkpoint(ckpt)
    model = build_model(checkpoint)
    adapter = model.net.adapter
    reason = getattr(model, "no_prediction", None)
    if reason:  # a pretraining checkpoint: nothing a user would run
        raise ValueError(f"{ckpt} cannot be exported: {reason}; fine-tune it first (python -m seqattn.run "
                         f"task=<a labelled task> init_from={ckpt}) and export that run's checkpoint")
    if not model.net.exportable:
        raise ValueError(
            f"{type(adapter).__name__} cannot be exported: it builds its attention structure per batch in "
            "Python, which a trace or torch.export would freeze to the example; use seqattn.load(ckpt).predict"
        )
    wrapper = ExportableNet(model.net).eval()
    data_config = checkpoint["seqattn_config"]["data"]
    datamodule = build_datamodule(override_data_config(data_config, data) if data else data_config)
    datamodule.for_prediction(model.spec)  # e.g. the training image size found in the data
    batch = example_batch(datamodule, model.net, source)
    if model.net.export_input_names and not all(k in batch for k in model.net.export_input_names):
        batch = {**batch, **adapter.export_inputs_from(batch)}  # e.g. text: words -> ids tensors
    missing = [k for k in wrapper.input_names if k not in batch]
    if missing:
        raise ValueError(f"the example batch lacks the adapter inputs {missing}; has {sorted(batch)}")
    inputs = tuple(batch[k] for k in wrapper.input_names)
    output = Path(output) if output else Path(ckpt).with_suffix(FORMATS[fmt])
    output.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        wrapper(*inputs)  # grows lazily built tables (sinusoidal positions) to the example's length first
        with _quiet_exporter() as captured:
            if fmt == "torchscript":
                traced = torch.jit.trace(wrapper, inputs, check_trace=False)
            else:
                _export_onnx(wrapper, inputs, output, captured)
    sidecar = describe_export(model, datamodule, wrapper.input_names, inputs, fmt, output,
                              checkpoint["seqattn_config"])
    text = json.dumps(sidecar, indent=1, ensure_ascii=False)
    if fmt == "onnx":
        _add_onnx_metadata(output, json.dumps(sidecar, ensure_ascii=False))
    else:  # the same JSON inside the file: torch.jit.load(path, _extra_files={TORCHSCRIPT_EXTRA: ""})
        traced.save(str(output), _extra_files={TORCHSCRIPT_EXTRA: text})
    sidecar_path(output).write_text(text + "\n", encoding="utf-8")
    _log_summary(sidecar, output)
    return output, inputs


def _log_summary(sidecar: dict[str, Any], output: Path) -> None:
    """What was written and what the model takes, for the user who runs it elsewhere."""
    lines = [f"exported {sidecar['format']} to {output}"]
    if sidecar["external_data"]:
        lines.append(f"  weights in {output.with_name(sidecar['external_data'])} (ONNX external data: keep it beside "
                     f"{output.name})")
    lines.append(f"  sidecar {sidecar_path(output)}: inputs, outputs, labels, preprocessing"
                 + (" (also in the model's metadata_props, key 'seqattn')" if sidecar["format"] == "onnx" else ""))
    for spec in sidecar["inputs"]:
        lines.append(f"  input {spec['name']} {spec['dtype']} [{', '.join(spec['shape'])}]: {spec['meaning']}")
    for spec in sidecar["outputs"]:
        lines.append(f"  output {spec['name']} [{', '.join(spec['shape'])}]")
    if sidecar["labels"]:
        shown = sidecar["labels"][:10]
        lines.append(f"  labels ({len(sidecar['labels'])}): {shown}" + (" ..." if len(sidecar["labels"]) > 10 else ""))
    log.info("%s", "\n".join(lines))


def _add_onnx_metadata(path: Path, text: str) -> None:
    """Store the sidecar JSON in the ONNX file's ``metadata_props`` (key ``seqattn``); the weights in the
    external data file are left as they are."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    del proto.metadata_props[:]
    proto.metadata_props.add(key="seqattn", value=text)
    onnx.save(proto, str(path))


def _export_onnx(wrapper: ExportableNet, inputs: tuple[torch.Tensor, ...], output: Path,
                 captured: io.StringIO | None = None) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError as err:
        raise ValueError('format=onnx needs the onnx packages: pip install "seqattn[export]"') from err
    from torch.export import Dim

    # every axis of every input may vary (batch, length); torch.export specialises what must be fixed
    dynamic = (tuple({axis: Dim.AUTO for axis in range(x.dim())} for x in inputs),)  # forward(*inputs)
    try:  # the torch.export-based exporter (the TorchScript-based one cannot export the STFT of logmel features)
        torch.onnx.export(wrapper, inputs, str(output), input_names=wrapper.input_names,
                          output_names=["logits", "token_mask"], dynamo=True, dynamic_shapes=dynamic, verbose=False)
    except Exception as err:  # noqa: BLE001 -- torch.export raises many kinds
        tail = "\n".join((captured.getvalue() if captured else "").splitlines()[-20:])
        raise ValueError(
            f"ONNX export failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); code "
            "on the model's path must not branch on tensor values under torch.compiler.is_exporting() "
            "(format=torchscript traces instead)" + (f"\nthe exporter's last messages:\n{tail}" if tail else "")
        ) from err


USAGE = "usage: python -m seqattn.export ckpt=PATH format=onnx|torchscript [output=FILE] [input=PATH] [data.KEY=VALUE ...]"
_ARGS = {"ckpt", "format", "output", "input"}


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    """``key=value`` arguments -> a dict (``data``: the ``data.KEY=VALUE`` ones, when given)."""
    argv, data = parse_data_overrides(argv, USAGE)
    args: dict[str, Any] = parse_key_values(argv, _ARGS, ("ckpt", "format"), USAGE)
    if data:
        args["data"] = data
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0 if argv else 2
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s", stream=sys.stderr)
    try:
        args = parse_args(argv)
        path, _ = export(args["ckpt"], args["format"], args.get("output"), args.get("input"), args.get("data"))
    except (ValueError, FileNotFoundError) as err:
        print(f"seqattn.export: error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
