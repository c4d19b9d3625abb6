"""Verification guards: each module checks one kind of fact and returns structured findings.

Layer: engine.verify. A guard is a module with ``NAME``, ``EVIDENCE`` (what it reads, for the guard
table) and ``check(ctx) -> list[Finding]``. :mod:`engine.verify.validate` runs them in :data:`ORDER`.
A finding names the node (a walk uid, or a corpus file:line) and says what to change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.spec.corpus import Corpus
from engine.spec.evaluate import Analysis
from engine.verify.evidence import Evidence, Registry
from engine.spec.ir import ModelSpec

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Finding:
    guard: str
    severity: str      # error blocks publication; warning and info are shown
    node: str          # walk uid or corpus place the finding is about ("" for the whole model)
    message: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"guard": self.guard, "severity": self.severity, "node": self.node,
                "message": self.message, "hint": self.hint}

    def one_line(self) -> str:
        where = f"{self.node}: " if self.node else ""
        text = f"{self.severity} [{self.guard}] {where}{self.message}"
        return " ".join((text + (f" — {self.hint}" if self.hint else "")).split())


@dataclass(frozen=True, slots=True)
class SpecTensor:
    """One concrete stored tensor of the spec (layer and expert indices filled in)."""

    name: str          # canonical name
    dtype: str
    shape: tuple[int, ...]
    uid: str
    stack: str
    role: str
    leaf: str
    scheme: str

    @property
    def numel(self) -> int:
        out = 1
        for d in self.shape:
            out *= d
        return out


@dataclass
class Context:
    corpus: Corpus
    model: ModelSpec
    evidence: Evidence
    registry: Registry
    numeric: Analysis
    symbolic: Analysis
    spec_tensors: list[SpecTensor] = field(default_factory=list)
    #: canonical name -> manifest tensor (filled by validate when a manifest exists)
    checkpoint: dict[str, Any] = field(default_factory=dict)
