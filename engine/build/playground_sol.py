"""The playground's live SOL times: a pick's prefill and decode speed-of-light as formula trees over its dims.

Layer: engine.build (on engine.deploy and engine.spec.formula_tree). ``archledger edit MODEL --swap
... --bind ...`` deploys both sides with the planner (:func:`engine.build.whatif.compare`): one
prefill of the whole ``context``-token prompt (batch 1: one step, TTFT = its step time) and one
decode step at ``context`` (TPOT = its step time; the bytes it reads), on H200 under
:func:`engine.build.whatif.default_config`. A step's time is max(FLOPs / peak, bytes / HBM
bandwidth, link bytes / link bandwidth + calls x per-call latency) and a phase is the sum over its
steps (:mod:`engine.deploy.cost`). Those step totals are the planner's *symbolic* programs (the same
placement and fusion, formulas over dims: :attr:`engine.deploy.structure.Structure.formulas`), so
the page can evaluate them at the reader's dims. Nothing here estimates anything: it exports the
planner's expressions and the GPU's rates, and the page (static/js/playground.js) sums
``max`` terms with static/js/formula.js.

Per base model and parallel config (``base``): the old side's three numbers as trees over ``seq`` and
``ctx`` (the numeric programs, as the deploy page exports them). Per pick (``sol``): the change,
new - old, of each number (the steps the swap changes), as trees over the pick's dims and the
context, made from the variant's plan at the pre-filled binding (the first corpus value of each dim,
the page's pre-fill; :data:`engine.build.whatif.PLACEHOLDER` where no corpus model binds it).

Where the planner decides on a dim's *value* the trees hold only while the decision stands, so each
pick carries ``valid``: [[condition tree, reason], ...], all of which must hold (evaluate to non-zero)
for the trees to equal ``edit`` (the page shows no SOL number otherwise, and says why):

* the parallel config (:func:`~engine.build.whatif.default_config` picks the fewest GPUs holding the
  larger side's weights; the new side's weights are a tree over the dims);
* the fusion token regime of the prefill (rules with ``max_tokens`` apply at ``ctx`` tokens per device
  or fewer: the context must stay on the build context's side of every live limit);
* the placement's numeric decisions (more devices than heads: the heads replicate) on expressions
  of the pick's dims, and the divisibility of a sharded dim the pick binds by its group (``check``).

Invariant: at any binding where every ``valid`` tree holds, base + change equals ``archledger edit
--json``'s ``prefill_sol_s``, ``decode_sol_s`` and ``decode_bytes`` to float rounding
(tests/test_site_playground_sol.py).
"""
from __future__ import annotations

from typing import Any

import sympy

from engine.deploy import Options, Scenario
from engine.deploy.cost import KV_BYTES, link_bandwidth, step_totals
from engine.deploy.fusion import live_rules
from engine.deploy.hardware import GPU
from engine.deploy.parallel import Mesh, ParallelConfig
from engine.deploy.planner import _model_decider, _sharded_axes, build_structure, check, validate_options
from engine.deploy.structure import tokens_per_device
from engine.spec import formula_tree, kv, symbols
from engine.spec.api import Evaluation

#: The numbers exported, in the page's order (engine.build.whatif.METRICS's keys).
KEYS = ("prefill_sol_s", "decode_bytes", "decode_sol_s")
_SEQ, _CTX, _BATCH = (symbols.dim(n) for n in (symbols.SEQ, symbols.CTX, symbols.BATCH))
_DEGREES = ("tp", "ep", "dp_attn", "cp", "pp", "dp")


def options_for(context: int, framework: str, kv_dtype: str) -> tuple[Options, Scenario]:
    """What :func:`engine.build.whatif._side` plans with at ``context`` (batch 1)."""
    return (Options(framework=framework, kv_dtype=kv_dtype, prefill_tokens=max(8192, context)),
            Scenario(batch=1, input_len=context, output_len=0))


def structure(ev: Evaluation, gpu: GPU, config: ParallelConfig, table, context: int, framework: str,
              kv_dtype: str):
    """:func:`engine.deploy.plan`'s structure (uncompiled: only its programs are read), or the
    planner's one-line refusal as a string."""
    problems = check(ev, config)
    if problems:
        return f"{config.label()} cannot run it: " + "; ".join(problems)
    options, scenario = options_for(context, framework, kv_dtype)
    validate_options(options, ev)
    domain = min(gpu.scale_up_domain, config.gpus_per_node or gpu.scale_up_domain)
    tokens = tokens_per_device(config, scenario, options.prefill_tokens, options.decode_seq)
    return build_structure(ev, config, options, domain, table, gpu, tokens, compile=False)


class _Rates:
    """A GPU's divisors of a step's totals (per dtype, link and collective shape)."""

    def __init__(self, gpu: GPU):
        self.gpu = gpu

    def terms(self, step, f, b, c, calls) -> Any:
        """The step's SOL as a tree: max(f / peak, b / hbm, c / link + calls x alpha)."""
        g = self.gpu
        link = link_bandwidth(g, step.link)
        alpha = g.collective_latency(step.collective, step.ranks, step.nodes) if step.collective else 0.0
        comm = sympy.Integer(0)
        if link != float("inf"):
            comm = c / sympy.Float(link)
        if alpha:
            comm = comm + calls * sympy.Float(alpha)
        return [f / sympy.Float(g.peak_flops(step.compute_dtype)), b / sympy.Float(g.hbm_bytes_per_s), comm]


def _phase_point(phase: str) -> dict:
    """Batch 1 (one request per replica at dp_attn 1; whatif's setting), decode at one new token."""
    out = {_BATCH: 1}
    if phase == "decode":
        out[_SEQ] = 1
    return out


def _sum_tree(terms: list[list]) -> Any:
    """Sum of max(...) of each step's terms as one tree; steps whose terms are all numbers are
    added here (their max is a number), the others stay ``max`` nodes."""
    constant, nodes = 0.0, []
    for parts in terms:
        if all(p.is_number for p in parts):
            constant += max(float(p) for p in parts)
        else:
            nodes.append(["max", *(formula_tree.to_tree(p) for p in parts)])
    return ["+", constant, *nodes] if nodes else constant


def _bytes_tree(values: list) -> Any:
    return formula_tree.to_tree(sympy.Add(*values))


def base_trees(s, gpu: GPU, kv_dtype: str) -> dict[str, Any]:
    """The old side's three numbers of structure ``s`` as trees over ``seq`` and ``ctx`` (its
    numeric programs: numbers in the scenario symbols)."""
    rates = _Rates(gpu)
    out = {}
    for phase in ("prefill", "decode"):
        point = {**_phase_point(phase), KV_BYTES: kv.KV_DTYPE_BYTES[kv_dtype]}
        terms, traffic = [], []
        for step in s.programs[phase].steps:
            f, b, c, _ = (sympy.sympify(e).xreplace(point) for e in step_totals(step))
            calls = (step.repeat if step.collective else sympy.Integer(0))
            terms.append(rates.terms(step, f, b, c, sympy.sympify(calls).xreplace(point)))
            traffic.append(b)
        out[f"{phase}_sol_s"] = _sum_tree(terms)
        if phase == "decode":
            out["decode_bytes"] = _bytes_tree(traffic)
    return out


def _key(step, totals) -> tuple:
    return (step.uid, *totals, step.repeat if step.collective else 0, step.compute_dtype, step.link,
            step.collective, step.ranks, step.nodes)


def change_trees(old, new, new_ev: Evaluation, needs: list[str], gpu: GPU, config: ParallelConfig,
                 kv_dtype: str) -> dict[str, Any]:
    """new - old of the three numbers: the steps of ``new``'s symbolic programs that ``old``'s lack
    (added) and the reverse (taken away; a step is its uid and totals, so the steps the swap leaves
    alone cancel), every symbol but the pick's dims and the scenario bound (``new_ev``'s values:
    the base's dims, the group counts; the config's degrees; batch 1; the KV dtype's bytes)."""
    rates = _Rates(gpu)
    fixed = {symbols.dim(k): v for k, v in new_ev.bound.items() if k not in needs}
    degrees = {symbols.dim(n): getattr(config, n) for n in _DEGREES}
    out: dict[str, Any] = {}
    for phase in ("prefill", "decode"):
        point = {**fixed, **degrees, **_phase_point(phase), KV_BYTES: kv.KV_DTYPE_BYTES[kv_dtype]}
        sides = [{_key(st, step_totals(st)): st for st in s.formulas[phase].steps} for s in (old, new)]
        terms: dict[int, list] = {1: [], -1: []}
        traffic = []
        for sign, mine, other in ((-1, sides[0], sides[1]), (1, sides[1], sides[0])):
            for key, step in mine.items():
                if key in other:
                    continue
                f, b, c, calls = (sympy.sympify(e).xreplace(point) for e in (*key[1:4], key[5]))
                terms[sign].append(rates.terms(step, f, b, c, calls))
                traffic.append(sign * b)
        out[f"{phase}_sol_s"] = ["+", _sum_tree(terms[1]), ["*", -1, _sum_tree(terms[-1])]]
        if phase == "decode":
            out["decode_bytes"] = _bytes_tree(traffic)
    return out


def free_of(trees: Any) -> set[str]:
    return formula_tree.free_names(trees) if not isinstance(trees, dict) else \
        set().union(set(), *(free_of(t) for t in trees.values()))


def config_condition(old_ev: Evaluation, new_ev: Evaluation, needs: list[str], gpu: GPU,
                     config: ParallelConfig, hbm_fraction: float = 0.9) -> Any | None:
    """The binding keeps :func:`engine.build.whatif.default_config`'s choice: the larger side's
    weights x 1.25 stay between the capacity of the config before it and this one's (a tree over
    the pick's dims; None when the new side's weights do not depend on them)."""
    from engine.build.whatif import default_config
    fixed = {symbols.dim(k): v for k, v in new_ev.bound.items() if k not in needs}
    new_bytes = sympy.Add(*(t.total_bytes for t in new_ev.tensors("symbolic"))).xreplace(fixed)
    if new_bytes.is_number:
        return None
    old_bytes = float(sum(t.total_bytes for t in old_ev.tensors()))
    per_gpu = gpu.hbm_bytes * hbm_fraction
    ladder = [(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4), (8, 8), (8, 16)]
    chosen = next(i for i, (tp, pp) in enumerate(ladder) if (tp, pp) == (config.tp, config.pp))
    assert default_config([old_ev, new_ev], gpu, hbm_fraction) == config
    need = ["*", 1.25, ["max", old_bytes, formula_tree.to_tree(new_bytes)]]
    conditions = []
    if chosen > 0:
        tp, pp = ladder[chosen - 1]
        conditions.append([">", need, tp * pp * per_gpu])
    if chosen < len(ladder) - 1:
        conditions.append(["<=", need, config.tp * config.pp * per_gpu])
    return ["and", *conditions] if conditions else None


def token_condition(table, gpu: GPU, config: ParallelConfig, context: int) -> Any | None:
    """The prefill's fusion regime at ``context`` (one request: ``ctx`` tokens per device): each live
    ``max_tokens`` limit stays on the side of the context it is on at the build (None: no limit)."""
    limits = sorted({r.when["max_tokens"] for r in live_rules(table, gpu, config, "prefill") if "max_tokens" in r.when})
    conditions = [["<=" if context <= m else ">", symbols.CTX, m] for m in limits]
    return ["and", *conditions] if conditions else None


def decision_conditions(new_ev: Evaluation, needs: list[str], config: ParallelConfig) -> list[list]:
    """The placement's decisions on expressions of the pick's dims (:func:`engine.deploy.planner._decider`'s
    record: expression -> the integer it decided), each kept: the value stays between the same two
    group sizes of the config (a decision compares a count with a group size, or with 1), and a
    sharded dim the pick binds stays divisible by its group (:func:`engine.deploy.planner.check`)."""
    decide = _model_decider(new_ev)
    seen = getattr(decide, "seen", {})
    needed = {symbols.dim(d) for d in needs}
    fixed = {symbols.dim(k): v for k, v in new_ev.bound.items() if k not in needs}
    # a decision compares a count with a group size (more devices than heads) or with 1 (one
    # expert): it stands while the count stays between the same two of these
    marks = sorted({1, 2, config.tp, config.attn_tp, config.moe_tp, config.ep, config.dp_attn, config.cp,
                    config.tp * config.cp, config.attn_tp * config.cp})
    out = []
    for expr_, value in seen.items():
        if value is None or not (getattr(expr_, "free_symbols", set()) & needed):
            continue
        tree = formula_tree.to_tree(sympy.sympify(expr_).xreplace(fixed))
        below = max((m for m in marks if m <= value), default=None)
        above = min((m for m in marks if m > value), default=None)
        parts = ([[">=", tree, below]] if below is not None else []) + ([["<", tree, above]] if above is not None else [])
        if parts:
            out.append(["and", *parts])
    mesh = Mesh(config, 1 << 30)
    for region, world, unit, count in _sharded_axes(new_ev):
        group = mesh.world_group(world, region)
        if unit not in needs or group is None or isinstance(count, Exception) or group.size == 1:
            continue
        per = sympy.Rational(count) / new_ev.bound[unit]       # units of the axis per unit of the dim
        tree = formula_tree.to_tree(symbols.dim(unit) * per)
        ok = ["==", ["mod", tree, group.size], 0]
        if new_ev.corpus.dims[unit].replicate:
            ok = ["or", ok, ["==", ["mod", group.size, tree], 0]]
        out.append(ok)
    return out


class Bases:
    """One base model's old side per parallel config (structures and their trees), shared by its picks."""

    def __init__(self, ev: Evaluation, gpu: GPU, table, context: int, framework: str, kv_dtype: str):
        self.ev, self.gpu, self.table, self.context = ev, gpu, table, context
        self.framework, self.kv_dtype = framework, kv_dtype
        self.structures: dict[str, Any] = {}
        self.trees: dict[str, Any] = {}

    def at(self, config: ParallelConfig):
        label = config.label()
        if label not in self.structures:
            s = structure(self.ev, self.gpu, config, self.table, self.context, self.framework, self.kv_dtype)
            self.structures[label] = s
            self.trees[label] = s if isinstance(s, str) else base_trees(s, self.gpu, self.kv_dtype)
        return self.structures[label]


def pick_sol(bases: Bases, variant, needs: list[str]) -> dict[str, Any]:
    """The SOL part of one pick (module doc): ``config`` (the base's entry in ``bases.trees``),
    ``change`` (key -> tree), ``valid`` ([[tree, reason]]), ``at`` (the binding the
    planner's decisions were taken at); or ``{"error": ...}`` when the planner refuses the pick at
    that binding."""
    from engine.build.whatif import default_config
    from engine.spec.api import evaluate_spec
    ev, gpu = bases.ev, bases.gpu
    new_ev = evaluate_spec(ev.corpus, variant.spec)
    config = default_config([ev, new_ev], gpu)
    old = bases.at(config)
    if isinstance(old, str):
        return {"error": f"the base on {config.label()}: {old}"}
    new = structure(new_ev, gpu, config, bases.table, bases.context, bases.framework, bases.kv_dtype)
    if isinstance(new, str):
        return {"error": new}
    change = change_trees(old, new, new_ev, needs, gpu, config, bases.kv_dtype)
    valid = []
    for tree, reason in ((config_condition(ev, new_ev, needs, gpu, config),
                          f"the weights then need another parallel config than {config.label()}"),
                         (token_condition(bases.table, gpu, config, bases.context),
                          "a fusion's token limit falls between this context and the build's "
                          f"({bases.context:,})")):
        if tree is not None:
            valid.append([tree, reason])
    valid += [[c, "the planner places it differently at these dims (heads per device, divisibility)"]
              for c in decision_conditions(new_ev, needs, config)]
    free = free_of(change) | free_of({str(i): v[0] for i, v in enumerate(valid)})
    stray = free - set(needs) - {symbols.SEQ, symbols.CTX}
    if stray:
        return {"error": f"the SOL formulas read {', '.join(sorted(stray))}, which the page cannot bind"}
    return {"config": config.label(), "change": change, "valid": valid,
            "at": {d: int(new_ev.bound[d]) for d in needs}}
