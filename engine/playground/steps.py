"""A pick's prefill and decode SOL steps as formula trees: the base's steps bound at the
pre-filled context, keyed so a variant's program reuses every step it shares with the base, and
the change a pick makes to them (:data:`KEYS`: the numbers exported).

Layer: engine.playground (on :mod:`engine.playground.trees` and engine.deploy's step costs).
"""
from __future__ import annotations

from typing import Any
from engine.deploy.cost import link_bandwidth
from engine.deploy.hardware import GPU
from engine.deploy.parallel import ParallelConfig
from engine.language import symbols
from engine.playground.trees import _BOUND, _fold, _tree, bind_tree, free_names


#: The numbers exported, in the page's order (engine.playground.variant.METRICS's keys).
KEYS = ("prefill_sol_s", "decode_bytes", "decode_sol_s")


_STEPS: dict[tuple, tuple] = {}     # (id(gpu), id(env), what a step's trees read) -> (gpu, env, trees)


def _step_trees(g: GPU, step, env: dict) -> tuple[list, Any]:
    """One step's SOL, max(f / peak, b / hbm, c / link + calls x alpha), and its HBM bytes b, as
    trees bound by ``env``: :func:`engine.deploy.step_totals.step_totals` (every call of the step; a
    ``last_token`` step at seq 1) and :mod:`engine.deploy.cost`'s rates, without sympy arithmetic.
    Memoized per GPU, env and every field of the step the trees read (:func:`_step_fields`; not its
    uid): a pick's plans repeat the steps of its other plans and of the other picks of its slot."""
    key = (id(g), id(env), _step_fields(step))
    hit = _STEPS.get(key)
    if hit is None or hit[0] is not g or hit[1] is not env:
        if len(_STEPS) > 50_000:
            _STEPS.clear()
        hit = _STEPS[key] = (g, env, _step_trees_of(g, step, env))
    return hit[2]


def _step_fields(step) -> tuple:
    """Every field of a step :func:`_step_trees_of` reads (:func:`_raw_key` without the uid)."""
    return (step.flops, step.bytes, step.weight_bytes, step.comm_bytes, step.repeat, step.last_token,
            step.compute_dtype, step.link, step.collective, step.ranks, step.nodes)


def _step_trees_of(g: GPU, step, env: dict) -> tuple[list, Any]:
    """:func:`_step_trees` computed."""
    if step.last_token:
        env = _last_token_env(env)

    def tree(expr):      # bound by env, once per (formula, env) per process: steps of a pick share formulas
        t = _tree(expr)
        if type(t) is not list:
            return bind_tree(t, env)
        key = (id(t), id(env))
        hit = _BOUND.get(key)
        if hit is None or hit[0] is not t or hit[1] is not env:
            if len(_BOUND) > 50_000:
                _BOUND.clear()
            hit = _BOUND[key] = (t, env, bind_tree(t, env))
        return hit[2]
    # bind_tree([op, *args]) is _fold(op, [bind_tree(arg) ...]): the repeat is bound once for all three
    repeat = tree(step.repeat)
    f = _fold("*", [tree(step.flops), repeat])
    b = _fold("*", [_fold("+", [tree(step.bytes), tree(step.weight_bytes)]), repeat])
    c = _fold("*", [tree(step.comm_bytes), repeat])
    link = link_bandwidth(g, step.link)
    alpha = g.collective_latency(step.collective, step.ranks, step.nodes) if step.collective else 0.0
    comm: list = ["+", 0]
    if link != float("inf"):
        comm.append(["*", c, 1.0 / link])
    if alpha:
        comm.append(["*", repeat, alpha])       # calls: the step's repeat
    # bound throughout (as bind_tree of the whole would leave it), so sums of steps only fold their top
    return _fold("max", [_fold("*", [f, 1.0 / g.peak_flops(step.compute_dtype)]),
                         _fold("*", [b, 1.0 / g.hbm_bytes_per_s]), bind_tree(comm, {})]), b


_SEQ1: dict = {}      # id(env) -> (env, env at seq 1): a last-token step's


def _last_token_env(env: dict) -> dict:
    hit = _SEQ1.get(id(env))
    if hit is None or hit[0] is not env:
        if len(_SEQ1) > 10_000:
            _SEQ1.clear()
        hit = _SEQ1[id(env)] = (env, {**env, symbols.SEQ: 1})
    return hit[1]


def _raw_key(step) -> tuple:
    """A step by what its totals and rates are made of (no arithmetic: :func:`step_totals` of two
    steps with equal keys are equal)."""
    return (step.uid, *_step_fields(step))


_KEYS: dict[int, tuple] = {}      # id(program) -> (program, {raw key: step}): the base's, reused by every pick


def _keyed(program) -> dict:
    hit = _KEYS.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    if len(_KEYS) > 64:
        _KEYS.clear()
    keyed = {_raw_key(st): st for st in program.steps}
    _KEYS[id(program)] = (program, keyed)
    return keyed


def _programs_change(bases: Any, old: dict, new: dict, config: ParallelConfig, needs,
                     part) -> tuple[dict[Any, dict[str, list]], set]:
    """new - old of the three numbers from two sets of symbolic fused programs (phase -> Program):
    the steps one has and the other lacks, each a tree bound by the base's values but ``needs``
    (the old ones, the base's steps, memoized on ``bases``, an
    :class:`engine.playground.playground_sol.Bases`), summed per ``part(step uid)`` (the
    layer template the step is in; None: none of the swapped ones): {part: {key: [added, removed]}}
    (a part with no such step is absent); and the symbols those trees read (a step's bytes tree is
    inside its SOL tree; a sum of trees reads what they read)."""
    names: set[str] = set()
    env = bases.env(config, needs)
    old_env = bases.env(config)
    terms: dict[tuple, list] = {}        # (part, key, sign) -> trees
    for phase in ("prefill", "decode"):
        sides = [_keyed(old[phase]), {_raw_key(st): st for st in new[phase].steps}]
        for sign, mine, other in ((-1, sides[0], sides[1]), (1, sides[1], sides[0])):
            for key, step in mine.items():
                if key not in other:
                    if sign < 0:     # a base step: the base's values throughout (its dims are not the page's)
                        (t, b), read = bases.step_with_names(step, old_env[phase])
                    else:
                        t, b = _step_trees(bases.gpu, step, env[phase])
                        read = free_names(t)
                    names |= read
                    where = part(step.uid)
                    terms.setdefault((where, f"{phase}_sol_s", sign), []).append(t)
                    if phase == "decode":
                        terms.setdefault((where, "decode_bytes", sign), []).append(b)
    out: dict[Any, dict[str, list]] = {}
    for where in dict.fromkeys(w for w, _, _ in terms):
        # [added, removed]: the removed steps are the same for most picks of a slot (shared, intern())
        out[where] = {k: [_fold("+", [0, *terms.get((where, k, 1), ())]), _summed(terms.get((where, k, -1), []))]
                      for k in KEYS}
    return out, names


_SUMS: dict[tuple, tuple] = {}     # ids of a list of trees -> (the list, their sum): the base's removed steps


def _summed(trees: list) -> Any:
    """``_fold("+", [0, *trees])``, one tree object per list of tree objects: the picks of a slot
    remove the same base steps (whose trees are shared, :meth:`Bases.step_with_names`), so their
    sums are one object and :func:`intern` writes its text once."""
    key = tuple(map(id, trees))
    hit = _SUMS.get(key)
    if hit is None or any(a is not b for a, b in zip(hit[0], trees)):
        if len(_SUMS) > 10_000:
            _SUMS.clear()
        hit = _SUMS[key] = (list(trees), _fold("+", [0, *trees]))
    return hit[1]


def _template_of(sites: dict[str, str]):
    """A step uid -> the layer template whose sites (``sites``: site uid -> template) hold its row
    (a fused step's uid is ``rule@row``, a decode step's ``row@decode``), else None."""
    def part(uid: str) -> str | None:
        for piece in uid.split("@"):
            for site, template in sites.items():
                if _under(piece, site):
                    return template
        return None
    return part


def _under(uid: str, site: str) -> bool:
    return uid == site or uid.startswith(site + "/")
