"""The one thing every adapter hands the encoder.

Letters: b batch, l sequence length, d model width, e edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

IGNORE_INDEX = -100
"""Label value that losses and metrics skip (padding, unlabeled frames); torch's cross-entropy default."""


@dataclass
class Tokens:
    """A padded batch of token vectors.

    Attributes:
        x: ``[B, L, D]`` float token vectors.
        mask: ``[B, L]`` bool, ``True`` = real token (``None`` = all real).
        attn_mask: optional structure ``[B, L, L]`` / ``[L, L]`` bool (``True`` = may
            attend) or float additive bias (``[B, H, L, L]`` allowed).
        edge_index: optional ``[2, E]`` long graph edges over flattened positions
            ``b * L + l`` (source row 0, target row 1: target attends to source).
        extra: modality-specific side information (e.g. frame times, word alignment).
    """

    x: torch.Tensor
    mask: torch.Tensor | None = None
    attn_mask: torch.Tensor | None = None
    edge_index: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.x.dim() != 3:
            raise ValueError(f"Tokens.x must be [B, L, D], got shape {tuple(self.x.shape)}")
        if self.mask is not None:
            if self.mask.shape != self.x.shape[:2]:
                raise ValueError(
                    f"Tokens.mask must be [B, L] = {tuple(self.x.shape[:2])}, got {tuple(self.mask.shape)}"
                )
            if self.mask.dtype != torch.bool:
                raise ValueError(f"Tokens.mask must be bool (True = real token), got {self.mask.dtype}")

    def replace(self, **changes: Any) -> "Tokens":
        return replace(self, **changes)
