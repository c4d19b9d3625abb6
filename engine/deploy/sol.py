"""Speed-of-light results of a plan at scenario points: phase times, capacity, the deployment row.

Layer: engine.deploy. :func:`summarize` is vectorized: batch, lengths, KV element size and GPU may vary
per point (broadcastable arrays), and every field comes back as an array of their broadcast shape.
The grid build calls it once per structure with every point that shares it; ``archledger deploy``
(:meth:`Deployment.build`) with one point, then adds the per-op table. Field names and units are
those of the Parquet schema. :class:`~engine.deploy.plan.Plan` (a structure on one GPU type) and
:class:`~engine.deploy.plan.Deployment` live in :mod:`engine.deploy.plan`, the per-op rows in
:mod:`engine.deploy.op_rows`; both import this module, never the reverse. The deploy page computes the same fields
in the browser from the formula trees of engine/batch/deploy_export.py and the rule programs this
module evaluates (engine.deploy.rules: schedule, capacity, TTFT/TPOT, the two-batch schedule, each
defined there once; static/js/deploy_eval.js gathers their inputs and formula.js runs them);
tests/test_site_offgrid.py holds the two equal.

* Two times per phase (docs/deployment.md "Two times per point"). ``step_bound_s``, the lower
  bound no schedule beats: max(sum of t_compute, sum of t_memory, per link class the sum of its
  t_comm) (engine.deploy.cost). ``step_time_s``, the schedule estimate under the framework's
  overlap policy (``Options.overlap``, the policies a fusion table declares): ``none`` = the sum
  over steps of SOL = max(t_compute, t_memory, t_comm), one kernel after another; ``two_batch``
  (SGLang's two-batch overlap, DeepSeek's dual micro-batch) = :func:`two_batch_time`. ``bound`` =
  the term whose steps take most of the no-overlap time. ``ttft_s`` / ``tpot_s`` are composed of
  the estimates, ``ttft_bound_s`` / ``tpot_bound_s`` of the bounds by the same rules below.
* One rule for capacity, fit and the prefill schedule (docs/deployment.md "Memory and capacity"),
  chunked prefill as vLLM and SGLang run it: a replica prefills at most ``prefill_tokens`` prompt
  tokens per step, and the framework reserves that step's working set (the largest kernel's
  activations at the budget; vLLM sizes it with a profiling run at ``max_num_batched_tokens``) next
  to the weights before the KV cache gets the rest. Per GPU: usable = hbm_fraction x HBM; capacity
  C = floor((usable - weights - runtime reserve - working set) / KV per request per GPU at the last
  position) (the reserve: the framework's ``runtime_reserve`` data, engine.deploy.fusion);
  ``max_concurrent_requests`` = dp_attn x C; a batch fits exactly when ceil(batch / dp_attn) <= C
  (else ``shortfall_bytes`` is the excess); ``max_prefill_batch`` = whole prompts one step holds,
  dp_attn x min(max(1, floor(budget / prompt)), C).
* TTFT = the last request's first token, [(pp - 1) x t(largest step) + s x t(mean step)] / pp with
  s = :func:`prefill_steps` (the fullest replica's prompt tokens over the budget, at least one
  micro-batch per stage); with pp = 1 that is s steps one after the other. TPOT = decode path at
  k = min(pp, batch) micro-batches. With DP-attention both paths run at
  the fullest replica's requests, ceil(batch / dp_attn).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.language import kv
from engine.deploy.admission import mean_context, steady_tokens as admission_steady_tokens
from engine.deploy.cost import BOUNDS
from engine.deploy.structure import (HBM_FRACTION, MAX_BATCH, MTP_STACK, PREFILL_TOKENS,
                                     Structure, micro_batches, tokens_per_step, prefill_program_batch, prefill_steps,
                                     program_batch, requests_per_replica, step_tokens, _schedule)
from engine.deploy.hardware import GPU
import engine.deploy.rules as rules
from engine.language.formula_tree import run_arrays


def phase_times(compiled, rates, batch, seq, ctx, kv_bytes, times_only: bool = False, at=None,
                unmeasured: float | None = None) -> dict[str, np.ndarray]:
    """Phase totals over the broadcast shape of the inputs (times in seconds, bytes, FLOPs);
    ``times_only``: the step time alone (the same floats); ``at``: the points are the inputs'
    points ``at`` picks; ``unmeasured``: also ``unmeasured_s`` where the totals give it
    (:meth:`engine.deploy.cost.CompiledProgram.totals`)."""
    if times_only:
        return {"step_time_s": compiled.step_time(rates, batch, seq, ctx, kv_bytes, at=at)}
    v = compiled.totals(rates, batch, seq, ctx, kv_bytes, at=at, unmeasured=unmeasured)
    extra = {"unmeasured_s": v["t_unmeasured"]} if "t_unmeasured" in v else {}
    return {**extra, "step_time_s": v["t_sol"], "step_bound_s": v["t_bound"], "comm_stream_s": v["t_comm_stream"],
            "compute_time_s": v["t_compute"], "memory_time_s": v["t_memory"],
            "comm_time_s": v["t_comm"], "flops": v["flops"], "bytes": v["bytes"],
            "weight_bytes": v["weight_bytes"], "comm_bytes": v["comm_bytes"],
            "bound": np.asarray(BOUNDS)[np.argmax(v["by_bound"], axis=0)]}


#: The fewest requests per attention replica in a step that the two-batch schedule splits in two
#: (SGLang's compute_split_seq_index returns None when a half would be empty: one request runs alone).
TWO_BATCH_MIN_REQUESTS = rules.TWO_BATCH_MIN_REQUESTS


def two_batch_time(half: dict, full: dict, requests_per_replica) -> np.ndarray:
    """One step's time when the batch runs as two half-batches that overlap (SGLang
    ``--enable-two-batch-overlap``, DeepSeek's dual micro-batch), from ``half`` (:func:`phase_times`
    of the program at half the batch) and the full batch's lower bound.

    ``full``: :func:`phase_times` of the full batch. The model (simple, and said so in
    docs/deployment.md): the GPU runs two streams; the compute
    stream runs both halves' kernels one after another (2 x (t_sol - t_comm_stream) of a half), the
    communication stream both halves' collectives (2 x t_comm_stream), each half's collective
    hidden behind the other half's kernels. The step takes the busier stream: max(2 x kernels,
    2 x collectives); the pipeline's start and end (the first half's first kernels, the second's
    last collective, with nothing to hide behind) are left out, so is the SMs' share DeepEP's
    kernels take. Never below the full batch's bound (no schedule is). A step of fewer than
    :data:`TWO_BATCH_MIN_REQUESTS` requests per replica is not split: its no-overlap time."""
    env = {"half_time": half["step_time_s"], "half_comm": half["comm_stream_s"], "full_bound": full["step_bound_s"],
           "full_time": full["step_time_s"], "requests": np.asarray(requests_per_replica)}
    return np.asarray(run_arrays(rules.TWO_BATCH, env)["time"])


def distinct_rows(columns: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``columns`` (each broadcast to length ``n``, as float64): (keys of
    shape (len(columns), distinct), inverse of shape (n,) with keys[:, inverse] equal to the
    rows). Sorted on the columns given per row (one given as a single number never splits two
    rows; the last column is the first sort key, as :func:`numpy.lexsort`), then cut wherever
    one of them changes."""
    full = [c if type(c) is np.ndarray and c.dtype == float and c.shape == (n,)       # (most calls: no view)
            else np.broadcast_to(np.asarray(c, dtype=float), (n,)) for c in columns]
    varying = [c for c in full if n and c.strides[0]]    # an input given as one number is constant
    if not varying:                         # every row alike (or none)
        first = np.arange(min(n, 1))
        return np.stack([c[first] for c in full]), np.zeros(n, dtype=np.intp)
    order = np.lexsort(varying)
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    changes = starts[1:]
    changes.fill(False)
    for c in varying:                       # a row starts where any sorted column changes
        ranked = c[order]
        changes |= ranked[1:] != ranked[:-1]
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = np.cumsum(starts) - 1
    first = order[starts]
    return np.stack([c[first] for c in full]), inverse


#: Steps x points below which :func:`phase_at_points` evaluates every point as given (measured:
#: sorting out the distinct points costs about as much as evaluating a few thousand step-points).
DISTINCT_MIN_ELEMENTS = 8192


def phase_at_points(compiled, gpus: list[GPU], gpu_index, batch, seq, ctx, kv_bytes,
                    times_only: bool = False) -> dict[str, np.ndarray]:
    """:func:`phase_times` of point ``i`` on ``gpus[gpu_index[i]]``, each distinct (batch, seq,
    ctx, KV size, GPU) point evaluated once and spread.

    Programs run at the *program* batch (ceil(batch / dp_attn) over the micro-batches; a chunked
    prefill step holds the same prompts for every batch that fills the step budget), the grid
    puts several GPU types of one class in one call and prefill does not read the output length:
    about three step-points in five a call asks for repeat another. Every number is per point
    arithmetic (a point's sums do not read another point; the stacked and the step-by-step sums
    agree, tests/test_cost_paths.py), so the spread results are the floats of a per-point call.
    Inputs of more than one dimension, and calls of fewer than :data:`DISTINCT_MIN_ELEMENTS`
    step-points (where sorting costs more than it saves), are evaluated as given."""
    args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
    index = np.asarray(gpu_index)
    shape = np.broadcast_shapes(*(a.shape for a in args), index.shape)
    if len(shape) != 1 or len(compiled.program.steps) * shape[0] < DISTINCT_MIN_ELEMENTS:
        return phase_times(compiled, compiled.rates_for(gpus, index), *args, times_only)
    # the GPU the last sort key: the keys come sorted on the point, each point's GPUs side by side
    keys, inverse = distinct_rows([index] + args, shape[0])
    gpu, points = keys[0].astype(np.intp), keys[1:]
    if (gpu == gpu[0]).all():             # one GPU type: the distinct points are the arguments'
        got = phase_times(compiled, compiled.rates_for(gpus, gpu), *points, times_only)
    else:
        # the step values do not depend on the GPU (only the rates they divide by do): evaluated
        # once per distinct (batch, seq, ctx, KV size), a run of the sorted keys, and gathered for
        # each GPU that runs it
        new = np.concatenate(([True], (points[:, 1:] != points[:, :-1]).any(axis=0)))
        got = phase_times(compiled, compiled.rates_for(gpus, gpu), *points[:, new], times_only,
                          at=np.cumsum(new) - 1)
    return {name: np.asarray(value)[inverse] for name, value in got.items()}


def prefill_working_set(structure: Structure, input_len, kv_bytes, prefill_tokens: int = PREFILL_TOKENS) -> np.ndarray:
    """Bytes one GPU reserves for a prefill step at the token budget: the largest kernel's working set
    (activations and caches read and written, no weights) with ``prefill_tokens`` prompt tokens per
    replica, i.e. budget / input_len prompts (a fraction is a chunk of one longer prompt: its queries
    against the whole prompt's keys). Fixed per (structure, prompt length), whatever the batch."""
    compiled = structure.compiled["prefill"]
    inp = np.asarray(input_len, dtype=float)
    shape = np.broadcast_shapes(inp.shape, np.shape(kv_bytes))
    if len(shape) == 1:
        # the grid asks at every point of a bucket: a handful of (prompt, KV size) pairs, each
        # evaluated once per program (per point arithmetic: the spread values are the same floats)
        keys, inverse = distinct_rows([inp, np.asarray(kv_bytes, dtype=float)], shape[0])
        key = ("points", prefill_tokens, keys.shape, keys.tobytes())     # (the budget sets the prompts per step)
        found = compiled.working_sets.get(key)
        if found is None:
            found = compiled.working_sets[key] = _working_set(structure, keys[0], keys[1], prefill_tokens)
        return found[inverse]
    return _working_set(structure, inp, kv_bytes, prefill_tokens)


def _working_set(structure: Structure, inp: np.ndarray, kv_bytes, prefill_tokens: int) -> np.ndarray:
    """:func:`prefill_working_set` at these points, each evaluated (a single point is remembered
    per program: the sizing search asks per GPU type and config)."""
    compiled = structure.compiled["prefill"]
    shape = np.broadcast_shapes(inp.shape, np.shape(kv_bytes))
    prompts = _schedule(structure.config, "budget_batch", 1, inp, prefill_tokens)   # per replica
    args = [np.asarray(v, dtype=float) for v in (prompts, inp, inp, kv_bytes)]
    key = tuple(float(a) for a in args) if not shape else None
    if key is not None and key in compiled.working_sets:
        return compiled.working_sets[key]
    keep, repeats = compiled.kernel_steps()
    if not keep:
        return np.zeros(shape)
    traffic, weights = compiled.columns((1, 3), args, shape)          # one table: the same floats
    repeat = repeats.reshape((-1,) + (1,) * len(shape))
    out = ((traffic[keep] - weights[keep]) / repeat).max(axis=0)
    if key is not None:
        compiled.working_sets[key] = out
    return out


def _room(structure: Structure, usable, act) -> np.ndarray:
    """Bytes per GPU left for the KV cache: usable - weights - the runtime reserve - the prefill
    step's working set ``act``."""
    env = {"usable": np.asarray(usable), "weights": structure.weight_bytes_per_gpu,
           "reserve": structure.reserve_bytes_per_gpu, "act": act}
    return run_arrays(rules.ROOM, env)["room"]


def _fit_count(room, kv_dev) -> np.ndarray:
    """The largest n >= 0 with n x kv_dev <= room, decided by the same float product the fit test
    uses (a float floor(room / kv_dev) can be one off at an exact boundary); MAX_BATCH when a
    request holds no cache, 0 when nothing is left."""
    room, kv_dev = np.broadcast_arrays(np.asarray(room, dtype=float), np.asarray(kv_dev, dtype=float))
    return np.asarray(run_arrays(rules.FIT, {"room": room, "kv_dev": kv_dev, "max_batch": MAX_BATCH})["cap"]).astype(np.int64)


def capacity_terms(structure: Structure, input_len, output_len, kv_bytes,
                   prefill_tokens: int = PREFILL_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """(KV bytes per request per GPU at the last position, the prefill step's working set) at these
    points: what :func:`capacity` reads besides the usable memory. GPU-free: the grid computes them
    once per structure for every GPU type it serves (the same arrays, so the same capacities)."""
    inp = np.asarray(input_len)
    kv_dev = structure.kv_device_fn(np.asarray(inp + np.asarray(output_len), dtype=float), kv_bytes)
    return kv_dev, prefill_working_set(structure, inp, kv_bytes, prefill_tokens)


def capacity(structure: Structure, usable, input_len, output_len, kv_bytes,
             prefill_tokens: int = PREFILL_TOKENS, terms: tuple | None = None, steady: bool = False) -> np.ndarray:
    """``max_concurrent_requests``: dp_attn x the requests per replica whose KV at the last position
    fits next to the weights and the prefill step's working set (the module's one rule). ``terms``:
    :func:`capacity_terms` of these points, when the caller has them. ``steady``:
    ``max_concurrent_requests_steady`` instead (:func:`steady_fit`), the same room."""
    kv_dev, act = terms if terms is not None else capacity_terms(structure, input_len, output_len, kv_bytes,
                                                                  prefill_tokens)
    room = _room(structure, usable, act)
    if steady:
        return structure.config.dp_attn * steady_fit(structure, room, input_len, output_len, kv_bytes)[2]
    return structure.config.dp_attn * _fit_count(room, kv_dev)


def capacities(structure: Structure, usable, terms: tuple, steady: tuple) -> tuple[np.ndarray, np.ndarray]:
    """``(capacity(...), capacity(..., steady=True))`` at the points ``terms`` (:func:`capacity_terms`)
    and ``steady`` (:func:`steady_terms`) were made at, with the room they share computed once: the
    very calls of :func:`capacity` on the same arrays, so the same numbers (the grid asks both of
    every cell; tests/test_grid_eleventh_pass.py)."""
    kv_dev, act = terms
    room = _room(structure, usable, act)
    dp_attn = structure.config.dp_attn
    return dp_attn * _fit_count(room, kv_dev), dp_attn * _steady_count(structure, room, steady[1])


def steady_terms(structure: Structure, input_len, output_len, kv_bytes,
                 tokens: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean cache tokens per request in the steady state, their KV bytes per GPU) at these points:
    what :func:`steady_fit` reads besides the room. GPU-free, like :func:`capacity_terms`.
    ``tokens``: the first, when the caller has it (it reads the structure's admission policy and the
    lengths alone: the grid computes it once per policy for all its structures)."""
    if tokens is None:
        tokens = admission_steady_tokens(structure.admission, input_len, output_len)
    return tokens, np.asarray(structure.kv_device_fn(tokens, kv_bytes), dtype=float)


def steady_fit(structure: Structure, room, input_len, output_len, kv_bytes,
               tokens: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steady state of continuous batching (engine.deploy.admission): (mean cache tokens per
    request, their KV bytes per GPU, requests per attention replica that fit) — the mean paged KV
    plus the admission reservation, in the room less the pages the scheduler keeps free.
    ``tokens``: the first, when the caller has it (:func:`steady_terms`)."""
    tokens, kv_steady = steady_terms(structure, input_len, output_len, kv_bytes, tokens)
    return tokens, kv_steady, _steady_count(structure, room, kv_steady)


def _steady_count(structure: Structure, room, kv_steady) -> np.ndarray:
    """Requests per attention replica that fit in the steady state: ``kv_steady`` bytes each in the
    ``room`` less the pages the structure's scheduler keeps free (rules.STEADY_ROOM)."""
    steady_room = run_arrays(rules.STEADY_ROOM, {"room": np.asarray(room),
                                                 "free_fraction": structure.admission.free_fraction})
    return _fit_count(steady_room["steady_room"], kv_steady)


#: The fields :func:`summarize` returns with ``serving_only`` (what the sizing search reads): the
#: worst case (every request at its last position) and the steady state the search serves by.
SERVING_FIELDS = ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "fits", "max_concurrent_requests",
                  "tpot_mean_s", "tokens_per_s_per_gpu_steady", "fits_steady", "max_concurrent_requests_steady")


def phase_inputs(structure: Structure, batch, input_len, output_len,
                 prefill_tokens: int = PREFILL_TOKENS, decode: bool = True, mean: bool = False) -> dict[str, tuple]:
    """The phase evaluations :func:`summarize` reads, as name -> (compiled program, batch, seq,
    ctx) (the KV size and the GPU are the points' own): ``prefill`` at the mean chunked-prefill
    step, ``decode`` (one step per request verifies the last token and k MTP drafts; k = 0: one
    token; left out when ``decode`` is false) at the last position, with ``mean`` also
    ``decode_mean``: the same step at the context averaged over the output
    (:func:`engine.deploy.admission.mean_context`) and, with a pipeline, ``fill``: the largest prefill
    step (a full budget, or the batch over min(pp, batch) micro-batches when the budget does not bind)."""
    config = structure.config
    batch, input_len, output_len = (np.asarray(x) for x in (batch, input_len, output_len))
    out = {"prefill": (structure.compiled["prefill"], prefill_program_batch(config, batch, input_len, prefill_tokens),
                       input_len, input_len)}
    if decode:
        out["decode"] = (structure.compiled["decode"], program_batch(config, batch),
                         float(structure.options.decode_seq), input_len + output_len)
        if mean:
            out["decode_mean"] = (structure.compiled["decode"], program_batch(config, batch),
                                  float(structure.options.decode_seq), mean_context(input_len, output_len))
    if config.pp > 1:
        largest = _schedule(config, "fill_batch", batch, input_len, prefill_tokens)
        out["fill"] = (structure.compiled["prefill"], largest, input_len, input_len)
    return out


def summarize(structure: Structure, gpus: list[GPU], gpu_index, kv_bytes, batch, input_len, output_len,
              hbm_fraction: float = HBM_FRACTION, prefill_tokens: int = PREFILL_TOKENS,
              serving_only: bool = False, phases: dict | None = None, prefill_only: bool = False,
              expected: dict | None = None, admitted: np.ndarray | None = None) -> dict[str, Any]:
    """Every numeric deployment field at the broadcast of the per-point arrays. Point ``i`` runs on
    ``gpus[gpu_index[i]]`` with ``kv_bytes[i]`` per cache element; one call serves every GPU and
    KV dtype that share a structure (the grid's batching). ``serving_only``: just
    :data:`SERVING_FIELDS`, computed by the same expressions (the same floats), phases as step times only.
    ``prefill_only`` (with ``serving_only``): no decode step is evaluated, ``tpot_s`` and
    ``tokens_per_s_per_gpu`` are NaN (the sizing search's prefill-pool points, read for their TTFT,
    fit and capacity only). ``phases``: :func:`phase_at_points` of each of :func:`phase_inputs` at
    these points, when the caller has them (:func:`summarize_many`). ``expected``: each phase
    input's step time from measured kernels (:func:`expected_phase_times`), composed into
    ``ttft_expected_s`` / ``tpot_expected_s`` / ``tpot_mean_expected_s`` by the rules of the
    estimate (no overlap: a sum of per-op expected times). ``admitted``: each point's steady tokens
    per request (engine.deploy.admission.steady_tokens under the structure's policy at the points'
    lengths), when the caller has them (the grid: picked out of its lanes')."""
    if prefill_only and not serving_only:
        raise ValueError("prefill_only gives the serving fields only: pass serving_only=True")
    config = structure.config
    batch, input_len, output_len, kv_bytes, gpu_index = (np.asarray(x) for x in
                                                         (batch, input_len, output_len, kv_bytes, gpu_index))
    overlap = structure.options.overlap or "none"
    inputs = None
    if phases is None or overlap != "none":
        inputs = phase_inputs(structure, batch, input_len, output_len, prefill_tokens, not prefill_only,
                              not prefill_only)
    if phases is None:
        # the two-batch schedule reads the full batch's bound: every sum, not the step time alone
        times_only = serving_only and overlap == "none"
        phases = {name: phase_at_points(compiled, gpus, gpu_index, b, seq, ctx, kv_bytes, times_only)
                  for name, (compiled, b, seq, ctx) in inputs.items()}
    if overlap == "two_batch":
        # each phase at half its program batch: the two half-batches of the schedule (two_batch_time)
        halves = {name: run_arrays(rules.HALVES, {"batch": np.asarray(b), "dp_attn": config.dp_attn})
                  for name, (compiled, b, seq, ctx) in inputs.items()}
        phases = {name: dict(phases[name], step_time_s=two_batch_time(
                      phase_at_points(compiled, gpus, gpu_index, halves[name]["half_batch"], seq, ctx, kv_bytes),
                      phases[name], halves[name]["requests"]))
                  for name, (compiled, b, seq, ctx) in inputs.items()}
    if expected is not None:     # each phase's expected step time beside its estimate and bound
        phases = {name: dict(v, step_expected_s=expected[name]) if name in expected else v
                  for name, v in phases.items()}
    length = input_len + output_len
    k = micro_batches(config, batch)
    steps = prefill_steps(config, batch, input_len, prefill_tokens)
    prefill, decode = phases["prefill"], phases.get("decode")
    options = structure.options
    hbm = np.array([g.hbm_bytes for g in gpus])[gpu_index]
    usable = run_arrays(rules.USABLE, {"hbm": hbm, "hbm_fraction": hbm_fraction})["usable"]
    weights = structure.weight_bytes_per_gpu
    kv_dev = np.asarray(structure.kv_device_fn(length, kv_bytes), dtype=float)
    per_rank = requests_per_replica(config, batch)        # requests on the fullest attention replica
    act = prefill_working_set(structure, input_len, kv_bytes, prefill_tokens)
    # the one rule: weights + the framework's runtime reserve + the prefill step's working set +
    # every request's KV at its last position
    reserve = structure.reserve_bytes_per_gpu
    room = _room(structure, usable, act)                  # what the KV cache gets
    per_replica_cap = _fit_count(room, kv_dev)
    # TTFT: the pipeline fills with the largest step (a full budget, or the batch over min(pp, batch)
    # micro-batches when the budget does not bind), then each step leaves one stage time later. The
    # steps' sum is taken at the mean step: exact for costs affine in the tokens (greedy full steps +
    # a remainder cost the same), an upper bound for MoE weight reads (concave in the tokens).
    def first_token(field):
        """TTFT composed of each prefill step's ``field`` (the estimate, or the bound): rules.FIRST_TOKEN."""
        env = {"steps": steps, "pp": config.pp, "prefill": prefill[field]}
        if config.pp > 1:
            env["fill"] = phases["fill"][field]
        return run_arrays(rules.FIRST_TOKEN, env)["ttft"]
    ttft = first_token("step_time_s")
    # speculative decoding: a step emits E tokens per request on average (rules.TOKENS_PER_STEP)
    per_step = tokens_per_step(options.mtp_tokens, options.mtp_acceptance) if options.mtp_tokens else 1.0
    # steady state under continuous batching (steady_fit): its cache per request and capacity
    steady_tokens, kv_steady, steady_cap = steady_fit(structure, room, input_len, output_len, kv_bytes, admitted)
    # the serving fields (rules.SERVING); TPOT at the last position and, the steady state's, at the
    # output's mean context; prefill_only: no decode step (NaN)
    serving = run_arrays(rules.SERVING, {
        "batch": batch, "input_len": input_len, "tp": config.tp, "pp": config.pp, "cp": config.cp,
        "dp_attn": config.dp_attn, "per_step": per_step, "ttft": ttft,
        "decode_time": np.nan if decode is None else decode["step_time_s"],
        "decode_mean_time": np.nan if decode is None else phases["decode_mean"]["step_time_s"],
        "per_rank": per_rank, "cap": per_replica_cap, "steady_cap": steady_cap, "kv_dev": kv_dev, "room": room,
        "step_tokens": step_tokens(config, prefill_tokens)})
    tpot, tpot_mean = serving["tpot"], serving["tpot_mean"]
    shape = np.broadcast_shapes(batch.shape, input_len.shape, output_len.shape, kv_bytes.shape, gpu_index.shape)
    if serving_only:
        return {name: np.broadcast_to(np.asarray(serving[key]), shape) for name, key in (
            ("ttft_s", "ttft"), ("tpot_s", "tpot"), ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu"),
            ("fits", "fits"), ("max_concurrent_requests", "max_concurrent_requests"),
            ("tpot_mean_s", "tpot_mean"), ("tokens_per_s_per_gpu_steady", "tokens_per_s_per_gpu_steady"),
            ("fits_steady", "fits_steady"), ("max_concurrent_requests_steady", "max_concurrent_requests_steady"))}
    max_ctx = structure.max_context
    stacks = ("main", MTP_STACK) if options.mtp_tokens else ("main",)

    def request_bytes_fn(part=None):
        """Cache bytes per request of every deployed stack (the MTP stack's too when it drafts)."""
        fns = [structure.request_bytes_fn(stack, part) for stack in stacks]
        return lambda length, kv_bytes: sum(fn(length, kv_bytes) for fn in fns)
    request_bytes = request_bytes_fn()

    def full(x):
        """``x`` over the points, read-only: what np.broadcast_to gives, and for an array that has
        the points' shape already (most fields) the same view made without broadcasting."""
        if isinstance(x, np.ndarray) and x.shape == shape:
            view = x.view()
            view.flags.writeable = False
            return view
        return np.broadcast_to(np.asarray(x), shape)

    # the lower bounds, composed by the same rules (each step's bound in place of its estimate)
    def per_token(step):
        """A decode step's time per output token (rules.PER_TOKEN)."""
        return run_arrays(rules.PER_TOKEN, {"step": step, "per_step": per_step})["per_token"]
    bound_fields = {"ttft_bound_s": full(first_token("step_bound_s")),
                    "tpot_bound_s": full(per_token(decode["step_bound_s"])),
                    # the steady state's TPOT (at the output's mean context) has its bound too: an
                    # output throughput at the steady capacity is bounded by this one, not tpot_bound_s
                    "tpot_mean_bound_s": full(per_token(phases["decode_mean"]["step_bound_s"])), "overlap": overlap}
    if expected is not None:     # from measured kernels (engine.deploy.measured), by the same rules
        bound_fields.update({"ttft_expected_s": full(first_token("step_expected_s")),
                             "tpot_expected_s": full(per_token(decode["step_expected_s"])),
                             "tpot_mean_expected_s": full(per_token(phases["decode_mean"]["step_expected_s"]))})
    mtp_fields = {} if not options.mtp_tokens else {
        "mtp_tokens": options.mtp_tokens, "mtp_acceptance": float(options.mtp_acceptance),
        "tokens_per_step": per_step, "tokens_per_step_formula": str(rules.TOKENS_PER_STEP),
        "decode_step_time_s": full(decode["step_time_s"])}

    return {
        "n_gpus": config.n_gpus, "gpus_per_node": structure.domain, "tp": config.tp, "ep": config.ep,
        "dp_attn": config.dp_attn, "pp": config.pp, "cp": config.cp,
        "cp_kind": config.cp_kind if config.cp > 1 else "", "dp": config.dp, "config": config.label(),
        "batch": full(batch), "micro_batches": full(k), "prefill_steps": full(steps), "input_len": full(input_len),
        "output_len": full(output_len),
        "hbm_bytes_per_gpu": full(hbm), "usable_bytes_per_gpu": full(usable),
        "weight_bytes_per_gpu": full(float(weights)),
        "kv_bytes_per_request": full(np.asarray(request_bytes(length, kv_bytes), dtype=float)),
        # the same bytes in two parts: flat recurrent states, and the caches that grow with context
        **{f"kv_{part}_bytes_per_request": full(np.asarray(request_bytes_fn(part)(length, kv_bytes),
                                                           dtype=float)) for part in kv.PARTS},
        "kv_bytes_per_request_per_gpu": full(kv_dev), "kv_budget_bytes_per_gpu": full(serving["kv_budget"]),
        "kv_bytes_per_gpu": full(serving["kv_need"]), "activation_bytes_per_gpu": full(act),
        "reserve_bytes_per_gpu": full(float(reserve)),
        "free_bytes_per_gpu": full(serving["free_bytes"]),
        "max_concurrent_requests": full(serving["max_concurrent_requests"]),
        "max_prefill_batch": full(np.asarray(serving["max_prefill_batch"]).astype(np.int64)),
        "kv_steady_tokens_per_request": full(steady_tokens),
        "kv_bytes_per_request_steady_per_gpu": full(kv_steady),
        "max_concurrent_requests_steady": full(serving["max_concurrent_requests_steady"]),
        "fits_steady": full(serving["fits_steady"]),
        "tpot_mean_s": full(tpot_mean),
        "tokens_per_s_per_gpu_steady": full(serving["tokens_per_s_per_gpu_steady"]),
        # fits exactly when ceil(batch / dp_attn) <= capacity per replica (the same inequality)
        "fits": full(serving["fits"]), "shortfall_bytes": full(serving["shortfall_bytes"]),
        "ttft_s": full(ttft), "tpot_s": full(tpot), **bound_fields,
        "prefill_tokens_per_s_per_gpu": full(serving["prefill_tokens_per_s_per_gpu"]),
        "tokens_per_s_per_gpu": full(serving["tokens_per_s_per_gpu"]),
        "extrapolated": full(length > max_ctx), "max_context": max_ctx, **mtp_fields,
        "phases": {"prefill": {k2: full(v) for k2, v in prefill.items()},
                   "decode": {k2: full(v) for k2, v in decode.items()}},
    }


def summarize_many(gpus: list[GPU], calls: list[tuple], hbm_fraction: float = HBM_FRACTION,
                   prefill_tokens: int = PREFILL_TOKENS, expected: list | None = None,
                   inputs: list | None = None, admitted: list | None = None,
                   phases: list | None = None) -> list[dict[str, Any]]:
    """``[summarize(structure, gpus, gpu_index, kv_bytes, batch, input_len, output_len) for (structure,
    gpu_index, kv_bytes, batch, input_len, output_len) in calls]`` (points along one axis), with
    every compiled program evaluated once over the points of all the calls that hold it.

    The grid summarizes each structure of a model apart, and sibling structures (other frameworks,
    fusion signatures and regimes of a config whose fusions leave a phase alike) hold the very
    same compiled programs: a model's grid asks about five times as many phase evaluations as it
    has distinct programs, each paying numpy's per-call costs over a few dozen points (and
    prefill's ``fill`` runs the prefill program again). Here each program's points, from every
    call and phase that runs it, go to one :func:`phase_at_points` call and its answers are cut
    back into the calls. Every number is per-point arithmetic (phase_at_points' own invariant:
    a point's sums do not read its companions), so each call gets the floats :func:`summarize`
    alone gives it (tests/test_numeric_speed2.py). ``expected``: per call, :func:`summarize`'s
    ``expected`` (each phase input's expected step time at the call's points), or None. ``inputs``:
    per call, its :func:`phase_inputs` (``prefill_tokens``, ``mean``) when the caller has them, or None.
    ``admitted``: per call, :func:`summarize`'s ``admitted`` (its points' steady tokens), or None.
    ``phases``: :func:`phases_many` of :func:`phase_requests` of these calls, when the caller has it."""
    if phases is None:
        phases = phases_many(gpus, phase_requests(calls, prefill_tokens, inputs))
    return [summarize(structure, gpus, gpu_index, kv_bytes, batch, input_len, output_len, hbm_fraction,
                      prefill_tokens, phases=phases[i], expected=expected[i] if expected else None,
                      admitted=admitted[i] if admitted else None)
            for i, (structure, gpu_index, kv_bytes, batch, input_len, output_len) in enumerate(calls)]


def phase_requests(calls: list[tuple], prefill_tokens: int = PREFILL_TOKENS, inputs: list | None = None) -> list[tuple]:
    """What :func:`summarize_many` hands :func:`phases_many` for ``calls`` (its arguments): per call
    (its :func:`phase_inputs`, given or made, each point's GPU index, its KV sizes)."""
    asked = []
    for c, (structure, gpu_index, kv_bytes, batch, input_len, output_len) in enumerate(calls):
        n = np.broadcast_shapes(*(np.shape(x) for x in (gpu_index, kv_bytes, batch, input_len, output_len)))
        if len(n) != 1:
            raise ValueError(f"summarize_many takes points along one axis, not of shape {n}")
        given = inputs[c] if inputs is not None else None
        asked.append((given if given is not None else
                      phase_inputs(structure, batch, input_len, output_len, prefill_tokens, mean=True),
                      np.broadcast_to(np.asarray(gpu_index), n), kv_bytes))
    return asked


def phases_many(gpus: list[GPU], asked: list[tuple], times_only: bool = False,
                unmeasured: float | None = None) -> list[dict[str, dict]]:
    """For each ``(inputs, gpu_index, kv_bytes)`` of ``asked`` (``inputs``: a :func:`phase_inputs`
    dict; ``gpu_index`` of one axis, the points), ``{name: phase_at_points(compiled, gpus, gpu_index,
    batch, seq, ctx, kv_bytes, times_only)}`` over its phases: what :func:`summarize` takes as
    ``phases``. Every compiled program (every class of programs with one evaluation key) is
    evaluated once, over the distinct (GPU, point) pairs of all the calls and phases that run it
    (sibling structures hold the very same programs, and a pipeline's ``fill`` runs the prefill
    program again), and its answers are cut back into the calls. The step functions themselves
    are evaluated once over one point set of every program's points, each program picking its
    own out of it. Every number is per-point arithmetic (:func:`phase_at_points`' invariant: a
    point's sums do not read its companions), so each call gets the floats its own evaluation
    gives (tests/test_numeric_speed2.py, tests/test_sizing_speed3.py, tests/test_tables_speed2.py).
    ``unmeasured``: :func:`phase_times`' (each program's ``unmeasured_s`` where its totals stack)."""
    # programs -> (the first of them, [(call, phase name, index, inputs)]), by their evaluation key:
    # programs built apart with the very same entries and rate kinds give the same numbers (the
    # first evaluates for all; every program here is alive, held by ``asked``)
    wanted: dict[tuple, tuple] = {}
    for i, (inputs, gpu_index, kv_bytes) in enumerate(asked):
        for name, (compiled, b, seq, ctx) in inputs.items():
            wanted.setdefault(compiled.evaluation_key(), (compiled, []))[1].append(
                (i, name, gpu_index, (b, seq, ctx, kv_bytes)))
    out: list[dict[str, dict]] = [{} for _ in asked]
    programs = list(wanted.values())
    sizes = [sum(len(r[2]) for r in runs) for _, runs in programs]
    total = sum(sizes)
    if not total:
        for compiled, runs in programs:
            for i, name, index, args in runs:
                out[i][name] = phase_at_points(compiled, gpus, index, *args, times_only)
        return out
    # one point set of every program's (batch, seq, ctx, KV size) points: each step function is
    # evaluated once over it (cost._values), not once per program over that program's points
    # (programs share most functions: a DeepSeek-V3 grid asked 11,583 function calls of 393
    # functions); each program gathers its points out of it (CompiledProgram._picked_table)
    points, inverse = distinct_rows([np.concatenate([_along(r[3][j], len(r[2])) for _, runs in programs for r in runs])
                                     for j in range(4)], total)
    union, m = list(points), points.shape[1]
    gpu_all = np.concatenate([np.asarray(r[2], dtype=np.int64) for _, runs in programs for r in runs])
    start = 0
    for (compiled, runs), n in zip(programs, sizes):
        # each distinct (GPU, point) of the program once (the pair's code: GPU x m + the point)
        pairs, back = _distinct_codes(gpu_all[start:start + n] * m + inverse[start:start + n], len(gpus) * m)
        got = phase_times(compiled, compiled.rates_for(gpus, pairs // m), *union, times_only, at=pairs % m,
                          unmeasured=unmeasured)
        got = {field: np.asarray(value)[back] for field, value in got.items()}
        start += n
        at = 0
        for i, name, index, _ in runs:
            stop = at + len(index)
            out[i][name] = {field: value[at:stop] for field, value in got.items()}
            at = stop
    return out


def _along(x, n: int) -> np.ndarray:
    """``x`` over ``n`` points: the array itself when it has them already (ints or floats: the
    concatenation and :func:`distinct_rows` make them floats, exactly), else filled as floats."""
    if type(x) is np.ndarray and x.shape == (n,):
        return x
    return np.full(n, x, dtype=float)


def _distinct_codes(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``numpy.unique(codes, return_inverse=True)`` of integer codes in ``range(size)``: by marking
    them in a table of ``size`` flags when it is not much longer than the codes (no sort), else
    numpy's. Either way the distinct codes ascending and each code's position among them."""
    if size > 64 * len(codes):
        return np.unique(codes, return_inverse=True)
    seen = np.zeros(size, dtype=bool)
    seen[codes] = True
    distinct = np.flatnonzero(seen)
    slot = np.empty(size, dtype=np.intp)
    slot[distinct] = np.arange(len(distinct))
    return distinct, slot[codes]
