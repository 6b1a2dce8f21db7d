"""Reading seqattn checkpoints safely and rebuilding the model from one, without Hydra.

A seqattn checkpoint is a Lightning checkpoint written by ``seqattn.run`` whose
``hyper_parameters`` hold the objective's arguments (``net``: the resolved network config
as plain dicts, ``spec``: what the data told the model -- label names, vocabulary, target
statistics, as plain data --, ``optimizer``, ...) and whose ``seqattn_config`` holds the whole
resolved run config (``data``, ``objective._target_``, ...). That is all that is needed to
rebuild the model and its datamodule anywhere::

    checkpoint = read_checkpoint("run/checkpoints/best.ckpt")   # weights_only=True
    model = build_model(checkpoint)                             # an Objective, eval mode
"""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import torch

from seqattn.model.build import locate

log = logging.getLogger("seqattn.training.checkpoint")

REQUIRED_KEYS = ("state_dict", "hyper_parameters", "seqattn_config")


class NotASeqattnCheckpoint(ValueError):
    """The file exists but is not a checkpoint written by ``seqattn.run``."""


def read_checkpoint(path: str | Path, weights_only: bool = True) -> dict[str, Any]:
    """Load a seqattn checkpoint onto the CPU.

    Args:
        path: a ``.ckpt`` written by ``seqattn.run`` (``checkpoints/best.ckpt`` / ``last.ckpt``).
        weights_only: load with ``torch.load(weights_only=True)`` (no arbitrary code runs while
            unpickling). seqattn checkpoints hold only tensors and plain containers, so this works
            for them; pass False only for a file you trust that needs it.

    Raises:
        FileNotFoundError: no such file.
        NotASeqattnCheckpoint (a ValueError): torch cannot read the file, or it lacks
            ``state_dict`` / ``hyper_parameters["net"]`` / ``seqattn_config``.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=weights_only)
    except pickle.UnpicklingError as err:
        if weights_only and "weights_only" in str(err):
            raise NotASeqattnCheckpoint(
                f"{path} is not a seqattn checkpoint: it holds Python objects that torch.load(weights_only=True) "
                f"refuses to unpickle ({str(err).splitlines()[0]}). seqattn checkpoints hold only tensors and plain "
                "containers; load a file you trust with weights_only=False"
            ) from None
        raise NotASeqattnCheckpoint(f"{path} is not a seqattn checkpoint: torch cannot read it ({err})") from None
    except Exception as err:  # noqa: BLE001 -- torch raises many kinds for a file that is not one of its own
        raise NotASeqattnCheckpoint(
            f"{path} is not a seqattn checkpoint: torch cannot read it ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); is it truncated or another kind of file?"
        ) from None
    if not isinstance(checkpoint, dict):
        raise NotASeqattnCheckpoint(f"{path} is not a seqattn checkpoint: it holds a {type(checkpoint).__name__}, "
                                    "not a checkpoint dict")
    missing = [k for k in REQUIRED_KEYS if k not in checkpoint]
    hparams = checkpoint.get("hyper_parameters")
    if not missing and not (isinstance(hparams, dict) and isinstance(hparams.get("net"), dict)):
        missing = ["hyper_parameters['net']"]
    if missing:
        raise NotASeqattnCheckpoint(
            f"{path} is not a seqattn checkpoint: it lacks {missing} (has keys {sorted(map(str, checkpoint))}); "
            "seqattn checkpoints are written by `python -m seqattn.run` under <run>/checkpoints/"
        )
    return checkpoint


def objective_class(checkpoint: dict[str, Any]) -> type:
    """The objective (LightningModule) class named by the checkpoint's run config."""
    target = (checkpoint["seqattn_config"].get("objective") or {}).get("_target_")
    if not target:
        raise NotASeqattnCheckpoint("the checkpoint's seqattn_config has no objective._target_")
    return locate(target)


def build_model(checkpoint: dict[str, Any] | str | Path, map_location: str | torch.device = "cpu"):
    """The trained objective (an ``Objective`` LightningModule, in eval mode) from a checkpoint
    dict or path; its ``.net`` is the ``SequenceModel`` and ``.labels`` the class names."""
    if not isinstance(checkpoint, dict):
        checkpoint = read_checkpoint(checkpoint)
    cls = objective_class(checkpoint)
    model = cls(**checkpoint["hyper_parameters"])
    model.load_state_dict(checkpoint["state_dict"])
    model.on_load_checkpoint(checkpoint)
    return model.to(map_location).eval()


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temporary file in the same folder, fsync, then ``os.replace``: a crash
    while saving leaves the previous file at ``path`` intact (never a truncated checkpoint)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
