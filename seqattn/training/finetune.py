"""Fine-tuning: start a run from another run's weights (``init_from=PATH.ckpt``).

What is loaded (``python -m seqattn.run task=... init_from=run/checkpoints/best.ckpt``):

- the adapter and the encoder (every ``net.*`` tensor except the head's), shapes must match;
- a tensor indexed by a vocabulary (the adapter's ``vocab_tables()`` hook: a word embedding, a
  character table) is mapped **by token**, not by position: each token's row is the checkpoint's row
  of that token (the checkpoint's tokens are its spec's, ``hyper_parameters["spec"]["vocab"]`` /
  ``["chars"]``), tokens the checkpoint lacks keep their fresh initialisation, and the counts are
  logged (``embedding: 52 of 54 words from the checkpoint, 2 new (initialised), 3 checkpoint words
  unused``); the other sizes (the width) must match;
- the head (and the global token) only when the checkpoint was trained by the same objective class
  and the label set is the same (names and count); otherwise they keep their fresh initialisation
  (a pretraining checkpoint, e.g. masked-token modelling, gives its adapter and encoder, never its head);
  so do the objective's label-indexed tensors outside the network (``objective.crf=true``'s tag-pair
  scores, ``crf.*``): loaded when both runs have them and the head loads; a CRF the checkpoint has and
  this run does not use (``crf=false``) is named in the log;
- the encoder's width (``model.dim``), positional scheme (``model.positional``) and layer-norm order
  (``model.norm_first``) must be the checkpoint's: a difference is a ``ValueError`` naming both (a
  parameter-free scheme such as rotary vs sinusoidal would otherwise load silently and mean something else);
- a learned positional table of another length is interpolated to the new ``model.max_len``
  (``finetune.resize_positional``);
- any other difference (a shape, a tensor the checkpoint lacks or has in excess) is a
  ``ValueError`` listing every such tensor.

Then ``freeze=[adapter, encoder]`` stops training those parts and ``finetune.pretrained_lr_mult``
scales the learning rate of the loaded tensors (``Objective.lr_multipliers``).

``finetune.vocabulary=checkpoint`` (default ``data``) makes the run's data use the checkpoint's
vocabulary (its spec's ``vocab`` and ``chars``) instead of building one from its own training split
(:func:`use_checkpoint_vocabulary`, before the data's ``setup()``): after pretraining on many unlabelled
sentences, a fine-tune on a few labelled ones then keeps every pretrained word (its index and its row)
instead of reading the words its labelled sentences lack as ``<unk>``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from seqattn.model.build import locate
from seqattn.model.protocols import VocabTable, network_of, vocab_tables
from seqattn.training.checkpoint import read_checkpoint

log = logging.getLogger("seqattn.training.finetune")

NET = "net."
TASK_SPECIFIC = ("net.head.", "net.global_token")  # re-initialised when the label set differs
# the objective's own tensors indexed by the labels (objective.crf=true: tag-pair scores), outside net.*: loaded with
# the head (same objective class, same label set), else left fresh; a checkpoint's that this model lacks is logged
LABEL_TENSORS = ("crf.",)
FREEZABLE = ("adapter", "encoder", "head", "global_token")
VOCABULARIES = ("data", "checkpoint")  # finetune.vocabulary: built from this run's training split | init_from's


@dataclass(frozen=True)
class FinetuneOptions:
    """What to start from and what to train (``init_from``, ``freeze``, ``finetune.*``; defaults in
    conf/config.yaml, built by ``seqattn.run``)."""

    init_from: str | None  # a seqattn checkpoint whose adapter + encoder are loaded; None = a fresh model
    freeze: tuple[str, ...]  # parts left untrained, among FREEZABLE
    pretrained_lr_mult: float  # learning rate of the loaded tensors = optimizer.lr * this (> 0)
    resize_positional: bool  # interpolate a learned positional table to the new model.max_len
    vocabulary: str = "data"  # among VOCABULARIES: the data's own vocabulary, or init_from's checkpoint's
    adapter: Mapping[str, Any] | None = None  # this run's adapter config: compared with the checkpoint's

    def __post_init__(self) -> None:
        if self.vocabulary not in VOCABULARIES:
            raise ValueError(f"finetune.vocabulary={self.vocabulary!r} is not one of {VOCABULARIES} (data: built "
                             "from this run's training split; checkpoint: the init_from checkpoint's)")


def _task_specific(name: str) -> bool:
    return name.startswith(TASK_SPECIFIC)


def _is_learned_positional(name: str, model_tensor: torch.Tensor, source: torch.Tensor) -> bool:
    return (name.endswith("positional.weight") and model_tensor.dim() == source.dim() == 2
            and model_tensor.shape[1] == source.shape[1])


def resize_positional(table: torch.Tensor, length: int) -> torch.Tensor:
    """A learned positional table ``[L_old, D]`` -> ``[length, D]`` by linear interpolation along positions
    (the first and last positions are kept; ``length == L_old`` returns it unchanged)."""
    if table.shape[0] == length:
        return table.clone()
    resized = F.interpolate(table.T[None].float(), size=length, mode="linear", align_corners=True)  # [1, D, L]
    return resized[0].T.to(table.dtype).contiguous()  # [length, D]


def _model_tables(model: nn.Module) -> dict[str, VocabTable]:
    """``{full tensor name: VocabTable}`` of the model's adapter (``net.adapter.<name>``)."""
    adapter = getattr(network_of(model), "adapter", None)
    return {f"{NET}adapter.{name}": table for name, table in vocab_tables(adapter).items()}


def map_by_token(name: str, table: VocabTable, fresh: torch.Tensor, source: torch.Tensor,
                 source_tokens: Sequence[str] | None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The tensor ``name`` of the new model with each token's entry (along ``table.axis``) copied from the
    checkpoint's entry of that token; tokens the checkpoint lacks keep ``fresh``'s entry; entries past
    the tokens (other input features) are copied by position.

    Args:
        fresh: the new model's tensor (its initialisation), ``table.tokens`` along ``table.axis``.
        source: the checkpoint's tensor, ``source_tokens`` along ``table.axis``.

    Returns:
        ``(tensor shaped like fresh, {"from_checkpoint", "total", "new", "unused", "new_tokens"})``.

    Raises:
        ValueError: the checkpoint lists no tokens, its tensor does not hold them, or a size other
            than the tokens' differs (naming both shapes and ``table.width_option``).
    """
    if source_tokens is None:
        raise ValueError(f"{name}: the checkpoint lists no {table.unit} (hyper_parameters.spec.{table.spec_key}), so "
                         "its rows cannot be matched to this model's by token")
    axis, old_tokens = table.axis, list(source_tokens)
    new_part, old_part = fresh.movedim(axis, 0), source.movedim(axis, 0)  # [tokens (+ rest), ...]
    if old_part.shape[1:] != new_part.shape[1:]:
        raise ValueError(f"{name}: checkpoint {tuple(source.shape)} vs model {tuple(fresh.shape)}: the {table.label} "
                         f"width differs; set {table.width_option} as in the checkpoint's run")
    rest = new_part.shape[0] - len(table.tokens)
    if old_part.shape[0] - len(old_tokens) != rest or rest < 0:
        raise ValueError(f"{name}: checkpoint {tuple(source.shape)} for {len(old_tokens)} {table.unit} vs model "
                         f"{tuple(fresh.shape)} for {len(table.tokens)}: the entries besides the {table.unit} differ "
                         "(another adapter configuration?)")
    where = {token: i for i, token in enumerate(old_tokens)}
    out = new_part.clone()
    shared = [(i, where[token]) for i, token in enumerate(table.tokens) if token in where]
    if shared:
        rows, old_rows = zip(*shared)
        out[list(rows)] = old_part[list(old_rows)]
    if rest:
        out[len(table.tokens):] = old_part[len(old_tokens):]
    new_tokens = [t for t in table.tokens if t not in where]
    counts = {"from_checkpoint": len(shared), "total": len(table.tokens), "new": len(new_tokens),
              "unused": len(old_tokens) - len(shared), "new_tokens": new_tokens}
    return out.movedim(0, axis).contiguous(), counts


def check_encoder_fits(model: nn.Module, source_net: Mapping[str, Any] | None) -> None:
    """``ValueError`` naming both values when the checkpoint's encoder config (``source_net["encoder"]``:
    its ``dim``, ``positional``, ``norm_first``) differs from ``model``'s encoder (``dim``, ``positional_name``,
    ``norm_first``); an attribute either side lacks (a baseline encoder, an old checkpoint) is not compared."""
    encoder = getattr(network_of(model), "encoder", None)
    source = (source_net or {}).get("encoder") if isinstance(source_net, Mapping) else None
    if encoder is None or not isinstance(source, Mapping):
        return
    pairs = (("dim", "dim", "width", "model.dim"), ("positional", "positional_name", "positional scheme",
                                                      "model.positional"),
             ("norm_first", "norm_first", "layer-norm order", "model.norm_first"))  # pre- vs post-norm: the same
    # tensors but for the final norm, each read another way
    for key, attr, what, option in pairs:
        old, new = source.get(key), getattr(encoder, attr, None)
        if old is not None and new is not None and old != new:
            raise ValueError(f"init_from: the encoder's {what} differs: the checkpoint has {option}={old!r}, this model "
                             f"{option}={new!r}; set {option}={old!r} to fine-tune from it (or train from scratch)")


def _same_objective(model: nn.Module, source_objective: str | None) -> bool:
    """Whether the checkpoint's objective (its ``_target_``) is ``model``'s class (unknown: assumed so)."""
    if not source_objective:
        return True
    try:
        return locate(source_objective) is type(model)
    except ValueError:
        return False


def init_from_state(
    model: nn.Module,
    state_dict: dict[str, torch.Tensor],
    source_labels: Sequence[str] | None,
    resize_positional_table: bool,
    source_spec: Mapping[str, Any] | None = None,
    source_objective: str | None = None,
    source_net: Mapping[str, Any] | None = None,
    adapter_differences: Sequence[str] = (),
) -> dict[str, Any]:
    """Copy a pretrained objective's ``net.*`` tensors into ``model`` (an ``Objective``).

    Args:
        model: the new objective (its ``net`` built for the new data: head sized for its labels).
        state_dict: the pretrained objective's ``state_dict`` (checkpoint ``["state_dict"]``).
        source_labels: the pretrained model's label names (None if it had none).
        resize_positional_table: interpolate a learned positional table of another length.
        source_spec: the pretrained model's spec (checkpoint ``["hyper_parameters"]["spec"]``): the tokens
            of its vocabulary tables (needed when the adapter declares ``vocab_tables()``).
        source_objective: the pretrained model's objective ``_target_`` (checkpoint ``seqattn_config``):
            another class than ``model``'s (pretraining -> a labelled task) never gives its head.
        source_net: the pretrained model's network config (``hyper_parameters["net"]``): its encoder's
            width and positional scheme must be ``model``'s (:func:`check_encoder_fits`).
        adapter_differences: this run's adapter settings that differ from the checkpoint's
            (:func:`input_differences`); a shape error names them (a feature width such as ``n_mels``).

    Returns:
        ``{"loaded": [...], "new": [...], "resized": [...]}`` tensor names (``resized`` are loaded too)
        and ``"vocab"``: ``{tensor name: counts}`` of the tensors mapped by token (:func:`map_by_token`).

    Raises:
        ValueError: listing every tensor outside the head whose shape differs (for a vocabulary
            table: whose width differs), that the checkpoint lacks or that the model lacks.
    """
    own = model.state_dict()
    target = {k: v for k, v in own.items() if k.startswith(NET)}
    source = {k: v for k, v in state_dict.items() if k.startswith(NET)}
    if not source:
        raise ValueError("the checkpoint has no network tensors (net.*): is it a seqattn checkpoint?")
    check_encoder_fits(model, source_net)
    labels = list(getattr(model, "labels", None) or [])
    same_objective = _same_objective(model, source_objective)
    same_task = same_objective and labels == list(source_labels or []) and all(
        source.get(k) is not None and source[k].shape == v.shape for k, v in target.items() if _task_specific(k))
    if not same_objective:
        log.info("the checkpoint was trained by %s, this model is %s: its adapter and encoder load, the head is new",
                 source_objective, type(model).__name__)
    elif not same_task:
        log.info("label set differs (checkpoint %s, now %s): the head is re-initialised",
                 list(source_labels or [])[:20], labels[:20])
    loaded, new, resized, problems = [], [], [], []
    update: dict[str, torch.Tensor] = {}
    tables, mapped = _model_tables(model), {}
    for name, tensor in target.items():
        if _task_specific(name) and not same_task:
            new.append(name)
            continue
        if name not in source:
            problems.append(f"{name}: in the model {tuple(tensor.shape)}, not in the checkpoint")
            continue
        value = source[name]
        if name in tables:  # rows are tokens: matched by token, never by position
            table = tables[name]
            try:
                update[name], mapped[name] = map_by_token(name, table, tensor, value,
                                                          (source_spec or {}).get(table.spec_key))
            except ValueError as err:
                problems.append(str(err))
                continue
            loaded.append(name)
            continue
        if value.shape != tensor.shape:
            if resize_positional_table and _is_learned_positional(name, tensor, value):
                update[name] = resize_positional(value, tensor.shape[0])
                resized.append(name)
                loaded.append(name)
                continue
            problems.append(f"{name}: checkpoint {tuple(value.shape)} vs model {tuple(tensor.shape)}")
            continue
        update[name] = value
        loaded.append(name)
    for name in source:
        if name not in target and not _task_specific(name):
            problems.append(f"{name}: in the checkpoint {tuple(source[name].shape)}, not in the model")
    if problems:
        hint = ("; a learned positional table of another length is resized only with "
                "finetune.resize_positional=true" if not resize_positional_table else "")
        front = [p for p in problems if p.startswith(f"{NET}subsample.")]
        if front and not any(name.startswith(f"{NET}subsample.") for name in source):
            hint += ("; the checkpoint has no front end between adapter and encoder (net.subsample): choose a model "
                     "without one (e.g. model=transformer, not model=stem_transformer)")
        elif front:
            hint += ("; the checkpoint's front end (net.subsample) is built otherwise than this model's: set its "
                     "options as the checkpoint was trained (a speech_cls checkpoint from before 2026-12-04 kept a "
                     "token per frame: net.subsample.time_factor=1)")
        if adapter_differences:  # a feature setting (adapter.n_mels, features, n_mfcc) sets the adapter's input width
            hint += (f"; this run's adapter also differs from the checkpoint's in {', '.join(adapter_differences)}: a "
                     "feature setting changes the width the adapter reads; set it as the checkpoint's "
                     "(adapter.KEY=VALUE)")
        raise ValueError("init_from: the checkpoint's network does not fit this model's (only the head and the "
                         f"vocabulary rows may differ); {len(problems)} tensor(s):\n  " + "\n  ".join(problems) + hint)
    label_tensors = {k: v for k, v in own.items() if k.startswith(LABEL_TENSORS)}
    for name, tensor in label_tensors.items():  # the CRF's scores: they mean something for this label set only
        value = state_dict.get(name)
        if same_task and value is not None and value.shape == tensor.shape:
            update[name] = value
            loaded.append(name)
        else:
            new.append(name)
    unused = sorted(k for k in state_dict if k.startswith(LABEL_TENSORS) and k not in label_tensors)
    if unused:
        log.info("init_from: the checkpoint's %s are not used (this run has no such layer, e.g. objective.crf=false: "
                 "the tags are each token's argmax)", unused)
    with torch.no_grad():
        for name, value in update.items():
            own[name].copy_(value)
    for name, counts in mapped.items():
        table = tables[name]
        log.info("init_from: %s: %d of %d %s from the checkpoint, %d new (initialised), %d checkpoint %s unused%s "
                 "(%s)", table.label, counts["from_checkpoint"], counts["total"], table.unit, counts["new"],
                 counts["unused"], table.unit,
                 f"; new e.g. {counts['new_tokens'][:5]}" if counts["new_tokens"] else "", name)
    vocab = {name: {k: v for k, v in counts.items() if k != "new_tokens"} for name, counts in mapped.items()}
    return {"loaded": loaded, "new": new, "resized": resized, "vocab": vocab}


def input_differences(here: Mapping[str, Any] | None, there: Mapping[str, Any] | None) -> list[str]:
    """The adapter settings (``adapter.*``) set in both configs to different values, as
    ``"f_max=4000 (checkpoint: None)"``, leaving out regularisation (keys naming ``dropout``), what a pretraining
    predicts (keys naming ``target``: no forward pass reads them) and the class: settings that change what the
    pretrained layers are given (features, frequency band, framing)."""
    if not isinstance(here, Mapping) or not isinstance(there, Mapping):
        return []
    return [f"{key}={here[key]!r} (checkpoint: {there[key]!r})" for key in sorted(set(here) & set(there))
            if key != "_target_" and "dropout" not in key and "target" not in key and here[key] != there[key]]


def init_from_checkpoint(model: nn.Module, path: str | Path, resize_positional_table: bool,
                         adapter: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`init_from_state` from a seqattn checkpoint file (read with ``weights_only=True``); logs
    which tensors were loaded, resized and newly initialised. ``adapter``: this run's adapter config; a
    setting that differs from the checkpoint's (:func:`input_differences`) is a warning naming both values."""
    checkpoint = read_checkpoint(path)
    differ = input_differences(adapter, (checkpoint.get("seqattn_config") or {}).get("adapter"))
    if differ:
        log.warning("init_from %s: this run's adapter differs from the checkpoint's in %s: the loaded layers were "
                    "trained on other inputs; set them alike (adapter.KEY=VALUE) unless that is meant",
                    path, ", ".join(differ))
    hparams = checkpoint["hyper_parameters"]
    objective = ((checkpoint.get("seqattn_config") or {}).get("objective") or {}).get("_target_")
    net = hparams.get("net")
    report = init_from_state(model, checkpoint["state_dict"], hparams.get("labels"), resize_positional_table,
                             source_spec=hparams.get("spec"), source_objective=objective,
                             source_net=net if isinstance(net, Mapping) else None, adapter_differences=differ)
    log.info("init_from %s: loaded %d tensors (%s), new (re-initialised) %d: %s%s", path, len(report["loaded"]),
             _summary(report["loaded"]), len(report["new"]), report["new"],
             f", resized {report['resized']}" if report["resized"] else "")
    return report


def use_checkpoint_vocabulary(datamodule: Any, options: FinetuneOptions) -> dict[str, Any] | None:
    """``finetune.vocabulary=checkpoint``: give ``datamodule`` (not yet set up) the ``init_from``
    checkpoint's vocabulary through its ``use_vocabulary(vocab, chars, lowercase, where)`` hook, so that
    its ``setup()`` uses it instead of building one from the training split. Does nothing for
    ``finetune.vocabulary=data``.

    Returns:
        ``{"words": V, "chars": C or None}`` of the vocabulary given, or None.

    Raises:
        ValueError: no ``init_from``; the checkpoint's spec has no vocabulary (``vocab``); the data has
            no ``use_vocabulary`` hook (it builds no vocabulary). Each names the checkpoint or the data.
    """
    if options.vocabulary == "data":
        return None
    if not options.init_from:
        raise ValueError(f"finetune.vocabulary={options.vocabulary!r} takes the vocabulary of the init_from checkpoint, "
                         "but init_from is not set; give init_from=<checkpoint> or use finetune.vocabulary=data")
    checkpoint = read_checkpoint(options.init_from)
    spec = checkpoint["hyper_parameters"].get("spec") or {}
    spec = spec if isinstance(spec, Mapping) else spec.to_dict()
    if not spec.get("vocab"):
        raise ValueError(f"finetune.vocabulary=checkpoint: the checkpoint {options.init_from} has no vocabulary "
                         "(hyper_parameters.spec.vocab is empty: its data built none); use finetune.vocabulary=data")
    hook = getattr(datamodule, "use_vocabulary", None)
    if hook is None:
        raise ValueError(f"finetune.vocabulary=checkpoint: this run's data ({type(datamodule).__name__}) builds no "
                         "vocabulary to replace; use finetune.vocabulary=data")
    data_config = (checkpoint.get("seqattn_config") or {}).get("data") or {}
    chars = spec.get("chars")
    hook(list(spec["vocab"]), None if chars is None else list(chars), data_config.get("lowercase"),
         where=str(options.init_from))
    return {"words": len(spec["vocab"]), "chars": None if chars is None else len(chars)}


def _summary(names: Sequence[str]) -> str:
    """``net.encoder.layers.0.attn.q_proj.weight`` ... -> ``net.encoder: 24, net.adapter: 2``."""
    counts: dict[str, int] = {}
    for name in names:
        part = ".".join(name.split(".")[:2])
        counts[part] = counts.get(part, 0) + 1
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


def freeze(model: nn.Module, parts: Sequence[str]) -> list[str]:
    """Stop training ``model.net.<part>`` for each part in ``parts`` (``adapter``, ``encoder``, ``head``,
    ``global_token``); returns the frozen parameter names."""
    unknown = [p for p in parts if p not in FREEZABLE]
    if unknown:
        raise ValueError(f"freeze={list(parts)}: {unknown} not among {list(FREEZABLE)}")
    frozen = []
    for name, param in model.named_parameters():
        if any(name == f"{NET}{p}" or name.startswith(f"{NET}{p}.") for p in parts):
            param.requires_grad_(False)
            frozen.append(name)
    if parts and not frozen:
        raise ValueError(f"freeze={list(parts)} matched no parameter")
    log.info("frozen: %d tensors of %s", len(frozen), list(parts))
    return frozen


def apply_finetune(model: nn.Module, options: FinetuneOptions) -> dict[str, Any] | None:
    """``options`` (``init_from`` / ``freeze`` / ``finetune.*``) applied to a freshly built objective.
    Returns a summary for ``metrics.json`` (None when nothing was asked)."""
    summary: dict[str, Any] = {}
    if options.init_from:
        report = init_from_checkpoint(model, options.init_from, options.resize_positional, options.adapter)
        mult = options.pretrained_lr_mult
        if mult <= 0:
            raise ValueError(f"finetune.pretrained_lr_mult={mult} must be > 0 (use freeze=[...] to stop training)")
        if mult != 1.0:
            model.lr_multipliers = {name: mult for name in report["loaded"]}
        summary.update(init_from=str(options.init_from), loaded=len(report["loaded"]), new=report["new"],
                       resized=report["resized"], pretrained_lr_mult=mult, vocabulary=options.vocabulary)
        if report["vocab"]:
            summary["vocab"] = report["vocab"]  # per table: from_checkpoint, total, new, unused
    if options.freeze:
        summary["frozen"] = len(freeze(model, list(options.freeze)))
    return summary or None
