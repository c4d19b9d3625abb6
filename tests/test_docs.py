"""Docs under test: every op, node field, role and quant scheme is documented."""
from __future__ import annotations

from pathlib import Path

from engine.language.file_schemas import NODE
from engine.language.ops import OPS

REPO = Path(__file__).resolve().parent.parent
SPEC_DOC = (REPO / "docs" / "spec-language.md").read_text()


def test_every_op_is_in_the_spec_language_doc():
    missing = [name for name in OPS if f"`{name}`" not in SPEC_DOC]
    assert not missing


def test_every_node_field_is_documented():
    missing = [field for field in NODE.fields if f"`{field}`" not in SPEC_DOC]
    assert not missing


def test_every_table_entry_has_a_doc(corpus):
    assert all(info.doc.strip() for info in corpus.dims.values())
    assert all(role.doc.strip() for role in corpus.roles.values())
    assert all(scheme.doc.strip() for scheme in corpus.schemes.values())
    assert all(component.doc.strip() for component in corpus.components.values())


def test_readme_starts_with_the_two_setup_commands():
    lines = [l for l in (REPO / "README.md").read_text().splitlines() if l.strip()]
    block = lines[lines.index("```bash") + 1: lines.index("```bash") + 4]
    assert block[2] == "```", "exactly two set-up commands"
    venv = "python3 -m venv .venv && . .venv/bin/activate && "    # Debian/Ubuntu refuse a system-wide install
    assert block[0].startswith(venv + "pip install -e . && archledger build")
    assert block[1].startswith(venv + "pip install -e '.[test,oracle]' && python -m pytest")
    import tomllib
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == ">=3.11" and "Python >= 3.11" in block[0]
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test,oracle]'" in ci and "python3 -m pytest -q" in ci


def test_every_relative_link_in_the_repos_markdown_resolves():
    """A Markdown link to a repo file (README, CONTRIBUTING, docs/) names a file that exists: a page
    moved or renamed (README's benchmark log went to docs/benchmarks-history.md) leaves no dead link."""
    import re
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    dead = [(page.name, target) for page in pages
            for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text())
            if not target.startswith(("http://", "https://", "#", "mailto:"))
            and not (page.parent / target.split("#")[0]).exists()]
    assert len(pages) > 5 and not dead
