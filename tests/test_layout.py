"""The architecture's import rules, checked by walking every module's imports (``ast``, nothing runs).

- ``core`` imports nothing else of seqattn; ``labels`` imports nothing of seqattn;
- ``model`` imports the core and the label conventions only (no Lightning, no Hydra);
- ``datakit`` imports the label conventions only;
- a modality imports the core, ``model.protocols``, the data kit, ``labels`` and the shared figure
  helpers (``seqattn.viz``) -- never another modality, an objective or the training machinery; its
  ``bench.py`` (an entry point) may also run a recipe through ``seqattn.run``;
- objectives and training never import a modality; no module outside ``modalities/`` names one
  (benchmarks find a modality's suite and structure cells at run time, like the suites).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import seqattn

PACKAGE = Path(seqattn.__file__).resolve().parent
MODALITIES = sorted(p.name for p in (PACKAGE / "modalities").iterdir() if p.is_dir() and not p.name.startswith("_"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every ``seqattn`` module a file imports (absolute and relative, at any depth in the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from seqattn.modalities import audio`
    return {m for m in out if m == "seqattn" or m.startswith("seqattn.")}


FILES = sorted(p for p in PACKAGE.rglob("*.py") if "conf" not in p.relative_to(PACKAGE).parts)


def _rule_violations(path: Path) -> list[str]:
    name = _module_name(path)
    imported = _imports(path)
    rel = path.relative_to(PACKAGE).parts
    bad = []

    def forbid(prefixes: tuple[str, ...], why: str, allow: tuple[str, ...] = ()) -> None:
        for m in sorted(imported):
            if any(m == p or m.startswith(p + ".") for p in prefixes) and not any(
                    m == a or m.startswith(a + ".") for a in allow):
                bad.append(f"{name} imports {m}: {why}")

    if name == "seqattn.labels":
        forbid(("seqattn",), "labels imports nothing of seqattn")
    elif rel[0] == "core":
        forbid(("seqattn",), "the core imports nothing else of seqattn", allow=("seqattn.core",))
    elif rel[0] == "model":
        forbid(("seqattn",), "model imports the core and labels only", allow=("seqattn.core", "seqattn.model",
                                                                             "seqattn.labels", "seqattn._deprecated"))
    elif rel[0] == "datakit":
        forbid(("seqattn",), "the data kit imports labels only", allow=("seqattn.datakit", "seqattn.labels"))
    elif rel[0] == "modalities" and len(rel) > 2:
        mine = f"seqattn.modalities.{rel[1]}"
        allowed = ("seqattn.core", "seqattn.model.protocols", "seqattn.datakit", "seqattn.labels", "seqattn.viz",
                   mine)
        if rel[-1] == "bench.py":  # an entry point: may run a recipe, time the network's parts
            allowed += ("seqattn.run", "seqattn.bench", "seqattn.model")
        forbid(("seqattn",), "a modality imports core, model.protocols, datakit, labels and viz only", allow=allowed)
    elif rel[0] in ("objectives", "training"):
        forbid(("seqattn.modalities",), f"{rel[0]} never import a modality")
    if rel[0] != "modalities":  # the package itself (to discover its folders) names no modality
        imported.discard("seqattn.modalities")
        forbid(("seqattn.modalities",), "only a modality's own folder names it")
    return bad


def test_there_are_modalities_and_files_to_check():
    assert MODALITIES == ["audio", "graph", "image", "text"]
    assert len(FILES) > 40


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layering(path):
    assert _rule_violations(path) == []


def test_the_walk_catches_a_planted_cross_modality_import(tmp_path, monkeypatch):
    """The rules are real: a text module importing the audio modality (or an objective) is reported."""
    planted = PACKAGE / "modalities" / "text" / "_planted_violation.py"
    planted.write_text("from seqattn.modalities.audio import features\nfrom seqattn.objectives import base\n")
    try:
        found = _rule_violations(planted)
    finally:
        planted.unlink()
    assert any("seqattn.modalities.audio" in v for v in found) and any("seqattn.objectives" in v for v in found)
    core = PACKAGE / "core" / "_planted_violation.py"
    core.write_text("import seqattn.model.heads\n")
    try:
        assert _rule_violations(core) == ["seqattn.core._planted_violation imports seqattn.model.heads: the core "
                                          "imports nothing else of seqattn"]
    finally:
        core.unlink()
