"""The declared interfaces of the network's parts, checked once when a network is built.

A network is ``adapter (batch -> Tokens) -> encoder (Tokens -> [B, L, D]) -> head ([B, L, D] -> logits)``.
Each part is an ``nn.Module``; what the network reads from it is declared here, with its default:

Adapter (:class:`AdapterBase`):
    ``inputs``            tuple of the batch keys it reads, in call order (required, non-empty).
    ``export_inputs``     tensor-only keys for exported models when ``inputs`` are not tensors
                          (text: ``("ids", "mask")``), else None.
    ``export_inputs_from(batch) -> dict``  the ``export_inputs`` tensors of a batch (default: none).
    ``exportable``        False when the adapter builds structure in Python per batch (graphs).
    ``spec_fields``       constructor arguments filled from the data's spec (see below).
    ``check_spec(spec)``  raise ``ValueError`` when the data does not provide what it reads.
    ``example_inputs(batch=2, scale=1)``  a batch of its export inputs built from the adapter alone
                          (``seqattn.export`` without ``input=``); ``scale`` makes them longer / larger.
    ``export_description()``  what an exported model's inputs mean, for its sidecar JSON:
                          ``{"inputs": {name: {"shape": ["B", "L"], "meaning": str}}, "preprocessing": {...}}``
                          (text: the vocabulary and character table; speech: the sample rate), so that the
                          exported file can be fed without seqattn (default: none).
    ``augmented_inputs``  None (default), or after a training forward the batch keys it actually read
                          when it augments its inputs (``{"waveform": ..., "lengths": ...}``): a
                          distillation teacher reads those in place of the clean batch.
    ``vocab_tables()``    ``{parameter name: VocabTable}``: its tensors whose entries along an axis are
                          the tokens of a vocabulary of the spec (a word embedding, a character table);
                          fine-tuning (``init_from``) maps those entries by token, not by position.
                          Default: none.
    ``token_targets(batch) -> TokenTargets``  what masked-token pretraining
                          (:mod:`seqattn.objectives.masked`) predicts at each token, computed from the
                          clean batch (before any masking): ``kind`` ``"class"`` (``values [B, L]`` long,
                          ``size`` classes), ``"regression"`` (``values [B, L, F]`` float, ``size`` = F) or
                          ``"binary"`` (``values [B, L, F]`` in ``[0, 1]``: several features present at once),
                          and ``maskable [B, L]`` bool (real tokens that may be hidden: never padding).
                          ``L`` is the adapter's token axis. Default: ``ValueError`` (the adapter declares
                          no token targets).
    ``token_target_layout() -> TargetLayout``  ``(kind, size)`` of its ``token_targets`` without a batch
                          (the prediction head is sized from it). Default: the same ``ValueError``.
    ``mask_tokens(tokens, hide, vector) -> Tokens``  ``tokens`` with the content of the positions ``hide
                          [B, L]`` replaced by ``vector [D]``. Default: ``x`` rows replaced outright, right
                          when positions are added later by the encoder (text, frames); an adapter that
                          adds positions itself (2-D image positions, graph encodings) overrides it to add
                          them back, so a hidden token keeps its position.

Encoder (the core :class:`~seqattn.core.Encoder` or a baseline):
    ``dim``               model width D; ``forward(tokens, return_attention=False)``.
    ``max_length``        optional: the longest sequence it accepts (a learned positional table), None = any.

Head (:class:`HeadBase`):
    ``num_outputs``       C classes / T targets;  ``per_token``  True = ``[B, L, C]``, False = ``[B, C]``;
    ``needs_global_token``  True when it reads the global token at position 0 (``cls`` pooling).
    ``pooling``           how a head that pools reads the sequence (``mean``, ``cls``, ``attention``...),
                          None (default) for a per-token head; figures draw what it reads.

A trained model (:class:`TrainedModel`: an objective of ``seqattn.objectives``), as figures and a
distillation teacher read it:
    ``net``               the network ``adapter -> encoder -> head``;
    ``labels``            class names (index -> name) or None;
    ``confusion_matrix``  ``[C, C]`` test counts (row true, column predicted) once tested, else None.
:func:`network_of` is a trained model's ``net``, or the module itself when it is a bare network.

``spec_fields = {"constructor argument": "spec key"}`` (a class attribute) names what a part takes
from the :class:`~seqattn.datakit.spec.DataSpec` (``"num_outputs"``, ``"vocab"``,
``"sizes.node_features"``...): the network builder fills those arguments, so data never travels
through another part's config.

Classes deriving from the bases get the defaults; any other ``nn.Module`` is checked by
:func:`check_adapter` / :func:`check_head` / :func:`check_encoder`. A subclass that defines a name
close to a hook's (``export_input`` for ``export_inputs``) is an error when the class is created:
a typo in a hook is never a silent fallback to the default.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from seqattn.core.tokens import Tokens

ADAPTER_HOOKS = ("inputs", "export_inputs", "export_inputs_from", "exportable", "spec_fields", "check_spec",
                 "example_inputs", "augmented_inputs", "vocab_tables", "export_description", "token_targets",
                 "token_target_layout", "mask_tokens")
TARGET_KINDS = ("class", "regression", "binary")
HEAD_HOOKS = ("num_outputs", "per_token", "needs_global_token", "spec_fields", "pooling")


def _near_misses(cls: type, hooks: tuple[str, ...]) -> None:
    for name in vars(cls):
        if name.startswith("_") or name in hooks:
            continue
        close = difflib.get_close_matches(name, hooks, n=1, cutoff=0.85)
        if close:
            raise TypeError(f"{cls.__name__}.{name} looks like a misspelt hook {close[0]!r} of "
                            f"{cls.__mro__[1].__name__}; rename it (hooks: {', '.join(hooks)})")


@dataclass(frozen=True)
class VocabTable:
    """A tensor of an adapter whose entries along ``axis`` are the tokens of a vocabulary (entry i =
    ``tokens[i]``): fine-tuning copies each token's entry from the checkpoint's entry of the same token
    (the checkpoint's tokens: its spec's ``spec_key``); entries past ``len(tokens)`` along ``axis``
    (other input features, e.g. character features next to one-hot words) are copied by position."""

    spec_key: str  # the DataSpec field listing the tokens (``"vocab"``, ``"chars"``)
    tokens: tuple[str, ...]  # this model's token of each entry, in order
    axis: int = 0  # the tensor axis the tokens index
    label: str = "embedding"  # what the log calls the table
    unit: str = "words"  # what the log calls its tokens
    width_option: str = "model.dim"  # the option that sets the tensor's other sizes (named in a mismatch)


@dataclass(frozen=True)
class TargetLayout:
    """What an adapter's token targets are, without a batch: ``kind`` ``"class"`` with ``size`` classes,
    ``"regression"`` with ``size`` features per token, or ``"binary"`` with ``size`` yes/no features per token
    (several may be yes at once: a multi-label target, e.g. which words a document has)."""

    kind: str
    size: int

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise ValueError(f"TargetLayout.kind={self.kind!r} is not one of {TARGET_KINDS}")
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size <= 0:
            raise ValueError(f"TargetLayout.size must be a positive int (classes or features), got {self.size!r}")


@dataclass(frozen=True)
class TokenTargets:
    """What masked-token pretraining predicts at each token of a batch (an adapter's ``token_targets``).

    Attributes:
        kind: ``"class"`` | ``"regression"`` | ``"binary"``.
        values: ``[B, L]`` long class indices in ``[0, size)`` (class), ``[B, L, F]`` float (regression) or
            ``[B, L, F]`` float in ``[0, 1]`` (binary: 1 = the feature is present); any value at positions that
            are not ``maskable`` (never read).
        maskable: ``[B, L]`` bool: real tokens that may be hidden (never padding, never a global token).
        size: classes (class) or ``F`` (regression, binary).
    """

    kind: str
    values: Tensor
    maskable: Tensor
    size: int

    def __post_init__(self) -> None:
        TargetLayout(self.kind, self.size)  # validates kind and size
        m = self.maskable
        if not isinstance(m, Tensor) or m.dim() != 2 or m.dtype != torch.bool:
            raise ValueError(f"TokenTargets.maskable must be a [B, L] bool tensor, got "
                             f"{getattr(m, 'dtype', type(m).__name__)} {tuple(getattr(m, 'shape', ()))}")
        v = self.values
        if self.kind == "class":
            if v.shape != m.shape or v.dtype != torch.long:
                raise ValueError(f"class TokenTargets.values must be [B, L] = {tuple(m.shape)} long, got {v.dtype} "
                                 f"{tuple(v.shape)}")
        elif v.dim() != 3 or v.shape[:2] != m.shape or v.shape[2] != self.size or not v.dtype.is_floating_point:
            raise ValueError(f"{self.kind} TokenTargets.values must be [B, L, F={self.size}] float with [B, L] = "
                             f"{tuple(m.shape)}, got {v.dtype} {tuple(v.shape)}")
        elif self.kind == "binary" and v.numel() and bool(((v[m] < 0) | (v[m] > 1)).any()):
            raise ValueError(f"binary TokenTargets.values must lie in [0, 1] on maskable tokens (1 = present), got "
                             f"values in [{float(v[m].min())}, {float(v[m].max())}]")

    @property
    def layout(self) -> TargetLayout:
        return TargetLayout(self.kind, self.size)


def _no_targets(adapter: nn.Module) -> ValueError:
    return ValueError(f"adapter {type(adapter).__name__} declares no token targets (the token_targets(batch) and "
                      "token_target_layout() hooks): masked-token pretraining needs the adapter to say what each "
                      "hidden token's target is")


def replace_rows(tokens: Tokens, hide: Tensor, vector: Tensor) -> Tokens:
    """``tokens`` with ``x[b, l] = vector`` where ``hide [B, L]``: the default ``mask_tokens``."""
    if hide.shape != tokens.x.shape[:2]:
        raise ValueError(f"hide must be [B, L] = {tuple(tokens.x.shape[:2])}, got {tuple(hide.shape)}")
    x = torch.where(hide.unsqueeze(-1), vector.to(tokens.x.dtype), tokens.x)  # [B, L, D]
    return tokens.replace(x=x)


class AdapterBase(nn.Module):
    """Base of the modality adapters: raw batch inputs -> :class:`~seqattn.core.Tokens`."""

    inputs: tuple[str, ...] = ()
    export_inputs: tuple[str, ...] | None = None
    exportable: bool = True
    spec_fields: ClassVar[Mapping[str, str]] = {}
    augmented_inputs: Mapping[str, Tensor] | None = None  # set by an augmenting adapter's training forward

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _near_misses(cls, ADAPTER_HOOKS)

    def export_inputs_from(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The ``export_inputs`` tensors of a batch (adapters whose ``inputs`` are tensors need none)."""
        return {}

    def check_spec(self, spec: Any) -> None:
        """Raise ``ValueError`` when the data's spec does not provide what this adapter reads."""

    def example_inputs(self, batch: int = 2, scale: int = 1) -> dict[str, Any]:
        """A batch of inputs for tracing / export, from the adapter alone (no data): ``batch`` items,
        ``scale`` times the default length or size."""
        raise ValueError(f"{type(self).__name__} has no example inputs: export it with input=<a file in the task's "
                         "predict format>")

    def vocab_tables(self) -> dict[str, VocabTable]:
        """``{parameter name (in this module): VocabTable}`` of the tensors indexed by vocabulary tokens."""
        return {}

    def export_description(self) -> dict[str, Any]:
        """What the exported model's inputs mean and how raw inputs become them (the export sidecar):
        ``{"inputs": {name: {"shape": [axis names], "meaning": str}}, "preprocessing": {...}}``."""
        return {"inputs": {}, "preprocessing": {}}

    def token_targets(self, batch: Mapping[str, Any]) -> TokenTargets:
        """What masked-token pretraining predicts at each token of ``batch``, from the clean batch."""
        raise _no_targets(self)

    def token_target_layout(self) -> TargetLayout:
        """``(kind, size)`` of :meth:`token_targets` (sizes the prediction head)."""
        raise _no_targets(self)

    def mask_tokens(self, tokens: Tokens, hide: Tensor, vector: Tensor) -> Tokens:
        """``tokens`` with the content at ``hide [B, L]`` replaced by ``vector [D]``, positions kept."""
        return replace_rows(tokens, hide, vector)


class HeadBase(nn.Module):
    """Base of the heads: encoder output ``[B, L, D]`` -> predictions."""

    num_outputs: int
    per_token: bool = True
    needs_global_token: bool = False
    pooling: str | None = None
    spec_fields: ClassVar[Mapping[str, str]] = {"num_outputs": "num_outputs"}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _near_misses(cls, HEAD_HOOKS)


def check_adapter(adapter: nn.Module) -> None:
    """``ValueError`` unless ``adapter`` declares its ``inputs`` (a non-empty tuple of batch keys) and
    its optional hooks have the declared types."""
    inputs = getattr(adapter, "inputs", None)
    if not isinstance(inputs, (tuple, list)) or not inputs or not all(isinstance(k, str) for k in inputs):
        raise ValueError(f"adapter {type(adapter).__name__} must declare the batch keys it reads as a non-empty "
                         f"tuple `inputs`, got {inputs!r}")
    export = getattr(adapter, "export_inputs", None)
    if export is not None and (not isinstance(export, (tuple, list)) or not all(isinstance(k, str) for k in export)):
        raise ValueError(f"adapter {type(adapter).__name__}.export_inputs must be a tuple of batch keys or None, "
                         f"got {export!r}")
    if export and not callable(getattr(adapter, "export_inputs_from", None)):
        raise ValueError(f"adapter {type(adapter).__name__} declares export_inputs but no export_inputs_from(batch)")
    if not callable(adapter):
        raise ValueError(f"adapter {type(adapter).__name__} is not callable")


def check_head(head: nn.Module) -> None:
    n = getattr(head, "num_outputs", None)
    if not isinstance(n, int) or n <= 0:
        raise ValueError(f"head {type(head).__name__} must have a positive int `num_outputs`, got {n!r}")
    if not isinstance(getattr(head, "per_token", None), bool):
        raise ValueError(f"head {type(head).__name__} must say whether it predicts per token (`per_token` bool)")


def check_encoder(encoder: nn.Module) -> None:
    dim = getattr(encoder, "dim", None)
    if not isinstance(dim, int) or dim <= 0:
        raise ValueError(f"encoder {type(encoder).__name__} must have a positive int `dim` (its width), got {dim!r}")


def encoder_max_length(encoder: nn.Module) -> int | None:
    """The encoder's optional ``max_length`` (None when it takes any length)."""
    value = getattr(encoder, "max_length", None)
    return int(value) if value is not None else None


def adapter_hooks(adapter: nn.Module) -> dict[str, Any]:
    """The optional adapter hooks with their defaults (read once, after :func:`check_adapter`)."""
    return {
        "export_inputs": tuple(getattr(adapter, "export_inputs", None) or ()) or None,
        "exportable": bool(getattr(adapter, "exportable", True)),
    }


def vocab_tables(adapter: nn.Module | None) -> dict[str, VocabTable]:
    """The adapter's ``vocab_tables()`` hook (none for a module that does not define it, or no adapter)."""
    hook = getattr(adapter, "vocab_tables", None)
    return dict(hook()) if callable(hook) else {}


def token_targets(adapter: nn.Module, batch: Mapping[str, Any]) -> TokenTargets:
    """The adapter's ``token_targets(batch)`` hook; ``ValueError`` when it declares none."""
    hook = getattr(adapter, "token_targets", None)
    if not callable(hook):
        raise _no_targets(adapter)
    targets = hook(batch)
    if not isinstance(targets, TokenTargets):
        raise ValueError(f"{type(adapter).__name__}.token_targets must return TokenTargets, got "
                         f"{type(targets).__name__}")
    return targets


def token_target_layout(adapter: nn.Module) -> TargetLayout:
    """The adapter's ``token_target_layout()`` hook; ``ValueError`` when it declares none."""
    hook = getattr(adapter, "token_target_layout", None)
    if not callable(hook):
        raise _no_targets(adapter)
    return hook()


def mask_tokens(adapter: nn.Module, tokens: Tokens, hide: Tensor, vector: Tensor) -> Tokens:
    """The adapter's ``mask_tokens`` hook (default :func:`replace_rows`)."""
    hook = getattr(adapter, "mask_tokens", None)
    return hook(tokens, hide, vector) if callable(hook) else replace_rows(tokens, hide, vector)


def augmented_inputs(adapter: nn.Module) -> Mapping[str, Tensor] | None:
    """The adapter's ``augmented_inputs`` hook: the batch keys its last training forward read, or None
    (the default of :class:`AdapterBase`, and of any module that does not define it)."""
    return getattr(adapter, "augmented_inputs", AdapterBase.augmented_inputs)


def head_pooling(head: nn.Module) -> str | None:
    """The head's ``pooling`` hook (None: a per-token head, the default of :class:`HeadBase`)."""
    return getattr(head, "pooling", HeadBase.pooling)


@runtime_checkable
class TrainedModel(Protocol):
    """A trained model as figures and a distillation teacher read it (every ``seqattn.objectives``
    objective): its network, its class names, and the test confusion matrix once tested."""

    net: nn.Module
    labels: list[str] | None
    confusion_matrix: Tensor | None  # [C, C] counts (row true, column predicted); None before a test


def network_of(model: nn.Module) -> nn.Module:
    """The network ``adapter -> encoder -> head`` that ``model`` runs: a trained model's ``net``, else
    ``model`` itself (a bare network)."""
    return model.net if isinstance(model, TrainedModel) else model

