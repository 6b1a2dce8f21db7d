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

from seqattn.core.tokens import Tokens, prepend_global_token


class SequenceModel(nn.Module):
    """``adapter`` (batch -> Tokens), ``encoder`` (Tokens -> [B, L, D]), ``head`` ([B, L, D] -> logits).

    Args:
        global_token: prepend a learned global token (CLS / virtual node) at position 0, which
            attends to and is attended by every real token. ``None`` (default): only when the head
            needs it (``PooledHead(pooling="cls")``). With it, ``L`` grows by one everywhere
            downstream of the adapter (``mask``, attention maps); per-token heads drop it again.
    """

    def __init__(self, adapter: nn.Module, encoder: nn.Module, head: nn.Module,
                 global_token: bool | None = None) -> None:
        super().__init__()
        if not hasattr(adapter, "inputs"):
            raise ValueError(f"adapter {type(adapter).__name__} must declare the batch keys it reads in `inputs`")
        self.adapter, self.encoder, self.head = adapter, encoder, head
        if global_token is None:
            global_token = bool(getattr(head, "needs_global_token", False))
        elif getattr(head, "needs_global_token", False) and not global_token:
            raise ValueError("head pooling 'cls' reads the global token; global_token=False contradicts it")
        dim = getattr(encoder, "dim", None)
        if global_token and dim is None:
            raise ValueError(f"global_token needs the encoder width; {type(encoder).__name__} has no `dim`")
        self.global_token = nn.Parameter(torch.randn(dim) * 0.02) if global_token else None

    def tokens(self, batch: dict[str, Any]) -> Tokens:
        """The adapter's tokens for ``batch`` (its ``inputs`` keys, or its ``export_inputs`` keys when an
        adapter with non-tensor inputs, e.g. words, is fed tensors by an exported model)."""
        names = self.adapter.inputs
        export_names = getattr(self.adapter, "export_inputs", None)  # tensor-only inputs (e.g. text ids)
        if export_names and any(k not in batch for k in names) and all(k in batch for k in export_names):
            names = export_names
        missing = [k for k in names if k not in batch]
        if missing:
            raise ValueError(f"batch lacks {missing} needed by {type(self.adapter).__name__}; has {sorted(batch)}")
        tokens = self.adapter(**{k: batch[k] for k in names})
        if self.global_token is not None:
            tokens = prepend_global_token(tokens, self.global_token)
        return tokens

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
        if self.global_token is not None and getattr(self.head, "per_token", False):
            encoded, mask = encoded[:, 1:], mask[:, 1:]  # per-token predictions for the real tokens only
        out = {"logits": self.head(encoded, mask), "mask": mask}
        if return_attention:
            out["attention"] = attention
            out["tokens"] = tokens
        return out
