"""The playground's live SOL times: a pick's prefill and decode speed-of-light as formula trees over its dims.

Layer: engine.playground (on engine.deploy and engine.language.formula_tree). ``archledger edit MODEL --swap
... --bind ...`` deploys both sides with the planner (:func:`engine.playground.variant.compare`): one
prefill of the whole ``context``-token prompt (batch 1: one step, TTFT = its step time) and one
decode step at ``context`` (TPOT = its step time; the bytes it reads), on H200 under
:func:`default_config`. A step's time is max(FLOPs / peak, bytes / HBM bandwidth, link bytes / link
bandwidth + calls x per-call latency) and a phase is the sum over its steps (:mod:`engine.deploy.cost`).
Those step totals come from the planner's *symbolic* programs (the same placement, pipeline hops and
fusion, formulas over dims: :func:`engine.deploy.planner.place_symbolic`), so the page can evaluate
them at the reader's dims. Nothing here estimates anything: it exports the planner's expressions and
the GPU's rates, and the page (static/js/playground.js) sums ``max`` terms with static/js/formula.js.

Per base model and parallel config (:class:`Bases`): the old side's three numbers as trees over
``seq`` and ``ctx``. Per pick (``sol``), one entry per subset of its layer templates the page lets
the reader tick (every non-empty subset where no layer stream touches the slot, ``tickable``; else
all of them: engine.playground.whatif.template_subsets), keyed by the subset comma-joined in the pick's
order: the steps the swap in those templates adds and those it removes (their difference is new -
old), as trees over the pick's dims and the context, per template, from the variant planned at the
pre-filled binding (the first corpus value of each dim, the page's pre-fill;
:data:`engine.playground.sites.PLACEHOLDER` where no corpus model binds it). The variant's symbolic
analysis is the base's with the new filler's site walks spliced in (:func:`site_sol`), or pick()'s
whole walk of it where a layer stream crosses the slot (:func:`whole_sol`); the planner repeats its
record of the base's placement for the rows the swap leaves alone.

A subset is the variant ``edit --swap 'layers[SUBSET].SLOT=COMPONENT'`` makes, on the config its
own weights pick. The swap in all the templates is planned; a subset on the same config takes that
plan's changed steps in its templates (every changed step lies in one template's rows: the planner
repeats the placement of a row whose inputs place alike, and a fusion joins neighbouring steps, so
swapping one template changes no step of another), with its own config bounds, ep check and
divisibility conditions and the whole swap's placement decisions (a superset of its own: a condition
from another template's rows can withhold a number, never change one). A subset on another config,
or where a changed step lies outside every template, is planned by itself (:func:`_planned`).
Over the corpus that is 3,045 entries for 199 tickable picks with two or more templates (DeepSeek-V4's
seven templates: 127 each); planning each subset by itself gives the same trees (checked for every
subset of the corpus when this was written; tests/test_site_playground_partial.py against ``edit``).

Where the planner decides on a dim's *value* the trees hold only while the decision stands, so each
pick carries ``valid``: [[condition tree, reason], ...], all of which must hold (evaluate to non-zero)
for the trees to equal ``edit`` (the page shows no SOL number otherwise, and says why):

* the parallel config (:func:`default_config` picks the fewest GPUs holding the larger side's
  weights; the new side's weights are a tree over the dims);
* the fusion token regime of the prefill (rules with ``max_tokens`` apply at ``ctx`` tokens per device
  or fewer: the context must stay on the build context's side of every live limit);
* the placement's decisions (more devices than heads: the heads replicate) on expressions of the
  pick's dims, and the divisibility of the sharded axes the swap puts in (``check``).

Invariant: at any binding where every ``valid`` tree of a subset's entry holds, base + change equals
``archledger edit --swap 'layers[SUBSET]...' --json``'s ``prefill_sol_s``, ``decode_sol_s`` and
``decode_bytes`` to float rounding (tests/test_site_playground_sol.py, the whole swap;
tests/test_site_playground_partial.py, subsets; a corpus-wide run of every pick at its pre-filled
binding and at doubled dims found no difference above 1e-9).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from engine.deploy import Options, Scenario
from engine.deploy.step_functions import KV_BYTES
from engine.deploy.fusion_table import live_rules
from engine.deploy.hardware import GPU
from engine.deploy.parallel import Mesh, ParallelConfig
from engine.deploy.planner import decider, place_symbolic
from engine.deploy.legality import check
from engine.deploy.structure import tokens_per_device
from engine.language import formula_tree, kv, symbols
from engine.language.api import Evaluation
from engine.playground.trees import (_NAMES, _TERMS, _TEXTS, _collected, _fold, _folded, bind_tree, free_names,
                                     tree_text)
from engine.playground.steps import KEYS, _STEPS, _SUMS, _programs_change, _step_trees, _template_of, _under

#: The (tp, pp) rungs :func:`default_config` climbs.
LADDER = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4), (8, 8), (8, 16))


def default_config(evs: list[Evaluation], gpu: GPU, hbm_fraction: float = 0.9) -> ParallelConfig:
    """The fewest GPUs (tp 1, 2, 4, 8, then pipeline stages of 8) holding the larger side's weights
    in ``hbm_fraction`` of HBM with a fifth of it left for KV and activations; when both sides are
    MoE their experts go on ep = tp (a dense side cannot take ep > 1: dense -> MoE keeps ep 1)."""
    return config_for_bytes(max(float(sum(t.total_bytes for t in ev.tensors())) for ev in evs),
                            all("n_experts" in ev.bound for ev in evs), gpu, hbm_fraction)


def config_for_bytes(weight_bytes: float, moe: bool, gpu: GPU, hbm_fraction: float = 0.9) -> ParallelConfig:
    """:func:`default_config` for the larger side's ``weight_bytes`` (``moe``: both sides are)."""
    need = weight_bytes * 1.25
    per_gpu = gpu.hbm_bytes * hbm_fraction
    for tp, pp in LADDER:
        if tp * pp * per_gpu >= need:
            break
    return ParallelConfig(tp=tp, pp=pp, ep=tp if moe else 1)


# -- the memos of formula trees (engine/playground/trees.py, steps.py and the site route below) -----


def forget() -> None:
    """Empty the memos of trees (_NAMES, _TEXTS, _TERMS, _STEPS, _DIVISIBLE, _SUMS:
    :func:`engine.playground.whatif.model_playground` after each model: its trees are bound by its own dims, so the next model shares none of them)."""
    _NAMES.clear()
    _TEXTS.clear()
    _TERMS.clear()
    _STEPS.clear()
    _DIVISIBLE.clear()
    _SUMS.clear()


_SEQ, _CTX, _BATCH = (symbols.dim(n) for n in (symbols.SEQ, symbols.CTX, symbols.BATCH))
_DEGREES = ("tp", "ep", "dp_attn", "cp", "pp", "dp")


def options_for(context: int, framework: str, kv_dtype: str) -> tuple[Options, Scenario]:
    """What :func:`engine.playground.whatif._side` plans with at ``context`` (batch 1)."""
    return (Options(framework=framework, kv_dtype=kv_dtype, prefill_tokens=max(8192, context)),
            Scenario(batch=1, input_len=context, output_len=0))


def token_condition(table, gpu: GPU, config: ParallelConfig, context: int) -> Any | None:
    """The prefill's fusion regime at ``context`` (one request: ``ctx`` tokens per device): each live
    ``max_tokens`` limit stays on the side of the context it is on at the build (None: no limit)."""
    limits = sorted({r.when["max_tokens"] for r in live_rules(table, gpu, config, "prefill") if "max_tokens" in r.when})
    conditions = [["<=" if context <= m else ">", symbols.CTX, m] for m in limits]
    return ["and", *conditions] if conditions else None


class Bases:
    """One base model's old side per parallel config (structures and their trees), shared by its picks."""

    def __init__(self, ev: Evaluation, gpu: GPU, table, context: int, framework: str, kv_dtype: str):
        self.ev, self.gpu, self.table, self.context = ev, gpu, table, context
        self.framework, self.kv_dtype = framework, kv_dtype
        self.trees: dict[str, Any] = {}
        #: every spliced analysis placed for this base: the planner caches stored weights by
        #: (row uid, id(row)), so a row freed while the cache lives could lend its id to another
        self.pinned: list = []
        self._programs: dict[str, Any] = {}
        #: per config, what placing each of the base's rows did (a pick's placement repeats it for
        #: the rows its splice leaves alone: engine.deploy.planner.place_symbolic)
        self.records: dict[str, dict] = {}
        self._envs: dict[tuple, dict] = {}
        self.site_bytes: dict[str, Any] = {}     # slot site uid -> the old filler's stored bytes there
        self._steps: dict[tuple, tuple] = {}
        self._sites: dict[str, tuple] = {}

    def site(self, uid: str) -> tuple[dict, set]:
        """The base's rows under slot site ``uid`` and the outputs of the site that rows outside it
        read (their uids without ``@decode``); once per site: every pick of the slot splices there."""
        if uid not in self._sites:
            rows = self.ev.symbolic.rows
            read = {i for r in rows.values() if not _under(r.uid, uid) for i in r.inputs if _under(i, uid)}
            self._sites[uid] = ({u: r for u, r in rows.items() if _under(u, uid)},
                                {i.removesuffix("@decode") for i in read})
        return self._sites[uid]

    def weight_bytes(self) -> float:
        """The base's stored bytes, every stack (what :func:`engine.playground.whatif.default_config` weighs)."""
        if not hasattr(self, "_weights"):
            self._weights = float(sum(t.total_bytes for t in self.ev.tensors()))
        return self._weights

    def env(self, config: ParallelConfig, needs=()) -> dict[str, dict]:
        """Per phase, the values a step's totals are bound with: the base's dims (not ``needs``: the
        page binds those), the config's degrees, batch 1, the KV dtype's bytes; decode at seq 1."""
        key = (config.label(), tuple(needs))
        if key not in self._envs:
            self._envs[key] = self._env(config, needs)
        return self._envs[key]

    def _env(self, config: ParallelConfig, needs) -> dict[str, dict]:
        base = {**{k: int(v) for k, v in self.ev.bound.items() if k not in needs},
                **{n: getattr(config, n) for n in _DEGREES}, symbols.BATCH: 1,
                KV_BYTES.name: kv.KV_DTYPE_BYTES[self.kv_dtype]}
        return {"prefill": base, "decode": {**base, symbols.SEQ: 1}}

    def programs(self, config: ParallelConfig):
        """The base's symbolic fused programs on ``config`` (:func:`symbolic_programs`; a string: why
        the planner refuses it), and its three numbers as trees in ``trees`` (over seq and ctx)."""
        label = config.label()
        if label not in self._programs:
            problems = check(self.ev, config)
            if problems:
                self._programs[label] = self.trees[label] = f"{label} cannot run it: " + "; ".join(problems)
            else:
                self.records[label] = {}
                programs = symbolic_programs(self, self.ev.symbolic, config, decider(self.ev.bound),
                                             record=self.records[label])
                self._programs[label] = programs
                self.trees[label] = self.phase_trees(programs, config)
        return self._programs[label]

    def phase_trees(self, programs: dict, config: ParallelConfig) -> dict[str, Any]:
        env = self.env(config)
        out = {}
        for phase in ("prefill", "decode"):
            steps = [self.step_tree(st, env[phase]) for st in programs[phase].steps]
            out[f"{phase}_sol_s"] = _fold("+", [0, *(t for t, _ in steps)])      # each step's tree is bound
            if phase == "decode":
                out["decode_bytes"] = _fold("+", [0, *(b for _, b in steps)])
        return out

    def step_tree(self, step, env: dict) -> tuple[Any, Any]:
        """A step's SOL tree and its HBM bytes' tree, bound by ``env`` (memoized per base step: every
        pick removes the same ones)."""
        return self.step_with_names(step, env)[0]

    def step_with_names(self, step, env: dict) -> tuple:
        """(:meth:`step_tree`'s pair, the symbols its SOL tree reads: its bytes' tree is inside it)."""
        key = (id(step), id(env))
        hit = self._steps.get(key)
        if hit is not None and hit[0] is step:
            return hit[1:]
        found = _step_trees(self.gpu, step, env)
        names = free_names(found[0])
        self._steps[key] = (step, found, names)
        return found, names


def whole_sol(bases: Bases, spec, symbolic, needs: list[str], values: dict[str, int]) -> dict[str, Any]:
    """The SOL part of a pick planned whole (module doc): the variant's whole symbolic walk
    (``symbolic``, of ``spec``) placed and fused by the planner at the pre-filled binding ``values``;
    for the picks without a site route (a layer stream crosses the slot) or where the splice does
    not apply. ``config`` (the base's entry in ``bases.trees``), ``change`` (key -> [[added trees],
    [removed trees]]), ``valid`` ([[tree, reason]]), ``at`` (the pre-filled binding); or
    ``{"error": ...}`` when the planner refuses the pick there; None where a formula reads a symbol
    the page cannot bind."""
    from engine.language import storage
    ev = bases.ev
    new_bytes = sympy.Add(*(t.total_bytes for t in storage.checkpoint_tensors(symbolic, spec, ev.corpus)))
    fixed = {k: int(v) for k, v in ev.bound.items() if k not in needs}
    old_total = bases.weight_bytes()
    delta = _folded(bind_tree(["+", formula_tree.to_tree(new_bytes), -old_total], fixed))
    one = {"": _Part(delta, list(symbolic.rows.values()), (False, False))}
    found = _planned(bases, symbolic, needs, values, one, [("",)], lambda uid: None, _has_experts(symbolic.rows.values()),
                     Evaluation(spec, ev.corpus, symbolic, symbolic), "whole")
    return None if found is None else found[("",)]


@dataclass(frozen=True)
class _Part:
    """What the swap does in one layer template (its sites): ``delta`` the stored bytes new - old (a
    tree over the pick's dims), ``swapped`` the rows it puts in, ``experts`` whether the old and the
    new filler there hold routed experts (the ep check)."""

    delta: Any
    swapped: list
    experts: tuple[bool, bool]


def _has_experts(rows) -> bool:
    """Whether ``rows`` hold routed experts in the main stack (what an ep > 1 config needs)."""
    return any(r.role == "experts" and r.stack == "main" and r.instances != 1 for r in rows)


# -- the site route: the variant's plan without its walks ---------------------------------------------


def site_sol(bases: Bases, needs: list[str], sites: dict[str, tuple], walks: dict[str, tuple],
             values: dict[str, int], subsets: list[tuple[str, ...]],
             memo: dict | None = None) -> dict[tuple, Any] | None:
    """The SOL part of a pick without a walk of the variant (:func:`_planned`), per subset of its
    layer templates (``subsets``, the first: all of them; each the swap in those templates only):
    the new filler walked at each site of the base (``sites``: the base's slot sites the pick swaps,
    engine.playground.whatif.Picks, site[4] the template; ``walks``: per site the new filler's rows,
    caches and output uids there and their stored bytes, engine.playground.sites.site_walk and
    site_bytes) spliced into the base's symbolic analysis: the rows under each site replaced, the
    new output taking the old one's uid (or, where a new row already has it, the old output's
    readers reading the new one). None where the splice does not apply (an output that is not one
    tensor): the caller then plans the whole variant. ``memo``: each site's splice and each template's
    part, kept by the call with all the pick's templates for its subsets planned alone (the same
    sites, walks and base: the same splices)."""
    from dataclasses import replace
    ev, a = bases.ev, bases.ev.symbolic
    memo = {} if memo is None else memo
    rows, caches = dict(a.rows), list(a.caches)
    rename: dict[str, str] = {}
    mine: dict[str, list] = {}        # template -> its sites' splices
    for uid, site in sites.items():
        if uid not in memo:
            memo[uid] = _splice(bases, uid, walks[uid])
        if memo[uid] is None:
            return None
        old_rows, new_rows, new_caches, renamed, _ = memo[uid]
        if renamed is not None:
            rename[renamed[0]] = renamed[1]
        for u in old_rows:
            del rows[u]
        rows.update(new_rows)
        caches = [c for c in caches if not _under(c.node_uid, uid)] + new_caches
        mine.setdefault(site[4], []).append(memo[uid])
    if rename:      # the readers of a renamed output read the new one (no rename: every row as it is)
        rows = {u: (replace(r, inputs=tuple(rename.get(i, i) for i in r.inputs))
                    if any(i in rename for i in r.inputs) else r) for u, r in rows.items()}
    values_ = {**a.values, **{d: symbols.dim(d) for d in needs}}
    spliced = replace(a, rows=rows, caches=tuple(caches), values=values_)
    fixed = {k: int(v) for k, v in ev.bound.items() if k not in needs}
    parts = {}
    for t, splices in mine.items():
        if ("part", t) not in memo:
            delta, swapped, experts = 0, [], [False, False]
            for old_rows, new_rows, _, _, (new_bytes, old_bytes) in splices:
                delta = delta + new_bytes - old_bytes
                swapped.extend(new_rows.values())
                experts[0] = experts[0] or _has_experts(old_rows.values())
                experts[1] = experts[1] or _has_experts(new_rows.values())
            memo[("part", t)] = _Part(_folded(bind_tree(formula_tree.to_tree(delta), fixed)), swapped, tuple(experts))
        parts[t] = memo[("part", t)]
    # _has_experts of the rows outside the sites (its test first: few rows hold experts)
    outside = any(r.role == "experts" and r.stack == "main" and r.instances != 1
                  and not any(_under(r.uid, u) for u in sites) for r in a.rows.values())

    def alone(chosen: tuple[str, ...]) -> Any:      # a subset planned by itself: its own splice
        found = site_sol(bases, needs, {u: s for u, s in sites.items() if s[4] in chosen}, walks, values, [chosen],
                         memo)
        return found[chosen] if found is not None else {"error": "a formula of this swap reads a symbol the page cannot bind"}
    return _planned(bases, spliced, needs, values, parts, subsets, _template_of({u: s[4] for u, s in sites.items()}),
                    outside, ev, "sites", alone)


def _splice(bases: Bases, uid: str, walk: tuple) -> tuple | None:
    """The new filler at slot site ``uid`` (``walk``: its rows, caches, output uids and stored bytes
    there): (the base's rows it replaces, its rows and caches with the new output taking the old
    one's uid where it can, else (old output, new output) for the old output's readers to read,
    (its stored bytes, the old filler's)); None where the splice does not apply (:func:`site_sol`)."""
    from dataclasses import replace
    from engine.language import storage
    ev, a = bases.ev, bases.ev.symbolic
    new_rows, new_caches, new_out, new_bytes = walk
    old_rows, outs = bases.site(uid)
    if uid not in bases.site_bytes:       # the old filler's: the same for every pick of the slot
        bases.site_bytes[uid] = sympy.Add(*(t.total_bytes for t in storage.checkpoint_tensors(
            replace(a, rows=old_rows, caches=()), ev.model, ev.corpus)))
    if len(outs) != 1 or len(new_out) != 1:
        return None
    old_out = next(iter(outs))
    renamed = None
    if old_out == new_out[0] or old_out not in new_rows:
        # the new output takes the old one's uid: its readers keep their inputs, so the planner
        # repeats their placement where the output places alike (a label; no number reads it)
        label = {new_out[0]: old_out, new_out[0] + "@decode": old_out + "@decode"}
        new_rows = {label.get(u, u): replace(r, uid=label.get(r.uid, r.uid),
                                             inputs=tuple(label.get(i, i) for i in r.inputs))
                    for u, r in new_rows.items()}
        new_caches = [replace(c, node_uid=label.get(c.node_uid, c.node_uid)) for c in new_caches]
    else:
        renamed = (old_out, new_out[0])
    return old_rows, new_rows, new_caches, renamed, (new_bytes, bases.site_bytes[uid])


def _planned(bases: Bases, analysis, needs: list[str], values: dict[str, int], parts: dict[str, _Part],
             subsets: list[tuple[str, ...]], part, outside_experts: bool, weights: Evaluation, route: str,
             alone=None) -> dict[tuple, Any] | None:
    """The SOL part of a pick from the variant's symbolic analysis (spliced or walked whole), per
    subset of its layer templates: ``parts`` what the swap does per template (:class:`_Part`),
    ``subsets`` the subsets wanted (the first: every part, the swap ``analysis`` is of), ``part``
    a step uid -> its template (:func:`_template_of`), ``outside_experts`` whether rows the swap
    leaves alone hold routed experts, ``weights`` the Evaluation whose spec stores the rows'
    weights, ``alone(subset)`` the entry of a subset planned by itself. None where a formula reads
    a symbol the page cannot bind.

    Each subset's entry is the planner's plan of the swap in those templates, at its own parallel
    config (:func:`config_for_bytes` of its own weights). The full swap is planned; a subset on the
    same config takes the full plan's changed steps in its templates (each step is in one
    template's rows: placement repeats a row placed alike and fusions join neighbouring steps, so
    the swap in one template changes no step of another's), with its own config bounds, ep check
    and divisibility and the full plan's placement decisions (those of the subset's rows among
    them: a condition of another template's rows can only withhold a number, never change one);
    a subset on another config, or where a changed step lies in none of the templates, is planned
    by itself (``alone``)."""
    ev, gpu = bases.ev, bases.gpu
    bases.pinned.append(analysis)
    # the config default_config picks: the larger side's weights at the pre-filled binding
    at = {**{k: int(v) for k, v in ev.bound.items()}, **values}
    old_total = bases.weight_bytes()
    moe = "n_experts" in ev.bound       # both sides MoE (a variant keeps the base's dims)

    def sized(chosen: tuple[str, ...]):
        delta = _collected([parts[t].delta for t in chosen if t in parts])
        return delta, config_for_bytes(max(old_total, old_total + formula_tree.evaluate(delta, at)), moe, gpu)

    def experts(chosen: tuple[str, ...]) -> bool:
        return outside_experts or any(p.experts[t in chosen] for t, p in parts.items())

    full = subsets[0]
    first = sized(full)
    config = first[1]
    old = bases.programs(config)
    refused = f"the base on {config.label()}: {old}" if isinstance(old, str) else None
    plan = None
    # planned also where the full swap is refused for routed experts alone (ep > 1, every expert
    # swapped out): its subsets that keep experts take their steps from it as from any full plan
    without_experts = config.ep > 1 and not experts(full)
    if refused is None:
        decide = decider({**ev.bound, **{d: sympy.Integer(v) for d, v in values.items()}})
        new = symbolic_programs(bases, analysis, config, decide, weights, reuse=bases.records.get(config.label()))
        groups, read = _programs_change(bases, old, new, config, needs, part)
        base_env = bases.env(config, needs)["prefill"]
        prefill = {**at, symbols.CTX: bases.context}

        def checked(trees: list) -> list:      # each condition once: (key, tree, holds at the pre-fill, reads)
            return [(tree_text(t), t, formula_tree.evaluate(t, prefill), free_names(t))
                    for t in trees]
        decisions = checked([bind_tree(c, base_env) for c in _decisions(decide.seen, needs, config)])
        divisible = {t: checked([bind_tree(c, base_env) for c in _divisible(p.swapped, config, ev.corpus.dims,
                                                                            analysis.values)])
                     for t, p in parts.items()}
        free = set().union(read, *(c[3] for c in decisions), *(c[3] for cs in divisible.values() for c in cs),
                           *(free_names(p.delta) for p in parts.values()))
        if not free - set(needs) - {symbols.SEQ, symbols.CTX}:
            plan = (groups, decisions, divisible)
        elif not without_experts:      # (refused for experts, its subsets are planned alone, as before)
            return None
    tokens_ok = token_condition(bases.table, gpu, config, bases.context)
    out: dict[tuple, Any] = {}
    for chosen in subsets:
        delta, mine = first if chosen is full else sized(chosen)
        if mine.label() != config.label():
            out[chosen] = alone(chosen)
        elif refused is not None:
            out[chosen] = {"error": refused}
        elif config.ep > 1 and not experts(chosen):
            out[chosen] = {"error": f"{config.label()} cannot run it: ep = {config.ep} but the model has no routed experts"}
        elif plan is None or (chosen != full and None in plan[0]):
            out[chosen] = alone(chosen)
        else:
            out[chosen] = _entry(bases, plan, chosen, chosen == full, config, delta, tokens_ok, route, values, moe)
    return out


def _entry(bases: Bases, plan: tuple, chosen: tuple[str, ...], every: bool, config: ParallelConfig, delta: Any,
           tokens_ok: Any, route: str, values: dict, moe: bool) -> dict[str, Any]:
    """One subset's entry from the full swap's plan (:func:`_planned`): its templates' changed steps
    (``every``: all of them, also those in none of the templates), its validity conditions. The
    config bounds hold at the pre-filled binding by construction (the config is chosen there), the
    token regime at the build's context and the placement decisions where they were taken; a
    divisibility condition may fail there: the entry is then that error."""
    groups, decisions, divisible = plan
    valid = []
    lo_hi = _config_bounds(config, bases.gpu, bases.weight_bytes(), delta, moe)
    if lo_hi is not None:
        valid.append([lo_hi, f"the weights then need another parallel config than {config.label()}"])
    if tokens_ok is not None:
        valid.append([tokens_ok, "a fusion's token limit falls between this context and the build's "
                                 f"({bases.context:,})"])
    placed = {}
    for key, tree, holds, free in [*decisions, *(c for t in chosen for c in divisible.get(t, ()))]:
        reason = "the planner places it differently at these dims (heads per device, divisibility)"
        if not holds:
            return {"error": f"at the pre-filled dims: {reason}"}
        if free:        # a constant that holds: nothing to test
            placed.setdefault(key, [tree, reason])
    valid += placed.values()
    mine = [g for g in groups if every or g in chosen]
    change = {k: [[groups[g][k][i] for g in mine if groups[g][k][i] != 0] for i in (0, 1)] for k in KEYS}
    return {"config": config.label(), "change": change, "valid": valid, "at": dict(values), "route": route}


def _config_bounds(config: ParallelConfig, gpu: GPU, old_total: float, new_delta: Any, moe: bool,
                   hbm_fraction: float = 0.9) -> Any | None:
    """The binding keeps the config: the larger side's weights x 1.25 (the new side's = the base's
    + ``new_delta``, a tree) stay above the capacity of the rung below and within this one's. The
    base's share is a number: a bound it meets alone is left out (the lower one where the base
    alone fills the rung below, the base's side of the upper one), so ``new_delta`` appears once
    per bound left (a pick's subsets each carry one)."""
    if not free_names(new_delta):
        return None
    per_gpu = gpu.hbm_bytes * hbm_fraction
    chosen = LADDER.index((config.tp, config.pp))
    new = ["*", 1.25, _fold("+", [old_total, new_delta])]
    parts = []
    if chosen > 0:
        tp, pp = LADDER[chosen - 1]
        if not 1.25 * old_total > tp * pp * per_gpu:
            parts.append([">", new, tp * pp * per_gpu])
    if chosen < len(LADDER) - 1:
        parts.append(["<=", new, config.tp * config.pp * per_gpu] if 1.25 * old_total <= config.tp * config.pp * per_gpu
                     else 0)
    return ["and", *parts] if parts else None


def _decisions(seen: dict, needs: list[str], config: ParallelConfig) -> list:
    """The placement's decisions (``seen``: :func:`engine.deploy.planner.decider`'s record,
    expression -> the integer decided) on expressions of the pick's dims, each as a condition that
    keeps it: a decision compares a count with a group size (more devices than heads) or with 1 (one
    expert), so it stands while the count stays between the same two of those; trees over the dims."""
    needed = {symbols.dim(d) for d in needs}
    marks = sorted({1, 2, config.tp, config.attn_tp, config.moe_tp, config.ep, config.dp_attn, config.cp,
                    config.tp * config.cp, config.attn_tp * config.cp})
    out = []
    for e, value in seen.items():
        if value is None or not (getattr(e, "free_symbols", set()) & needed):
            continue
        tree = formula_tree.to_tree(e)
        below = max((m for m in marks if m <= value), default=None)
        above = min((m for m in marks if m > value), default=None)
        parts = ([[">=", tree, below]] if below is not None else []) + ([["<", tree, above]] if above is not None else [])
        if parts:
            out.append(["and", *parts])
    return out


_DIVISIBLE: dict[tuple, tuple] = {}    # (id(rows), config, id(dims table), names in scope) -> (rows, table, conditions)


def _divisible(rows, config: ParallelConfig, dims_table, values) -> list:
    """:func:`engine.deploy.legality.check`'s divisibility of the sharded axes of ``rows`` (symbolic:
    the rows the swap put in) by their groups, and of routed experts by ep, as conditions (trees
    over the dims; one over the base's dims alone becomes a constant once bound). Memoized per
    list of rows (a template's part is kept for all of a pick's subsets planned alone), config,
    dims table and the names ``values`` puts in scope (all it reads of them)."""
    key = (id(rows), config, id(dims_table), frozenset(values))
    hit = _DIVISIBLE.get(key)
    if hit is None or hit[0] is not rows or hit[1] is not dims_table:
        if len(_DIVISIBLE) > 10_000:
            _DIVISIBLE.clear()
        hit = _DIVISIBLE[key] = (rows, dims_table, _divisible_of(rows, config, dims_table, values))
    return hit[2]


def _divisible_of(rows, config: ParallelConfig, dims_table, values) -> list:
    """:func:`_divisible` computed."""
    from engine.language import expr as exprs
    from engine.deploy.placement import shard_unit
    mesh = Mesh(config, 1 << 30)
    out, seen = [], set()
    for row in rows:
        if row.stack != "main":
            continue
        region = "experts" if row.role == "experts" else "default"
        for param, world in row.weight_axes.items():
            name = row.dim_names[param]
            unit = shard_unit(name, dims_table)
            group = mesh.world_group(world, region)
            if unit is None or group is None or group.size == 1:
                continue
            axis = next(x for axes in (row.out.axes, *(t.axes for t in row.in_shapes), *(l.axes for l in row.leaves))
                        for x in axes if x.name == name)
            parsed = exprs.evaluate(name, exprs.Scope({k: symbols.dim(k) for k in {*values, unit}}))
            count = axis.size / (parsed / symbols.dim(unit))
            key = (str(count), group.size)
            if key in seen:
                continue
            seen.add(key)
            tree = formula_tree.to_tree(count)
            ok = ["==", ["mod", tree, group.size], 0]
            if dims_table[unit].replicate:
                ok = ["or", ok, ["==", ["mod", group.size, tree], 0]]
            out.append(ok)
        if row.role == "experts" and config.ep > 1 and row.instances != 1 and ("ep", str(row.instances)) not in seen:
            seen.add(("ep", str(row.instances)))
            out.append(["==", ["mod", formula_tree.to_tree(row.instances), config.ep], 0])
    return out


def symbolic_programs(bases: Bases, analysis, config: ParallelConfig, decide, ev: Evaluation | None = None,
                      record: dict | None = None, reuse: dict | None = None) -> dict[str, Any]:
    """Per phase, the planner's fused symbolic program of ``analysis`` on ``config`` at the page's
    setting (:func:`engine.deploy.planner.place_symbolic`); ``ev``: whose rows' weights (the base's,
    or a variant walked whole); ``record``/``reuse``: the base's placement record, written or repeated."""
    ev, gpu = ev or bases.ev, bases.gpu
    options, scenario = options_for(bases.context, bases.framework, bases.kv_dtype)
    domain = min(gpu.scale_up_domain, config.gpus_per_node or gpu.scale_up_domain)
    tokens = tokens_per_device(config, scenario, options.prefill_tokens, options.decode_seq)
    return place_symbolic(ev, analysis, config, domain, options, bases.table, gpu, tokens, decide, record, reuse)


def intern(picks: dict[str, dict[str, dict]]) -> list:
    """Every pick's ``change`` and ``valid`` trees moved into one table of distinct trees (returned;
    the document's ``sol_trees``): each change an [added, removed] pair of lists of indices (new -
    old = the sum of the added trees - the sum of the removed ones: per layer template), each
    validity condition [index, reason]. Picks of one slot remove mostly the same steps, and the
    subsets of a pick's templates share their templates' trees."""
    table: list = []
    index: dict[str, int] = {}

    def at(tree) -> int:
        key = tree_text(tree)      # subsets share their templates' subtrees: each text is made once
        if key not in index:
            index[key] = len(table)
            table.append(tree)
        return index[key]
    for chosen in picks.values():
        for p in chosen.values():
            for entry in p.get("sol", {}).values():
                if "change" in entry:
                    entry["change"] = {k: [[at(t) for t in added], [at(t) for t in removed]]
                                       for k, (added, removed) in entry["change"].items()}
                    entry["valid"] = [[at(t), reason] for t, reason in entry["valid"]]
    return table
