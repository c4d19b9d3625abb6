"""Errors a contributor can act on: one line with file:line, the field, what is wrong, what to write.

Layer: engine. Every user-facing failure of loading or evaluating a spec is a :class:`SpecError`;
the CLI prints ``str(error)`` and exits non-zero, so the message must stand on its own.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Where:
    """A place in the corpus: file (relative to the corpus root when possible), 1-based line, field path."""

    file: str = "<unknown>"
    line: int = 0
    field: str = ""

    def at(self, field: str, line: int | None = None) -> "Where":
        """The same file, a sub-field (dotted), optionally a more precise line."""
        joined = f"{self.field}.{field}" if self.field else field
        return Where(self.file, self.line if line is None else line, joined)

    def __str__(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        return f"{loc}: {self.field}" if self.field else loc


class SpecError(Exception):
    """A spec (or corpus table) is wrong. ``str()`` is one line: ``file:line: field: problem; hint``."""

    def __init__(self, where: Where, problem: str, hint: str = ""):
        self.where = where
        self.problem = problem
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.where}: {self.problem}"
        if self.hint:
            text += f" — {self.hint}"
        return " ".join(text.split())  # guarantee a single line
