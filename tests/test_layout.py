"""The architecture's import rules, checked by walking every module's imports (``ast``, nothing runs).

- ``core`` imports nothing else of seqattn; ``labels`` imports nothing of seqattn;
- ``model`` imports the core and the label conventions only (no Lightning, no Hydra);
- ``datakit`` imports the label conventions only;
- a modality imports the core, ``model.protocols``, the data kit, ``labels`` and the shared figure
  helpers (``seqattn.viz``) -- never another modality, an objective, the training machinery, the model
  internals or an entry point (``run``, ``bench``): no arrow runs back up;
- objectives and training never import a modality; no module outside ``modalities/`` names one,
  except a benchmark suite named after its modality (``bench/<m>.py``); the rest of ``bench/`` finds a
  modality's structure cells at run time, and the tasks in ``conf/task/``;
- the import graph of the whole package has no circle (lazy imports inside functions count).

The modalities are the folders of ``seqattn/modalities/``: nothing here lists them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import seqattn

PACKAGE = Path(seqattn.__file__).resolve().parent
KNOWN_MODALITIES = {"audio", "graph", "image", "text"}
MODALITY_IMPORTS = ("seqattn.core", "seqattn.model.protocols", "seqattn.datakit", "seqattn.labels", "seqattn.viz")


def modalities(package: Path = PACKAGE) -> list[str]:
    """The modality folders of a package tree (sub-packages of ``modalities/``)."""
    return sorted(p.name for p in (package / "modalities").iterdir()
                  if p.is_dir() and not p.name.startswith("_") and (p / "__init__.py").is_file())


def files(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "conf" not in p.relative_to(package).parts)


MODALITIES = modalities()
FILES = files()


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every ``seqattn`` module a file imports (absolute and relative, at any depth in the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path, package).split(".")
    parent = me if path.name == "__init__.py" else me[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(parent[: len(parent) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from seqattn.modalities import audio`
    return {m for m in out if m == "seqattn" or m.startswith("seqattn.")}


def rule_violations(path: Path, package: Path = PACKAGE) -> list[str]:
    name = _module_name(path, package)
    imported = _imports(path, package)
    rel = path.relative_to(package).parts
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
                                                                             "seqattn.labels"))
    elif rel[0] == "datakit":
        forbid(("seqattn",), "the data kit imports labels only", allow=("seqattn.datakit", "seqattn.labels"))
    elif rel[0] == "modalities" and len(rel) > 2:
        forbid(("seqattn",), "a modality imports core, model.protocols, datakit, labels and viz only",
               allow=(*MODALITY_IMPORTS, f"seqattn.modalities.{rel[1]}"))
    elif rel[0] in ("objectives", "training"):
        forbid(("seqattn.modalities",), f"{rel[0]} never import a modality")
    if rel[0] != "modalities":  # the package itself (to discover its folders) names no modality
        imported.discard("seqattn.modalities")
        own = ()
        if rel[0] == "bench" and len(rel) == 2 and path.stem in modalities(package):
            own = (f"seqattn.modalities.{path.stem}",)  # bench/<m>.py: the suite of modality m
        forbid(("seqattn.modalities",), "only a modality's own folder (and its bench/<m>.py suite) names it",
               allow=own)
    return bad


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports, at any depth in the file. ``from a import b`` imports
    ``a.b`` when that is a module, else ``a``; the parent packages Python runs on the way are not edges
    (every module would then sit in a circle with its package's ``__init__``)."""
    paths = {_module_name(p, package): p for p in files(package)}
    graph = {}
    for name, path in paths.items():
        me = name.split(".")
        parent = me if path.name == "__init__.py" else me[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(parent[: len(parent) - node.level + 1] + ([node.module] if node.module else []))
                        if node.level else node.module or "")
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """The import circles of a package tree (each strongly connected component of two or more modules)."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_there_are_modalities_and_files_to_check():
    assert KNOWN_MODALITIES <= set(MODALITIES)
    assert len(FILES) > 40


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layering(path):
    assert rule_violations(path) == []


def test_the_import_graph_has_no_circle():
    assert import_cycles() == []


def planted_tree(tmp_path: Path, sources: dict[str, str]) -> Path:
    """A scratch ``seqattn`` package under ``tmp_path`` with each ``{relative path: source}`` written in it.
    Planted files never go into the installed package: other tests (run at the same time under xdist) walk it."""
    package = tmp_path / "seqattn"
    for relative, source in sources.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return package


def test_the_walk_catches_a_planted_cross_modality_import(tmp_path):
    """The rules are real: a text module importing the audio modality (or an objective) is reported."""
    package = planted_tree(tmp_path, {
        "modalities/text/_planted_violation.py": "from seqattn.modalities.audio import features\n"
                                                 "from seqattn.objectives import base\n",
        "core/_planted_violation.py": "import seqattn.model.heads\n"})
    found = rule_violations(package / "modalities/text/_planted_violation.py", package)
    assert any("seqattn.modalities.audio" in v for v in found) and any("seqattn.objectives" in v for v in found)
    assert rule_violations(package / "core/_planted_violation.py", package) == [
        "seqattn.core._planted_violation imports seqattn.model.heads: the core imports nothing else of seqattn"]


@pytest.mark.parametrize("source", ["from seqattn.run import train", "from seqattn.bench import measure",
                                    "import seqattn.model.heads", "from seqattn.training import callbacks"])
def test_the_walk_catches_a_modality_importing_upwards(source, tmp_path):
    """An arrow back up (a modality running a recipe, timing model internals, using an entry point) is reported,
    whatever the file is called (there is no bench.py exception)."""
    package = planted_tree(tmp_path, {"modalities/graph/bench.py": f"def f():\n    {source}\n"})
    found = rule_violations(package / "modalities/graph/bench.py", package)
    assert found and all("a modality imports core, model.protocols, datakit, labels and viz only" in v for v in found)


def test_a_bench_module_names_only_its_own_modality(tmp_path):
    """``bench/graph.py`` may import the graph modality; ``bench/core.py`` or a graph suite importing audio may not."""
    package = planted_tree(tmp_path, {
        **{f"{folder}/__init__.py": "" for folder in ("modalities/graph", "modalities/audio", "bench")},
        "bench/graph.py": "from seqattn.modalities.graph import adapter\n",
        "bench/core.py": "from seqattn.modalities.graph import adapter\n",
        "bench/audio2.py": "import seqattn.modalities\nfrom seqattn.modalities.audio import viz\n"})
    assert rule_violations(package / "bench" / "graph.py", package) == []
    why = "only a modality's own folder (and its bench/<m>.py suite) names it"
    for module, named in (("core", "seqattn.modalities.graph"), ("audio2", "seqattn.modalities.audio")):
        found = rule_violations(package / "bench" / f"{module}.py", package)
        assert found and all(v.startswith(f"seqattn.bench.{module} imports {named}") and why in v for v in found)


def test_the_cycle_check_catches_a_planted_circle(tmp_path):
    """A circle through lazy imports, the one ``bench/core.py`` and ``bench/structure.py`` used to form."""
    package = planted_tree(tmp_path, {
        "__init__.py": "",
        "bench/__init__.py": "def main():\n    from seqattn.bench.core import run\n",
        "bench/core.py": "def run():\n    from seqattn.bench import structure\n",
        "bench/structure.py": "def step():\n    from seqattn.bench import core as bench_core\n",
        "bench/measure.py": "import json\n"})
    assert import_cycles(package) == [["seqattn.bench.core", "seqattn.bench.structure"]]
    (package / "bench" / "structure.py").write_text("from seqattn.bench import measure\n")
    assert import_cycles(package) == []
