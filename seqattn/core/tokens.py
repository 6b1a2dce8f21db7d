"""The one thing every adapter hands the encoder.

Letters: b batch, l sequence length, d model width, e edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

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
        edge_bias: optional ``[E, H]`` float additive attention score per edge of ``edge_index``
            and head (e.g. edge features of a graph); the ``edge`` kernel adds it to the scores.
        edge_attr: optional ``[E, C]`` float features per edge of ``edge_index`` that every attention
            layer with ``edge_dim = C`` projects into key and value offsets (``MultiHeadAttention``).
        grid: ``(h, w)`` when the ``L`` tokens (after any global tokens) lie on a row-major 2-D grid
            (images); None otherwise.
        grid_window: odd ``k``: each token attends only to its ``k×k`` neighbourhood on ``grid``
            (described, not an ``[L, L]`` mask; the image adapter's ``window``); None = no grid window.
        causal: token ``i`` may attend only to ``j <= i`` (positions after the global tokens).
        num_global: how many global tokens (CLS / virtual node) lead each sequence (positions
            ``0 .. num_global-1``); :func:`prepend_global_token` adds one.

        The encoder plans an exact kernel whose cost follows the allowed pairs from ``mask``,
        ``grid_window``, ``causal``, ``edge_index`` and its own options (the 1-D ``window`` ±w, the
        ``graph_path``, the ``kernel``): :mod:`seqattn.core.plan`; ``Encoder.plan(tokens)`` shows the
        plan without running the layers. Global tokens attend to, and are attended by, every real
        token whatever the structure.
        extra: side information for figures and inspection only (e.g. frame features, words);
            no code path depends on it.
    """

    x: torch.Tensor
    mask: torch.Tensor | None = None
    attn_mask: torch.Tensor | None = None
    edge_index: torch.Tensor | None = None
    edge_bias: torch.Tensor | None = None
    grid: tuple[int, int] | None = None
    num_global: int = 0
    grid_window: int | None = None
    causal: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    edge_attr: torch.Tensor | None = None

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
        if self.edge_bias is not None:
            if self.edge_index is None:
                raise ValueError("Tokens.edge_bias needs an edge_index (one bias row per edge)")
            if self.edge_bias.dim() != 2 or self.edge_bias.shape[0] != self.edge_index.shape[1]:
                raise ValueError(f"Tokens.edge_bias must be [E={self.edge_index.shape[1]}, H], "
                                 f"got shape {tuple(self.edge_bias.shape)}")
        if self.edge_attr is not None:
            if self.edge_index is None:
                raise ValueError("Tokens.edge_attr needs an edge_index (one feature row per edge)")
            if self.edge_attr.dim() != 2 or self.edge_attr.shape[0] != self.edge_index.shape[1]:
                raise ValueError(f"Tokens.edge_attr must be [E={self.edge_index.shape[1]}, C], "
                                 f"got shape {tuple(self.edge_attr.shape)}")

        if self.grid_window is not None:
            if not isinstance(self.grid_window, int) or self.grid_window < 1 or self.grid_window % 2 == 0:
                raise ValueError(f"Tokens.grid_window must be an odd int >= 1 (a k×k neighbourhood), "
                                 f"got {self.grid_window!r}")
            if self.grid is None:
                raise ValueError("Tokens.grid_window needs Tokens.grid = (h, w)")
        if self.grid is not None and self.grid[0] * self.grid[1] != self.x.shape[1] - self.num_global:
            raise ValueError(f"Tokens.grid {tuple(self.grid)} holds {self.grid[0] * self.grid[1]} tokens, but x has "
                             f"{self.x.shape[1]} positions and num_global={self.num_global}")

    def replace(self, **changes: Any) -> "Tokens":
        return replace(self, **changes)


def prepend_global_token(tokens: Tokens, vector: torch.Tensor) -> Tokens:
    """Put one global token (CLS for sequences, virtual node for graphs) in front of every sequence.

    ``tokens.x [B, L, D]`` -> ``[B, L+1, D]`` with ``vector [D]`` at position 0. The global token
    is real (mask True), attends to every real token and every real token attends to it:

    - ``attn_mask`` (bool or float; ``[L, L]``, ``[B, L, L]``, ``[B, H, L, L]``) gains a row and
      a column that allow everything (``True`` / ``0.0``);
    - ``edge_index`` over flattened ``b * L + l`` is renumbered to ``b * (L+1) + l + 1`` and gains,
      after the original ``E`` edges, the edges global->token, token->global for every real token
      and the global token's self-loop; ``edge_bias [E, H]`` and ``edge_attr [E, C]`` gain zero rows
      for the added edges (``extra["global_edges"]`` counts them, for inspection);
    - ``num_global`` grows by one (a grid, a grid window, ``causal``, the encoder's window, if any,
      still describe the tokens after them: the global token sees and is seen by every real token).
    """
    x = tokens.x
    b, length, dim = x.shape
    if vector.shape != (dim,):
        raise ValueError(f"global token vector must be [D={dim}], got shape {tuple(vector.shape)}")
    x = torch.cat([vector.to(x.dtype).expand(b, 1, dim), x], dim=1)  # [B, L+1, D]
    mask = tokens.mask
    real = mask if mask is not None else torch.ones(b, length, dtype=torch.bool, device=x.device)
    new_mask = torch.cat([torch.ones(b, 1, dtype=torch.bool, device=x.device), real], dim=1)
    attn_mask = tokens.attn_mask
    if attn_mask is not None:
        allow = True if attn_mask.dtype == torch.bool else 0.0
        # pad the last two dims by one in front: [.., L, L] -> [.., L+1, L+1]
        padded = attn_mask.new_full((*attn_mask.shape[:-2], length + 1, length + 1), allow)
        padded[..., 1:, 1:] = attn_mask
        attn_mask = padded
    extra = dict(tokens.extra)
    edge_index = tokens.edge_index
    if edge_index is not None:
        graph = edge_index // length
        edge_index = edge_index + graph + 1  # b*L + l -> b*(L+1) + l + 1
        node = torch.nonzero(real.flatten(), as_tuple=False).squeeze(1)  # [N] flattened real tokens
        node_graph = node // length
        node_new = node + node_graph + 1
        glob = node_graph * (length + 1)
        glob_self = torch.arange(b, device=x.device) * (length + 1)
        added = torch.cat([
            torch.stack([glob, node_new]),  # global -> token (token attends to the global token)
            torch.stack([node_new, glob]),  # token -> global
            torch.stack([glob_self, glob_self]),
        ], dim=1)
        edge_index = torch.cat([edge_index, added], dim=1)
        extra["global_edges"] = n_added = added.shape[1]
    edge_bias = tokens.edge_bias
    if edge_bias is not None:
        edge_bias = torch.cat([edge_bias, edge_bias.new_zeros(n_added, edge_bias.shape[1])])  # [E+G, H]
    edge_attr = tokens.edge_attr
    if edge_attr is not None:
        edge_attr = torch.cat([edge_attr, edge_attr.new_zeros(n_added, edge_attr.shape[1])])  # [E+G, C]
    return Tokens(x=x, mask=new_mask, attn_mask=attn_mask, edge_index=edge_index, edge_bias=edge_bias, grid=tokens.grid,
                  num_global=tokens.num_global + 1, grid_window=tokens.grid_window, causal=tokens.causal, extra=extra,
                  edge_attr=edge_attr)
