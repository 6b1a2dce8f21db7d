"""Building a network from its config and the data's spec -- the one place they meet.

``build_network(net_cfg, spec)`` instantiates a ``_target_`` config (plain dicts, as saved in a
checkpoint) of :class:`~seqattn.model.network.SequenceModel` and its parts. A part's constructor
arguments named in its ``spec_fields`` (see :mod:`seqattn.model.protocols`) are taken from the
spec; the config may leave them out (or null). A config value that *contradicts* the spec (say
``head.num_outputs=5`` when the data has 3 classes) is an error naming both.

No Hydra here: ``_target_`` is resolved with :func:`locate`, so a checkpoint rebuilds anywhere.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Mapping

_RESERVED = ("_target_", "_partial_", "_convert_", "_recursive_", "_args_")


def locate(path: str) -> Any:
    """``"package.module.Name"`` -> the object (a class or function); ``ValueError`` naming the path."""
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"_target_ must be a dotted path like 'seqattn.model.heads.TokenHead', got {path!r}")
    module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        # a nested attribute (package.module.Class.method) or a wrong path
        parent, _, outer = module_name.rpartition(".")
        try:
            return getattr(getattr(importlib.import_module(parent), outer), attr)
        except (ImportError, AttributeError, ValueError):
            raise ValueError(f"cannot import {module_name!r} for _target_ {path!r}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{module_name!r} has no {attr!r} (_target_ {path!r})") from None


def spec_kwargs(cls: type, cfg: Mapping[str, Any], spec: Any, where: str) -> dict[str, Any]:
    """The constructor arguments ``cls.spec_fields`` takes from ``spec`` (none without a spec).

    A value the config sets (not None) must equal the spec's; the config may omit the argument.
    """
    fields = getattr(cls, "spec_fields", None) or {}
    if spec is None or not fields:
        return {}
    out = {}
    for arg, key in fields.items():
        value = spec.get(key, None)
        if value is None:
            continue
        if isinstance(value, tuple):
            value = list(value)
        given = cfg.get(arg)
        if given is not None and (list(given) if isinstance(given, (list, tuple)) else given) != value:
            shown = value if not isinstance(value, list) or len(value) <= 8 else f"[{len(value)} values]"
            raise ValueError(f"{where}.{arg}={given!r} contradicts the data ({key}={shown}); leave {where}.{arg} "
                             "unset: it comes from the data")
        out[arg] = value
    return out


def build_part(cfg: Mapping[str, Any] | Any, spec: Any = None, where: str = "part") -> Any:
    """One ``_target_`` config -> the object, spec fields filled. A non-dict is returned as is (an
    already built module)."""
    if not isinstance(cfg, Mapping):
        return cfg
    if "_target_" not in cfg:
        raise ValueError(f"{where} config needs a _target_ (the class to build), got keys {sorted(cfg)}")
    target = locate(cfg["_target_"])
    kwargs = {k: v for k, v in cfg.items() if k not in _RESERVED}
    kwargs.update(spec_kwargs(target, kwargs, spec, where))
    try:
        return target(**kwargs)
    except TypeError as err:
        raise ValueError(f"cannot build {where} {cfg['_target_']}: {err}{_foreign_keys_hint(target, kwargs, where)}") \
            from None


#: where each part of :func:`build_network` sits in a run's config (conf/config.yaml: ``net.adapter: ${adapter}``)
_CONFIG_PATH = {"adapter": "adapter", "encoder": "model", "head": "head", "subsample": "net.subsample", "net": "net"}


def _foreign_keys_hint(target: Any, kwargs: Mapping[str, Any], where: str) -> str:
    """What to do when a part's config has keys its class does not take: Hydra merges two config groups'
    settings of one part key by key (``task=speech_ctc model=stem_transformer``: the task's
    ``TimeSubsampling`` and the model's ``SpectrogramStem`` in ``net.subsample``)."""
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return ""
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return ""
    taken = {p.name for p in params}
    extra = sorted(k for k in kwargs if k not in taken)
    if not extra:
        return ""
    path = _CONFIG_PATH.get(where, where)
    name = getattr(target, "__name__", str(target))
    return (f". {path} has keys {name} does not take: {extra}. Two config groups that both set {path} (a task's "
            f"and a model's) merge key by key; keep one part: set {path}._target_ to the class you want and delete "
            f"the other's keys on the command line; to keep {name}: {' '.join(f'~{path}.{k}' for k in extra)}")


def build_network(cfg: Mapping[str, Any] | Any, spec: Any = None) -> Any:
    """A network config (``_target_`` = a ``SequenceModel``, with ``adapter`` / ``encoder`` / ``head``
    part configs) -> the network. An ``nn.Module`` is returned unchanged."""
    if not isinstance(cfg, Mapping):
        return cfg
    cfg = dict(cfg)
    parts = {name: build_part(cfg.pop(name), spec, name) for name in ("adapter", "encoder", "head", "subsample")
             if cfg.get(name) is not None}
    net = build_part({**cfg, **parts}, spec, "net")
    check = getattr(getattr(net, "adapter", None), "check_spec", None)
    if spec is not None and callable(check):
        check(spec)
    return net
