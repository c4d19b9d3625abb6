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
tokens per device exceed: engine.deploy.structure.regime).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from engine.language.formula_tree import compile_arrays, positional

#: the step functions' arguments (engine.deploy.step_functions.ARGS, by name)
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
        self._specs: dict[int, Any] = {}
        self._tables: dict[int, Any] = {}
        self._roofs: dict[int, Any] = {}

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
        programs = option[phase]
        return self.program(programs[min(self.regime(option, tokens), len(programs) - 1)])

    @staticmethod
    def regime(option: dict, tokens: int) -> int:
        """The fusion regime of ``tokens`` per device under ``option``'s limits."""
        from engine.deploy.structure import regime      # the one rule of a regime
        return regime(option["limits"], tokens)

    def spec(self, index: int):
        """Expected-time tree ``index`` (engine.deploy.measured.spec_tree's form) read back: None for
        a step no table covers (its bound / the default efficiency), else (calls, the tables, the
        roofline's key, the point's coordinate functions, the condition's function, the MoE key's
        text): what measured._ask reads of a step's Spec."""
        if index in self._specs:
            return self._specs[index]
        tree = self.doc["trees"][index]
        spec = None
        if tree[0] == "pw":
            (value, applies), _ = tree[1:]
            time = value[1][2]                                   # ["max", ["*", repeat, time], t_sol]
            nodes = time[1:] if time[0] == "min" else [time]
            entries = [self.doc["lookups"][n[1]] for n in nodes]
            spec = (float(value[1][1]), [self.table(n[1]) for n in nodes], self.roof(nodes[0][1]),
                    [compile_arrays(p) for p in nodes[0][2:]], compile_arrays(applies[-1]), entries[0]["shape"])
        self._specs[index] = spec
        return spec

    def roof(self, ref: int):
        """Lookup ``ref``'s roofline: its stored tree as a function of the table's axes (made once
        per ref, so the interpolation groups by it), or its key where the tree is missing
        (engine.deploy.interpolation compiles it then)."""
        found = self._roofs.get(ref)
        if found is None:
            entry = self.doc["lookups"][ref]
            stored = entry.get("roof_fn")
            found = self._roofs[ref] = tuple(entry["roof_key"]) if stored is None else \
                _shaped(positional(stored[1], tuple(stored[0])))
        return found

    def table(self, ref: int):
        """Lookup table ``ref`` as an engine.deploy.measured_tables.Table (one object per ref: the
        interpolation groups its points by table)."""
        found = self._tables.get(ref)
        if found is None:
            from engine.deploy.measured_tables import Table
            entry = self.doc["lookups"][ref]
            values = tuple(np.asarray(v, dtype=float) for v in entry["values"])
            seconds = np.asarray(entry["us"], dtype=float).reshape([len(v) for v in values]) * 1e-6
            kernel, variant, gpu, framework, version, source = entry["table"]
            found = self._tables[ref] = Table(kernel, variant, gpu, framework, version, tuple(entry["axes"]), values,
                                              seconds, entry["path"], source, rate=entry.get("rate"))
        return found

    def structure(self, option: dict, config, options, tokens: dict[str, int]) -> "StoredStructure":
        """The structure ``archledger deploy`` builds for ``option`` under ``config`` and ``options``
        (the option's framework, a KV dtype it holds, the document's budget and HBM share, no MTP)
        at ``tokens`` per device by phase."""
        return StoredStructure(self, option, config, options, tokens)


def _shaped(fn):
    """A tree's function, or its float as a function (a constant term)."""
    return fn if callable(fn) else (lambda *args: fn)


class StoredStructure:
    """What engine.deploy.sol.summarize, engine.deploy.plan.Plan and the op rows read of an
    engine.deploy.structure.Structure, made from a :class:`Document`'s option: each phase's program
    of its regime, weights, reserve, admission, KV per GPU and per request; and the expected times'
    lookups (:meth:`gather`, which engine.deploy.measured.gather hands a stored structure's calls to)."""

    def __init__(self, document: Document, option: dict, config, options, tokens: dict[str, int]):
        from engine.deploy.admission import Admission
        from engine.deploy.structure import kv_device
        from engine.language import kv
        doc = document.doc
        row = doc["configs"][option["config"]]
        self.document, self.option = document, option
        self.ev = SimpleNamespace(model=SimpleNamespace(model_id=doc["model_id"]))
        self.config, self.options, self.domain = config, options, row["domain"]
        compiled = {p: document.phase_program(option, p, tokens[p]) for p in ("prefill", "decode")}
        self.compiled = compiled
        self.programs = self.formulas = self.unfused = self.unfused_formulas = \
            {p: c.program for p, c in compiled.items()}
        self.regimes = {p: document.regime(option, tokens[p]) for p in ("prefill", "decode")}
        self.weight_bytes_per_gpu = row["weight_bytes_per_gpu"]
        self.reserve_bytes_per_gpu = option["reserve"]
        self.admission = Admission(**option["admission"])
        self.kv_device_fn = kv_device(_shaped(positional(doc["trees"][row["kv_dev"]], ("length", "kv_bytes"))))
        self.max_context = doc["max_context"]
        self._kv = kv

    def request_bytes_fn(self, stack: str, part: str | None = None):
        """Cache bytes per request of one stack (engine.language.kv.request_bytes_of of the stored terms)."""
        elements, own = (self._kv.of_length(_shaped(positional(t, ("length",))))
                         for t in self.document.doc["kv_terms"][stack][part or "all"])
        return self._kv.request_bytes_of(elements, own)

    def gather(self, plan, phase: str, batch, seq, ctx, values: dict, keep=None):
        """engine.deploy.measured.gather of this structure: every kept step at its bound / the
        default efficiency (measured.fallback), and the lookups of the steps the document's
        expected-time trees cover, where measured.ask_where (the one rule) says a table applies."""
        from engine.deploy.measured import _rows, ask_where, fallback
        steps = self.programs[phase].steps
        keep = list(range(len(steps)) if keep is None else keep)
        n = len(batch)
        t_sol = _rows(values["t_sol"], keep, n)
        out = fallback(t_sol)
        expected = self.option["expected"][plan.options.kv_dtype][phase][self.regimes[phase]]
        trees = self.document.doc["expected"][expected]
        env = {name: np.broadcast_to(np.asarray(x, dtype=float), (n,)) for name, x in
               (("batch", batch), ("seq", seq), ("ctx", ctx))}
        env["kv_bytes"] = np.full(n, float(plan.kv_bytes))
        found: dict = {}            # coordinate function -> its values (steps share them)

        def at(fn):
            value = found.get(fn)
            if value is None:
                value = np.asarray(fn(env), dtype=float)
                value = found[fn] = value if value.shape == (n,) else np.broadcast_to(value, (n,))
            return value
        for j, i in enumerate(keep):
            spec = self.document.spec(trees[i])
            if spec is None:
                continue
            repeat, tables, roof, point, applies, shape = spec
            a = ask_where(j, np.column_stack([at(f) for f in point]), at(applies), t_sol[j], tables, roof, repeat,
                          shape)
            if a is not None:
                out.asks.append(a)
        return out
