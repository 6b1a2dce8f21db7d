"""The network every recipe trains: adapter -> encoder -> head.

``SequenceModel.forward(batch) -> dict(logits, mask, attention?)``: the adapter
declares which batch keys it reads (``adapter.inputs``) and turns them into
:class:`~seqattn.core.Tokens`; the encoder (or a baseline with the same interface)
never knows the modality; the head makes per-token ``[B, L, C]`` or pooled ``[B, C]``
predictions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from seqattn.core.tokens import Tokens


class SequenceModel(nn.Module):
    """``adapter`` (batch -> Tokens), ``encoder`` (Tokens -> [B, L, D]), ``head`` ([B, L, D] -> logits)."""

    def __init__(self, adapter: nn.Module, encoder: nn.Module, head: nn.Module) -> None:
        super().__init__()
        if not hasattr(adapter, "inputs"):
            raise ValueError(f"adapter {type(adapter).__name__} must declare the batch keys it reads in `inputs`")
        self.adapter, self.encoder, self.head = adapter, encoder, head

    def tokens(self, batch: dict[str, Any]) -> Tokens:
        missing = [k for k in self.adapter.inputs if k not in batch]
        if missing:
            raise ValueError(f"batch lacks {missing} needed by {type(self.adapter).__name__}; has {sorted(batch)}")
        return self.adapter(**{k: batch[k] for k in self.adapter.inputs})

    def forward(self, batch: dict[str, Any], return_attention: bool | list[int] = False) -> dict[str, Any]:
        """Returns ``logits`` ([B, L, C] per token or [B, C] pooled), ``mask`` [B, L] and, when asked,
        ``attention`` (list of [B, H, L, L]) and ``tokens``."""
        tokens = self.tokens(batch)
        encoded = self.encoder(tokens, return_attention=return_attention)
        attention = None
        if return_attention:
            encoded, attention = encoded
        mask = tokens.mask
        if mask is None:
            mask = torch.ones(encoded.shape[:2], dtype=torch.bool, device=encoded.device)
        out = {"logits": self.head(encoded, mask), "mask": mask}
        if return_attention:
            out["attention"] = attention
            out["tokens"] = tokens
        return out
