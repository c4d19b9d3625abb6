"""One model over the grid: structures compiled once, every point evaluated in vectorized batches.

Layer: engine.batch. For each (GPU, parallel config) cell of :func:`engine.batch.grid.model_cells` and each
framework, the device programs depend on the GPU only through its arch (fusion conditions) and its
scale-up domain (links), and on the scenario only through the fusion token regimes; the KV element
size is a free symbol. So a *structure* is built per (config, domain, framework, fusion signature,
token regime) and shared by every GPU, KV dtype and scenario point that maps to it: one
:func:`engine.deploy.sol.summarize` call evaluates all of them at once (and
:func:`engine.deploy.sol.summarize_many` evaluates each compiled program once over the points of
every structure that holds it). No per-point graph walk happens.

Points per cell: the grid's prompt lengths (up to ``beyond_max_context`` x the model's maximum,
flagged extrapolated beyond it) x output lengths x the batches (:func:`grid_batches`) that fit the
KV budget at that context in the steady state of continuous batching or in the worst case
(``max_concurrent_requests_steady``, ``max_concurrent_requests``: usually the steady one is the
larger), plus the larger capacity itself; a context that fits no request in either keeps a batch-1
row with ``fits = false`` and the shortfall. The fronts (``on_front``) serve by the steady state;
the worst case stays on every row beside it (``fits``, ``tpot_s``, ``max_concurrent_requests``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from itertools import groupby
from dataclasses import replace

import numpy as np

from engine.language import checkpoints, formula_tree, kv
from engine.language.api import Evaluation
from engine.deploy import PHASES, Plan, Scenario, tokens_per_device
from engine.deploy.fusion_table import load_tables, token_limits
from engine.deploy.structure_cache import StructureCache, regime, signature
from engine.batch.grid import input_lengths, load_grid, model_cells
from engine.deploy.hardware import load_gpus
from engine.deploy.measured import DEFAULT_EFFICIENCY, load_measured, looks_up
from engine.deploy.op_rows import op_rows_columns_many, weight_text
from engine.deploy.plan import expected_phase_times_many, flat_inputs, pick_inputs
from engine.deploy.rules import GRID_BATCHES
from engine.deploy.admission import steady_tokens
from engine.deploy.sol import (capacities, capacity_terms, phase_inputs, phase_requests, phases_many, steady_terms,
                               summarize_many)
from engine.deploy.structure import HBM_FRACTION, PREFILL_TOKENS, Options, device_tokens
from engine.batch.columns import Columns

#: A bucket's per-point lists, in the order they are filled.
BUCKET_FIELDS = ("batch", "input_len", "output_len", "kv_bytes", "kv_dtype", "gpu")
PHASE_FIELDS = ("step_time_s", "step_bound_s", "step_expected_s", "compute_time_s", "memory_time_s", "comm_time_s", "flops", "bytes",
                "weight_bytes", "comm_bytes", "bound")


def check_work(ev: Evaluation, grid_path=None, gpu_root=None) -> None:
    """Refuse, in one line, a model whose points over the grid could exceed the bound
    (:func:`engine.batch.grid.model_cells`), before any structure is built (the build checks every
    bound of a model's work before starting any of it)."""
    stored = float(sum(t.total_bytes for t in ev.tensors() if t.stack == "main"))
    model_cells(ev, load_grid(grid_path), load_gpus(gpu_root), stored)


def evaluate_model(ev: Evaluation, grid_path=None, gpu_root=None, export: dict | None = None,
                   cache: StructureCache | None = None):
    """(deployment columns, op columns, number of points) for one model over the grid. With
    ``export`` (a dict), it also receives the deploy page's formula document
    (:func:`engine.batch.deploy_export.model_export`) built from the same structures. ``cache``: the
    model's :class:`engine.deploy.structure_cache.StructureCache` to build into (the build passes
    the same one to its sizing step, which then compiles only what the grid did not)."""
    grid, gpus = load_grid(grid_path), load_gpus(gpu_root)
    if cache is None:
        cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    tables = cache.tables
    deployments, ops = Columns(), Columns()
    measured = _measured_reader(gpu_root)     # one reader for every format's rows and the export
    cells, structure, total = _evaluate_format(ev, grid, gpus, measured, cache, checkpoints.OWN, deployments, ops)
    for name in checkpoints.formats(ev.model)[1:]:
        # a published checkpoint's rows: the grid's `checkpoints:` block (GPUs, frameworks, KV
        # dtypes), on those of its GPUs whose tensor cores run the format natively (elsewhere
        # frameworks dequantize to BF16): docs/results.md, "Weight formats"
        small = grid.for_checkpoints()
        compute = checkpoints.format_compute(ev.model, name, ev.corpus)
        names = tuple(n for n in (small.gpus if small.gpus is not None else tuple(gpus))
                      if n not in gpus or compute <= set(gpus[n].peak))   # an unknown name: model_cells says so
        if names:
            total += _evaluate_format(ev, replace(small, gpus=names), gpus, measured, cache, name, deployments, ops)[2]
    deployments, ops = deployments.joined(), ops.joined()
    if export is not None:
        from engine.batch.deploy_export import model_export
        export.update(model_export(ev, cells, grid, gpus, tables, structure,
                                   lambda s, gpu: s.weight_bytes_per_gpu < gpu.hbm_bytes * HBM_FRACTION, measured))
    return deployments, ops, total



def _evaluate_format(ev: Evaluation, grid, gpus: dict, measured, cache: StructureCache, fmt: str,
                     deployments: Columns, ops: Columns):
    """Append one weight format's deployment and op rows over ``gpus`` to ``deployments`` and
    ``ops``; (its cells, its structure lookup, its number of points). ``measured``: the build's
    :func:`_measured_reader`."""
    options = Options(weight_format=fmt)
    tables = cache.tables
    stored = float(sum(t.total_bytes for t in checkpoints.tensors(ev.numeric, ev.model, ev.corpus, fmt)
                       if t.stack == "main"))
    cells = model_cells(ev, grid, gpus, stored)
    gpu_list = sorted({g.key for g, _ in cells})
    gpu_objs = [gpus[k] for k in gpu_list]
    gpu_pos = {k: i for i, k in enumerate(gpu_list)}
    max_ctx = int(ev.numeric.max_context)
    inputs = input_lengths(grid, max_ctx)

    def structure(config, domain, framework, gpu, regimes, mtp: int = 0):
        """The structure of a cell's framework at per-phase token ``regimes`` (domains that hold the
        whole config place and compile alike: the cache shares that work); with ``mtp`` draft
        tokens, only the draft steps of the one ``archledger deploy --mtp`` builds, fused alone,
        and its memory (the deploy page's export: StructureCache.drafting)."""
        if mtp:
            return cache.drafting(config, domain, framework, gpu, regimes, mtp)
        return cache.structure(config, domain, framework, gpu, regimes, options)

    # 1. the points of every cell, bucketed by the structure that evaluates them
    buckets: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    ops_points: dict[tuple, list] = defaultdict(list)
    regime_memo: dict[tuple, dict] = {}
    token_memo: dict = {}         # config -> {(batch, prompt): tokens_per_device}

    def regimes_of(config, limits) -> dict:
        """The memo of :func:`regimes_at` ((batch, prompt) -> regimes) and :func:`grouped` for one
        config and limits: looked up once per cell and framework, not hashed (a config, a tuple) per point."""
        return regime_memo.setdefault((config, tuple(limits)), {})

    def regimes_at(memo: dict, config, limits, b, inp, out_len) -> tuple:
        """The fusion token regime per phase of a point (the same for every GPU and KV dtype).
        Keyed without the output length: tokens per device read only the batch and the prompt."""
        found = memo.get((b, inp))
        if found is None:
            tokens = token_memo.setdefault(config, {})      # the frameworks' other limits: the same tokens
            t = tokens.get((b, inp))
            if t is None:
                t = tokens[(b, inp)] = tokens_per_device(config, Scenario(b, inp, out_len))
            found = memo[(b, inp)] = tuple(regime(limits, t[p]) for p in PHASES)
        return found

    top = max(grid.batches)

    def grouped(memo: dict, config, limits, inp, caps: tuple[int, int], out_len) -> list[tuple]:
        """The batches a prompt length runs at the capacities ``caps`` (worst case, steady state:
        :func:`grid_batches`), grouped by regime: (regimes, batches) in the order they first occur,
        batches in batch order (so buckets fill, and are created, as point by point). Remembered
        in ``memo`` per (prompt, the larger capacity up to the largest batch): the batches read no
        more than that, the regimes the batch and the prompt (as :func:`regimes_at`), and the other
        KV dtypes and output lengths of a cell meet the same ones again."""
        key = ("batches", inp, max(0, min(max(caps), top)))
        found = memo.get(key)
        if found is None:
            by_regime: dict[tuple, list] = {}
            for b in grid_batches(grid.batches, caps):
                by_regime.setdefault(regimes_at(memo, config, limits, b, inp, out_len), []).append(b)
            found = memo[key] = list(by_regime.items())
        return found

    batch_set = set(grid.batches)

    def fill_tokens(config, cell_caps: np.ndarray) -> None:
        """Put the tokens per device of the (batch, prompt) pairs a cell's points ask into the
        config's memo at once (:func:`_tokens_at`): with a config's first cell, the grid's batches at
        every prompt; then the capacities the cell adds (each prompt's column of ``cell_caps``, the
        larger of the worst-case and the steady-state capacity: the one :func:`grid_batches` adds).
        :func:`regimes_at` computes any other pair itself."""
        tokens = token_memo.get(config)
        pairs = []
        if tokens is None:
            tokens = token_memo[config] = {}
            pairs = [(b, inp) for inp in inputs for b in grid.batches]
        for inp, column in zip(inputs, cell_caps.T.tolist()):
            for cap in set(column):
                if 1 <= cap < top and cap not in batch_set and (cap, inp) not in tokens:
                    pairs.append((cap, inp))
        if pairs:
            tokens.update(zip(pairs, _tokens_at(config, pairs)))

    lanes = [(kv_dtype, out_len) for kv_dtype in grid.kv_dtypes for out_len in grid.output_lengths]
    lane_points = (np.tile(np.array(inputs), len(lanes)), np.repeat(np.array([o for _, o in lanes]), len(inputs)),
                   np.repeat(np.array([kv.KV_DTYPE_BYTES[d] for d, _ in lanes]), len(inputs)))
    lane_terms: dict[int, tuple] = {}     # id(base structure) -> (it, its capacity_terms, steady_terms at lane_points)
    admitted: dict = {}                   # admission policy -> its steady tokens at lane_points

    def policy_tokens(admission) -> np.ndarray:
        """The steady tokens per request at the lane points under ``admission``, once per policy:
        engine.deploy.admission.steady_tokens reads the policy and the lengths alone (a frozen
        policy compares by every field, so equal keys read equal numbers)."""
        found = admitted.get(admission)
        if found is None:
            found = admitted[admission] = steady_tokens(admission, lane_points[0], lane_points[1])
        return found

    for gpu, config in cells:
        domain = gpu.scale_up_domain
        for framework in grid.frameworks:
            limits = token_limits(tables.get(framework))
            sig = signature(tables.get(framework), gpu)
            base = structure(config, domain, framework, gpu, (len(limits), 0))
            usable = gpu.hbm_bytes * HBM_FRACTION
            memo = regimes_of(config, limits)
            if base.weight_bytes_per_gpu >= usable:
                continue                                   # weights alone do not fit: nothing to serve
            # the capacity at every (KV dtype, output length, prompt) of the cell in one call (its
            # arithmetic is per point: the same numbers as one call per KV dtype and output length)
            mine = lane_terms.get(id(base))      # GPU types of one structure: the same terms
            if mine is None or mine[0] is not base:
                mine = lane_terms[id(base)] = (base, capacity_terms(base, *lane_points),
                                               steady_terms(base, *lane_points, tokens=policy_tokens(base.admission)))
            # and the steady state's (the fronts serve by it: sol.steady_fit), in the same room
            cell_caps, steady_caps = (c.reshape(len(lanes), len(inputs)) for c in capacities(base, usable, *mine[1:]))
            fill_tokens(config, np.maximum(cell_caps, steady_caps))
            # this cell and framework's buckets by regimes (the buckets' key past the regimes is the
            # cell's and framework's own: not hashed again per point), each bucket's columns at hand
            mine_buckets: dict[tuple, tuple] = {}
            for kv_dtype in grid.kv_dtypes:
                kv_bytes = kv.KV_DTYPE_BYTES[kv_dtype]
                for out_len in grid.output_lengths:
                    lane = lanes.index((kv_dtype, out_len))
                    # Python ints compare faster
                    caps = zip(cell_caps[lane].tolist(), steady_caps[lane].tolist())
                    for inp, cap in zip(inputs, caps):
                        for regimes, bs in grouped(memo, config, limits, inp, cap, out_len):
                            lists = mine_buckets.get(regimes)
                            if lists is None:
                                bucket = buckets[(config, domain, framework, sig, regimes, gpu.key)]
                                lists = mine_buckets[regimes] = tuple(bucket[name] for name in BUCKET_FIELDS)
                            k = len(bs)
                            lists[0].extend(bs)
                            lists[1].extend([inp] * k)
                            lists[2].extend([out_len] * k)
                            lists[3].extend([kv_bytes] * k)
                            lists[4].extend([kv_dtype] * k)
                            lists[5].extend([gpu.key] * k)
                if kv_dtype in grid.ops_kv_dtypes:
                    for b, inp, out_len in grid.ops_points:
                        regimes = regimes_at(memo, config, limits, b, inp, out_len)
                        ops_points[(config, domain, framework, gpu.key, regimes, kv_dtype)].append((b, inp, out_len))

    # 2. one vectorized evaluation per structure (all GPUs of the bucket's class at once)
    merged: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for (config, domain, framework, sig, regimes, gpu_key), points in buckets.items():
        into = merged[(config, domain, framework, sig, regimes)]
        for name, values in points.items():
            into[name].extend(values)
    total = 0
    calls = []
    for (config, domain, framework, sig, regimes), points in merged.items():
        gpu = gpus[points["gpu"][0]]
        s = structure(config, domain, framework, gpu, regimes)
        calls.append((s, np.array([gpu_pos[g] for g in points["gpu"]]), np.array(points["kv_bytes"], dtype=float),
                      np.array(points["batch"]), np.array(points["input_len"]), np.array(points["output_len"])))
    # each call's phase inputs once (per point: the expected times' groups pick theirs out)
    call_inputs = [phase_inputs(call[0], call[3], call[4], call[5], call[0].options.prefill_tokens, mean=True)
                   for call in calls]
    # the summaries' phase sums first (sibling structures share compiled programs: each evaluated
    # once over all their points; summarize_many's inputs: a call's own at the default prefill
    # budget), with each point's sum of step bounds over the default efficiency: the expected time
    # where no table covers a step, which the expected times take instead of evaluating it again
    summary_inputs = [i if call[0].options.prefill_tokens == PREFILL_TOKENS else None
                      for call, i in zip(calls, call_inputs)]
    phases = phases_many(gpu_objs, phase_requests(calls, inputs=summary_inputs), unmeasured=DEFAULT_EFFICIENCY)
    known = [_unmeasured_sums(p) if i is not None else None for p, i in zip(phases, summary_inputs)]
    # the expected times from measured kernels (gpus/measured/), by deploy's own rule
    expected = _expected(calls, list(merged.values()), gpus, measured, call_inputs, known)
    # each call's steady tokens per request, picked out of its policy's at the lanes
    # (admission.steady_tokens is per point: the floats of evaluating at the call's own points)
    lane_of = _lane_index(inputs, grid.output_lengths)
    summaries = summarize_many(gpu_objs, calls, expected=expected, phases=phases,
                               admitted=[policy_tokens(call[0].admission)[lane_of(call[4], call[5])]
                                         for call in calls])
    for ((config, domain, framework, sig, regimes), points), call, out in zip(merged.items(), calls, summaries):
        s = call[0]
        n = len(call[1])
        total += n
        phases = out.pop("phases")
        out["weight_bytes_per_gpu_formula"] = weight_text(s.weight_formula)
        # each field as the points' array or one value, once for both phases' rows
        fields = [(name, _points(value, n), True) if isinstance(value, np.ndarray) and value.ndim
                  else (name, value.item() if isinstance(value, np.ndarray) else value, False)
                  for name, value in out.items() if name != "max_context"]
        for phase in PHASES:
            deployments.repeat("model_id", ev.model.model_id, n)
            deployments.add("gpu", points["gpu"])
            deployments.repeat("framework", framework, n)
            deployments.repeat("weight_format", fmt, n)
            deployments.add("kv_dtype", points["kv_dtype"])
            deployments.repeat("phase", phase, n)
            for name, value, per_point in fields:
                if per_point:
                    deployments.add(name, value)
                else:
                    deployments.repeat(name, value, n)
            for name in PHASE_FIELDS:
                deployments.add(name, _points(np.asarray(phases[phase][name]), n))

    # 3. per-op tables of the points the site shows: every table's lookups at once (each measured
    # table interpolated once over all of them), appended in the same order
    asked, labels = [], []
    for (config, domain, framework, gpu_key, regimes, kv_dtype), points in ops_points.items():
        gpu = gpus[gpu_key]
        plan = Plan(structure(config, domain, framework, gpu, regimes), gpu, kv_dtype)
        scenarios = [Scenario(b, inp, out_len) for b, inp, out_len in points]
        kernels = measured(gpu_key, framework)       # measured kernels (`tables`: the fusion tables)
        for phase in PHASES:
            asked.append((plan, phase, scenarios, kernels))
            labels.append((config, domain, framework, gpu_key, kv_dtype, phase, scenarios))
    for (config, domain, framework, gpu_key, kv_dtype, phase, scenarios), columns in \
            zip(labels, op_rows_columns_many(asked, arrays=True)):
        rows = len(columns["op_uid"])
        per_point = rows // len(scenarios)
        key = {"model_id": ev.model.model_id, "gpu": gpu_key, "n_gpus": config.n_gpus,
               "gpus_per_node": domain, "tp": config.tp, "ep": config.ep, "dp_attn": config.dp_attn,
               "pp": config.pp, "cp": config.cp, "cp_kind": config.cp_kind if config.cp > 1 else "",
               "config": config.label(), "framework": framework, "weight_format": fmt,
               "kv_dtype": kv_dtype, "phase": phase}
        for name, value in key.items():
            ops.repeat(name, value, rows)
        for point in scenarios:
            ops.repeat("batch", point.batch, per_point)
            ops.repeat("input_len", point.input_len, per_point)
            ops.repeat("output_len", point.output_len, per_point)
        for name, values in columns.items():
            ops.add(name, values)
    return cells, structure, total


# the grid's batch rule (GRID_BATCHES) is written in engine/deploy/rules.py, beside the summary's rules:
# the site ships it without importing this module (which brings the spec language and sympy)


def grid_batches(batches, caps) -> list[int]:
    """:data:`GRID_BATCHES` at the capacities ``caps`` (worst case, steady state) over ``batches``;
    the rule runs once per distinct (batches, capacities) of a process (the grid asks the same
    capacities at every prompt length and config where the KV budget is not what binds)."""
    key = (tuple(batches), caps[0], caps[1], type(caps[0]), type(caps[1]))     # (5 and 5.0: one key else)
    found = _BATCHES.get(key)
    if found is None:
        if len(_BATCHES) > 100_000:
            _BATCHES.clear()
        found = _BATCHES[key] = tuple(formula_tree.select(GRID_BATCHES, list(batches),
                                                          {"worst": caps[0], "steady": caps[1]}))
    return list(found)


_BATCHES: dict[tuple, tuple] = {}     # (batches, worst, steady, their types) -> grid_batches' answer


def _measured_reader(gpu_root):
    """(GPU key, framework) -> the measured tables the deploy command reads for them, from the
    build's GPU folder (``<gpu_root>/measured``, as deploy and plan read theirs; the repo's when
    None), each pair read once per model."""
    from functools import cache
    from pathlib import Path
    root = Path(gpu_root) / "measured" if gpu_root else None
    return cache(lambda gpu_key, framework: load_measured(root, gpu=gpu_key, framework=framework))


def _unmeasured_sums(phases: dict) -> dict[str, np.ndarray] | None:
    """A call's :func:`engine.deploy.sol.phases_many` answer's ``unmeasured_s`` per phase input,
    taken out of it (the summaries read the rest); None unless every input has it (a program whose
    totals do not stack gives none)."""
    sums = {name: v.pop("unmeasured_s", None) for name, v in phases.items()}
    return sums if all(v is not None for v in sums.values()) else None


def _expected(calls: list[tuple], buckets: list[dict], gpus: dict, measured,
              inputs: list | None = None, known: list | None = None) -> list[dict[str, np.ndarray]]:
    """Per call (a structure over a bucket's points), each phase input's expected step time at its
    points (:func:`engine.deploy.plan.expected_phase_times_many`, every call of the model at once):
    each (GPU, KV dtype) of a bucket's points with its own measured tables (the deploy command's
    lookup: that GPU's under the structure's framework; a GPU without any: bound / the default
    efficiency; ``measured``: :func:`_measured_reader`), gathered back in the points' order.
    ``inputs``: each call's :func:`engine.deploy.sol.phase_inputs` at its points (its structure's
    prefill budget, ``mean``), each group's picked out of them. ``known``: per call, each of those
    inputs' sum of its steps' bounds over the default efficiency at the call's points
    (:func:`_unmeasured_sums`), or None: a group on a GPU type without tables, no two-batch overlap,
    takes its points' out of it (:func:`_known_times`) and is not asked."""
    asked, where, picked = [], [], []
    out: list[dict[str, np.ndarray]] = [{} for _ in calls]
    for c, (call, points) in enumerate(zip(calls, buckets)):
        s = call[0]
        batch, inp, out_len = call[3], call[4], call[5]
        flat = flat_inputs(inputs[c]) if inputs is not None else None       # once per call, picked per group
        for gpu_key, kv_dtype, mine, size in _gpu_groups(points["gpu"], points["kv_dtype"]):
            plan, tables = Plan(s, gpus[gpu_key], kv_dtype), measured(gpu_key, s.options.framework)
            if _known_times(plan, tables, known[c] if known is not None else None, mine, out[c], len(call[1])):
                continue
            asked.append((plan, batch[mine], inp[mine], out_len[mine], tables))
            where.append((c, mine, size))
            if inputs is not None:
                picked.append(pick_inputs(flat, mine))
    for (c, mine, size), times in zip(where, expected_phase_times_many(asked, picked if inputs is not None else None)):
        n = len(calls[c][1])
        for name, value in times.items():
            out[c].setdefault(name, np.zeros(n))[mine] = np.broadcast_to(value, (size,))
    return out


def _known_times(plan: Plan, tables, sums: dict | None, mine, into: dict, n: int) -> bool:
    """Write a group's expected times (its points ``mine`` of a call of ``n`` points) into ``into``
    from ``sums`` (:func:`_unmeasured_sums`) where they are its times: nothing is looked up for it
    (engine.deploy.measured.looks_up: each step at its bound over the default efficiency, summed
    point-major, engine.deploy.compiled_totals.point_major_divided) and no two-batch schedule
    recomposes them. The sums are per point, so its points' are the floats of its own evaluation
    (tests/test_grid_thirteenth_pass.py). Whether it wrote them."""
    if sums is None or looks_up(plan, tables) or (plan.structure.options.overlap or "none") == "two_batch":
        return False
    for name, value in sums.items():
        into.setdefault(name, np.zeros(n))[mine] = value[mine]
    return True


def _gpu_groups(gpu_of: list, kv_of: list) -> list[tuple]:
    """(GPU key, KV dtype, the points, how many) of each (GPU, KV dtype) of a call's points
    (``gpu_of``, ``kv_of``: each point's), GPUs in the order they first occur and each GPU's KV
    dtypes in the order the call's first occur; the points in ascending order, as a slice where a
    pair's points are one run (a call's buckets are one GPU each, filled KV dtype after KV dtype:
    every pair, so a view, not a copy) and as indices otherwise. The same groups, in the same
    order, as a mask per pair over the call (tests/test_grid_tenth_pass.py)."""
    runs: dict[tuple, list] = {}
    start = 0
    for pair, group in groupby(zip(gpu_of, kv_of)):
        size = sum(1 for _ in group)
        runs.setdefault(pair, []).append((start, start + size))
        start += size
    gpu_rank = {g: i for i, g in enumerate(dict.fromkeys(gpu_of))}
    kv_rank = {k: i for i, k in enumerate(dict.fromkeys(kv_of))}
    out = []
    for (gpu_key, kv_dtype), spans in sorted(runs.items(), key=lambda r: (gpu_rank[r[0][0]], kv_rank[r[0][1]])):
        if len(spans) == 1:
            mine = slice(*spans[0])
        else:
            mine = np.concatenate([np.arange(a, b) for a, b in spans])
        out.append((gpu_key, kv_dtype, mine, sum(b - a for a, b in spans)))
    return out


def _lane_index(inputs: list[int], outputs) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A function of points' (prompt, output) arrays giving each point's place in the lanes' first
    KV dtype block (``_evaluate_format``'s ``lane_points``: output after output, each over every prompt
    in ``inputs``' order): output position x len(inputs) + prompt position. Every point's lengths are
    among the grid's (its buckets are filled from them)."""
    def places(values, order: np.ndarray):
        ranked = np.asarray(values)[order]
        return lambda x: order[np.searchsorted(ranked, x)]
    prompt = places(inputs, np.argsort(inputs, kind="stable"))
    output = places(list(outputs), np.argsort(list(outputs), kind="stable"))
    return lambda inp, out: output(out) * len(inputs) + prompt(inp)


def _tokens_at(config, pairs: list[tuple[int, int]]) -> list[dict[str, int]]:
    """:func:`engine.deploy.tokens_per_device` of ``config`` at each (batch, prompt) pair (default
    prefill budget and decode seq), its arithmetic over arrays in one pass
    (:func:`engine.deploy.structure.device_tokens`). The grid's points are in range already
    (engine.batch.grid checks its batches and lengths), so no Scenario is built to check them."""
    prefill, decode = device_tokens(config, np.array([b for b, _ in pairs]), np.array([i for _, i in pairs]))
    return [{"prefill": int(p), "decode": int(d)} for p, d in zip(prefill.tolist(), decode.tolist())]

def _points(value: np.ndarray, n: int) -> np.ndarray:
    """``value`` over the bucket's ``n`` points: summarize's fields already have that shape (its
    arrays are broadcast to the points), so most need no new view."""
    return value if value.shape == (n,) else np.broadcast_to(value, (n,))
