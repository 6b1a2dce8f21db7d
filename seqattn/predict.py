"""Predict with a trained checkpoint: ``python -m seqattn.predict ckpt=PATH input=FILE_OR_DIR output=FILE``.

Arguments are ``key=value`` (Hydra style, no Hydra config needed: the checkpoint carries its
own run config, label names, vocabulary and normalisation):

    ckpt=PATH         a checkpoint written by ``seqattn.run`` (``<run>/checkpoints/best.ckpt``)
    input=PATH        what the task reads: e.g. an audio file, a folder of audio files or a
                      manifest for ``task=speech`` (see the task's README)
    output=FILE       ``.csv`` or ``.jsonl``; omitted: JSON lines on stdout
    batch_size=N      default: the training batch size
    device=cpu|cuda   default: cpu
    on_error=skip|stop  skip (default): predict every readable input, list the others (with the reason)
                      on stderr and exit 1; stop: stop at the first bad input
    data.KEY=VALUE    any option of the task's data config, over the checkpoint's (the run's) value:
                      e.g. data.id_column=name (molecule CSV columns), data.edges=new_edges.csv and
                      data.unknown_nodes=skip (social), data.text_column=review, data.encoding=latin-1;
                      values are parsed as in ``seqattn.run`` (null, numbers, [lists])

The work is generic: the datamodule named by the checkpoint's ``data`` config builds the
batches (``predict_loader(source, batch_size)``) and describes their items (``describe(batch)``:
ids, text, SMILES, paths); the objective's ``predict_step`` returns a typed
:class:`~seqattn.objectives.predictions.Prediction`, which becomes JSON-able rows by its kind
(:func:`~seqattn.objectives.predictions.prediction_rows`). Python::

    import seqattn
    model = seqattn.load("run/checkpoints/best.ckpt")
    rows = model.predict("recording.wav")          # list of dicts, one per input item
"""

from __future__ import annotations

import csv
import difflib
import json
import logging
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
from hydra.utils import instantiate

from seqattn.cli import parse_key_values
from seqattn.objectives.predictions import Prediction, prediction_rows
from seqattn.training.checkpoint import build_model, read_checkpoint

log = logging.getLogger("seqattn.predict")

OUTPUT_FORMATS = (".csv", ".jsonl")


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, (torch.Tensor, Prediction)):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _to_cpu(value: Any) -> Any:
    return _to_device(value, torch.device("cpu"))


class Predictor:
    """A trained model with the datamodule that reads its inputs.

    Attributes:
        model: the objective (LightningModule, eval mode); ``model.net`` is the ``SequenceModel``.
        datamodule: the task's DataModule built from the checkpoint's ``data`` config (not set up:
            prediction needs no training data).
        config: the checkpoint's resolved run config (dict).
        labels: class names (index -> name) or None (e.g. regression).
    """

    def __init__(self, model: torch.nn.Module, datamodule: Any, config: dict[str, Any],
                 device: str | torch.device = "cpu") -> None:
        for name in ("predict_loader", "describe"):
            if not callable(getattr(datamodule, name, None)):
                raise ValueError(f"{type(datamodule).__name__} does not implement `{name}` (the predict protocol); "
                                 "seqattn.predict cannot read inputs for this task")
        if not hasattr(model, "predict_step"):
            raise ValueError(f"{type(model).__name__} has no predict_step")
        self.device = _device(device)
        self.model = model.to(self.device).eval()
        self.datamodule = datamodule
        self.config = config
        self.labels = list(model.labels) if getattr(model, "labels", None) else None
        self.errors: list[tuple[str, str]] = []  # (where, reason) of the inputs the last predict() left out

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device = "cpu",
                        weights_only: bool = True, data: Mapping[str, Any] | None = None) -> "Predictor":
        """``data``: data options over the checkpoint's data config (``{"id_column": "name"}``, dotted keys
        for nested ones), see :func:`override_data_config`."""
        device = _device(device)  # before loading anything
        checkpoint = read_checkpoint(path, weights_only=weights_only)
        model = build_model(checkpoint)
        config = checkpoint["seqattn_config"]
        reason = getattr(model, "no_prediction", None)
        if reason:  # e.g. a pretraining checkpoint: its head predicts its own training targets, not a task's
            raise ValueError(f"{path}: {reason} (task={config.get('task_name')}); fine-tune it on a labelled task "
                             f"first: python -m seqattn.run task=<a labelled task of the same data> init_from={path}, "
                             "then load that run's checkpoint")
        if data:
            config = {**config, "data": override_data_config(config["data"], data)}
        datamodule = build_datamodule(config["data"])
        datamodule.for_prediction(model.spec)  # e.g. the training image size found in the data
        return cls(model, datamodule, config, device)

    def batches(self, source: str | Path, batch_size: int | None = None,
                on_error: str = "skip") -> Iterator[tuple[dict, Any]]:
        """``(batch, output)`` pairs (on the CPU) for every batch of ``source``; inputs that cannot be
        read are collected in :attr:`errors` (``on_error="skip"``) or raise (``"stop"``)."""
        if on_error not in ("skip", "stop"):
            raise ValueError(f"on_error={on_error!r} is not one of ('skip', 'stop')")
        self.datamodule.on_error = on_error
        self.datamodule.predict_errors = []
        loader = self.datamodule.predict_loader(_check_source(source), batch_size=batch_size)
        self.errors.extend(self.datamodule.predict_errors)
        with torch.inference_mode():
            for i, batch in enumerate(loader):
                self.errors.extend(batch.pop("skipped", []))
                if not batch:  # every input of this batch was unreadable
                    continue
                output = self.model.predict_step(_to_device(batch, self.device), i)
                yield batch, _to_cpu(output)

    def predict(self, source: str | Path | Sequence[str | Path], batch_size: int | None = None,
                on_error: str = "skip") -> list[dict[str, Any]]:
        """Rows, one per input item of ``source`` (a file or folder in the task's predict format, or a
        list of them), see :func:`~seqattn.objectives.predictions.prediction_rows`. Inputs that cannot
        be read are left out and listed in :attr:`errors` as ``(where, reason)`` (``on_error="skip"``,
        the default; a warning says how many), or stop the call (``on_error="stop"``)."""
        sources = list(source) if isinstance(source, (list, tuple)) else [source]
        if not sources:
            raise ValueError("predict got an empty list of inputs")
        self.errors = []
        rows: list[dict[str, Any]] = []
        for one in sources:
            for batch, output in self.batches(one, batch_size, on_error):
                rows.extend(prediction_rows(output, self.datamodule.describe(batch)))
        if self.errors:
            log.warning("%d input(s) could not be read and were left out (on_error=skip): %s", len(self.errors),
                        "; ".join(f"{w}: {r}" for w, r in self.errors[:5]) + (" ..." if len(self.errors) > 5 else ""))
        return rows

    def predict_to_file(self, source: str | Path, output: str | Path | None,
                        batch_size: int | None = None, on_error: str = "skip") -> int:
        """Predict and write ``output`` (``.csv`` / ``.jsonl``; None: JSON lines on stdout). Returns the row count."""
        if output is not None:
            _check_output(output)
        rows = self.predict(source, batch_size, on_error)
        write_rows(rows, output)
        return len(rows)


def _device(device: str | torch.device) -> torch.device:
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device={device!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device} but no CUDA GPU is available on this machine; use device=cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def _check_source(source: Any) -> Path:
    """What predict reads must be a path to an existing file or folder."""
    if not isinstance(source, (str, Path)):
        raise ValueError(f"predict takes a path to a file or folder in the task's predict format (or a list of "
                         f"paths), got a {type(source).__module__}.{type(source).__name__}; write the input to a "
                         "file first (an image file, a .wav, a .txt with one sentence per line, a SMILES .csv ...)")
    path = Path(source).expanduser()
    if not path.exists():
        shown = str(source) if len(str(source)) <= 80 else str(source)[:77] + "..."
        raise ValueError(f"predict input {shown!r} is not an existing file or folder; predict reads its inputs from "
                         "files (for raw text: a .txt file with one sentence per line)")
    return path


def _check_output(output: str | Path) -> None:
    suffix = Path(output).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise ValueError(f"output={str(output)!r}: the file name must end in one of {OUTPUT_FORMATS}")


def override_data_config(data_config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's ``data`` config with ``overrides`` (``{"edges": "new.csv", "sbm.seed": 3}``) set
    over it. A key the data config does not have is a ``ValueError`` naming it and the valid ones
    (a misspelt option is never silently ignored)."""
    from omegaconf import OmegaConf

    options = sorted(k for k in data_config if k != "_target_")
    cfg = OmegaConf.create(dict(data_config))
    if data_config.get("source", "") is None and not any(str(k).removeprefix("data.") == "source" for k in overrides):
        # the source the run resolved from its own options (social: karate) stays, whatever is overridden
        # (a new data.edges alone would otherwise select the csv source, which needs a node CSV)
        resolved = getattr(build_datamodule(data_config), "source", None)
        if isinstance(resolved, str):
            cfg.source = resolved
    changed = []
    for key, value in overrides.items():
        key = str(key).removeprefix("data.")
        top = key.split(".")[0]
        if top not in options:
            close = difflib.get_close_matches(top, options, n=1)
            raise ValueError(f"data.{key}: the checkpoint's data config ({data_config.get('_target_', '?')}) has no "
                             f"option {top!r}" + (f" (did you mean data.{close[0]}?)" if close else "")
                             + f"; its options: {', '.join(options)}")
        OmegaConf.update(cfg, key, value, merge=False)
        changed.append(f"data.{key}={value!r}")
    if changed:
        log.info("data options over the checkpoint's: %s", ", ".join(changed))
    return OmegaConf.to_container(cfg, resolve=True)


def build_datamodule(data_config: Mapping[str, Any]) -> Any:
    """The DataModule of a data config (not set up); its own ``ValueError`` rather than Hydra's wrapper."""
    from hydra.errors import InstantiationException

    try:
        return instantiate(dict(data_config), _convert_="all")
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ValueError):
            raise ValueError(str(cause)) from None
        raise


def load(ckpt: str | Path, device: str | torch.device = "cpu", weights_only: bool = True,
         data: Mapping[str, Any] | None = None) -> Predictor:
    """A :class:`Predictor` from a seqattn checkpoint: ``seqattn.load(path).predict(source) -> rows``;
    ``data`` sets data options over the checkpoint's (``seqattn.load(p, data={"id_column": None})``)."""
    return Predictor.from_checkpoint(ckpt, device=device, weights_only=weights_only, data=data)


def write_rows(rows: Sequence[dict[str, Any]], output: str | Path | None) -> None:
    """Write rows as ``.jsonl`` (one JSON object a line) or ``.csv`` (the union of the rows' keys as
    columns; list / dict values JSON-encoded); ``output=None`` writes JSON lines to stdout."""
    if output is None:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        return
    _check_output(output)
    output = Path(output)
    suffix = output.suffix.lower()
    output.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".jsonl":
        with open(output, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        return
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with open(output, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})


USAGE = "usage: python -m seqattn.predict ckpt=PATH input=FILE_OR_DIR [output=FILE.csv|FILE.jsonl] " \
        "[batch_size=N] [device=cpu|cuda] [on_error=skip|stop] [data.KEY=VALUE ...]"
_ARGS = {"ckpt", "input", "output", "batch_size", "device", "on_error"}


def parse_data_overrides(argv: Sequence[str], usage: str = "") -> tuple[list[str], dict[str, Any]]:
    """Split ``data.KEY=VALUE`` arguments off ``argv``: ``(the others, {"KEY": value})``, values parsed
    by Hydra's override grammar as ``seqattn.run`` parses them (``null``, ``3``, ``[a,b]``, quotes)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    rest, data = [], {}
    for arg in argv:
        if not arg.lstrip("-").startswith("data."):
            rest.append(arg)
            continue
        try:
            (override,) = OverridesParser.create().parse_overrides([arg.lstrip("-")])
        except HydraException as err:
            raise ValueError(f"cannot parse {arg!r} ({str(err).splitlines()[0]}); expected data.KEY=VALUE\n"
                             f"{usage or USAGE}") from None
        if override.type.name != "CHANGE" or override.value_type is None:
            raise ValueError(f"{arg!r}: expected data.KEY=VALUE\n{usage or USAGE}")
        data[override.key_or_group.removeprefix("data.")] = override.value()
    return rest, data


def parse_args(argv: Sequence[str]) -> dict[str, Any]:
    """``["ckpt=a.ckpt", "input=x", "data.id_column=name"]`` -> ``{"ckpt": "a.ckpt", "input": "x",
    "data": {"id_column": "name"}}`` (``data`` only when given); ValueError on anything else."""
    argv, data = parse_data_overrides(argv)
    args: dict[str, Any] = parse_key_values(argv, _ARGS, ("ckpt", "input"), USAGE)
    if data:
        args["data"] = data
    if "batch_size" in args:
        try:
            args["batch_size"] = int(args["batch_size"])  # type: ignore[assignment]
        except ValueError:
            raise ValueError(f"batch_size={args['batch_size']!r} must be a positive integer") from None
        if args["batch_size"] <= 0:  # type: ignore[operator]
            raise ValueError(f"batch_size={args['batch_size']} must be a positive integer")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__.split("\n\n    import seqattn")[0])
        return 0 if argv else 2
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s", stream=sys.stderr)
    try:
        args = parse_args(argv)
        predictor = load(args["ckpt"], device=args.get("device", "cpu"), data=args.get("data"))
        n = predictor.predict_to_file(args["input"], args.get("output"), args.get("batch_size"),
                                      args.get("on_error", "skip"))
    except (ValueError, FileNotFoundError) as err:
        print(f"seqattn.predict: error: {err}", file=sys.stderr)
        return 2
    if args.get("output"):
        log.info("wrote %d rows to %s", n, args["output"])
    if predictor.errors:
        print(f"seqattn.predict: {len(predictor.errors)} input(s) could not be read and have no row:", file=sys.stderr)
        for where, reason in predictor.errors:
            print(f"  {where}: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
