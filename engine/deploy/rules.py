"""The deployment summary's rules, written once as rule programs (engine.language.formula_tree).

Layer: engine.deploy (formula trees only; no engine state). Each rule below is the one definition
of its arithmetic: the engine evaluates it over numpy arrays (:func:`engine.language.formula_tree.run_arrays`,
the floats of the numpy expression in the written order: results unchanged by the move here), and
site_builder/data.py ships :func:`exported` to the deploy page (index.json ``model.rules``), whose glue (static/js/deploy_eval.js)
hands the same programs to the one interpreter (static/js/formula.js ``run``). A rule changed here
changes the grid, the CLI and the browser at once; tests/test_site_offgrid.py checks the browser
against ``archledger deploy --json`` at off-grid points (one mechanism, two interpreters).

Two programs only the page runs: :data:`STEP` restates the step times of
:mod:`engine.deploy.roofline`, which the engine computes in place over (GPU x step) arrays, its
hottest loop (held equal to it bit for bit by tests/test_roofline.py, to the engine's numbers by the
browser tests above and tests/test_site_numbers.py, and by hand in tests/test_hand_comm.py), and
:data:`SERVING_BOUND` is the page's capacity bound without a working set or reserve.

Programs (inputs -> what they bind; docs/deployment.md derives each):

* :data:`SCHEDULE` (batch, input_len, pp, dp_attn, cp, prefill_tokens, decode_seq, limits): the
  micro-batches, the fullest replica's requests, the program batches, the chunked-prefill steps,
  the tokens per device and the fusion regime of each phase (engine.deploy.structure);
* :data:`STEP` (one step's flops, bytes, comm, weights, calls, repeat and the GPU's peak, HBM and
  link rates, alpha): its three times, SOL and working set (engine.deploy.cost);
* :data:`FIT` (room, kv_dev, max_batch): the requests per replica whose KV fits (sol._fit_count);
* :data:`ROOM`: the bytes the KV cache gets; :data:`STEADY_ROOM`: under a free-page watermark;
* :data:`ADMISSION` (input_len, output_len, page_tokens, reserve_ratio, reserve_clip_tokens): the
  steady state's mean paged tokens per request and the output's mean context (engine.deploy.admission);
* :data:`TWO_BATCH` (half_time, half_comm, full_bound, full_time, requests): the two-batch overlap;
* :data:`FIRST_TOKEN` (steps, pp, prefill, fill): TTFT from one step time (estimate, bound, expected);
* :data:`SERVING` (the above's results): TPOT, throughputs, capacities and fit (sol.summarize);
* :data:`TOKENS_PER_STEP` (mtp_tokens, mtp_acceptance): a speculative step's mean tokens, the tree of
  engine.deploy.structure.TOKENS_PER_STEP's closed form.
"""
from __future__ import annotations

from functools import lru_cache

from engine.language import symbols
from engine.language.formula_tree import Rule, call, program, to_tree

_ = Rule
batch, input_len, output_len = _("batch"), _("input_len"), _("output_len")
pp, dp_attn, cp, tp = _("pp"), _("dp_attn"), _("cp"), _("tp")

#: engine.deploy.structure: micro_batches, requests_per_replica, program_batch, step_tokens,
#: prefill_steps, prefill_program_batch, device_tokens; structure_cache.regime
SCHEDULE = program(
    ("micro_batches", call("max", 1, call("min", pp, batch))),
    ("per_rank", call("cdiv", batch, dp_attn)),
    ("program_batch", dp_attn * _("per_rank") / _("micro_batches")),
    ("step_tokens", _("prefill_tokens") * cp),
    ("prefill_steps", call("max", _("micro_batches"), call("cdiv", _("per_rank") * input_len, _("step_tokens")))),
    ("prefill_batch", dp_attn * _("per_rank") / _("prefill_steps")),
    # the pipeline's fill step: a full budget, or the batch over the micro-batches when it does not bind
    ("fill_batch", dp_attn * call("min", _("per_rank") / _("micro_batches"), _("step_tokens") / input_len)),
    # the prompts of one step at the token budget (what the prefill working set is sized at)
    ("budget_batch", dp_attn * _("step_tokens") / input_len),
    # tokens one device works on per kernel call (what fusion size limits are stated in)
    ("prefill_device_tokens", call("cdiv", _("prefill_batch") * input_len / (dp_attn * cp), 1)),
    ("decode_device_tokens", call("cdiv", _("program_batch") * _("decode_seq"), dp_attn)),
    # the fusion regime: how many of the ascending token limits the tokens exceed (a limit is inclusive)
    ("prefill_regime", call("rank", "limits", _("prefill_device_tokens"))),
    ("decode_regime", call("rank", "limits", _("decode_device_tokens"))),
)

#: engine.deploy.cost: one step's times (calls x the per-call alpha; a link's rate, infinite for no
#: link) and its working set per repeat (prefill's reserve, sol.prefill_working_set)
STEP = program(
    ("t_compute", _("flops") / _("peak")),
    ("t_memory", _("bytes") / _("hbm")),
    ("t_comm", _("comm") / _("link") + _("calls") * _("alpha")),
    ("t_sol", call("max", call("max", _("t_compute"), _("t_memory")), _("t_comm"))),
    ("working_set", (_("bytes") - _("weights")) / _("repeat")),
    # the deploy page's MTP drafts: a draft step `times` over is the exported --mtp 1 step's values
    # x times (a draft step's calls are repeat x k / layers: linear in k; planner.with_drafts)
    *((f"{name}_n", _(name) * _("times")) for name in ("flops", "bytes", "comm", "weights",
                                                          "t_compute", "t_memory", "t_comm", "t_sol")),
    # the roofline's coordinates: FLOPs per HBM byte (cost.intensity) and the FLOP/s the step attains
    ("intensity", _("flops_n") / _("bytes_n")),
    ("attained", _("flops_n") / _("t_sol_n")),
)

#: sol._fit_count: the largest n >= 0 with n x kv_dev <= room, decided by the float product the fit
#: test uses (a float floor can be one off at an exact boundary); max_batch when a request holds no
#: cache, 0 when nothing is left
FIT = program(
    ("safe", call("pw", (_("kv_dev"), _("kv_dev") > 0), (1.0, 1))),
    ("n0", call("floor", call("max", _("room"), 0.0) / _("safe"))),
    ("n1", call("pw", (_("n0") + 1, (_("n0") + 1) * _("safe") <= _("room")), (_("n0"), 1))),
    ("n2", call("pw", (_("n1") - 1, call("and", _("n1") > 0, _("n1") * _("safe") > _("room"))), (_("n1"), 1))),
    ("n3", call("pw", (_("n2"), _("kv_dev") > 0), (_("max_batch"), 1))),
    ("cap", call("pw", (_("n3"), _("room") >= 0), (0, 1))),
)

#: sol.summarize: the bytes a GPU's framework may use, and a phase's two half-batches (two_batch)
USABLE = program(("usable", _("hbm") * _("hbm_fraction")))
HALVES = program(("half_batch", batch / 2), ("requests", batch / dp_attn))
#: a decode step's time per output token (speculative decoding: a step emits ``per_step`` tokens)
PER_TOKEN = program(("per_token", _("step") / _("per_step")))

#: sol._room: usable - weights - the runtime reserve - the prefill step's working set
ROOM = program(("room", _("usable") - _("weights") - _("reserve") - _("act")))
#: sol.steady_fit: the room less the pages the scheduler keeps free
STEADY_ROOM = program(("steady_room", _("room") * (1.0 - _("free_fraction"))))


def _ceil_sum(n) -> Rule:
    """S(n) = sum_{t=1..n} ceil(t / page) for whole n (admission._ceil_sum): P q (q + 1) / 2 + r (q + 1)."""
    n = call("max", n, 0.0)
    q = call("floor", n / _("page_tokens"))
    r = n - q * _("page_tokens")
    return _("page_tokens") * q * (q + 1) / 2 + r * (q + 1)


_k = call("max", output_len - 1, 0.0)
_clip = _("reserve_clip_tokens")
#: engine.deploy.admission: steady_tokens (mean paged tokens + the admission reservation) and
#: mean_context (the decode context averaged over the output)
ADMISSION = program(
    ("paged_tokens", call("pw", (_("page_tokens") * (_ceil_sum(input_len + output_len - 1) - _ceil_sum(input_len - 1))
                                 / call("max", output_len, 1.0), output_len > 0),
                          (_("page_tokens") * call("ceil", input_len / _("page_tokens")), 1))),
    ("reserved_tokens", call("pw", (0.0, call("==", _("reserve_ratio"), 0)),
                             (_("reserve_ratio") * call("pw", (_k * (_k + 1) / 2, call("or", call("==", _clip, 0), _k <= _clip)),
                                                        (_clip * (_clip + 1) / 2 + (_k - _clip) * _clip, 1))
                              / call("max", output_len, 1.0), 1))),
    ("steady_tokens", _("paged_tokens") + _("reserved_tokens")),
    ("mean_context", input_len + call("max", output_len - 1, 0.0) / 2),
    ("length", input_len + output_len),
)

#: sol.two_batch_time: two overlapped half-batches take the busier stream, never below the full
#: batch's bound; fewer than two requests per replica: not split
TWO_BATCH_MIN_REQUESTS = 2
TWO_BATCH = program(
    ("kernels", _("half_time") - _("half_comm")),
    ("time", call("pw", (call("max", call("max", 2.0 * _("kernels"), 2.0 * _("half_comm")), _("full_bound")),
                         _("requests") >= TWO_BATCH_MIN_REQUESTS), (_("full_time"), 1))),
)

#: sol.summarize's TTFT: s steps of the mean step over pp stages; with a pipeline it first fills
#: with the largest step, then each step leaves one stage later (``prefill``/``fill``: one step
#: time of each: the estimate, the bound or the expected time)
FIRST_TOKEN = program(
    ("ttft", call("pw", (_("steps") * _("prefill") / pp + (pp - 1) * _("fill") / pp, pp > 1),
                  (_("steps") * _("prefill") / pp, 1))),
)

#: sol.summarize's serving fields from a point's step times, capacity terms and capacities
#: (``cap``/``steady_cap``: :data:`FIT`'s, per attention replica)
SERVING = program(
    ("replica", tp * pp * cp),
    ("tpot", _("decode_time") / _("per_step")),
    ("tpot_mean", _("decode_mean_time") / _("per_step")),
    ("tokens_per_s_per_gpu", batch / _("tpot") / _("replica")),
    ("tokens_per_s_per_gpu_steady", batch / _("tpot_mean") / _("replica")),
    ("tokens_per_s_per_user", 1 / _("tpot")),
    ("tokens_per_s_per_user_steady", 1 / _("tpot_mean")),
    ("prefill_tokens_per_s_per_gpu", batch * input_len / _("ttft") / _("replica")),
    ("fits", _("per_rank") <= _("cap")),
    ("fits_steady", _("per_rank") <= _("steady_cap")),
    ("max_concurrent_requests", dp_attn * _("cap")),
    ("max_concurrent_requests_steady", dp_attn * _("steady_cap")),
    ("kv_need", _("per_rank") * _("kv_dev")),
    ("kv_budget", call("max", _("room"), 0.0)),
    ("free_bytes", call("max", _("room") - _("kv_need"), 0.0)),
    ("shortfall_bytes", call("max", _("kv_need") - _("room"), 0.0)),
    ("max_prefill_batch", dp_attn * call("min", call("max", 1, call("floor", _("step_tokens") / input_len)), _("cap"))),
)


#: the deploy page's upper bound of a config's capacity (no working set, no reserve): its replicas' sum
SERVING_BOUND = program(("max_concurrent_requests", dp_attn * _("cap")))


#: Speculative decoding (engine.deploy.structure): k draft tokens per step, each kept with
#: probability a once the drafts before it were, so a step emits E = sum_{i=0..k} a^i tokens per
#: request on average (the engine evaluates the Sum exactly; the page its closed form's tree)
#: (``MTP_TOKENS``, ``MTP_ACCEPTANCE``, ``TOKENS_PER_STEP``: sympy objects, made on first use by the
#: module's ``__getattr__``, so a command that evaluates a build's stored programs never imports sympy)
@lru_cache(maxsize=None)
def _mtp() -> dict:
    import sympy
    k, a, i = symbols.index("mtp_tokens"), symbols.rate("mtp_acceptance"), symbols.index("i")
    return {"MTP_TOKENS": k, "MTP_ACCEPTANCE": a, "TOKENS_PER_STEP": sympy.Sum(a ** i, (i, 0, k))}


def __getattr__(name: str):
    if name in ("MTP_TOKENS", "MTP_ACCEPTANCE", "TOKENS_PER_STEP"):
        return _mtp()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _tokens_per_step_tree():
    import sympy
    mtp = _mtp()
    closed = mtp["TOKENS_PER_STEP"].doit()     # Piecewise((k + 1, a == 1), ((1 - a^(k+1)) / (1 - a), True))
    return to_tree(closed.subs({mtp["MTP_TOKENS"]: sympy.Symbol("mtp_tokens"),
                                mtp["MTP_ACCEPTANCE"]: sympy.Symbol("mtp_acceptance")}))


#: every program by name: what the deploy page receives (index.json ``model.rules``)
def exported() -> dict:
    """The programs and trees the browser evaluates (JSON)."""
    return {"schedule": SCHEDULE, "step": STEP, "usable": USABLE, "halves": HALVES, "per_token": PER_TOKEN, "fit": FIT, "room": ROOM, "steady_room": STEADY_ROOM,
            "admission": ADMISSION, "two_batch": TWO_BATCH, "first_token": FIRST_TOKEN, "serving": SERVING,
            "serving_bound": SERVING_BOUND,
            "tokens_per_step": _tokens_per_step_tree()}


#: The batches the grid (engine/batch/grid_eval.py) keeps for one (config, GPU, framework, KV dtype, prompt, output) at its
#: capacities ``worst`` and ``steady`` (``max_concurrent_requests`` and
#: ``max_concurrent_requests_steady``), as a selection rule (engine.language.formula_tree.select; the deploy
#: page's formula.js reads this same rule from index.json): the grid's batches up to the larger
#: capacity (usually the steady state's), and that capacity itself when it is at least 1 and below
#: the largest batch ``top``, in batch order; ``[1]`` when neither holds a request (that row says by
#: how much it does not fit). So every batch the steady state serves at a grid batch or at its
#: capacity is a row (the fronts' points), and so is every grid batch the worst case holds; the
#: worst case's own capacity is each row's ``max_concurrent_requests`` beside it, not a row (a row
#: per capacity would add 3-5% to the table for a front no reader draws).
_MOST = ["max", "worst", "steady"]
GRID_BATCHES = {"each": "b", "largest": "top", "keep": ["<=", "b", _MOST],
                "add": [[_MOST, ["and", [">=", _MOST, 1], ["<", _MOST, "top"]]]], "else": [1]}
