"""A sizing answer on another time: the cheapest served point under the lower bound or the expected time.

Layer: engine.serving (on sizing, planner, sol and measured; nothing here prints). The search
(:func:`engine.serving.sizing.search`) ranks every served point on one time, the schedule estimate.
:func:`answer_on` answers the same question on ``bound`` (no schedule beats it) or ``expected``
(from measured kernels, engine.deploy.measured) from the summary ``archledger deploy`` prints at
each point it reads (:func:`engine.deploy.plan.summarize_plan`, with the GPU's measured tables for
``expected``), so every number of such an answer is deploy's at that point.

Rules (also in docs/deployment.md, "Sizing on another time"):

* the candidates are the search's served points (served is a capacity rule, the same on every
  time); a point meets the SLA when its TTFT and steady TPOT on that time (:data:`TIMES`) are
  within the bounds and, with ``users``, its batch is what a replica holds (sizing's rule);
* per served config, the largest served batch within the TTFT and TPOT bounds, found by bisection
  over its served batches: this reads each time as non-decreasing in the batch within a config
  (more requests per step never make a step faster), and the largest batch as the config's best
  (the fewest replicas and the most tokens/s/GPU when TPOT grows slower than the batch); with
  ``users``, the largest batch below it that a replica holds (``batch = ceil(U / r)``);
* of those, the search's ranking: the fewest GPUs, then the most tokens/s/GPU, then the fewest
  GPUs per replica. A config with more GPUs per replica than the best answer so far is not read.

tests/test_plan_times.py checks on the estimate that this reproduces the search's own answer.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.serving.sizing import SLA, GPUSearch, _load, users_held

#: time -> the summary fields of its (TTFT, steady TPOT, TPOT at the last token).
TIMES = {"estimate": ("ttft_s", "tpot_mean_s", "tpot_s"),
         "bound": ("ttft_bound_s", "tpot_mean_bound_s", "tpot_bound_s"),
         "expected": ("ttft_expected_s", "tpot_mean_expected_s", "tpot_expected_s")}
#: What each time is, in words (plan's text).
TIME_WORDS = {"estimate": "schedule estimate", "bound": "lower bound",
              "expected": "expected time (measured kernels)"}


class PointReader:
    """Deploy's summary at (config, batch) of one GPU type, each point read once; ``tables``:
    the GPU's measured tables (engine.deploy.measured.load_measured), None: no expected times.
    ``cache``: the search's :class:`engine.deploy.structure_cache.StructureCache` (of ``ev`` and
    ``fusion``), whose structures the plans then are (its live key: the structures the search
    placed and compiled already, the same numbers by that cache's invariant); without it each
    plan is built as ``archledger deploy`` builds it."""

    def __init__(self, ev, gpu, options, fusion, input_len: int, output_len: int, tables=None, cache=None):
        self.ev, self.gpu, self.options, self.fusion = ev, gpu, options, fusion
        self.input_len, self.output_len, self.tables, self.cache = input_len, output_len, tables, cache
        self.read: dict = {}         # (config, batch) -> (its summary call's fields, its index there)
        self.calls = 0               # summaries evaluated (each over every batch of one plan)
        self._points: dict = {}      # (config, batch) -> its summary as a dict, made when first asked
        self._plans: dict = {}       # (config, fusion token regime per phase) -> deploy's plan
        self._live: dict = {}        # config -> per phase its live token limits (with ``cache``)

    def __call__(self, config, batch: int) -> dict[str, Any]:
        key = (config, int(batch))
        found = self._points.get(key)
        if found is None:
            if key not in self.read:
                self.read_all(config, [int(batch)])
            found = self._points[key] = _point(*self.read[key])
        return found

    def read_all(self, config, batches) -> None:
        """:meth:`read_many` of one config."""
        self.read_many([(config, batches)])

    def read_many(self, wanted) -> None:
        """Deploy's summary at every (config, batch) of ``wanted`` ((config, batches) pairs) not
        read yet: one vectorized :func:`engine.deploy.plan.summarize_plan` per plan (config and
        fusion token regime) over its batches, the expected times of them all together
        (:func:`engine.deploy.plan.summarize_plans`, each measured table interpolated once). A
        call's cost is mostly per call, not per point (a config's few hundred served batches cost
        about what a dozen single points do), and every field is per-point arithmetic, so each
        point gets the floats a call at that point alone gives (tests/test_deploy_fast.py).
        A point's dict is made only when it is asked for (the bisection reads a few of each config)."""
        from engine.deploy import PHASES
        from engine.deploy.plan import summarize_plans
        from engine.deploy.structure import device_tokens
        by_plan: dict[int, tuple] = {}
        for config, batches in wanted:
            todo = [b for b in dict.fromkeys(int(b) for b in batches) if (config, b) not in self.read]
            if not todo:
                continue
            # tokens_per_device of every batch at once (its own arrays: the same whole numbers)
            tokens = device_tokens(config, np.array(todo, dtype=float), self.input_len, self.options.prefill_tokens,
                                   self.options.decode_seq)
            for i, b in enumerate(todo):
                p = self._plan(config, b, {phase: int(t[i]) for phase, t in zip(PHASES, tokens)})
                by_plan.setdefault(id(p), (p, config, []))[2].append(b)
        groups = list(by_plan.values())
        self.calls += len(groups)
        summaries = summarize_plans([(p, np.array(group), self.input_len, self.output_len,
                                      self.tables) for p, _, group in groups])
        for (p, config, group), s in zip(groups, summaries):
            fields = {k: (np.broadcast_to(v, (len(group),)) if isinstance(v, np.ndarray) else v)
                      for k, v in s.items() if k != "phases"}
            for i, b in enumerate(group):
                self.read[(config, b)] = (fields, i)

    def _plan(self, config, batch: int, tokens: dict):
        """Deploy's plan of ``config`` at ``batch`` (``tokens``: its tokens per device by phase,
        engine.deploy.structure.tokens_per_device), built once per fusion token regime: the
        batch reaches the structure only through the tokens per device its fusion rules compare
        with their ``max_tokens`` (engine.deploy.fusion, ``_rule_conditions``), so two batches
        exceeding the same limits (:func:`engine.deploy.structure_cache.regime`) fuse, place and
        compile alike, and the summary evaluates the one structure at each point."""
        from engine.deploy import PHASES, Scenario, plan
        from engine.deploy.fusion_table import live_token_limits, token_limits
        from engine.deploy.structure_cache import regime
        if self.cache is not None:      # the search's structure of this live regime
            limits = self._live.get(config)
            if limits is None:
                limits = self._live[config] = [live_token_limits(self.fusion, self.gpu, config, p) for p in PHASES]
            key = (config, "live", tuple(regime(m, tokens[p]) for m, p in zip(limits, PHASES)))
            found = self._plans.get(key)
            if found is None:
                from engine.deploy.plan import Plan
                found = self._plans[key] = Plan(self.cache.live_structure(
                    config, self.gpu.scale_up_domain, self.options.framework, self.gpu, key[2], self.options), self.gpu)
            return found
        limits = token_limits(self.fusion)
        key = (config, tuple(regime(limits, tokens[p]) for p in PHASES))
        found = self._plans.get(key)
        if found is None:
            found = self._plans[key] = plan(self.ev, self.gpu, config, self.options, self.fusion,
                                            Scenario(batch, self.input_len, self.output_len))
        return found


def _point(fields: dict, i: int) -> dict[str, Any]:
    """Point ``i`` of a summary call's ``fields`` as a dict of Python values (an array's element as
    ``tolist`` gives it, any other field as it is)."""
    return {k: (v[i].item() if isinstance(v, np.ndarray) else v) for k, v in fields.items()}


def times_of(summary: dict, has_expected: bool = True) -> dict[str, dict[str, float]]:
    """A point's three times (two without measured tables): time -> {ttft_s, tpot_s, tpot_last_s}."""
    return {t: dict(zip(("ttft_s", "tpot_s", "tpot_last_s"), (float(summary[f]) for f in fields)))
            for t, fields in TIMES.items() if t != "expected" or (has_expected and fields[0] in summary)}


def row_on(res: GPUSearch, config, batch: int, summary: dict, time: str, sla: SLA, output_len: int) -> dict:
    """One point on ``time`` as a search row (sizing.POINT_FIELDS, by sizing's own row maker),
    with ``time`` and the point's ``times`` beside."""
    ttft, tpot, last = (float(summary[f]) for f in TIMES[time])
    replica = config.tp * config.pp * config.cp          # GPUs of one model replica (dp = 1 in the search)
    p = {"config": np.array([0]), "batch": np.array([int(batch)]), "n_gpus": np.array([config.n_gpus]),
         "ttft_s": np.array([ttft]), "tpot_s": np.array([tpot]), "tpot_last_s": np.array([last]),
         "tokens_per_s_per_gpu": np.array([batch / tpot / replica]),
         "max_concurrent_requests": np.array([summary["max_concurrent_requests_steady"]]),
         "max_concurrent_requests_worst": np.array([summary["max_concurrent_requests"]])}
    p.update(_load(p, sla, output_len))
    row = GPUSearch(res.gpu, configs=[config], points=p, price=res.price).rows([0])[0]
    row["time"] = time
    row["times"] = times_of(summary)
    return row


def answer_on(time: str, res: GPUSearch, read: PointReader, sla: SLA) -> dict | None:
    """The cheapest point of ``res``'s served points on ``time`` (the module's rules), as a
    :func:`row_on` row; None where no served point meets the SLA on it."""
    ttft_f, tpot_f, _ = TIMES[time]
    if not res.points:
        return None
    best, key = None, None
    order = sorted(range(len(res.configs)), key=lambda k: res.configs[k].n_gpus)
    for k in order:
        config = res.configs[k]
        if best is not None and config.n_gpus > best["total_gpus"]:
            break
        batches = np.sort(res.points["batch"][res.points["config"] == k])
        # every served batch of the config at once (one config at a time: a GPU count's configs
        # together hold a few hundred MB of per-step arrays for no faster answer); the bisection
        # below reads them
        read.read_all(config, batches)

        def within(i):
            s = read(config, int(batches[i]))
            return s[ttft_f] <= sla.ttft_s and s[tpot_f] <= sla.tpot_s
        if not within(0):
            continue
        lo, hi = 0, len(batches) - 1                 # within(lo); the last within is in [lo, hi]
        if not within(hi):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if within(mid) else (lo, mid)
            hi = lo
        held = [int(b) for b in batches[:hi + 1] if users_held(int(b), sla.users)]
        if not held:
            continue
        row = row_on(res, config, held[-1], read(config, held[-1]), time, sla, read.output_len)
        if not row["meets_sla"]:
            continue
        rank = (row["total_gpus"], -row["tokens_per_s_per_gpu"], row["n_gpus"])
        if key is None or rank < key:
            best, key = row, rank
    return best
