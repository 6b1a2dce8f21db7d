"""CTC decoding: per-frame log-probabilities -> label sequences (Graves et al. 2006).

A CTC path is one symbol per frame, from the labels and a *blank*. It means the label sequence
left after merging repeated symbols and then dropping blanks (:func:`collapse`): ``a a - a b b``
-> ``a a b`` (``-`` = blank). The probability of a label sequence is the sum over all its paths.

- :func:`greedy_decode`: the most probable path (argmax per frame), collapsed. Fast, vectorised;
  not always the most probable *sequence*.
- :func:`prefix_beam_search`: keeps the ``beam_width`` most probable label prefixes, each with
  the exact probability of its paths ending in a blank / in its last label, frame by frame. With a
  beam as wide as the number of prefixes it is exact (tests compare it with brute force over all
  paths); a narrow beam is an approximation.

Class indices are the network's: ``blank`` (0 by default) and labels ``1..C``; callers map them
to the data's label indices (``class - 1``). Both decoders run on the CPU in Python / numpy (the
exported network outputs the per-frame logits; decode them with these functions).

Letters: b batch, f frames, k classes (labels + blank), s output length.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

NEG_INF = float("-inf")


def collapse(path: Sequence[int], blank: int = 0) -> list[int]:
    """A path (one class per frame) -> its label sequence: merge repeats, then drop blanks."""
    out, previous = [], None
    for symbol in path:
        symbol = int(symbol)
        if symbol != previous and symbol != blank:
            out.append(symbol)
        previous = symbol
    return out


def greedy_decode(log_probs: torch.Tensor, lengths: torch.Tensor | None = None, blank: int = 0) -> list[list[int]]:
    """Best path decoding. ``log_probs [B, F, K]`` (or logits: only the argmax matters), ``lengths [B]``
    real frames (None: all ``F``) -> one list of class indices (blank excluded) per item."""
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be [B, F, K], got shape {tuple(log_probs.shape)}")
    b, f, _ = log_probs.shape
    best = log_probs.argmax(-1)  # [B, F]
    if lengths is None:
        lengths = torch.full((b,), f, dtype=torch.long)
    previous = torch.cat([best.new_full((b, 1), -1), best[:, :-1]], dim=1)  # [B, F]: the frame before
    real = torch.arange(f, device=best.device)[None] < lengths.to(best.device)[:, None]  # [B, F]
    keep = (best != previous) & (best != blank) & real  # [B, F]
    best, keep = best.cpu(), keep.cpu()
    return [best[i][keep[i]].tolist() for i in range(b)]


def _logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


def prefix_beam_search(
    log_probs: torch.Tensor | np.ndarray,
    beam_width: int = 8,
    blank: int = 0,
    min_log_prob: float | None = None,
) -> list[tuple[list[int], float]]:
    """CTC prefix beam search over one utterance.

    Args:
        log_probs: ``[F, K]`` per-frame log-probabilities (log-softmax over classes) of the real frames.
        beam_width: prefixes kept after each frame (>= 1).
        blank: the blank's class index.
        min_log_prob: skip a label at a frame where its log-probability is below this (speed); None
            = consider every label (exact with a wide enough beam).

    Returns:
        up to ``beam_width`` ``(labels, log_prob)`` pairs, most probable first: ``labels`` a list of
        class indices (no blank), ``log_prob`` the log of the summed probability of its paths.
    """
    if beam_width < 1:
        raise ValueError(f"beam_width must be >= 1, got {beam_width}")
    lp = log_probs.detach().double().cpu().numpy() if isinstance(log_probs, torch.Tensor) else \
        np.asarray(log_probs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"log_probs must be [F, K] (one utterance), got shape {lp.shape}")
    num_classes = lp.shape[1]
    labels = [c for c in range(num_classes) if c != blank]
    # prefix -> [log P(paths so far collapsing to prefix, ending in blank), ... ending in its last label]
    beams: dict[tuple[int, ...], list[float]] = {(): [0.0, NEG_INF]}
    for frame in lp:
        nxt: dict[tuple[int, ...], list[float]] = {}

        def slot(prefix: tuple[int, ...]) -> list[float]:
            if prefix not in nxt:
                nxt[prefix] = [NEG_INF, NEG_INF]
            return nxt[prefix]

        candidates = labels if min_log_prob is None else [c for c in labels if frame[c] >= min_log_prob]
        for prefix, (p_blank, p_label) in beams.items():
            total = _logaddexp(p_blank, p_label)
            here = slot(prefix)
            here[0] = _logaddexp(here[0], total + frame[blank])  # a blank: the prefix stays
            last = prefix[-1] if prefix else None
            for c in candidates:
                p = frame[c]
                longer = slot(prefix + (c,))
                if c == last:
                    longer[1] = _logaddexp(longer[1], p_blank + p)  # a repeat needs a blank in between
                    here[1] = _logaddexp(here[1], p_label + p)  # else it merges with the last label
                else:
                    longer[1] = _logaddexp(longer[1], total + p)
        scored = [(prefix, p, _logaddexp(*p)) for prefix, p in nxt.items()]
        ranked = sorted((x for x in scored if x[2] > NEG_INF), key=lambda x: x[2], reverse=True)  # reachable only
        beams = {prefix: p for prefix, p, _ in ranked[:beam_width]}
    out = [(list(prefix), _logaddexp(*p)) for prefix, p in beams.items()]
    return sorted(out, key=lambda item: item[1], reverse=True) or [([], NEG_INF)]


def beam_decode(log_probs: torch.Tensor, lengths: torch.Tensor | None = None, beam_width: int = 8,
                blank: int = 0, min_log_prob: float | None = None) -> list[list[int]]:
    """:func:`prefix_beam_search` over a batch: ``log_probs [B, F, K]``, ``lengths [B]`` -> the best
    label sequence (class indices, no blank) per item."""
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be [B, F, K], got shape {tuple(log_probs.shape)}")
    lp = log_probs.detach().float().cpu()
    n = lengths.tolist() if lengths is not None else [lp.shape[1]] * lp.shape[0]
    return [prefix_beam_search(lp[i, : int(n[i])], beam_width, blank, min_log_prob)[0][0] for i in range(lp.shape[0])]


def pad_sequences(sequences: Sequence[Sequence[int]], pad: int = -1) -> torch.Tensor:
    """Lists of ints -> ``[B, S_max]`` long padded with ``pad`` (``S_max`` >= 1, so a batch of empty
    sequences is ``[B, 1]`` of padding)."""
    width = max([len(s) for s in sequences] + [1])
    out = torch.full((len(sequences), width), pad, dtype=torch.long)
    for i, s in enumerate(sequences):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out
