"""A linear-chain conditional random field over per-token scores: ``SequenceLabeling(crf=True)``.

The network's per-token logits are the CRF's emissions ``[B, L, C]``; the CRF adds a learned score for every pair
of neighbouring labels (``transitions [C, C]``, from → to) and for the first and last label of a sequence
(``start [C]``, ``end [C]``). A sequence of labels ``y`` scores ``start[y_0] + Σ_t emissions[t, y_t] +
Σ_t transitions[y_{t-1}, y_t] + end[y_last]``; training minimises ``−log p(gold)`` (the log-partition over every
label sequence minus that over the sequences that agree with the gold labels), decoding takes the best-scoring
sequence (Viterbi). With every CRF parameter at zero -- where it starts -- the loss is the per-token cross-entropy
and the decoded labels are each token's argmax, so the CRF can only add what the label pairs carry.

Positions labelled ``IGNORE_INDEX`` inside a sequence are marginalised (any label there), so partly-labelled
sentences train as they are. ``mask [B, L]`` marks the real tokens; each row must be a prefix (padding at the end).

Lample et al. 2016 (BiLSTM-CRF) and TENER (Yan et al. 2019) put a CRF on top of their taggers.
"""

from __future__ import annotations

import torch
from torch import nn

from seqattn.labels import IGNORE_INDEX

#: the score given to a label the gold sequence rules out (finite, so a row with one allowed label has no NaN)
_RULED_OUT = -1.0e4


def check_prefix_mask(mask: torch.Tensor) -> None:
    """``ValueError`` unless every row of ``mask [B, L]`` is a prefix of real tokens (padding at the end)."""
    if mask.dim() != 2:
        raise ValueError(f"the CRF needs a token mask [B, L], got shape {tuple(mask.shape)}")
    if mask.shape[1] > 1 and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        rows = torch.nonzero((mask[:, 1:] & ~mask[:, :-1]).any(1)).flatten().tolist()
        raise ValueError(f"the CRF needs each row of the token mask to be a prefix (real tokens, then padding); "
                         f"rows {rows[:5]} have a real token after padding")


class LinearChainCRF(nn.Module):
    """Label-pair scores for ``num_tags`` labels, all zero at the start.

    Shapes: ``emissions [B, L, C]`` (any float dtype; computed in float32), ``mask [B, L]`` bool prefixes,
    ``labels [B, L]`` long with ``IGNORE_INDEX`` where there is no label.
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        if isinstance(num_tags, bool) or not isinstance(num_tags, int) or num_tags < 1:
            raise ValueError(f"num_tags must be an int >= 1, got {num_tags!r}")
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))

    def extra_repr(self) -> str:
        return f"num_tags={self.num_tags}"

    def _check(self, emissions: torch.Tensor, mask: torch.Tensor) -> None:
        if emissions.dim() != 3 or emissions.shape[-1] != self.num_tags or mask.shape != emissions.shape[:2]:
            raise ValueError(f"the CRF needs emissions [B, L, {self.num_tags}] and a mask [B, L]; got "
                             f"{tuple(emissions.shape)} and {tuple(mask.shape)}")
        check_prefix_mask(mask)

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log Σ_y exp(score(y))`` per sequence: ``[B]`` (0 for a sequence without real tokens)."""
        self._check(emissions, mask)
        return _forward_with(emissions.float(), mask, self.transitions, self.start, self.end)

    def nll(self, emissions: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``−log p(gold labels)`` summed over the sequences, divided by the number of labelled tokens (the scale
        of the per-token cross-entropy, which it equals while every CRF parameter is zero): a scalar."""
        self._check(emissions, mask)
        if labels.shape != mask.shape:
            raise ValueError(f"labels must be [B, L] like the mask {tuple(mask.shape)}, got {tuple(labels.shape)}")
        labelled = (labels != IGNORE_INDEX) & mask
        if bool((labels[~mask] != IGNORE_INDEX).any()):
            raise ValueError("labels on padding positions (mask False): label them IGNORE_INDEX (-100)")
        count = int(labelled.sum())
        em = emissions.float()
        if count == 0:
            return em.sum() * 0.0
        outside = labelled & ((labels < 0) | (labels >= self.num_tags))
        if bool(outside.any()):  # (ruled out everywhere, or clamped to class 0 below: a silently wrong loss)
            raise ValueError(f"label {int(labels[outside][0])} is out of bounds: labels must lie in "
                             f"[0, {self.num_tags}) or be IGNORE_INDEX ({IGNORE_INDEX})")
        tags = torch.arange(self.num_tags, device=em.device)
        ruled_out = labelled.unsqueeze(-1) & (tags != labels.clamp_min(0).unsqueeze(-1))  # [B, L, C]
        gold = em.masked_fill(ruled_out, _RULED_OUT)
        both = _forward_with(torch.cat([em, gold]), torch.cat([mask, mask]), self.transitions, self.start,
                             self.end)  # [2B]: one pass
        everything, agreeing = both.chunk(2)
        return (everything - agreeing).sum() / count

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The best-scoring label sequence (Viterbi): ``[B, L]`` long; padding positions repeat the last real
        token's label (the metrics ignore them)."""
        self._check(emissions, mask)
        em = emissions.float()
        b, length, c = em.shape
        if length == 0:
            return torch.zeros((b, 0), dtype=torch.long, device=em.device)
        steps = max(int(mask.sum(1).max()), 1)
        score = self.start + em[:, 0]  # [B, C]
        trans = self.transitions.unsqueeze(0)
        keep = torch.arange(c, device=em.device).expand(b, c)  # a padding step keeps each label
        pointers = []
        for t in range(1, steps):
            best, previous = (score.unsqueeze(2) + trans).max(1)  # [B, C_to]
            real = mask[:, t, None]
            score = torch.where(real, best + em[:, t], score)
            pointers.append(torch.where(real, previous, keep))
        last = (score + self.end).argmax(1)  # [B]
        path = [last]
        for previous in reversed(pointers):
            last = previous.gather(1, last.unsqueeze(1)).squeeze(1)
            path.append(last)
        path.reverse()
        out = torch.stack(path, 1)  # [B, steps]
        if steps < length:
            out = torch.cat([out, out[:, -1:].expand(b, length - steps)], 1)
        return out

    def marginals(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``p(y_t = c)`` under the CRF, ``[B, L, C]`` (each real token's row sums to 1; padding rows are 0): the
        gradient of the log-partition with respect to the emissions. Works inside ``torch.inference_mode``."""
        self._check(emissions, mask)
        with torch.inference_mode(False), torch.enable_grad():  # copies: no gradient reaches the parameters
            em = emissions.detach().float().clone().requires_grad_(True)
            params = [p.detach().clone() for p in (self.transitions, self.start, self.end)]
            logz = _forward_with(em, mask.clone(), *params)
            (grad,) = torch.autograd.grad(logz.sum(), em)
        return grad * mask.unsqueeze(-1)


def _forward_with(em: torch.Tensor, mask: torch.Tensor, transitions: torch.Tensor, start: torch.Tensor,
                  end: torch.Tensor) -> torch.Tensor:
    """The forward algorithm: the log-partition of each sequence, ``[B]`` (0 without real tokens), from
    ``em [B, L, C]`` float32, ``mask [B, L]`` prefixes and the CRF's parameters.

    In probability space, rescaled at every step (Rabiner's scaling): each step is a ``[B, C] @ [C, C]`` product, a
    multiply and a sum, where the log-space recursion's ``logsumexp`` over ``[B, C, C]`` took ~6x the time (forward
    + backward, 64 sentences of 15-30 words, 18 labels, one thread: 22.5 ms). The emissions are shifted by their
    row maximum and the parameters by theirs before ``exp``, and the shifts added back in log space."""
    lengths = mask.sum(1)
    steps = int(lengths.max()) if lengths.numel() else 0
    if steps == 0:
        return em.new_zeros(em.shape[0])
    em = em[:, :steps]
    mask = mask[:, :steps]
    shift = em.amax(-1)  # [B, L]
    probs = (em - shift.unsqueeze(-1)).exp()  # [B, L, C], each row's largest 1
    t_shift, s_shift, e_shift = transitions.max(), start.max(), end.max()
    step = (transitions - t_shift).exp()  # [C, C]
    alpha = (start - s_shift).exp() * probs[:, 0]  # [B, C]
    norms = [alpha.sum(1, keepdim=True)]  # [B, 1] each
    alphas = [alpha / norms[0]]
    for t in range(1, steps):  # past a row's end the steps run on (on padding) and are left out below
        nxt = (alphas[-1] @ step) * probs[:, t]
        norms.append(nxt.sum(1, keepdim=True))
        alphas.append(nxt / norms[-1])
    at_end = torch.stack(alphas, 1).gather(1, (lengths - 1).clamp_min(0).view(-1, 1, 1).expand(-1, 1, em.shape[-1]))
    last = (at_end.squeeze(1) * (end - e_shift).exp()).sum(1)  # [B]
    tiny = torch.finfo(em.dtype).tiny
    log_norms = torch.where(mask, torch.cat(norms, 1).clamp_min(tiny).log(), 0.0)  # [B, steps], the real steps only
    logz = (log_norms.sum(1) + last.clamp_min(tiny).log()
            + torch.where(mask, shift, 0.0).sum(1) + (lengths - 1).clamp_min(0) * t_shift + s_shift + e_shift)
    return torch.where(lengths > 0, logz, logz.new_zeros(()))
