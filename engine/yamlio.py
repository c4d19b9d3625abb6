"""Safe YAML reading that remembers line numbers, so every error can point at file:line.

Layer: engine. Only ``yaml.SafeLoader`` is used (specs arrive in pull requests). Mappings load as
:class:`LineDict`, a ``dict`` that also knows the line of each key; lists as :class:`LineList`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from engine.errors import SpecError, Where


class LineDict(dict):
    """A mapping from YAML with ``line`` (1-based, of the mapping) and ``key_lines`` per key."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    """A sequence from YAML with ``line`` (1-based)."""

    line: int = 0


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key_node.value if isinstance(key_node, yaml.ScalarNode) else '[...]'!r} "
                "is not a name (quote it if it is one)",
                key_node.start_mark)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(path: Path, display: str | None = None) -> Any:
    """Parse one YAML file safely; a syntax error becomes a one-line :class:`SpecError`."""
    name = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(Where(name), f"cannot read file ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 — _Loader derives from SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        problem = f"invalid YAML: {exc.problem or exc.context}"
        raise SpecError(Where(name, line), problem,
                        "check indentation, colons and quoting around this line") from None
    except yaml.YAMLError as exc:
        raise SpecError(Where(name), f"invalid YAML: {exc}") from None
