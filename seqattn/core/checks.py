"""Value checks that need the host (a synchronisation on CUDA, a graph break under ``torch.compile``).

The encoder validates a batch once, when it plans the attention of a forward
(the planner, :mod:`seqattn.core.plan`); the kernels themselves check values (edge index ranges,
...) only in debug mode: ``SEQATTN_DEBUG_CHECKS=1`` in the environment, or :func:`set_debug_checks`.
"""

from __future__ import annotations

import os

import torch

_DEBUG = os.environ.get("SEQATTN_DEBUG_CHECKS", "0") not in ("", "0", "false", "False")


def debug_checks() -> bool:
    """Whether kernels check tensor values on every call (slow: host synchronisations)."""
    return _DEBUG


def set_debug_checks(enabled: bool) -> bool:
    """Turn per-call value checks on or off; returns the previous setting."""
    global _DEBUG
    previous, _DEBUG = _DEBUG, bool(enabled)
    return previous


def tracing() -> bool:
    """Inside ``torch.compile``, ``torch.export`` or a jit trace: no branch on tensor values, no
    host reads (the graph must hold for other inputs)."""
    return bool(torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing())
