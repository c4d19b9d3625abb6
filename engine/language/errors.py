"""Errors a contributor can act on: one line with file:line, the field, what is wrong, what to write.

Layer: engine.language. Every user-facing failure of loading or evaluating a spec is a :class:`SpecError`;
the CLI prints ``str(error)`` and exits non-zero, so the message must stand on its own.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field as _field
from typing import Any


@dataclass(frozen=True, slots=True)
class Where:
    """A place in the corpus: file (relative to the corpus root when possible), 1-based line, field path."""

    file: str = "<unknown>"
    line: int = 0
    field: str = ""
    #: The YAML mapping (or list) written at this place, when known: ``at()`` looks sub-fields up
    #: in it so they point at their own line (a block-style node spans several lines).
    node: Any = _field(default=None, compare=False, repr=False)

    def at(self, field: str, line: int | None = None) -> "Where":
        """The same file, a sub-field (dotted, ``a.b``/``a[0].b``), at its own line when known."""
        joined = f"{self.field}.{field}" if self.field else field
        found, node = self.line, self.node
        for key, index in _path(field):
            if not (hasattr(node, "line_of") and key in node):
                node = None
                break
            found, node = node.line_of(key) or found, node[key]
            if index is not None:
                if not (isinstance(node, list) and index < len(node)):
                    node = None
                    break
                node = node[index]
                found = getattr(node, "line", 0) or found
        return Where(self.file, found if line is None else line, joined, node)

    def __str__(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        return f"{loc}: {self.field}" if self.field else loc


def _path(field: str) -> list[tuple[str, int | None]]:
    """'schedule[1].when' -> [('schedule', 1), ('when', None)]."""
    out = []
    for part in field.split("."):
        match = re.fullmatch(r"(.*)\[(\d+)\]", part)
        out.append((match[1], int(match[2])) if match else (part, None))
    return out


class SpecError(Exception):
    """A spec (or corpus table) is wrong. ``str()`` is one line: ``file:line: field: problem; hint``."""

    def __init__(self, where: Where, problem: str, hint: str = ""):
        self.where = where
        self.problem = problem
        self.hint = hint
        super().__init__(self.one_line())

    def __reduce__(self):    # picklable, so an error in a build worker reaches the parent intact
        return (type(self), (self.where, self.problem, self.hint))

    def one_line(self) -> str:
        text = f"{self.where}: {self.problem}"
        if self.hint:
            text += f" — {self.hint}"
        return " ".join(text.split())  # guarantee a single line
