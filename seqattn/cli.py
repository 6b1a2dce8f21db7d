"""Command-line ``key=value`` arguments, parsed in one place for every entry point.

``python -m seqattn.predict ckpt=a.ckpt input=x`` and ``python -m seqattn.export ...`` take Hydra-style
``key=value`` arguments without a Hydra config (the checkpoint carries its own); ``--key=value`` and
``batch-size`` spellings are accepted too. ``python -m seqattn.run`` is Hydra's.
"""

from __future__ import annotations

from typing import Sequence


def parse_key_values(argv: Sequence[str], allowed: set[str], required: Sequence[str], usage: str) -> dict[str, str]:
    """Command-line ``key=value`` arguments (``--key=value`` and ``batch-size`` spellings too) ->
    ``{key: value}``; ValueError naming the bad argument or the missing keys, with ``usage``."""
    args: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("-").replace("-", "_")
        if not sep or key not in allowed:
            raise ValueError(f"unexpected argument {arg!r}; expected key=value with key in {sorted(allowed)}\n{usage}")
        args[key] = value
    missing = [k for k in required if not args.get(k)]
    if missing:
        raise ValueError(f"missing {missing}\n{usage}")
    return args
