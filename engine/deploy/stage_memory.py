"""A placement's memory figures: weights on the fullest pipeline stage and KV cache per device.

Layer: engine.deploy. :func:`_memory` gives (weight bytes of the weight-heaviest stage, its formula,
KV bytes per request per device of the stage holding the most cache) from a config's numeric and
symbolic placements: rows go to pipeline stages in layer order (:func:`_stage_rows`), the MTP stack
sits on the last stage. Invariants: the figures depend on the placements only (not on fusion), so
every structure sharing placements shares them; each memo here is keyed by the objects it holds
and gives the sympy tree the plain computation gives (tests/test_placement_speed2.py,
tests/test_struct_share.py).
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping

import sympy

from engine.language import kv, streams as stream_rules
from engine.language.api import Evaluation
from engine.language.ops import OPS
from engine.language.shapes import Tensor
from engine.deploy.step_functions import KV_BYTES
from engine.deploy.device_program import ZERO, Layout, Program
from engine.deploy.parallel import ParallelConfig
from engine.deploy.placement import Placer
from engine.deploy.placement_arith import _add, _div, _mul
from engine.deploy.structure import LENGTH, MTP_STACK, Options


def _stage_of_layers(ev: Evaluation, pp: int) -> dict[str, list[int]]:
    """Template component uid -> its layer count on each pipeline stage."""
    total = _layer_count(ev.numeric)
    out = {}
    for comp in ev.numeric.components.values():
        if comp.template and comp.stack == "main":
            counts = Counter(stream_rules.stage_of(i, pp, total) for i in comp.layers)
            out[comp.uid] = [counts.get(s, 0) for s in range(pp)]
    return out


#: (id(numeric analysis), pp, row uids) -> (the analysis, :func:`_stage_rows` of them)
_STAGE_ROWS: dict[tuple, tuple] = {}


def _stage_rows(stored: Mapping[str, sympy.Expr], ev: Evaluation, pp: int) -> list[list[tuple[str, sympy.Expr]]]:
    """Per stage: (row uid, layers of it on the stage). Layers go to stages in order; rows outside
    the layer stack go to the first (embedding) or the last (everything after the stack) stage.

    A function of the numeric analysis, ``pp`` and the uids of ``stored`` (in order), not of
    their values: every placement of a model stores the same rows, so it is computed once per
    pipeline degree (the memo holds the analysis; callers only read the lists)."""
    key = (id(ev.numeric), pp, tuple(stored))
    hit = _STAGE_ROWS.get(key)
    if hit is None or hit[0] is not ev.numeric:
        if len(_STAGE_ROWS) > 256:       # the pipeline degrees of a few models
            _STAGE_ROWS.clear()
        hit = _STAGE_ROWS[key] = (ev.numeric, _stage_rows_of(stored, ev, pp))
    return hit[1]


def _stage_rows_of(stored: Mapping[str, sympy.Expr], ev: Evaluation, pp: int) -> list[list[tuple[str, sympy.Expr]]]:
    per_template = _stage_of_layers(ev, pp)
    stages: list[list] = [[] for _ in range(pp)]
    for uid in stored:
        row = ev.numeric.rows[uid]
        template = next((t for t in per_template if uid.startswith(t + "/")), None)
        if template is not None:
            for s, n in enumerate(per_template[template]):
                if n:
                    stages[s].append((uid, sympy.Integer(n) if pp > 1 else row.repeat))
        else:
            stages[0 if row.role == "embedding" else pp - 1].append((uid, row.repeat))
    return stages


_MEMORY: dict[tuple, tuple] = {}     # numeric placement identity -> (the placements, their memory figures)
_FORMULAS: dict[tuple, tuple] = {}   # (numeric, symbolic) placement identity -> (them, the weight formula)


def _memory(ev: Evaluation, config: ParallelConfig, options: Options, numeric: dict, symbolic: dict | None) -> tuple:
    """Weights on the fullest pipeline stage (bytes, formula) and KV per request per device: they
    depend on the placements only, not on fusion, so structures sharing placements (every
    framework, fusion signature and token regime of a config) share them; computed once. Without a
    ``symbolic`` placement the formula is None (the numbers read only the numeric one)."""
    weights, worst, stages, mtp, kv_dev = _figures(ev, config, options, numeric)
    if symbolic is None:
        return weights, None, kv_dev
    key = (id(numeric["prefill"][0]), id(symbolic["prefill"][0]), id(symbolic["decode"][0]), config.pp,
           options.mtp_tokens)
    found = _FORMULAS.get(key)
    if found is not None and found[0][0] is numeric["prefill"][0] and found[0][1] is symbolic:
        return weights, found[1], kv_dev
    sym_stored = symbolic["prefill"][0].stored
    weight_formula = _sum(tuple(_mul(sym_stored[u], n if config.pp > 1 else ev.symbolic.rows[u].repeat)
                                for u, n in stages[worst]))
    if worst == config.pp - 1:
        weight_formula += sympy.Add(*(symbolic["decode"][0].stored[u] * ev.symbolic.rows[u].repeat for u in mtp))
    if len(_FORMULAS) > 256:        # the placements of one model at a time, roughly
        _FORMULAS.clear()
    _FORMULAS[key] = ((numeric["prefill"][0], symbolic), weight_formula)
    return weights, weight_formula, kv_dev


def _figures(ev: Evaluation, config: ParallelConfig, options: Options, numeric: dict) -> tuple:
    """(weight bytes of the fullest stage, that stage, the stages' rows, the MTP rows it adds, KV
    per request per device) of the numeric placements, once per placement."""
    key = (id(numeric["prefill"][0]), id(numeric["decode"][0]), config.pp, options.mtp_tokens)
    found = _MEMORY.get(key)
    if found is not None and found[0] is numeric:
        return found[1]
    # memory: the fullest pipeline stage (weights are stored as the prefill placement says)
    # (the main stack's rows: with MTP drafting the programs also hold the MTP stack's, counted below)
    stored = {u: v for u, v in numeric["prefill"][0].stored.items() if ev.numeric.rows[u].stack == "main"}
    stages = _stage_rows(stored, ev, config.pp)
    # sympy.Add(*terms) flattens once; sum() would re-flatten a growing Add at every term
    # (the products through placement's memo: configs of one stage placement and pipeline degree
    # multiply the same stored bytes by the same layer counts)
    per_stage = [_stage_bytes(stored, rows) for rows in stages]
    # speculative decoding: the whole MTP stack (every module, as frameworks load it) on the last stage
    # (a row that shares a main-stack tensor, e.g. MiMo's head, stores nothing of its own)
    mtp = [u for u in numeric["decode"][0].stored if ev.numeric.rows[u].stack == MTP_STACK
           and not ev.numeric.rows[u].shares] if options.mtp_tokens else []
    mtp_weights = sympy.Add(*(numeric["decode"][0].stored[u] * ev.numeric.rows[u].repeat for u in mtp))
    per_stage[-1] += mtp_weights
    worst = max(range(config.pp), key=lambda s: float(per_stage[s]))
    # KV: the stage holding the most cache, which in a hybrid stack need not be the weight-heaviest
    # one (a stage of only Mamba layers keeps fixed states, one with attention grows with context);
    # weights of the heaviest stage + cache of the fullest is an upper bound of any one stage's need
    per_stage_kv = [_kv_per_device(ev, numeric["decode"][0], numeric["decode"][1], rows) for rows in stages]
    if options.mtp_tokens:
        per_stage_kv[-1] += _kv_per_device(ev, numeric["decode"][0], numeric["decode"][1], None, MTP_STACK)
    kv_dev = _max(frozenset(per_stage_kv))
    if len(_MEMORY) > 256:          # the placements of one model at a time, roughly
        _MEMORY.clear()
    result = (float(per_stage[worst]), worst, stages, mtp, kv_dev)
    _MEMORY[key] = (numeric, result)
    return result


def _stage_bytes(stored: Mapping[str, sympy.Expr], rows: list[tuple[str, sympy.Expr]]) -> sympy.Expr:
    """The weight bytes of a stage: ``sympy.Add`` of stored bytes times layers, row by row. A
    numeric placement's stored bytes and layer counts are Integers (checkpoint weights), whose
    products and sum are those of Python's ints: summed so, without a sympy object per term."""
    pairs = [(stored[u], n) for u, n in rows]
    if all(isinstance(v, sympy.Integer) and isinstance(n, sympy.Integer) for v, n in pairs):
        return sympy.Integer(sum(v.p * n.p for v, n in pairs))
    return _sum(tuple(_mul(v, n) for v, n in pairs))


#: ids of terms -> (their sympy.Add, the terms): see :func:`_sum`.
_SUMS: dict[tuple, tuple] = {}


def _sum(terms: tuple) -> sympy.Expr:
    """``sympy.Add(*terms)``, once per tuple of the same term objects (in the same order): the
    configs of a model store the same bytes per row (numeric: one stage placement under several
    pipeline degrees; symbolic: degrees are symbols, so tp 8 and tp 16 store alike), and placement's
    memo hands back the same product objects, while flattening and sorting a sum of a hundred
    terms is slow. Keyed by the terms' ids, the entry holding the terms (an id is not reused while
    its object lives)."""
    key = tuple(map(id, terms))
    hit = _SUMS.get(key)
    if hit is None:
        if len(_SUMS) > 4096:
            _SUMS.clear()
        hit = _SUMS[key] = (sympy.Add(*terms), terms)
    return hit[0]


_MAXIMA: dict[frozenset, sympy.Expr] = {}    # {per-stage KV expressions} -> their sympy.Max


def _max(terms: frozenset) -> sympy.Expr:
    """``sympy.Max`` of a set of expressions, once per set: configs that differ in what does not
    split the cache (experts, DP) have the same per-stage KV, and comparing expressions in
    ``length`` to drop the ones never largest is slow. Max's result does not depend on the order
    of its arguments (it sorts what survives), so a set is the key."""
    found = _MAXIMA.get(terms)
    if found is None:
        if len(_MAXIMA) > 4096:
            _MAXIMA.clear()
        found = _MAXIMA[terms] = sympy.Max(*terms)
    return found


def _kv_per_device(ev: Evaluation, program: Program, placer: Placer,
                   stage: list[tuple[str, sympy.Expr]] | None, stack: str = "main") -> sympy.Expr:
    """Cache bytes one device holds for one request at context ``length`` (its stage's layers; with
    ``stage`` None every layer of ``stack``, e.g. the whole MTP stack)."""
    total = ZERO
    for cache in kv.caches(ev.numeric, stack):
        row = ev.numeric.rows[cache.node_uid]
        layout = program.layouts.get(cache.node_uid, program.layouts.get(cache.node_uid + "@decode"))
        if layout is None:
            continue
        count = cache.repeat if stage is None else _layers_on_stage(ev, cache.node_uid, stage)
        if OPS[row.op].state is not None:   # a recurrent state: shards with heads / channels
            split = placer.split(Tensor(row.out.axes[2:]), Layout(layout.shards[2:]))
        else:
            split = placer.split(Tensor(row.out.axes[1:]), Layout(layout.shards[1:]))
        total = _add(total, _mul(_div(_cache_bytes(cache), split), count))   # (a + b / c * d, memoized)
    return total


_CACHE_BYTES: dict[int, tuple] = {}     # id(cache entry) -> (the entry, :func:`_cache_bytes` of it)


def _cache_bytes(cache) -> sympy.Expr:
    """Bytes one layer of a cache entry holds for one request at context ``length``, unsharded:
    tokens kept x elements per token x element bytes (``kv_bytes`` unless the entry has its own
    dtype). A function of the entry alone, and every config's memory figures read it for every
    stage (``sympy.Min`` of a window is slow to build): computed once per entry object."""
    found = _CACHE_BYTES.get(id(cache))
    if found is None or found[0] is not cache:
        if len(_CACHE_BYTES) > 4096:      # the entries of a few models at a time
            _CACHE_BYTES.clear()
        element = cache.own_bytes if cache.dtype else KV_BYTES
        found = _CACHE_BYTES[id(cache)] = (cache, kv.tokens_kept(cache, LENGTH) * cache.per_token * element)
    return found[1]


def _layers_on_stage(ev: Evaluation, uid: str, stage: list[tuple[str, sympy.Expr]]) -> sympy.Expr:
    """Layers of ``uid``'s template on a stage, read off any weighted row of the same template
    (the first one); both lookups through :data:`_ON_STAGE` (every cache entry of every stage of
    every config asks, and a stage lists a hundred rows)."""
    hit = _ON_STAGE.get(id(stage))
    if hit is None or hit[0] is not stage or hit[1] is not ev.numeric:
        if len(_ON_STAGE) > 4096:
            _ON_STAGE.clear()
        hit = _ON_STAGE[id(stage)] = (stage, ev.numeric, {})
    found = hit[2].get(uid)
    if found is None:
        template = next((c.uid for c in ev.numeric.components.values()
                         if c.template and uid.startswith(c.uid + "/")), None)
        found = hit[2][uid] = next((n for row_uid, n in stage if template and row_uid.startswith(template + "/")),
                                   ZERO)
    return found


#: id(stage rows) -> (the rows, the numeric analysis, {cache uid: its layers on the stage}). Stage
#: lists are :func:`_stage_rows`' memoized objects, read-only, so the answers stay valid.
_ON_STAGE: dict[int, tuple] = {}


def _layer_count(analysis) -> int:
    """Main-stack layers, read off the template components (valid under either binding)."""
    return sum(len(c.layers) for c in analysis.components.values() if c.template and c.stack == "main")
