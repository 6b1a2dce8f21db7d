"""Export a trained network: ``python -m seqattn.export ckpt=PATH format=onnx|torchscript [output=FILE]``.

Arguments are ``key=value``:

    ckpt=PATH                 a checkpoint written by ``seqattn.run``
    format=onnx|torchscript   ``onnx`` needs ``pip install "seqattn[export]"`` (onnx, onnxscript, onnxruntime)
    output=FILE               default: next to the checkpoint, ``<ckpt stem>.onnx`` / ``.ts``
    input=PATH                optional: example inputs in the task's predict format (else the adapter's
                              own example inputs: the checkpoint alone is enough)

The exported model's inputs are the adapter's inputs, in ``adapter.inputs`` order (speech:
``waveform [B, T]`` float32 and ``lengths [B]`` int64), or its ``export_inputs`` when its own
inputs are not tensors (text: ``ids [B, L]`` int64 from the vocabulary and ``mask [B, L]`` bool,
see ``TextAdapter.export_inputs_from``). Graph adapters are refused (see ``GraphAdapter``); its outputs are ``logits`` (``[B, L, C]``
per token or ``[B, C]`` pooled) and ``token_mask [B, L]``. ONNX (``torch.export``) keeps batch size and
length dynamic; TorchScript is traced on the example batch. Input checks that branch on tensor
values are skipped while exporting or tracing, and positional tables are computed from the input's
own length there, so an exported model runs on inputs of any length (tests: 3x the example's).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Sequence

import torch
from hydra.utils import instantiate
from torch import nn

from seqattn.cli import parse_key_values
from seqattn.training.checkpoint import build_model, read_checkpoint

log = logging.getLogger("seqattn.export")

FORMATS = {"onnx": ".onnx", "torchscript": ".ts"}


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


def example_batch(checkpoint: dict[str, Any], net: nn.Module, source: str | Path | None = None,
                  spec: Any = None) -> dict[str, Any]:
    """A batch to trace with: the first batch of ``source`` through the datamodule's ``predict_loader``,
    else the adapter's own example inputs (from the checkpoint alone: no data needed)."""
    if source is not None:
        datamodule = instantiate(checkpoint["seqattn_config"]["data"], _convert_="all")
        datamodule.for_prediction(spec)
        return next(iter(datamodule.predict_loader(source)))
    return net.adapter.example_inputs()


def export(ckpt: str | Path, fmt: str, output: str | Path | None = None, source: str | Path | None = None
           ) -> tuple[Path, tuple[torch.Tensor, ...]]:
    """Export the checkpoint's network; returns ``(path, example inputs)``."""
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r} is not one of {sorted(FORMATS)}")
    checkpoint = read_checkpoint(ckpt)
    model = build_model(checkpoint)
    adapter = model.net.adapter
    if not model.net.exportable:
        raise ValueError(
            f"{type(adapter).__name__} cannot be exported: it builds its attention structure per batch in "
            "Python, which a trace or torch.export would freeze to the example; use seqattn.load(ckpt).predict"
        )
    wrapper = ExportableNet(model.net).eval()
    batch = example_batch(checkpoint, model.net, source, model.spec)
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
        if fmt == "torchscript":
            traced = torch.jit.trace(wrapper, inputs, check_trace=False)
            traced.save(str(output))
        else:
            _export_onnx(wrapper, inputs, output)
    log.info("exported %s (inputs %s) to %s", fmt, wrapper.input_names, output)
    return output, inputs


def _export_onnx(wrapper: ExportableNet, inputs: tuple[torch.Tensor, ...], output: Path) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError as err:
        raise ValueError('format=onnx needs the onnx packages: pip install "seqattn[export]"') from err
    from torch.export import Dim

    # every axis of every input may vary (batch, length); torch.export specialises what must be fixed
    dynamic = (tuple({axis: Dim.AUTO for axis in range(x.dim())} for x in inputs),)  # forward(*inputs)
    try:  # the torch.export-based exporter (the TorchScript-based one cannot export the STFT of logmel features)
        torch.onnx.export(wrapper, inputs, str(output), input_names=wrapper.input_names,
                          output_names=["logits", "token_mask"], dynamo=True, dynamic_shapes=dynamic)
    except Exception as err:  # noqa: BLE001 -- torch.export raises many kinds
        raise ValueError(
            f"ONNX export failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); code "
            "on the model's path must not branch on tensor values under torch.compiler.is_exporting() "
            "(format=torchscript traces instead)"
        ) from err


USAGE = "usage: python -m seqattn.export ckpt=PATH format=onnx|torchscript [output=FILE] [input=PATH]"
_ARGS = {"ckpt", "format", "output", "input"}


def parse_args(argv: Sequence[str]) -> dict[str, str]:
    return parse_key_values(argv, _ARGS, ("ckpt", "format"), USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0 if argv else 2
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s", stream=sys.stderr)
    try:
        args = parse_args(argv)
        path, _ = export(args["ckpt"], args["format"], args.get("output"), args.get("input"))
    except (ValueError, FileNotFoundError) as err:
        print(f"seqattn.export: error: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
