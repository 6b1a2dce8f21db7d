"""The network every recipe trains: adapter -> encoder -> head.

``SequenceModel.forward(batch) -> dict(logits, mask, attention?)``: the adapter declares which
batch keys it reads (``adapter.inputs``) and turns them into :class:`~seqattn.core.Tokens`; the
encoder (or a baseline with the same interface) never knows the modality; the head makes
per-token ``[B, L, C]`` or pooled ``[B, C]`` predictions. The parts' interfaces are declared in
:mod:`seqattn.model.protocols` and checked here, once.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from seqattn.core.tokens import Tokens, prepend_global_token
from seqattn.model.protocols import adapter_hooks, check_adapter, check_encoder, check_head, encoder_max_length


class SequenceModel(nn.Module):
    """``adapter`` (batch -> Tokens), ``encoder`` (Tokens -> [B, L, D]), ``head`` ([B, L, D] -> logits).

    Args:
        subsample: optional module ``Tokens -> Tokens`` applied to the adapter's tokens before the
            encoder (e.g. :class:`~seqattn.model.subsample.TimeSubsampling`: ``F`` frames ->
            ``ceil(F / k)`` tokens, the mask follows); None = none.
        global_token: prepend a learned global token (CLS / virtual node) at position 0, which
            attends to and is attended by every real token. ``None`` (default): only when the head
            needs it (``PooledHead(pooling="cls")``). With it, ``L`` grows by one everywhere
            downstream of the adapter (``mask``, attention maps); per-token heads drop it again.
    """

    def __init__(self, adapter: nn.Module, encoder: nn.Module, head: nn.Module,
                 global_token: bool | None = None, subsample: nn.Module | None = None) -> None:
        super().__init__()
        check_adapter(adapter)
        check_encoder(encoder)
        check_head(head)
        self.adapter, self.encoder, self.head = adapter, encoder, head
        self.subsample = subsample
        hooks = adapter_hooks(adapter)
        self.input_names: tuple[str, ...] = tuple(adapter.inputs)
        self.export_input_names: tuple[str, ...] | None = hooks["export_inputs"]
        self.exportable: bool = hooks["exportable"]
        needs = bool(getattr(head, "needs_global_token", False))
        if global_token is None:
            global_token = needs
        elif needs and not global_token:
            raise ValueError("head pooling 'cls' reads the global token; global_token=False contradicts it")
        self.global_token = nn.Parameter(torch.randn(encoder.dim) * 0.02) if global_token else None

    @property
    def max_tokens(self) -> int | None:
        """The longest adapter output (in tokens) the network accepts: the encoder's limit less the
        global token, or None for any length."""
        limit = encoder_max_length(self.encoder)
        if limit is None:
            return None
        return limit - (1 if self.global_token is not None else 0)

    def tokens(self, batch: dict[str, Any], transform: Callable[[Tokens], Tokens] | None = None) -> Tokens:
        """The adapter's tokens for ``batch``: its ``inputs`` keys, or its ``export_inputs`` keys when
        the batch holds those instead (an exported text model is fed ids, not words).

        ``transform``: applied to the adapter's own tokens (its ``L``), before any subsampling and
        global token (masked-token pretraining hides tokens there)."""
        names = self.input_names
        export = self.export_input_names
        if export and any(k not in batch for k in names) and all(k in batch for k in export):
            names = export
        missing = [k for k in names if k not in batch]
        if missing:
            raise ValueError(f"batch lacks {missing} needed by {type(self.adapter).__name__}; has {sorted(batch)}")
        tokens = self.adapter(**{k: batch[k] for k in names})
        if transform is not None:
            tokens = transform(tokens)
        if self.subsample is not None:
            tokens = self.subsample(tokens)
        if self.global_token is not None:
            tokens = prepend_global_token(tokens, self.global_token)
        return tokens

    def forward(self, batch: dict[str, Any], return_attention: bool | list[int] = False,
                transform: Callable[[Tokens], Tokens] | None = None) -> dict[str, Any]:
        """Returns ``logits`` ([B, L, C] per token or [B, C] pooled), ``mask`` [B, L] and, when asked,
        ``attention`` (list of [B, H, L, L]) and ``tokens``. ``transform``: see :meth:`tokens`."""
        tokens = self.tokens(batch, transform)
        encoded = self.encoder(tokens, return_attention=return_attention)
        attention = None
        if return_attention:
            encoded, attention = encoded
        mask = tokens.mask
        if mask is None:
            mask = torch.ones(encoded.shape[:2], dtype=torch.bool, device=encoded.device)
        if tokens.num_global and self.head.per_token:
            g = tokens.num_global
            encoded, mask = encoded[:, g:], mask[:, g:]  # per-token predictions for the real tokens only
        out = {"logits": self.head(encoded, mask), "mask": mask}
        if return_attention:
            out["attention"] = attention
            out["tokens"] = tokens
        return out
