"""Dropout whose CPU masks cost a fraction of torch's.

On CPU, ``torch.nn.functional.dropout`` draws its mask with ``bernoulli_``, one generator call and one
branch per element (~7 ns per element on this machine; 19 % of the tagging encoder's training step in a
profile). ``python -m seqattn.bench dropout`` times both side by side.

:func:`dropout` draws the same kind of mask from 63-bit integers cut into four 15-bit uniforms each
(``int64.random_()``, one generator call per four elements): keep an element when its uniform ``u`` in
``[0, 32768)`` is ``>= t``, ``t = round(p · 32768)``, and scale kept elements by ``32768 / (32768 - t)``.
The drop probability is ``t / 32768``, ``p`` to within ``1.6e-5``, and the output's expectation is the input
exactly (as with torch's). It uses torch's default generator, so ``torch.manual_seed`` / Lightning's
``seed_everything`` make it reproducible; the stream differs from ``bernoulli_``'s, so a run's numbers
differ from torch dropout's as another seed's would.

Elsewhere (CUDA's fused kernel, ``torch.export`` or a jit trace; ``torch.compile`` traces this one) and
when :data:`ENABLED` is False (``fast_dropout=false`` on the command line) it is torch's ``F.dropout``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

#: the fast CPU masks on (``fast_dropout`` in conf/config.yaml sets it for a run)
ENABLED = True

_LEVELS = 1 << 15  # 15-bit uniforms: four from each 63-bit draw


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu",
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, float]:
    """A random keep mask ``[*shape]`` bool (each element kept with probability ``1 - t/32768``,
    ``t = round(p · 32768)``) and the scale ``32768 / (32768 - t)`` that keeps the expectation."""
    numel = math.prod(shape)
    threshold = int(round(float(p) * _LEVELS))
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device).random_(generator=generator)
    uniform = words.view(torch.int16)[:numel].bitwise_and(_LEVELS - 1)  # [numel] in [0, 32768)
    return uniform.ge(threshold).view(shape), _LEVELS / (_LEVELS - threshold)


def scaled_keep_mask(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> torch.Tensor:
    """:func:`keep_mask`'s mask from the same draws, as the factor dropout multiplies by: ``[*shape]`` of
    ``dtype``, ``scale`` where kept and 0 where dropped (``keep.to(dtype) * scale``, bit for bit).

    Computed in the 16-bit integers without a comparison: ``(u - t) >> 15`` is -1 where ``u < t`` and 0
    elsewhere (``u - t`` lies in ``[-32768, 32767]``), so ``+ 1`` is the keep bit. Torch's ``int16 >= t`` and
    ``bool -> float`` passes are element by element on CPU; these are vectorised (the mask of a
    ``[64, 35, 64]`` tensor: 62 against 168 µs, the 93 µs draw aside)."""
    keep, scale = keep_bits(shape, p, device, generator)
    return keep.to(dtype).mul_(scale)


def keep_bits(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str = "cpu",
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, float]:
    """:func:`scaled_keep_mask`'s draws before the conversion: ``([*shape] int16, 1 = keep and 0 = drop; the
    scale ``32768 / (32768 - t)``)``. ``x * keep`` promotes to ``x``'s dtype in the multiply itself, so a caller
    that can apply the scale to a smaller tensor afterwards (attention: to the output ``[B, H, L, E]`` instead
    of the weights ``[B, H, L, S]``) saves the conversion's and the scaling's passes."""
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"a keep mask (scaled_keep_mask, keep_bits) needs a drop probability in [0, 1), got {p!r}")
    numel = math.prod(shape)
    threshold = int(round(float(p) * _LEVELS))
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device).random_(generator=generator)
    bits = words.view(torch.int16)[:numel].bitwise_and_(_LEVELS - 1)  # [numel] in [0, 32768), in place
    keep = bits.sub_(threshold).bitwise_right_shift_(15).add_(1).view(shape)  # 1 = keep, 0 = drop (int16)
    if torch.compiler.is_compiling():
        # torch.compile breaks the graph at the draw, so the bits leave a compiled frame: as a dtype view of the int64
        # draws they would fail AOT autograd's alias replay (it re-strides the int64 base with int16 sizes)
        keep = keep.clone()
    return keep, _LEVELS / (_LEVELS - threshold)


def fast_path(x: torch.Tensor) -> bool:
    """Whether :func:`dropout` draws ``x``'s mask with the cheap CPU masks (else torch's ``F.dropout``)."""
    return ENABLED and x.device.type == "cpu" and x.is_floating_point() and not _exporting()


def _exporting() -> bool:
    return bool(torch.compiler.is_exporting() or torch.jit.is_tracing())


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the cheap CPU mask (module docstring); same shape as ``x``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0 or not fast_path(x):
        return F.dropout(x, p, training=True)
    return x * scaled_keep_mask(x.shape, p, x.dtype, x.device)  # the gradient is grad · mask · scale, as torch's


class Dropout(nn.Dropout):
    """``nn.Dropout`` with :func:`dropout`'s CPU masks (a drop-in: same ``p``, state and repr)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def set_fast_dropout(enabled: bool) -> None:
    """Turn the cheap CPU masks on or off for this process (``fast_dropout`` in conf/config.yaml)."""
    global ENABLED
    if not isinstance(enabled, bool):
        raise ValueError(f"fast_dropout must be true or false (cheap CPU dropout masks, or torch's), got {enabled!r}")
    ENABLED = enabled
