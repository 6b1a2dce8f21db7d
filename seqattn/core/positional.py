"""Positional encodings.

Letters: b batch, l length, d model width, h heads, k head width.

Self-attention alone is permutation-equivariant: it does not know where a token is.
Additive encodings (``learned``, ``sinusoidal``) are added to ``x [B, L, D]`` once,
before the first layer; ``rotary`` rotates q and k inside every attention layer.

- ``none``: no position information.
- ``learned``: one trained vector per position up to an explicit ``max_len``; a longer
  input raises ``ValueError`` (the seed: "defined up to 128, but the sequence is 129").
- ``sinusoidal``: the fixed sin/cos rule of "Attention is all you need"; any length.
- ``rotary``: RoPE (Su et al. 2021); any length, relative by construction.

Besides these, :class:`RelativePositionBias` is a learned, direction-aware relative position bias
added to the attention scores (Shaw et al. 2018 / T5 / TENER 2019): one scalar per head and signed
offset ``j - i`` clipped to ``±max_distance``; it can go with any of the four (the encoder's
``relative_bias``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

POSITIONALS = ("none", "learned", "sinusoidal", "rotary")


class LearnedPositional(nn.Module):
    """A trained vector per position. ``forward(x [B, L, D]) -> [B, L, D]``."""

    def __init__(self, dim: int, max_len: int) -> None:
        super().__init__()
        if max_len is None or max_len <= 0:
            raise ValueError(f"learned positional encoding needs an explicit max_len > 0, got {max_len!r}")
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, dim) * 0.02)  # [max_len, D]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        if length > self.max_len:
            raise ValueError(
                f"sequence length {length} exceeds the learned positional encoding's max_len={self.max_len}; "
                "raise model.max_len or use positional=sinusoidal/rotary"
            )
        return x + self.weight[:length].unsqueeze(0)  # [B, L, D] + [1, L, D]


def sinusoidal_table(length: int, dim: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """``[L, D]`` table: ``PE[p, 2i] = sin(p / 10000^(2i/D))``, ``PE[p, 2i+1] = cos(p / 10000^(2i/D))``.

    Computed in float64 when ``dtype`` is float64, else in float32, then cast to ``dtype``.
    """
    work = torch.float64 if dtype == torch.float64 else torch.float32
    pos = torch.arange(length, device=device, dtype=work)[:, None]  # [L, 1]
    div = torch.exp(torch.arange(0, dim, 2, device=device, dtype=work) * (-math.log(10000.0) / dim))  # [ceil(D/2)]
    table = torch.zeros(length, dim, device=device, dtype=work)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div[: dim // 2])
    return table.to(dtype)


class SinusoidalPositional(nn.Module):
    """Fixed sin/cos encoding for any length. ``forward(x [B, L, D]) -> [B, L, D]``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        # a cache grown to the longest input seen, NOT a buffer: its size depends on the data, and
        # DDP broadcasts buffers from rank 0 every step (ranks with other lengths would mismatch)
        self.table = sinusoidal_table(0, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        if torch.compiler.is_exporting() or torch.jit.is_tracing() or torch.compiler.is_compiling():
            # exported / traced / compiled graphs: the table is computed from the input's length, so
            # the graph holds no length baked in from the example
            return x + sinusoidal_table(length, self.dim, x.device, work).to(x.dtype).unsqueeze(0)
        if self.table.shape[0] < length or self.table.device != x.device or self.table.dtype != work:
            self.table = sinusoidal_table(max(length, 2 * self.table.shape[0]), self.dim, x.device, work)
        return x + self.table[:length].to(x.dtype).unsqueeze(0)  # [B, L, D] + [1, L, D]


class RotaryEmbedding(nn.Module):
    """Rotary position embedding applied to q and k ``[B, H, L, K]`` (K even)."""

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary positional encoding needs an even head width, got {head_dim}")
        self.head_dim, self.base = head_dim, float(base)
        self._table: torch.Tensor | None = None  # [n, 1, K/2] complex angles of rotate_pairs, grown on demand

    def _cos_sin(self, length: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        work = torch.float64 if dtype == torch.float64 else torch.float32
        t = torch.arange(length, device=device, dtype=work)
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.head_dim, 2, device=device, dtype=work) / self.head_dim))
        freqs = torch.outer(t, inv_freq)  # [L, K/2]
        emb = torch.cat([freqs, freqs], dim=-1)  # [L, K]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)  # [.., K/2] each
        return torch.cat([-x2, x1], dim=-1)

    # -- the paired form: the same scores with one complex product ------------------------------------
    def pair_order(self) -> torch.Tensor:
        """``[K]`` long: ``[0, K/2, 1, K/2+1, …]``, each rotated pair ``(i, i + K/2)`` of ``rotate_half`` made
        adjacent. ``q·k`` is the same for any order of the K dims applied to both, so a layer may read its q / k
        projection rows in this order and rotate with :meth:`rotate_pairs`."""
        half = self.head_dim // 2
        return torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).reshape(-1)

    def paired(self, x: torch.Tensor) -> bool:
        """Whether :meth:`rotate_pairs` serves ``x``: float32 / float64 outside autocast, in eager mode (complex
        numbers: no bf16 complex type, and tracers / exporters do not all take them)."""
        return (x.dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled(x.device.type)
                and not torch.jit.is_tracing() and not torch.compiler.is_exporting()
                and not torch.compiler.is_compiling())

    def _angles(self, length: int, device, dtype) -> torch.Tensor:
        """``[L, 1, K/2]`` complex: ``exp(i θ_{l, j})``, kept and grown like the sinusoidal table."""
        table = self._table
        complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        if table is None or table.shape[0] < length or table.device != device or table.dtype != complex_dtype:
            n = max(length, 2 * table.shape[0] if table is not None else length)
            cos, sin = self._cos_sin(n, device, dtype)  # [n, K]
            half = self.head_dim // 2
            table = self._table = torch.complex(cos[:, :half], sin[:, :half]).unsqueeze(1)  # [n, 1, K/2]
        return table[:length]

    def rotate_pairs(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, L, G, K]`` whose K dims are in :meth:`pair_order` (G heads, q and k together) -> rotated,
        ``[B, L, G, K]`` in that order: one complex product ``(x_{2j} + i x_{2j+1}) · exp(i θ_{l, j})``, the
        ``x · cos + rotate_half(x) · sin`` of :meth:`forward` with its dims reordered."""
        b, length, groups, width = x.shape
        pairs = torch.view_as_complex(x.reshape(b, length, groups, width // 2, 2))  # [B, L, G, K/2]
        return torch.view_as_real(pairs * self._angles(length, x.device, x.dtype)).flatten(-2)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self._cos_sin(q.shape[-2], q.device, q.dtype)  # [L, K]
        cos_k, sin_k = (cos, sin) if k.shape[-2] == q.shape[-2] else self._cos_sin(k.shape[-2], k.device, k.dtype)
        return rotate(q, cos, sin), rotate(k, cos_k, sin_k)


def _rotate_into(out: torch.Tensor, x: torch.Tensor, sin: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """``out += rotate_half(x) · sin`` (or, ``transpose``, the adjoint: ``out += rotate_half(x · sin)`` with the
    opposite sign) in place, without building ``rotate_half(x)``: ``out``, ``x [.., K]``, ``sin [L, K]``."""
    half = x.shape[-1] // 2
    if transpose:
        out[..., :half].addcmul_(x[..., half:], sin[..., half:])
        out[..., half:].addcmul_(x[..., :half], sin[..., :half], value=-1.0)
    else:
        out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1.0)
        out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


class _Rotate(torch.autograd.Function):
    """``x · cos + rotate_half(x) · sin`` with a backward that keeps only ``cos`` and ``sin`` (the transpose
    of a rotation is the rotation by the opposite angle): two in-place products each way instead of the
    chunk / negate / concatenate / multiply / add chain and its saved tensors."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate_into(x * cos, x, sin)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        cos, sin = ctx.saved_tensors
        return _rotate_into(grad * cos, grad, sin, transpose=True), None, None


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position rotation ``x [.., L, K] · cos [L, K] + rotate_half(x) · sin [L, K]`` -> ``[.., L, K]``."""
    if torch.jit.is_tracing() or torch.compiler.is_exporting() or cos.requires_grad or sin.requires_grad:
        # the plain formula: every tracer knows it, and _Rotate gives the angles no gradient
        return x * cos + RotaryEmbedding._rotate_half(x) * sin
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotate.apply(x, cos, sin)
    return _rotate_into(x * cos, x, sin)


class RelativePositionBias(nn.Module):
    """A learned additive attention bias per head and signed relative offset.

    ``bias[h, i, j] = table[clip(j - i, -M, M) + M, h]`` with ``M = max_distance``: the query at
    position ``i`` scores the key at ``j`` by how far and in which direction it lies (``j - i < 0``:
    to the left), the same for every absolute position (shift-invariant). Offsets beyond ``±M`` share
    the edge entries. Starts at zero (no preference), so a model starts from plain attention.

    ``forward(length, key_length=None) -> [1, H, L, S]`` (float, in the table's dtype unless ``dtype``).
    """

    def __init__(self, heads: int, max_distance: int) -> None:
        super().__init__()
        if heads <= 0:
            raise ValueError(f"relative position bias needs heads > 0, got {heads}")
        if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 1:
            raise ValueError(f"relative position bias needs an int max_distance >= 1, got {max_distance!r}")
        self.heads, self.max_distance = heads, max_distance
        self.table = nn.Parameter(torch.zeros(2 * max_distance + 1, heads))  # [2M+1, H]

    def offsets(self, length: int, key_length: int | None = None, device=None) -> torch.Tensor:
        """``[L, S]`` long: ``clip(j - i, -M, M) + M``, the table row of each (query i, key j)."""
        key_length = length if key_length is None else key_length
        i = torch.arange(length, device=device)[:, None]
        j = torch.arange(key_length, device=device)[None, :]
        return (j - i).clamp(-self.max_distance, self.max_distance) + self.max_distance

    def forward(self, length: int, key_length: int | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
        rows = self.offsets(length, key_length, self.table.device)  # [L, S]
        bias = self.table[rows].permute(2, 0, 1).unsqueeze(0)  # [L, S, H] -> [1, H, L, S]
        return bias if dtype is None else bias.to(dtype)


def build_positional(kind: str, dim: int, head_dim: int, max_len: int | None = None):
    """Returns ``(additive module or None, rotary module or None)`` for an encoder.

    ``dim`` is the model width (additive encodings), ``head_dim`` the q/k width per head (rotary).
    """
    if kind not in POSITIONALS:
        raise ValueError(f"unknown positional encoding {kind!r}; expected one of {POSITIONALS}")
    if kind == "learned":
        return LearnedPositional(dim, max_len), None
    if kind == "sinusoidal":
        return SinusoidalPositional(dim), None
    if kind == "rotary":
        return None, RotaryEmbedding(head_dim)
    return None, None
