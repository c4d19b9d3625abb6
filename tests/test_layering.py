"""House rules checked mechanically: imports only go downward; spec text never reaches eval.

Inside ``engine/`` the concerns are packages (docs/architecture.md): ``spec`` at the bottom,
``deploy`` and ``verify`` beside each other on it, the features ``serving`` and ``playground``
beside each other on ``deploy``, ``build`` on all of them, ``cli`` on top. A module
imports its own concern and the ones below it, never a higher or a sideways one, and across a
concern only public names (no ``_private`` module or name).
"""
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


#: engine's concerns: the package (or top-level module) -> the concerns it may import.
#: ``project`` (where the checkout is) imports nothing of the engine; ``api`` and the package
#: ``__init__`` are the public facade over language; deploy and verify never import each other, nor
#: do the two features (serving, playground); the batch build imports the features for the
#: tables it writes, never the reverse.
CONCERNS = {
    "project": set(),
    "language": {"project"},
    "deploy": {"language", "project"},
    "verify": {"language", "project"},
    "serving": {"deploy", "language", "project"},
    "playground": {"deploy", "language", "project"},
    "batch": {"serving", "playground", "deploy", "verify", "language", "project"},
    "cli": {"batch", "serving", "playground", "deploy", "verify", "language", "project"},
    "api": {"language"},
    "__init__": set(),
}


def _concern(module: str) -> str | None:
    """``engine.deploy.sol`` -> ``deploy``; ``engine.api`` -> ``api``; not engine -> None."""
    parts = module.split(".")
    if parts[0] != "engine":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _engine_imports(path: Path):
    """(imported module, imported names, line) for every absolute ``engine`` import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "engine":
                    yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "engine":
            yield node.module, [alias.name for alias in node.names], node.lineno


def _module_of(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def test_every_engine_module_belongs_to_a_concern():
    for path in (REPO / "engine").rglob("*.py"):
        module = _module_of(path)
        concern = _concern(module)
        assert concern in CONCERNS, f"{path.relative_to(REPO)}: {concern!r} is not a concern of engine"


def test_engine_concerns_import_only_downward():
    for path in (REPO / "engine").rglob("*.py"):
        here = _concern(_module_of(path))
        for module, names, line in _engine_imports(path):
            there = _concern(module)
            if there == "__init__" and names:          # `from engine import x`: x is the concern
                for name in names:
                    assert name == here or name in CONCERNS[here], \
                        f"{path.relative_to(REPO)}:{line} imports engine.{name} ({here} may import {CONCERNS[here]})"
                continue
            assert there == here or there in CONCERNS[here], \
                f"{path.relative_to(REPO)}:{line} imports {module} ({here} may import {sorted(CONCERNS[here])})"


def test_no_private_names_across_concerns():
    """Across a concern, only the public interface: no ``_module`` and no ``_name``."""
    for path in (REPO / "engine").rglob("*.py"):
        here = _concern(_module_of(path))
        for module, names, line in _engine_imports(path):
            if _concern(module) == here:
                continue
            private = [p for p in module.split(".") if p.startswith("_")]
            private += [n for n in names if n.startswith("_")]
            assert not private, f"{path.relative_to(REPO)}:{line} imports private {private} from {module}"


def test_no_relative_imports_in_engine():
    """Every import names its package, so the rules above see it."""
    for path in (REPO / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.ImportFrom) and node.level), \
                f"{path.relative_to(REPO)}:{node.lineno} uses a relative import"


def test_engine_modules_form_no_import_cycle():
    """Within a concern too, module imports form no cycle (deploy and sol once imported each other)."""
    graph = {}
    for path in (REPO / "engine").rglob("*.py"):
        graph[_module_of(path)] = {m for m, _, _ in _engine_imports(path)}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph or nxt == node:
                continue
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(trail + [node, nxt])
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


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


#: issue 37's sizes: a module a reader takes in at once, a class with one job (the house style).
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 250


def test_modules_and_classes_stay_small():
    """No engine or site_builder module over :data:`MAX_MODULE_LINES` lines, no class over
    :data:`MAX_CLASS_LINES`: a module that grows past them is split along its seams (pure moves;
    docs/architecture.md names where each rule lives)."""
    for package in ORDER:
        for path in (REPO / package).rglob("*.py"):
            text = path.read_text()
            lines = text.count("\n")
            assert lines <= MAX_MODULE_LINES, f"{path.relative_to(REPO)} has {lines} lines (split it: at most {MAX_MODULE_LINES})"
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef):
                    size = node.end_lineno - node.lineno + 1
                    assert size <= MAX_CLASS_LINES, \
                        f"{path.relative_to(REPO)}:{node.lineno} class {node.name} has {size} lines (at most {MAX_CLASS_LINES})"
