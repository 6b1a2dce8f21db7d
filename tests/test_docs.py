"""The documentation a user reads: links resolve, the front page stays short, every task README
says how to run it, how to bring your own data and what was measured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FRONT_PAGE_MAX_LINES = 250
TASK_SECTIONS = {"run": r"^#+ Run it", "your own data": r"^#+ Bring your own", "results": r"^#+ Results",
                 "real data": r"^#+ Your own data, measured"}


def _doc_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "tasks").glob("*/README.md"))]


def _outside_code(text: str, inline: bool = True) -> list[str]:
    """The lines of a markdown text with fenced blocks blanked (and inline code removed if ``inline``)."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "``", line) if inline else line)
    return out


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings (lower case, punctuation dropped, spaces -> '-',
    repeated headings numbered)."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _outside_code(path.read_text(encoding="utf-8"), inline=False):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(2).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def broken_links(root: Path) -> list[str]:
    """``file:line: target`` for every relative link (outside code) whose file or heading is missing."""
    bad = []
    for doc in _doc_files(root):
        for lineno, line in enumerate(_outside_code(doc.read_text(encoding="utf-8")), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (doc.parent / path).resolve() if path else doc
                ok = dest.exists() and (not anchor or (dest.is_file() and anchor in heading_anchors(dest)))
                if not ok:
                    bad.append(f"{doc.relative_to(root)}:{lineno}: {target}")
    return bad


def test_every_relative_link_resolves():
    assert len(_doc_files(ROOT)) > 8
    assert broken_links(ROOT) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Real data\n")
    (tmp_path / "README.md").write_text("[ok](docs/a.md#real-data) [gone](docs/b.md) [no heading](docs/a.md#other)\n"
                                        "`[in code](docs/c.md)`\n")
    assert broken_links(tmp_path) == ["README.md:1: docs/b.md", "README.md:1: docs/a.md#other"]


def test_the_front_page_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= FRONT_PAGE_MAX_LINES
    assert "pip install -e . && python -m seqattn.run task=speech" in text
    assert 'pip install -e ".[test]" && pytest' in text


@pytest.mark.parametrize("task", sorted(p.stem for p in (ROOT / "conf" / "task").glob("*.yaml")))
def test_every_task_has_a_readme_with_run_own_data_and_results(task):
    readme = ROOT / "tasks" / task / "README.md"
    assert readme.is_file(), f"{readme} is missing"
    text = readme.read_text(encoding="utf-8")
    missing = [name for name, pattern in TASK_SECTIONS.items() if not re.search(pattern, text, re.M)]
    assert missing == []
