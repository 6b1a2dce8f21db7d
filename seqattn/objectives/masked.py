"""Masked-token modelling: pretraining on unlabelled data by hiding tokens and predicting them.

One step (:meth:`MaskedModelling.forward`), for any adapter that declares token targets
(:mod:`seqattn.model.protocols`: ``token_targets``, ``token_target_layout``, ``mask_tokens``):

1. ``targets = adapter.token_targets(batch)``, from the **clean** batch: ``values`` ``[B, L]`` long
   (``kind="class"``) or ``[B, L, F]`` float (``kind="regression"``; ``kind="binary"``: in ``[0, 1]``, several
   features present at once), ``maskable [B, L]`` bool;
2. :func:`choose_hidden` picks ``hide [B, L]`` among the maskable positions: ``ceil(mask_ratio · n / span)``
   runs of ``span`` consecutive positions per sequence of ``n`` maskable tokens (at least one);
3. the adapter's tokens at ``hide`` get the learned ``mask_vector [D]`` in place of their content
   (``adapter.mask_tokens``), before any subsampling, global token and the encoder. Positions survive:
   an encoder positional encoding is added inside the encoder, after this replacement; an adapter
   that adds positions itself puts them back in its ``mask_tokens`` hook;
4. the network's per-token head predicts each position's target from the encoder output; only the
   hidden positions are scored: cross-entropy for ``class`` targets (``train/acc``, ``val/acc``:
   accuracy over hidden tokens), mean squared error over the features for ``regression``, binary
   cross-entropy per feature (a multi-label target) for ``binary``.

``prior_bias=True`` starts the head at the training targets' prior: before the first training step (not
when resuming) the mean of the targets over the maskable positions of up to ``prior_batches`` training
batches sets the head's output bias (``binary``: each feature's log-odds; ``class``: the classes' log
frequencies; ``regression``: the mean) and zeroes the output layer's weight, so the first loss is the
prior's (the best constant prediction's) and the network learns the residual: a bag-of-words target of
1,433 words at 1-5 % each otherwise spends its first hundreds of steps learning the biases.
``regression_loss="cosine"`` scores a regression target by GraphMAE's scaled cosine error,
``(1 - cos(prediction, target)) ** cosine_gamma`` per hidden token: the direction of the feature vector, not
its scale, and, with ``gamma > 1``, easy tokens down-weighted.

The loss is a mean over hidden tokens (the epoch loss weights each batch by them). Validation and
test hide positions chosen by a hash of each sequence's targets and ``eval_seed``
(:func:`content_scores`; regression targets by each position's largest feature, so that float rounding
does not move them): the same every epoch, and the same whatever the batch size, the batch
order or the number of processes, so ``val/loss`` compares epochs and a DDP test equals a
one-process test; training draws from the global generator (seeded by the run). A batch may carry
``score_mask [B, L]`` bool: the positions this process scores. Positions are hidden as without it,
but only hidden positions inside it count in the loss and metrics; a data module that gives every
process the same whole item (one graph) splits the scoring this way, so that the hidden set, and so
every process's input, is the one a single process sees.

The head's size is the adapter's ``token_target_layout().size`` (not the data's classes). The mask
vector lives in the objective (``mask_vector``), not in ``net``: fine-tuning (``init_from``) loads the
adapter and encoder, never it. A checkpoint has no head to predict a task with: ``seqattn.load()``
refuses it (:attr:`MaskedModelling.no_prediction`).

Letters: b batch, l tokens, d width, c classes, f features.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from seqattn.datakit.spec import DataSpec
from seqattn.model.build import build_network, build_part
from seqattn.model.protocols import TargetLayout, TokenTargets, mask_tokens, token_target_layout, token_targets
from seqattn.objectives.base import Objective
from seqattn.objectives.predictions import Prediction


_M1, _M2, _GOLD = 0xBF58476D1CE4E5B9 - 2**64, 0x94D049BB133111EB - 2**64, 0x9E3779B97F4A7C15 - 2**64


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A splitmix64-style integer hash of an int64 tensor, elementwise (wrapping arithmetic)."""
    x = x + _GOLD
    x = (x ^ (x >> 30)) * _M1
    x = (x ^ (x >> 27)) * _M2
    return x ^ (x >> 31)


def content_scores(targets: TokenTargets, seed: int = 0) -> torch.Tensor:
    """``[B, L]`` float64 in ``[0, 1)``: a deterministic score per position from a hash of the position,
    ``seed`` and the sequence's maskable targets, so the same sequence gets the same scores in any batch.

    ``class`` and ``binary`` targets are hashed value by value (they are exact). ``regression`` targets
    (audio frames, image patches: floats that another CPU, BLAS or torch build rounds differently in the
    last bits) are hashed by each position's largest feature's index (a frame's loudest mel bin, a patch's
    brightest pixel value's place): float rounding (~1e-6) changes it only where two features tie to
    within it. The key before 2026-12-07 (every value quantised to 2^-16) moved the hidden positions of
    nearly every clip under such rounding, so the same model was scored on another sample. A single
    regression feature (``F = 1``) gives no content key: sequences with the same maskable positions then
    hide the same ones."""
    values = targets.values
    if targets.kind == "regression":
        key = values.argmax(-1)  # [B, L]
    elif targets.kind == "binary":
        q = torch.round(values.double() * 65536).long()  # [B, L, F]
        f = torch.arange(q.shape[-1], device=q.device)
        key = _mix(q + f * 1_000_003).sum(-1)  # [B, L]
    else:
        key = values.long()
    length = key.shape[1]
    pos = torch.arange(length, device=key.device)
    token = _mix(_mix(key) + pos)  # [B, L]
    row = torch.where(targets.maskable, token, torch.zeros_like(token)).sum(1, keepdim=True)  # [B, 1]
    x = _mix(row ^ _mix(pos + int(seed) * 7919))  # [B, L]
    return (x & ((1 << 53) - 1)).double() / float(1 << 53)


def choose_hidden(maskable: torch.Tensor, ratio: float, span: int = 1,
                  generator: torch.Generator | None = None, scores: torch.Tensor | None = None) -> torch.Tensor:
    """Positions to hide: ``maskable [B, L]`` bool -> ``hide [B, L]`` bool, a subset of ``maskable``.

    Per sequence with ``n`` maskable positions, ``k = min(n, ceil(ratio · n / span))`` span starts are
    drawn uniformly among them (at least one when ``n > 0``); each hides itself and the next
    ``span - 1`` positions that are maskable. Random numbers come from ``generator`` (CPU) when given;
    ``scores [B, L]`` in ``[0, 1)`` (e.g. :func:`content_scores`) replace them (the lowest are drawn).
    """
    if maskable.dim() != 2 or maskable.dtype != torch.bool:
        raise ValueError(f"maskable must be [B, L] bool, got {maskable.dtype} {tuple(maskable.shape)}")
    n = maskable.sum(1)  # [B]
    k = torch.minimum(n, torch.ceil(n.double() * ratio / span).long())  # [B] span starts
    if scores is None:
        scores = torch.rand(maskable.shape, generator=generator).to(maskable.device)  # [B, L]
    elif scores.shape != maskable.shape:
        raise ValueError(f"scores must be [B, L] = {tuple(maskable.shape)}, got {tuple(scores.shape)}")
    scores = scores.masked_fill(~maskable, 2.0)  # never drawn before a maskable position
    rank = scores.argsort(1).argsort(1)  # [B, L] rank of each position's score in its row
    starts = (rank < k.unsqueeze(1)) & maskable  # [B, L]
    hide = starts.clone()
    for j in range(1, min(span, maskable.shape[1])):
        hide[:, j:] |= starts[:, :-j]  # a start at l hides l .. l + span - 1
    return hide & maskable


class MaskedModelling(Objective):
    """Predict hidden tokens' targets (declared by the adapter) from their context.

    Args (besides :class:`~seqattn.objectives.base.Objective`'s):
        mask_ratio: fraction of each sequence's maskable tokens to hide, in ``(0, 1]``.
        span: hide runs of this many consecutive tokens (1: single tokens; frames of a signal: longer).
        eval_seed: seed of the positions hidden at validation / test (the same every epoch).
        prior_bias: start the head's output at the training targets' prior (see the module docstring).
        prior_batches: at most this many training batches estimate that prior.
        regression_loss: ``mse`` (mean squared error) or ``cosine`` (scaled cosine error) for regression targets.
        cosine_gamma: the scaled cosine error's exponent (>= 1).
    """

    no_prediction = ("it is a pretraining checkpoint (masked-token modelling): its head predicts hidden tokens' "
                     "training targets, not a task's labels, so it has nothing to predict with")

    def __init__(self, *args: Any, mask_ratio: float = 0.15, span: int = 1, eval_seed: int = 0,
                 prior_bias: bool = False, prior_batches: int = 64, regression_loss: str = "mse",
                 cosine_gamma: float = 2.0, **kwargs: Any) -> None:
        if not (isinstance(mask_ratio, (int, float)) and 0.0 < float(mask_ratio) <= 1.0):
            raise ValueError(f"mask_ratio must be in (0, 1] (the fraction of tokens hidden), got {mask_ratio!r}")
        if not isinstance(span, int) or isinstance(span, bool) or span < 1:
            raise ValueError(f"span must be an int >= 1 (consecutive tokens hidden together), got {span!r}")
        if regression_loss not in ("mse", "cosine"):
            raise ValueError(f"regression_loss must be 'mse' or 'cosine', got {regression_loss!r}")
        if not float(cosine_gamma) >= 1.0:
            raise ValueError(f"cosine_gamma must be >= 1, got {cosine_gamma!r}")
        if not isinstance(prior_batches, int) or isinstance(prior_batches, bool) or prior_batches < 1:
            raise ValueError(f"prior_batches must be an int >= 1, got {prior_batches!r}")
        super().__init__(*args, **kwargs)
        self.mask_ratio, self.span, self.eval_seed = float(mask_ratio), int(span), int(eval_seed)
        self.prior_bias, self.prior_batches = bool(prior_bias), int(prior_batches)
        self.regression_loss, self.cosine_gamma = regression_loss, float(cosine_gamma)
        if not self.net.head.per_token:  # declared by every head (checked when the network is built)
            raise ValueError(f"masked modelling predicts every hidden token: it needs a per-token head (head=masked), "
                             f"got {type(self.net.head).__name__} with per_token=False")
        self.mask_vector = nn.Parameter(torch.randn(self.net.encoder.dim) * 0.02)  # [D]

    # --- building ----------------------------------------------------------------------
    @property
    def layout(self) -> TargetLayout:
        """What the adapter's targets are (``kind``, ``size``)."""
        return token_target_layout(self.net.adapter)

    def build_net(self, net: dict, spec: DataSpec | None) -> nn.Module:
        """The network with its head sized by the adapter's target layout (not by the data's classes)."""
        net = dict(net)
        if net.get("adapter") is None or net.get("head") is None:
            raise ValueError(f"masked modelling needs a network with an adapter and a head, got keys {sorted(net)}")
        adapter = build_part(net["adapter"], spec, "adapter")
        layout = token_target_layout(adapter)
        head = net["head"]
        if isinstance(head, dict):
            given = head.get("num_outputs")
            if given is not None and int(given) != layout.size:
                raise ValueError(f"head.num_outputs={given} contradicts the adapter's token targets ({layout.kind}, "
                                 f"{layout.size}); leave it unset: masked modelling sizes the head from the adapter")
            head = build_part({**head, "num_outputs": layout.size}, None, "head")
        return build_network({**net, "adapter": adapter, "head": head}, spec)

    def make_metrics(self) -> MetricCollection:
        layout = self.layout
        if layout.kind == "class":
            # unchecked inputs (argmaxes; the cross-entropy loss checks the targets first), as task labeling's metrics
            return MetricCollection({"acc": MulticlassAccuracy(layout.size, average="micro", validate_args=False)})
        return MetricCollection({})

    # --- the prior ---------------------------------------------------------------------
    def output_layer(self) -> nn.Linear:
        """The head's last linear layer with one output per target (whose bias :meth:`set_prior` sets)."""
        size = self.layout.size
        layers = [m for m in self.net.head.modules() if isinstance(m, nn.Linear) and m.out_features == size]
        if not layers or layers[-1].bias is None:
            raise ValueError(f"prior_bias needs a head whose last layer is an nn.Linear with {size} outputs and a bias; "
                             f"{type(self.net.head).__name__} has none")
        return layers[-1]

    def target_prior(self, batches) -> torch.Tensor:
        """``[C|F]``: the targets' mean over the maskable positions of ``batches`` (summed over every process),
        as logits: log-odds (binary), log frequencies (class), the mean itself (regression)."""
        layout, total, count = self.layout, None, None
        for batch in batches:
            targets = token_targets(self.net.adapter, batch)
            values = targets.values[targets.maskable]  # [N] or [N, F]
            if targets.kind == "class":
                values = F.one_hot(values.long(), layout.size)
            part, n = values.double().sum(0), torch.tensor(float(values.shape[0]), dtype=torch.float64)
            total, count = (part, n) if total is None else (total + part, count + n)
        if total is None:
            raise ValueError("prior_bias: the training loader gave no batch")
        strategy = getattr(getattr(self, "_trainer", None), "strategy", None)
        if strategy is not None:  # every process's share: the same bias on every process
            total = strategy.reduce(total.to(self.device), reduce_op="sum").cpu()
            count = strategy.reduce(count.to(self.device), reduce_op="sum").cpu()
        if float(count) <= 0:
            raise ValueError("prior_bias: the training batches have no maskable position")
        mean = total / count
        if layout.kind == "regression":
            return mean.float()
        eps = 0.5 / float(count)  # a target never (or always) seen: half an observation, not an infinite logit
        mean = mean.clamp(eps, 1.0 - eps)
        return (mean.log() if layout.kind == "class" else torch.logit(mean)).float()

    @torch.no_grad()
    def set_prior(self, prior: torch.Tensor) -> None:
        """The head's output starts at ``prior`` for every token: its last layer's bias := ``prior``, weight := 0."""
        layer = self.output_layer()
        layer.bias.copy_(prior.to(layer.bias))
        layer.weight.zero_()

    def on_train_start(self) -> None:
        if not self.prior_bias or self.global_step > 0:  # a resumed run keeps its trained head
            return
        with _random_states_kept():  # the extra loader's shuffle and worker seeds: not drawn from the run's streams
            loader = self.trainer.datamodule.train_dataloader() if self.trainer.datamodule is not None \
                else self.trainer.train_dataloader
            batches = (self._apply_batch_transfer_handler(b) for _, b in zip(range(self.prior_batches), loader))
            self.set_prior(self.target_prior(batches))

    # --- one step ----------------------------------------------------------------------

    def hide_tokens(self, tokens, hide: torch.Tensor):
        """The adapter's tokens with ``hide [B, L]`` replaced by the mask vector (the adapter's hook)."""
        if tuple(tokens.x.shape[:2]) != tuple(hide.shape):
            raise ValueError(f"{type(self.net.adapter).__name__}.token_targets gave [B, L] = {tuple(hide.shape)} but "
                             f"its tokens are {tuple(tokens.x.shape[:2])}: targets must be one per adapter token")
        return mask_tokens(self.net.adapter, tokens, hide, self.mask_vector)

    def forward(self, batch: dict, return_attention: bool | list[int] = False,
                hide: torch.Tensor | None = None) -> dict:
        """A masked pass: ``logits [B, L, C|F]``, ``mask [B, L]``, ``targets`` (:class:`TokenTargets`, from
        the clean batch), ``hide [B, L]`` (the positions hidden; given, or chosen here), ``scored [B, L]``
        (the hidden positions this process scores: ``hide & batch["score_mask"]`` when the batch has one)."""
        targets = token_targets(self.net.adapter, batch)  # before any masking
        if targets.layout != self.layout:
            raise ValueError(f"{type(self.net.adapter).__name__}.token_targets gave {targets.layout}, its layout "
                             f"says {self.layout}")
        if hide is None:  # training: random; evaluation: by content, the same in every batch and process
            scores = None if self.training else content_scores(targets, self.eval_seed)
            hide = choose_hidden(targets.maskable, self.mask_ratio, self.span, scores=scores)
        hide = hide & targets.maskable
        out = self.net(batch, return_attention=return_attention, transform=lambda t: self.hide_tokens(t, hide))
        if tuple(out["logits"].shape[:2]) != tuple(hide.shape):
            raise ValueError(f"the network predicts {tuple(out['logits'].shape[:2])} tokens for {tuple(hide.shape)} "
                             "targets: masked modelling needs one prediction per adapter token (no subsampling)")
        scored = hide
        if batch.get("score_mask") is not None:
            share = batch["score_mask"]
            if tuple(share.shape) != tuple(hide.shape):
                raise ValueError(f"score_mask must be [B, L] = {tuple(hide.shape)} bool (one per adapter token), "
                                 f"got {tuple(share.shape)}")
            scored = hide & share.to(device=hide.device, dtype=torch.bool)
        out.update(targets=targets, hide=hide, scored=scored)
        return out

    def loss(self, out: dict, batch: dict) -> torch.Tensor:
        """Mean over hidden tokens: cross-entropy (class), squared error averaged over features
        (regression) or binary cross-entropy averaged over features (binary: ``logits`` are each feature's
        log-odds); a regression target with ``regression_loss="cosine"``: the scaled cosine error. Unhidden
        positions add nothing, not even gradient; nor do hidden ones outside
        ``score_mask``."""
        logits, hide, targets = out["logits"], out["scored"], out["targets"]
        if not bool(hide.any()):
            return logits.sum() * 0.0
        predicted = logits[hide]  # [N, C] or [N, F]
        wanted = targets.values[hide]  # [N] or [N, F]
        if targets.kind == "class":
            return F.cross_entropy(predicted.float(), wanted)
        if targets.kind == "binary":
            return F.binary_cross_entropy_with_logits(predicted.float(), wanted.float())
        if self.regression_loss == "cosine":  # GraphMAE's scaled cosine error
            cos = F.cosine_similarity(predicted.float(), wanted.float(), dim=-1, eps=1e-8)
            return (1.0 - cos).pow(self.cosine_gamma).mean()
        return F.mse_loss(predicted.float(), wanted.float())

    def loss_weight(self, out: dict, batch: dict) -> int:
        return int(out["scored"].sum())

    def predictions(self, out: dict, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Scored hidden tokens only: ``(argmax [N], target [N])`` for class targets; empty for regression and
        binary."""
        hide, targets = out["scored"], out["targets"]
        if targets.kind == "class":
            return out["logits"][hide].argmax(-1), targets.values[hide]
        empty = torch.zeros(0, dtype=torch.long, device=hide.device)
        return empty, empty

    def predict_step(self, batch: dict, batch_idx: int) -> Prediction:
        raise ValueError(f"{self.no_prediction}; fine-tune it first: python -m seqattn.run task=<a labelled task> "
                         "init_from=<this checkpoint>")


__all__ = ["MaskedModelling", "TokenTargets", "choose_hidden", "content_scores"]


@contextlib.contextmanager
def _random_states_kept() -> Iterator[None]:
    """The global random states (torch, CUDA, numpy, python) as they were on entry, restored on exit: work done
    inside (an extra pass over a shuffled loader) leaves the training's random streams where they were."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)
