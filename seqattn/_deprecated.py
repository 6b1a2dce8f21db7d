"""Old module paths (before the modalities/ layout) keep working, with a deprecation warning.

``seqattn.adapters.audio``, ``seqattn.data.text``, ``seqattn.heads``, ... are importable and resolve
their names in the modules that hold them now, so user code and checkpoints or configs written
with the old ``_target_`` paths still load. Each old module warns once (``DeprecationWarning``)
naming its new home. :func:`replacement` maps an old dotted path to the new one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any

#: old module -> the modules that hold its names now (searched in order)
MOVED: dict[str, tuple[str, ...]] = {
    "seqattn.network": ("seqattn.model.network",),
    "seqattn.heads": ("seqattn.model.heads",),
    "seqattn.baselines": ("seqattn.model.baselines",),
    "seqattn.callbacks": ("seqattn.training.callbacks",),
    "seqattn.checkpoint": ("seqattn.training.checkpoint", "seqattn.cli"),
    "seqattn.finetune": ("seqattn.training.finetune",),
    "seqattn.resume": ("seqattn.training.resume",),
    "seqattn.sweep": ("seqattn.training.sweep",),
    "seqattn.viz.common": ("seqattn.viz",),
    "seqattn.data.base": ("seqattn.datakit.module",),
    "seqattn.adapters.audio": ("seqattn.modalities.audio.adapter", "seqattn.modalities.audio.features"),
    "seqattn.data.audio": ("seqattn.modalities.audio.data", "seqattn.modalities.audio.manifest"),
    "seqattn.data.speech": ("seqattn.modalities.audio.corpus",),
    "seqattn.viz.speech": ("seqattn.modalities.audio.viz",),
    "seqattn.adapters.image": ("seqattn.modalities.image.adapter",),
    "seqattn.data.image": ("seqattn.modalities.image.data", "seqattn.modalities.image.readers"),
    "seqattn.data.shapes": ("seqattn.modalities.image.shapes",),
    "seqattn.viz.image": ("seqattn.modalities.image.viz",),
    "seqattn.bench.image": ("seqattn.modalities.image.bench",),
    "seqattn.adapters.text": ("seqattn.modalities.text.adapter", "seqattn.modalities.text.vocab"),
    "seqattn.data.text": ("seqattn.modalities.text.data", "seqattn.modalities.text.readers",
                          "seqattn.datakit.download"),
    "seqattn.data.text_corpus": ("seqattn.modalities.text.corpus",),
    "seqattn.viz.text": ("seqattn.modalities.text.viz",),
    "seqattn.adapters.graph": ("seqattn.modalities.graph.adapter", "seqattn.modalities.graph.positional",
                               "seqattn.modalities.graph.batching", "seqattn.core.graph_cost"),
    "seqattn.data.molecule": ("seqattn.modalities.graph.molecule_data", "seqattn.modalities.graph.molecules"),
    "seqattn.data.social": ("seqattn.modalities.graph.social", "seqattn.modalities.graph.social_files"),
    "seqattn.data.sampling": ("seqattn.modalities.graph.sampling",),
    "seqattn.viz.graph": ("seqattn.modalities.graph.viz",),
    "seqattn.viz.social": ("seqattn.modalities.graph.viz",),
    "seqattn.bench.graph": ("seqattn.modalities.graph.bench",),
    # the old packages themselves (their modules are above)
    "seqattn.adapters": (),
    "seqattn.data": (),
}

_warned: set[str] = set()


def register(old: str, *new: str) -> None:
    """Declare that the names of module ``old`` now live in ``new`` (searched in order)."""
    MOVED[old] = tuple(new)


def replacement(path: str) -> str:
    """An old dotted object path (``seqattn.heads.TokenHead``) -> its current one; others unchanged."""
    module, _, attr = path.rpartition(".")
    if module not in MOVED or not MOVED[module]:
        return path
    for target in MOVED[module]:
        try:
            if hasattr(importlib.import_module(target), attr):
                return f"{target}.{attr}"
        except ImportError:
            continue
    return path


class _MovedModule(types.ModuleType):
    def __init__(self, name: str, targets: tuple[str, ...]) -> None:
        super().__init__(name, f"deprecated alias of {', '.join(targets) or 'several modules'}")
        self._targets = targets
        self.__path__: list[str] = []  # a package: old submodules resolve through the finder too

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} (deprecated; now {', '.join(self._targets)}) has no "
                             f"attribute {attr!r}")


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):  # noqa: D102
        return _MovedModule(spec.name, MOVED[spec.name])

    def exec_module(self, module) -> None:  # noqa: D102
        name = module.__name__
        if name not in _warned and MOVED[name]:
            _warned.add(name)
            warnings.warn(f"{name} is deprecated; import from {' / '.join(MOVED[name])} instead",
                          DeprecationWarning, stacklevel=3)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # noqa: D102
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, _Loader(), is_package=True)
        return None


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
