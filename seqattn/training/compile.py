"""``compile=``: ``torch.compile`` of the encoder for a run (issue 20, item 5).

``compile: null`` (default) runs eager. ``compile=inductor`` (or ``true``) compiles the encoder's
forward and backward with TorchInductor, ``dynamic=True`` (lengths change from batch to batch:
bucketed sequences, molecules, clips), in place (``nn.Module.compile``): parameter names and so
checkpoints are the same as an eager run's, and a compiled run's checkpoint loads without it.
``compile=aot_eager`` traces the same graphs without generating code (checks that a model traces; no
speed-up), ``compile=eager`` runs only Dynamo's capture.

Only the encoder is compiled: the adapters read host values (vocabulary lookups, file lengths, graph
batching) and the heads are small. The encoder's layers read none (``tests/core/test_compile.py``), so
its graph has no breaks; its attention plan is made once per forward, outside the layers.

Whether it pays is measured per recipe as whole runs, compile time included, side by side:
``python -m seqattn.bench recipes --tasks <task> --variants "eager=" "compiled=compile=inductor"``
(docs/benchmarks.md has the numbers). It is off by default: on this project's 2-core CPU it did not
pay for the recipes measured.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import nn

log = logging.getLogger(__name__)

BACKENDS = ("inductor", "aot_eager", "eager")
_OFF = ("none", "null", "off", "false")
_ON = ("true", "on")


def parse_compile(value: Any) -> str | None:
    """``compile`` setting -> a ``torch.compile`` backend name, or None (off).

    ``null`` / ``false`` / ``off`` -> None; ``true`` / ``on`` -> ``inductor``; a name in :data:`BACKENDS`
    -> itself. Anything else is a ``ValueError`` naming the value and what is allowed.
    """
    if value is None or value is False:
        return None
    if value is True:
        return "inductor"
    name = value.strip().lower() if isinstance(value, str) else None  # 1 / 0 are not settings
    if name in _OFF:
        return None
    if name in _ON:
        return "inductor"
    if name in BACKENDS:
        return name
    raise ValueError(f"compile={value!r} is not a setting: expected null / false (off), true (= inductor) "
                     f"or a torch.compile backend among {', '.join(BACKENDS)}")


def compile_encoder(net: nn.Module, setting: Any) -> str | None:
    """Compile ``net.encoder`` in place with the backend of ``setting`` (:func:`parse_compile`).

    Returns the backend used, or None when off (the network is left untouched). ``dynamic=True``: one
    graph serves every batch length instead of one compilation per length.
    """
    backend = parse_compile(setting)
    if backend is None:
        return None
    encoder = getattr(net, "encoder", None)
    if not isinstance(encoder, nn.Module):
        raise ValueError(f"compile={setting!r}: the network {type(net).__name__} has no encoder module to compile")
    encoder.compile(backend=backend, dynamic=True)
    log.info("compile: the encoder (%s) is compiled with torch.compile(backend=%r, dynamic=True); the first "
             "steps of each new shape and of evaluation include compile time", type(encoder).__name__, backend)
    return backend
