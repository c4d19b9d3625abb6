"""Compiled programs made from the build's formula document (``results/formulas/<model>.json``).

Layer: engine.deploy (reads a document the caller loaded; no file, no sympy of its own). A built
checkout holds, per model, every structure the grid evaluated as formula trees
(engine/batch/deploy_export.py). When the document says its trees are written in their compiled
functions' order (``evaluation_order``: engine.deploy.printed_tree), a program made here from them
gives the floats of the program the planner compiles from the spec (the same step functions, in
the same order, with the same rate kinds): what a command needs to answer from the build instead
of walking, placing and compiling the spec. tests/test_stored_consistency.py holds the two equal,
bit for bit, on three models.

Which program a deployment runs: the option of its (GPU, config, scale-up domain, framework), and
per phase the program of its fusion token regime (the number of the option's ``limits`` the
tokens per device exceed: engine.deploy.structure_cache.regime).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.language.formula_tree import positional

#: the step functions' arguments (engine.deploy.cost.ARGS, by name)
NAMES = ("batch", "seq", "ctx", "kv_bytes")
LINKS = ("", "scale_up", "scale_out")          # engine.batch.deploy_export.LINKS, by index
KINDS = ("compute", "comm", "fused")           # engine.batch.deploy_export.KINDS


@dataclass(frozen=True, slots=True)
class StoredStep:
    """What a compiled program and the per-op rows read of one step (engine.deploy.placement.Step's
    fields of those names; ``repeat`` a float)."""

    uid: str
    name: str
    op: str
    kind: str
    role: str
    component: str
    group: str
    link: str
    view: bool
    parts: tuple
    compute_dtype: str
    repeat: float
    collective: str
    ranks: int
    nodes: int
    formulas: tuple                     # (flops, bytes, comm bytes, weight bytes) as text


@dataclass(frozen=True)
class StoredProgram:
    """A program's steps (what engine.deploy.cost.CompiledProgram reads of a Program)."""

    steps: tuple


class Document:
    """One model's formula document, its programs compiled on demand (each tree's function made
    once: programs share most trees, as the compile path shares its step functions)."""

    def __init__(self, doc: dict[str, Any]):
        if not doc.get("evaluation_order"):
            raise ValueError("the document's trees are not in their evaluation order (an older build, or a "
                             "formula without one): compile from the spec")
        self.doc = doc
        self._functions: dict[int, Any] = {}
        self._programs: dict[int, Any] = {}

    def function(self, index: int):
        """Tree ``index`` as a function of (batch, seq, ctx, kv_bytes), or its float."""
        fn = self._functions.get(index)
        if fn is None:
            fn = self._functions[index] = positional(self.doc["trees"][index], NAMES)
        return fn

    def program(self, index: int):
        """Program ``index`` as an engine.deploy.cost.CompiledProgram (made once)."""
        found = self._programs.get(index)
        if found is None:
            from engine.deploy.cost import CompiledProgram
            rows = self.doc["programs"][index]
            steps = tuple(self.step(row) for row in rows)
            entries = [(*(self.function(row[k]) for k in range(4)),
                        self.function(row[4]) if row[8] != -1 else 0.0) for row in rows]
            found = self._programs[index] = CompiledProgram(StoredProgram(steps), entries)
        return found

    def step(self, row: list) -> StoredStep:
        """One program row (engine/batch/deploy_export.py's module doc) as a :class:`StoredStep`."""
        s, doc = self.doc["strings"], self.doc
        collective, ranks, nodes = doc["colls"][row[8]] if row[8] != -1 else ("", 1, 1)
        return StoredStep(uid=s[row[11]], name=s[row[15]], op=s[row[16]], kind=KINDS[row[9]], role=s[row[18]],
                          component=s[row[17]], group=s[row[19]], link=LINKS[row[7]], view=bool(row[10]),
                          parts=tuple(s[i] for i in row[20]), compute_dtype=doc["dtypes"][row[6]],
                          repeat=row[5], collective=collective, ranks=ranks, nodes=nodes,
                          formulas=(s[row[12]], s[row[13]], s[row[14]], s[row[21]]))

    def option(self, gpu: str, config_key: str, framework: str) -> dict | None:
        """The option of (GPU key, config key ``<n_gpus>-<label>-d<domain>``, framework), None when the
        grid did not publish it."""
        configs = self.doc["configs"]
        for o in self.doc["options"]:
            if o["gpu"] == gpu and o["framework"] == framework and configs[o["config"]]["key"] == config_key:
                return o
        return None

    def phase_program(self, option: dict, phase: str, tokens: int):
        """The compiled program ``option`` runs in ``phase`` at ``tokens`` tokens per device: its
        fusion regime's (how many of the option's limits the tokens exceed)."""
        from engine.deploy.structure_cache import regime as regime_of      # the one rule of a regime
        regime = regime_of(option["limits"], tokens)
        programs = option[phase]
        return self.program(programs[min(regime, len(programs) - 1)])
