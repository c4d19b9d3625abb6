"""Schema checks on one YAML file: :class:`Reader` loads it against its schema and names lines.

Layer: engine.language. Every corpus, GPU, fusion, grid and measured-table file is read through a
:class:`Reader`: the file's schema (engine.language.file_schemas) checks the kind of every value on
load; the loaders check how fields go together, and every error is a :class:`Where` naming the
file (relative to the corpus's parent), the line and the field.

Invariant: a file is loaded once per Reader, through the bounded, safe YAML loader
(:func:`engine.language.yamlio.load_yaml`), with line numbers on every mapping and list.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.language.errors import SpecError, Where
from engine.language.schema import kind_of
from engine.language.yamlio import LineDict, LineList, load_yaml


class Reader:
    """Schema checks on one YAML file, producing :class:`Where` values with lines."""

    def __init__(self, path: Path, root: Path, schema: Any = None):
        try:
            self.display = str(path.relative_to(root.parent))
        except ValueError:
            self.display = str(path)
        self.data = load_yaml(path, self.display, schema=schema)

    def where(self, mapping: Any, field: str = "", key: str | None = None) -> Where:
        """``field`` at ``mapping`` (or at its ``key``); sub-fields resolve to their own lines."""
        line, node = 0, mapping
        if isinstance(mapping, LineDict):
            line = mapping.line_of(key) if key is not None else mapping.line
            node = mapping.get(key) if key is not None else mapping
        elif isinstance(mapping, LineList):
            line = mapping.line
        return Where(self.display, line, field, node)

    def mapping(self, value: Any, field: str, parent: Any = None, key: str | None = None) -> LineDict:
        if not isinstance(value, dict):
            raise SpecError(self.where(parent, field, key), f"expected a mapping, got {kind_of(value)}",
                            "write `key: value` pairs here")
        return value

    def keys(self, mapping: LineDict, field: str, allowed: tuple, required: tuple = ()) -> None:
        for key in mapping:
            if key not in allowed:
                raise SpecError(self.where(mapping, f"{field}.{key}" if field else str(key), key),
                                f"unknown field {key!r}", "allowed: " + ", ".join(allowed))
        for key in required:
            if key not in mapping:
                raise SpecError(self.where(mapping, field), f"missing field {key!r}",
                                f"add `{key}:`")

    def names(self, value: Any, field: str, parent: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        if isinstance(value, list):
            value = next(v for v in value if not isinstance(v, str))
            got = f"a list containing {kind_of(value)}"
        else:
            got = kind_of(value)
        raise SpecError(self.where(parent, field, key), f"expected a name or list of names, got {got}",
                        f"write `{key}: name` or `{key}: [name, name]`")
