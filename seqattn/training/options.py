"""The ``trainer`` group checked before any work: every key a Trainer parameter, every value of its type.

Lightning checks its arguments only when it uses them: ``trainer.max_epochs=one`` fails with a
``TypeError`` deep inside the fit loop after the data has loaded, and a misspelt key
(``+trainer.max_epoch=1``, as Hydra suggests for a key the config lacks) fails with "unexpected keyword
argument". :func:`check_trainer_options` compares the group with the signature and the annotations of
the class it instantiates (``_target_``, :class:`lightning.pytorch.Trainer` by default) and raises a
``ValueError`` naming the key, the value and what is expected (for an unknown key: the closest valid
key and the list of valid ones).

The arguments ``seqattn.run`` passes to the Trainer itself (:data:`SET_BY_RUN`) are not options of
the group: a value there would be silently replaced, so it is an error saying where to set it.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

_UNIONS = (typing.Union, types.UnionType)
DEFAULT_TARGET = "lightning.pytorch.Trainer"
# Trainer arguments seqattn.run passes itself, and where a user sets what they control
SET_BY_RUN = {
    "callbacks": "the callbacks group (callbacks.<name>=..., callbacks.<name>=null to drop one)",
    "logger": "the logger group (logger=csv | none)",
    "default_root_dir": "the run directory (hydra.run.dir=...)",
}


def _trainer_class(target: str) -> type:
    from hydra.utils import get_class

    try:
        return get_class(target)
    except (ImportError, ValueError) as err:
        raise ValueError(f"trainer._target_={target!r} is not a class that can be imported ({err}); "
                         f"expected {DEFAULT_TARGET} or a subclass") from None


def trainer_parameters(target: str = DEFAULT_TARGET) -> dict[str, Any]:
    """``{name: annotation}`` of the keyword arguments the class ``target`` takes (``Any`` where it has
    none); a class that passes ``**kwargs`` on also takes :class:`lightning.pytorch.Trainer`'s."""
    cls = _trainer_class(target)
    signature = inspect.signature(cls.__init__)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 -- an annotation that does not resolve: the names are still checked
        hints = {}
    params = {name: hints.get(name, Any) for name, p in list(signature.parameters.items())[1:]
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if target != DEFAULT_TARGET and any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        params = {**trainer_parameters(DEFAULT_TARGET), **params}
    return params


def matches(value: Any, annotation: Any) -> bool:
    """Whether a config value (plain YAML data: numbers, strings, lists, mappings; a mapping with
    ``_target_`` is an object to build) can be the argument annotated ``annotation``."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in _UNIONS:
        return any(matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if isinstance(value, Mapping) and "_target_" in value:
        return origin is None and isinstance(annotation, type) and annotation not in (int, float, bool, str)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (list, tuple, Sequence, Iterable) or annotation in (list, tuple):
        return isinstance(value, (list, tuple)) and all(matches(v, args[0] if args else Any) for v in value)
    if origin in (dict, Mapping) or annotation is dict:
        return isinstance(value, Mapping)
    if isinstance(annotation, type):  # a class: a value of it (a plain one), else built from a _target_ node
        return isinstance(value, annotation)
    return True  # a typing form not known here: Lightning checks it


def describe(annotation: Any) -> str:
    """``Optional[int]`` -> ``an integer or null``: what a config value of that annotation looks like."""
    if annotation is None or annotation is type(None):
        return "null"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in _UNIONS:
        parts = [describe(arg) for arg in args if arg is not type(None)]
        literals = [arg for arg in args if typing.get_origin(arg) is typing.Literal]
        if literals:  # precision: one list of allowed values
            values = [repr(v) for lit in literals for v in typing.get_args(lit)]
            parts = [f"one of {', '.join(values)}"] + [describe(a) for a in args
                                                      if a not in literals and a is not type(None)]
        return " or ".join(parts + (["null"] if type(None) in args else []))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if annotation in names:
        return names[annotation]
    if origin in (list, tuple, Sequence, Iterable):
        return f"a list of ({describe(args[0])})" if args else "a list"
    if origin in (dict, Mapping):
        return "a mapping"
    if isinstance(annotation, type):
        name = annotation.__name__
        return f"{'an' if name[0] in 'AEIOU' else 'a'} {name} (a config node with _target_)"
    return str(annotation)


def check_trainer_options(trainer: DictConfig | Mapping[str, Any]) -> None:
    """``ValueError`` for a key of the ``trainer`` group its class does not take, a key ``seqattn.run``
    sets itself (:data:`SET_BY_RUN`), or a value not of the parameter's annotated type."""
    options = OmegaConf.to_container(trainer, resolve=True) if isinstance(trainer, DictConfig) else dict(trainer)
    target = str(options.pop("_target_", DEFAULT_TARGET))
    params = trainer_parameters(target)
    valid = sorted(k for k in params if k not in SET_BY_RUN)
    for key, value in options.items():
        if key in SET_BY_RUN:
            raise ValueError(f"trainer.{key} is set by seqattn.run: configure it through {SET_BY_RUN[key]}")
        if key not in params:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hint = f"did you mean trainer.{close[0]}? " if close else ""
            raise ValueError(f"trainer.{key}={value!r}: {target} has no option {key!r}; {hint}the trainer options "
                             f"are: {', '.join(valid)}")
        if not matches(value, params[key]):
            raise ValueError(f"trainer.{key}={value!r} ({type(value).__name__}): expected {describe(params[key])} "
                             f"({target} argument {key})")
