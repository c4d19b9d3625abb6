"""House rules checked mechanically: imports only go downward; spec text never reaches eval."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Lower layers never import higher ones.
ORDER = ["engine", "site_builder"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_imports_only_go_downward():
    for rank, package in enumerate(ORDER):
        higher = set(ORDER[rank + 1:]) | {"tests"}
        for path in (REPO / package).rglob("*.py"):
            bad = _imports(path) & higher
            assert not bad, f"{path.relative_to(REPO)} imports {bad} (a higher layer)"


def test_no_eval_or_string_sympify_in_code():
    for package in ORDER:
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    assert name not in ("eval", "exec", "sympify", "parse_expr"), \
                        f"{path.relative_to(REPO)}:{node.lineno} calls {name}"


def test_yaml_is_loaded_safely():
    for path in (REPO / "engine").rglob("*.py"):
        text = path.read_text()
        assert "yaml.load(" not in text or "SafeLoader" in text, path
        assert "yaml.unsafe_load" not in text and "FullLoader" not in text, path
