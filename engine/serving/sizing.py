"""Sizing: the cheapest deployments that meet a latency SLA, aggregated and disaggregated, and the front.

Layer: engine.serving (on planner and sol; nothing here prints). :func:`search` walks, for each GPU
type, every GPU count that is a power of two up to a limit, every legal TP / EP / DP-attention / PP
config at that count (:func:`engine.deploy.parallel.enumerate_configs` filtered by
:func:`engine.deploy.legality.check`; ``dp = 1``: whole-model replicas are counted separately) and
every batch from 1 to the config's capacity, and evaluates the batches in vectorized
:func:`engine.deploy.sol.summarize` calls (one per structure: config, fusion token regime and the
fusion rules that can match, over every GPU type sharing it; structures come from a
:class:`engine.deploy.structure_cache.StructureCache`, the build's shared with its grid
evaluation), so no point is planned twice. :func:`front` is the Pareto front of tokens/s/GPU
against tokens/s/user.

Rules (also in docs/deployment.md, "Sizing: archledger plan"):

* a point (config, batch) is *served* when the steady state of continuous batching holds it
  (``fits_steady`` and ``batch <= max_concurrent_requests_steady``: each request's mean paged KV
  plus the framework's admission headroom, docs/deployment.md "Steady-state capacity"); it *meets
  the SLA* when also ``ttft_s <= ttft`` and its steady TPOT (the decode step at the output's mean
  context, deploy's ``tpot_mean_s``) ``<= tpot``. ``batch`` is requests per model replica, as in
  ``archledger deploy``; the numbers are those ``deploy`` prints at that point. A point's ``tpot_s``,
  ``tokens_per_s_per_gpu`` and ``max_concurrent_requests`` are those steady figures
  (:data:`STEADY_COLUMNS`); ``tpot_last_s`` and ``max_concurrent_requests_worst`` are the worst case
  (every request at its last position), shown beside them. A prefill-pool point holds every prompt
  at once (its worst case).
* replicas: without load, one replica. With ``users = U`` concurrent users, ``r = ceil(U / batch)``
  replicas and the point is kept only when ``batch = ceil(U / r)`` (the load a replica really
  holds). With ``rate = R`` requests/s, a replica at batch ``b`` completes ``b / (TTFT + output x
  TPOT)`` requests/s (Little's law with the batch's own latency: ``b`` requests in flight, each
  alive one prefill and ``output`` decode steps); ``r = ceil(R / that)``.
* cost: GPUs = ``r x n_gpus``; the cheapest point has the fewest GPUs, ties broken by the highest
  tokens/s/GPU (decode tokens, ``batch / TPOT / replica GPUs``); tokens/s/user = ``1 / TPOT``.
* the front is over every served point of a GPU type (all configs, all batches), SLA or not: a
  point is on it when no other point has at least its tokens/s/GPU and tokens/s/user and more of one.

* disaggregated (:func:`engine.serving.pairing.disaggregated`, on ``search(..., pools=True)``): every served decode point
  joined with the prefill (config, batch) that meets TTFT with the fewest prefill GPUs; the joining
  rules (KV transfer, pool ratio, replicas, price) are :mod:`engine.serving.disagg`'s; the pairs of
  GPU types joined are those :func:`engine.serving.pairing.pair_allowed` allows (default: one vendor on both sides).
* price: ``usd_per_hour`` = GPUs x the GPU file's price, ``usd_per_m_tokens`` = $/h / (decode tokens/s
  x 3600) x 1e6; None where a GPU has no price.

Invariant: every point reported (cheapest or front) is a (legal config, batch) that was evaluated,
with the fields :func:`engine.deploy.sol.summarize` gave it; a disaggregated point is a pair of
them (a prefill-pool point and a decode point) joined by :func:`engine.serving.disagg.join`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.language import checkpoints, storage
from engine.language.api import Evaluation
from engine.language.errors import SpecError, Where
from engine.deploy.admission import steady_tokens
from engine.deploy.fusion_table import FusionTable, admission_of, live_token_limits, reserve_bytes
from engine.serving.disagg import PREFILL_OUTPUT, ROUND, usd_per_m_tokens
from engine.deploy.hardware import GPU
from engine.deploy.parallel import MAX_GPUS, ParallelConfig, enumerate_configs
from engine.deploy.planner import weight_format_model
from engine.deploy.legality import check, validate_options
from engine.serving.pareto import front
from engine.deploy.sol import capacity, capacity_terms, phase_inputs, phases_many, summarize
from engine.deploy.structure_cache import StructureCache
from engine.deploy.structure import (MAX_BATCH, PHASES, PREFILL_TOKENS, Options, option_where, prefill_program_batch,
                                      program_batch)

#: Every batch up to this is evaluated; above it, batches step by :data:`BATCH_STEP` (a ratio) up
#: to the capacity (itself included). The front and the cheapest point move by well under 1% with it.
DENSE_BATCHES = 512
BATCH_STEP = 1.01
#: Bound of the (GPU type, config) pairs one model's sizing covers (one search of ``archledger
#: plan``, or every search of a grid's ``sizing:`` block together), checked as that product before
#: any structure is built (:func:`check_pairs`): each pair compiles or reuses a structure and
#: evaluates up to about 1,300 batches (twice that with prefill pools); plan took about 50 ms and
#: 1.9 MB per pair (Llama-3.1-8B, every GPU type, up to 64 GPUs: 984 pairs, 48 s, 1.8 GB), and a
#: block of every GPU type up to 4,096 GPUs ran past 5 minutes. ``plan``'s default (every GPU type
#: of gpus/, up to 8 GPUs) covers at most 600 pairs of a corpus model, the default grid's block 300
#: (tests/test_bounds.py holds both under the bound).
MAX_SEARCH_PAIRS = 2_048
#: Fields of one reported point (JSON names; seconds, tokens/s, requests/s).
POINT_FIELDS = ("gpu", "config", "n_gpus", "tp", "ep", "dp_attn", "pp", "replicas", "total_gpus", "batch",
                "ttft_s", "tpot_s", "tpot_last_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "requests_per_s",
                "max_concurrent_requests", "max_concurrent_requests_worst", "meets_sla", "kind", "usd_per_hour",
                "usd_per_m_tokens")
#: A point's columns from :func:`engine.deploy.sol.summarize`'s serving fields: the search serves by
#: the steady state of continuous batching (docs/deployment.md "Steady-state capacity"), so its
#: headline TPOT, throughput and capacity are deploy's steady ones; the worst case (every request at
#: its last position, deploy's ``tpot_s`` and ``max_concurrent_requests``) is kept beside them.
STEADY_COLUMNS = {"ttft_s": "ttft_s", "tpot_s": "tpot_mean_s", "tpot_last_s": "tpot_s",
                  "tokens_per_s_per_gpu": "tokens_per_s_per_gpu_steady",
                  "max_concurrent_requests": "max_concurrent_requests_steady",
                  "max_concurrent_requests_worst": "max_concurrent_requests"}
#: The fields of a point that are its own evaluated columns (the rest are labels or derived).
_COLUMNS = POINT_FIELDS[POINT_FIELDS.index("replicas"):POINT_FIELDS.index("kind")]


@dataclass(frozen=True)
class SLA:
    """Latency bounds (seconds) and an optional load: ``users`` concurrent or ``rate`` requests/s."""

    ttft_s: float
    tpot_s: float
    users: int | None = None
    rate: float | None = None

    def __post_init__(self):
        for name, option in (("ttft_s", "--ttft"), ("tpot_s", "--tpot")):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise SpecError(option_where(option), f"{value!r} is not a positive number of seconds",
                                f"write e.g. {option} 0.05")
        if self.users is not None and self.rate is not None:
            raise SpecError(option_where("--users/--rate"), "both a user count and a request rate",
                            "give one load: --users U (concurrent) or --rate R (requests/s)")
        if self.users is not None and not (isinstance(self.users, int) and 1 <= self.users <= MAX_BATCH * MAX_GPUS):
            raise SpecError(option_where("--users"), f"{self.users!r} is not a user count",
                            f"write a whole number from 1 to {MAX_BATCH * MAX_GPUS:,}")
        if self.rate is not None and not (isinstance(self.rate, (int, float)) and math.isfinite(self.rate)
                                          and self.rate > 0):
            raise SpecError(option_where("--rate"), f"{self.rate!r} is not a positive request rate",
                            "write requests per second, e.g. --rate 10")


@dataclass
class GPUSearch:
    """One GPU type's search: every served point as columns, and the configs they index."""

    gpu: str
    configs: list[ParallelConfig] = field(default_factory=list)
    points: dict[str, np.ndarray] = field(default_factory=dict)   # one entry per (config, batch)
    rejected: int = 0         # legal configs with no served batch (weights, or one request, do not fit)
    price: float | None = None            # $/h of one GPU (its GPU file's price), if on file
    # prefill-pool points (search(..., pools=True)): batch up to the capacity at input + 1, TTFT
    pool_configs: list[ParallelConfig] = field(default_factory=list)
    prefill: dict[str, np.ndarray] = field(default_factory=dict)   # config (into pool_configs), batch, ttft_s
    kv_share: dict[ParallelConfig, float] = field(default_factory=dict)   # KV bytes per GPU of a request at the prompt

    def rows(self, index) -> list[dict[str, Any]]:
        """Points as dicts (:data:`POINT_FIELDS`), in the order of ``index``."""
        out = []
        for i in np.asarray(index, dtype=int).tolist():
            c = self.configs[int(self.points["config"][i])]
            row = {"gpu": self.gpu, "config": c.label(), "n_gpus": c.n_gpus, "tp": c.tp, "ep": c.ep,
                   "dp_attn": c.dp_attn, "pp": c.pp}
            for name in _COLUMNS:
                value = self.points[name][i]
                row[name] = value.item() if hasattr(value, "item") else value
            row["kind"] = "aggregated"
            hourly = None if self.price is None else row["total_gpus"] * self.price
            row["usd_per_hour"] = hourly
            row["usd_per_m_tokens"] = None if hourly is None else float(
                usd_per_m_tokens(hourly, row["tokens_per_s_per_gpu"] * row["total_gpus"]))
            out.append(row)
        return out

    def cheapest(self, top: int = 5) -> list[dict[str, Any]]:
        """The best SLA-meeting point of each config, cheapest configs first (fewest GPUs, then the
        highest tokens/s/GPU, then the fewest GPUs per replica)."""
        p = self.points
        if not p:
            return []
        idx = np.flatnonzero(p["meets_sla"])
        if not idx.size:
            return []
        order = idx[np.lexsort((p["n_gpus"][idx], -p["tokens_per_s_per_gpu"][idx], p["total_gpus"][idx]))]
        return self.rows(_first_per_key(order, lambda i: p["config"][i], top))

    def front(self) -> list[dict[str, Any]]:
        """The Pareto front of tokens/s/GPU vs tokens/s/user over every served point, fastest user first."""
        return _front_rows(self)


def batch_list(cap: int, users: int | None = None) -> np.ndarray:
    """Batches searched under capacity ``cap``: every one up to :data:`DENSE_BATCHES`, then steps of
    :data:`BATCH_STEP`, the capacity itself, and (with ``users``) every ``ceil(users / r)``."""
    cap = min(int(cap), MAX_BATCH)
    dense = np.arange(1, min(cap, DENSE_BATCHES) + 1)
    if cap <= DENSE_BATCHES:
        return dense
    if users is None:             # the steps are increasing and above the dense range: no sort needed
        steps = _steps()
        steps = steps[:np.searchsorted(steps, cap, side="right")]
        tail = [cap] if not steps.size or steps[-1] != cap else []
        return np.concatenate([dense, steps, np.asarray(tail, dtype=int)])
    n = int(math.log(cap / DENSE_BATCHES) / math.log(BATCH_STEP)) + 1
    extra = [np.unique(np.floor(DENSE_BATCHES * BATCH_STEP ** np.arange(1, n + 1))).astype(int), [cap]]
    r = np.arange(1, -(-users // DENSE_BATCHES) + 1)
    extra.append(-(-users // r))
    out = np.concatenate([dense, *[np.asarray(e, dtype=int) for e in extra]])
    return np.unique(out[(out >= 1) & (out <= cap)])


_STEPS: list[np.ndarray] = []


def _steps() -> np.ndarray:
    """floor(DENSE_BATCHES x BATCH_STEP^k), k = 1, 2 ... up to MAX_BATCH, distinct (the same
    elementwise powers whatever the capacity: a capacity's steps are the prefix up to it)."""
    if not _STEPS:
        n = int(math.log(MAX_BATCH / DENSE_BATCHES) / math.log(BATCH_STEP)) + 2
        _STEPS.append(np.unique(np.floor(DENSE_BATCHES * BATCH_STEP ** np.arange(1, n + 1))).astype(int))
    return _STEPS[0]


def _device_tokens(config: ParallelConfig, batch: np.ndarray, input_len: int,
                   prefill_tokens: int = PREFILL_TOKENS, decode_seq: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """:func:`engine.deploy.structure.tokens_per_device` over an array of batches (prefill: one
    chunked-prefill step's tokens; decode: ``decode_seq`` per request)."""
    pre = np.asarray(prefill_program_batch(config, batch, input_len, prefill_tokens), dtype=float)
    dec = np.asarray(program_batch(config, batch), dtype=float) * decode_seq
    return np.ceil(pre * input_len / (config.dp_attn * config.cp)), np.ceil(dec / config.dp_attn)


def legal_configs(ev: Evaluation, max_gpus: int) -> list[ParallelConfig]:
    """Every legal single-replica config (``dp = 1``, no context parallelism) on 1, 2, 4 ... up to
    ``max_gpus`` GPUs."""
    moe = any(r.role == "experts" for r in ev.numeric.rows.values())
    out, n = [], 1
    while n <= max_gpus:
        out.extend(c for c in enumerate_configs(n, moe=moe, max_pp=n, max_cp=1)
                   if c.dp == 1 and not check(ev, c))
        n *= 2
    return out


def check_pairs(factors: dict[str, int], where: Where, hint: str) -> None:
    """Refuse, in one line naming the product and :data:`MAX_SEARCH_PAIRS`, a sizing whose
    (GPU type, config) pairs (the product of ``factors``, what -> how many) exceed the bound."""
    pairs = math.prod(factors.values())
    if pairs > MAX_SEARCH_PAIRS:
        shown = " x ".join(f"{n:,} {what}" for what, n in factors.items())
        raise SpecError(where, f"the sizing search covers {pairs:,} (GPU type, config) pairs ({shown}), "
                        f"more than the limit of {MAX_SEARCH_PAIRS:,}",
                        f"{hint} (the bound is engine/serving/sizing.py's MAX_SEARCH_PAIRS)")


class _Evaluator:
    """Structures from a :class:`engine.deploy.structure_cache.StructureCache` (per config, domain
    class, fusion signature and live token regime: shared between GPU types of one search, and with
    whatever else evaluated the model through the same cache, e.g. the build's grid evaluation)."""

    def __init__(self, ev: Evaluation, options: Options, fusion: FusionTable | None,
                 cache: StructureCache | None = None):
        if cache is None:
            cache = StructureCache(ev, {options.framework: fusion} if fusion is not None else {})
        elif cache.ev is not ev or cache.tables.get(options.framework) is not fusion:
            raise ValueError("a shared structure cache must be of this evaluation and hold this fusion table "
                             f"under {options.framework!r}")
        self.ev, self.options, self.fusion, self.cache = ev, options, fusion, cache
        self.kv_bytes = float(_kv_bytes(options))
        self._first: dict[tuple, object] = {}
        self._limits: dict[tuple, tuple] = {}        # (config, GPU arch) -> live limits per phase
        self._regimes: dict[tuple, tuple] = {}       # (config, limits, input_len) -> batch 1's regimes
        self._terms: dict[tuple, tuple] = {}         # (id(structure), input_len, outputs) -> (structure, terms)
        self._steady: dict[tuple, float] = {}        # (admission, input_len, output_len) -> steady tokens

    def limits(self, config: ParallelConfig, gpu: GPU) -> tuple[list[int], list[int]]:
        """Per phase, :func:`engine.deploy.fusion_table.live_token_limits` (once per config and GPU arch:
        :func:`engine.deploy.fusion_table.live_rules` reads the GPU's arch only, and this search's table is fixed)."""
        key = (config, gpu.arch)
        found = self._limits.get(key)
        if found is None:
            found = self._limits[key] = tuple(live_token_limits(self.fusion, gpu, config, phase) for phase in PHASES)
        return found

    def structure(self, config: ParallelConfig, gpu: GPU, regimes: tuple[int, int]):
        return self.cache.live_structure(config, gpu.scale_up_domain, self.options.framework, gpu, regimes,
                                         self.options)

    def codes(self, config: ParallelConfig, gpu: GPU, batch: np.ndarray, input_len: int) -> np.ndarray:
        """Per batch, the (prefill, decode) regime as a row of an (n, 2) array: how many of each
        phase's limits its tokens per device exceed (a limit is inclusive: tokens <= max_tokens fuses)."""
        tokens = _device_tokens(config, batch, input_len, self.options.prefill_tokens, self.options.decode_seq)
        return np.stack([np.searchsorted(np.asarray(limits, dtype=float), t, side="left")
                         for limits, t in zip(self.limits(config, gpu), tokens)], axis=1)

    def regimes(self, config: ParallelConfig, gpu: GPU, batch: np.ndarray, input_len: int) -> list[tuple[int, int]]:
        """:meth:`codes` as a list of (prefill, decode) tuples."""
        return list(map(tuple, self.codes(config, gpu, batch, input_len).tolist()))

    def first(self, config: ParallelConfig, gpu: GPU, input_len: int):
        """The structure of batch 1 (its regimes depend on the GPU only through the live limits)."""
        key = (config, gpu.key, input_len)
        if key not in self._first:
            # batch 1's regimes, once per config and live limits (the GPU types of one arch share them)
            rkey = (config, tuple(map(tuple, self.limits(config, gpu))), input_len)
            regimes = self._regimes.get(rkey)
            if regimes is None:
                regimes = self._regimes[rkey] = self.regimes(config, gpu, np.array([1]), input_len)[0]
            self._first[key] = self.structure(config, gpu, regimes)
        return self._first[key]

    def capacity(self, config: ParallelConfig, gpu: GPU, input_len: int, output_len, steady: bool = False) -> np.ndarray:
        """``max_concurrent_requests`` (``steady``: ``max_concurrent_requests_steady``) at batch 1's
        structure for each output length (summarize()'s own rule, without its phase times)."""
        return self.capacities(config, [gpu], input_len, output_len, steady)[0]

    def capacities(self, config: ParallelConfig, gpus: list[GPU], input_len: int, output_len,
                   steady: bool = False) -> np.ndarray:
        """:meth:`capacity` of each of ``gpus`` (GPU types whose batch 1 has one structure,
        :meth:`first`), one row per GPU, in one evaluation: the GPU types differ only in their
        usable bytes, a column of the room, and every operation of capacity() is elementwise, so
        each row holds the numbers of that GPU's own call (tests/test_sizing_capacities.py)."""
        s = self.first(config, gpus[0], input_len)
        out_len = np.asarray(output_len)
        # capacity()'s GPU-free terms (KV per request per GPU, the prefill working set), once per
        # structure and lengths: the GPU types sharing batch 1's structure differ in usable bytes only
        key = (id(s), input_len, tuple(out_len.ravel().tolist()), out_len.shape)
        found = self._terms.get(key)
        if found is None or found[0] is not s:
            found = self._terms[key] = (s, capacity_terms(s, input_len, out_len, self.kv_bytes,
                                                          self.options.prefill_tokens))
        usable = np.array([gpu.hbm_bytes * self.options.hbm_fraction for gpu in gpus], dtype=float)
        usable = usable.reshape((len(gpus),) + (1,) * out_len.ndim)
        return np.asarray(capacity(s, usable, input_len, out_len, self.kv_bytes, self.options.prefill_tokens,
                                   terms=found[1], steady=steady))

    def cannot_fit(self, config: ParallelConfig, gpu: GPU, input_len: int, output_len) -> bool:
        """Whether :meth:`capacity`, worst case and steady, is 0 at every output length, decided from the placements alone
        (no fusion, no compilation): the room capacity() leaves for the KV cache is usable -
        weights - reserve - the prefill working set, and a working set is never negative, so when
        usable - weights - reserve is short of one request's KV per GPU no request fits, whatever
        the fused programs. (A margin of a millionth of the usable bytes, and of a billionth of
        the KV, covers the difference between evaluating the KV expression here and compiled.)"""
        weights, kv_dev = self.cache.memory(config, gpu.scale_up_domain, self.options)
        usable = gpu.hbm_bytes * self.options.hbm_fraction
        room = usable - weights - reserve_bytes(self.fusion, config)
        admission = admission_of(self.fusion)
        for out in np.atleast_1d(output_len).tolist():
            # the worst case's KV at the last position, and the steady state's at its mean cache
            # tokens in the room less the pages kept free (sol.steady_fit); those tokens read the
            # lengths and this search's admission policy only: once per search and lengths
            key = (admission, input_len, int(out))
            steady = self._steady.get(key)
            if steady is None:
                steady = self._steady[key] = float(steady_tokens(admission, input_len, int(out)))
            for tokens, share in ((input_len + int(out), 1.0), (steady, 1.0 - admission.free_fraction)):
                kv = self.cache.kv_at(kv_dev, tokens, self.kv_bytes)
                if not (kv > 0 and share * room + 1e-6 * usable < kv * (1 - 1e-9)):
                    return False
        return True

    def kv_share(self, config: ParallelConfig, gpu: GPU, input_len: int) -> float:
        """KV bytes one GPU holds of a request at the prompt length (placement's, whatever the fusion)."""
        s = self.first(config, gpu, input_len)
        return float(s.kv_device_fn(float(input_len), self.kv_bytes))

    def evaluate(self, gpus: list[GPU], work: dict[tuple[int, int], tuple], input_len: int,
                 pool_start: dict[tuple[int, int], int] | None = None) -> dict[tuple[int, int], dict[str, np.ndarray]]:
        """summarize() fields at every point of ``work`` ((GPU index, config index) -> (config,
        batches, output length per batch)): one call per structure, over every GPU type that shares
        it (all arithmetic is per point, so a point's numbers do not depend on its companions; summarize
        evaluates each distinct step-time point once: most of a sweep's batches repeat a program batch).
        ``pool_start``: per work entry, where its prefill-pool points begin; those are evaluated by
        summarize's ``prefill_only`` (TTFT, fit and capacity only: no decode step, which the search
        never reads of a pool point: about half of the pooled search's step-time work), and their ``tpot_s`` and ``tokens_per_s_per_gpu`` are left NaN."""
        groups: dict[int, list] = {}
        for (g, k), (config, batch, out_len) in work.items():
            regimes = self.codes(config, gpus[g], batch, input_len)
            # the distinct (prefill, decode) rows, sorted as tuples sort: one integer per row (a
            # row-wise np.unique sorts a structured view, several times slower)
            width = int(regimes[:, 1].max()) + 1
            code = regimes[:, 0] * width + regimes[:, 1]
            for c in np.unique(code).tolist():
                sel = np.flatnonzero(code == c)
                s = self.structure(config, gpus[g], (int(c // width), int(c % width)))
                groups.setdefault(id(s), [s]).append((g, k, sel))
        # one summarize() call per structure and kind of point: (structure, prefill_only, runs, batch,
        # output length, GPU index), where a run is (g, k, the selected points)
        calls = []
        for s, *parts in groups.values():
            # (g, k, the selected points, the pool points among them or None) as one run per kind
            serving, pooled = [], []
            for g, k, sel in parts:
                start = len(work[g, k][1]) if pool_start is None else pool_start[g, k]
                serving.append((g, k, sel[sel < start]))
                pooled.append((g, k, sel[sel >= start]))
            for prefill_only, runs in ((False, serving), (True, pooled)):
                runs = [r for r in runs if len(r[2])]
                if not runs:
                    continue
                calls.append((s, prefill_only, runs, np.concatenate([work[g, k][1][sel] for g, k, sel in runs]),
                              _one_length(np.concatenate([work[g, k][2][sel] for g, k, sel in runs])),
                              np.concatenate([np.full(len(sel), g) for g, _, sel in runs])))
        # each compiled program once over the points of every call and phase running it (times only;
        # prefill-only calls leave the decode step out)
        phases = phases_many(gpus, [(phase_inputs(s, batch, input_len, out_len, self.options.prefill_tokens,
                                                  not prefill_only, not prefill_only), index, self.kv_bytes)
                                    for s, prefill_only, _, batch, out_len, index in calls],
                             # two_batch reads the bound: the overlap each structure resolved (its table's default)
                             times_only=all((s.options.overlap or "none") == "none" for s, *_ in calls))
        out: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        for (s, prefill_only, runs, batch, out_len, index), phase in zip(calls, phases):
            got = summarize(s, gpus, index, self.kv_bytes, batch, input_len, out_len, self.options.hbm_fraction,
                            self.options.prefill_tokens, serving_only=True, phases=phase, prefill_only=prefill_only)
            at = 0
            for g, k, sel in runs:          # every point of a work entry is in one run
                into, n = out.setdefault((g, k), {}), len(work[g, k][1])
                for name, value in got.items():
                    value = np.asarray(value)
                    if name not in into:
                        into[name] = np.zeros(n, dtype=value.dtype)
                    into[name][sel] = value[at:at + len(sel)]
                at += len(sel)
        return out


def _one_length(lengths: np.ndarray):
    """A call's output lengths as one number where they are all one (always, in the search: the
    scenario's output, or :data:`engine.serving.disagg.PREFILL_OUTPUT` for prefill-pool points), else
    as they are. summarize() and phase_inputs() then evaluate what reads the output length alone
    (steady tokens per request, the KV at them and at the last position, the decode's mean context)
    once per call, not per point: elementwise arithmetic, so the same floats, broadcast beside the
    per-point arrays (tests/test_serve_eleventh_pass.py: bit for bit and dtype for dtype)."""
    first = lengths[0]
    return first if (lengths == first).all() else lengths


def _kv_bytes(options: Options) -> int:
    from engine.language.kv import KV_DTYPE_BYTES
    return KV_DTYPE_BYTES[options.kv_dtype]


def _stored_bytes(ev: Evaluation, weight_format: str = "checkpoint") -> float:
    """The main stack's stored bytes in ``weight_format`` (its published storage, or a checkpoint's)."""
    model = weight_format_model(ev.model, ev.corpus, weight_format)
    return float(sum(t.total_bytes for t in storage.checkpoint_tensors(ev.numeric, model, ev.corpus) if t.stack == "main"))


def search(ev: Evaluation, gpus: list[GPU], input_len: int, output_len: int, sla: SLA, *, max_gpus: int = 8,
           options: Options = Options(), fusion: FusionTable | None = None, pools: bool = False,
           cache: StructureCache | None = None) -> list[GPUSearch]:
    """Every served (legal config, batch) point on each GPU type, with replicas, GPUs and whether it
    meets ``sla`` (see the module doc for the rules). One :class:`GPUSearch` per GPU, in order.

    ``pools``: also every prefill-pool point (batch up to the capacity at ``input + 1``, its TTFT) and
    each config's KV share per GPU at the prompt, what :func:`disaggregated` pairs up.
    ``cache``: a :class:`engine.deploy.structure_cache.StructureCache` of ``ev`` whose table for
    ``options.framework`` is ``fusion``, to reuse (and fill) structures compiled elsewhere; the
    points are the same with or without it."""
    if not (isinstance(max_gpus, int) and 1 <= max_gpus <= MAX_GPUS):
        raise SpecError(option_where("--max-gpus"), f"{max_gpus!r} is not a GPU count",
                        f"write a whole number from 1 to {MAX_GPUS}")
    if not (isinstance(input_len, int) and input_len >= 1 and isinstance(output_len, int) and output_len >= 1):
        raise SpecError(option_where("--input/--output"), f"input {input_len!r}, output {output_len!r}",
                        "both must be whole numbers >= 1 (TPOT needs at least one output token)")
    validate_options(options, ev)
    configs = legal_configs(ev, max_gpus)
    check_pairs({"GPU types": len(gpus), f"configs up to {max_gpus} GPUs": len(configs)}, option_where("--max-gpus"),
                "name fewer GPU types (--gpu) or a smaller --max-gpus")
    # a published format's bytes bound every split's; a blanket scheme's are not computed here
    published = options.weight_format == "checkpoint" or checkpoints.find(ev.model, options.weight_format)
    stored = _stored_bytes(ev, options.weight_format) if published else 0.0
    evaluator = _Evaluator(ev, options, fusion, cache)
    # 1. per GPU type and config, the batches to try: up to the steady-state capacity summarize()
    # reports (its steady fit then decides which of them are served); a prefill pool holds the prompt
    # and the first token only (its worst case: a pool's requests leave after their first token)
    work: dict[tuple[int, int], tuple] = {}
    pool_start: dict[tuple[int, int], int] = {}
    outs = np.array([output_len, PREFILL_OUTPUT]) if pools else np.array([output_len])
    # the (GPU type, config) pairs that may hold a request, each with batch 1's structure (built in
    # this order, as one pair at a time built them), then their capacities in one evaluation per
    # config and structure (:meth:`_Evaluator.capacities`: each GPU's row is its own call's numbers)
    open_: dict[tuple[int, int], object] = {}
    for g, gpu in enumerate(gpus):
        usable = gpu.hbm_bytes * options.hbm_fraction
        for k, config in enumerate(configs):
            if stored / config.n_gpus >= usable:          # a lower bound on any split's weights per GPU
                continue
            if evaluator.cannot_fit(config, gpu, input_len, outs):     # capacity 0: no structure needed
                continue
            open_[g, k] = evaluator.first(config, gpu, input_len)
    sharing: dict[tuple[int, int], list[int]] = {}      # (config, id(batch 1's structure)) -> GPU indices
    for (g, k), s in open_.items():
        sharing.setdefault((k, id(s)), []).append(g)
    capacities: dict[tuple[int, int], tuple] = {}
    for (k, _), members in sharing.items():
        group = [gpus[g] for g in members]
        caps = evaluator.capacities(configs[k], group, input_len, outs)
        steady = evaluator.capacities(configs[k], group, input_len, outs[:1], steady=True)
        for row, g in enumerate(members):
            capacities[g, k] = (caps[row], int(steady[row][0]))
    for g, gpu in enumerate(gpus):
        for k, config in enumerate(configs):
            if (g, k) not in capacities:
                continue
            caps, cap = capacities[g, k]
            batch = batch_list(cap, sla.users) if cap >= 1 else np.zeros(0, dtype=np.int64)
            out_len = np.full(batch.shape, output_len)
            pool_start[g, k] = len(batch)                 # prefill-pool points (output 1) after the others
            if pools and caps[1] >= 1:
                pool_batch = batch_list(int(caps[1]))
                batch = np.concatenate([batch, pool_batch])
                out_len = np.concatenate([out_len, np.full(pool_batch.shape, PREFILL_OUTPUT)])
            if batch.size:
                work[g, k] = (config, batch, out_len)
    # 2. one summarize() per structure, over every GPU type sharing it
    evaluated = evaluator.evaluate(gpus, work, input_len, pool_start)
    # 3. each GPU type's points, config by config
    results = []
    for g, gpu in enumerate(gpus):
        res = GPUSearch(gpu.key, price=gpu.price_usd_per_hour)
        cols: dict[str, list] = {k: [] for k in ("config", "batch", "ttft_s", "tpot_s", "tpot_last_s",
                                                 "tokens_per_s_per_gpu", "max_concurrent_requests",
                                                 "max_concurrent_requests_worst", "n_gpus")}
        pre: dict[str, list] = {k: [] for k in ("config", "batch", "ttft_s")}
        for k, config in enumerate(configs):
            if (g, k) not in work:
                res.rejected += 1
                continue
            _, batch, _ = work[g, k]
            got = evaluated[g, k]
            is_pool = np.arange(len(batch)) >= pool_start[g, k]
            # served: the steady state of continuous batching holds the batch; a prefill-pool point:
            # every prompt's KV at once (its worst case)
            served = got["fits_steady"].astype(bool) & (batch <= got["max_concurrent_requests_steady"]) & ~is_pool
            if pools:
                pooled = got["fits"].astype(bool) & (batch <= got["max_concurrent_requests"]) & is_pool
                if pooled.any():
                    res.pool_configs.append(config)
                    pre["config"].append(np.full(int(pooled.sum()), len(res.pool_configs) - 1))
                    pre["batch"].append(batch[pooled])
                    pre["ttft_s"].append(np.asarray(got["ttft_s"])[pooled])
                if pooled.any() or served.any():
                    res.kv_share[config] = evaluator.kv_share(config, gpu, input_len)
            if not served.any():
                res.rejected += 1
                continue
            res.configs.append(config)
            n = int(served.sum())
            cols["config"].append(np.full(n, len(res.configs) - 1))
            cols["batch"].append(batch[served])
            cols["n_gpus"].append(np.full(n, config.n_gpus))
            # a point's headline figures are the steady state's (what continuous batching holds and
            # a request sees on average, deploy's *_steady / tpot_mean_s), the worst case beside them
            for name, field in STEADY_COLUMNS.items():
                cols[name].append(np.asarray(got[field])[served])
        if res.configs:
            p = {k: np.concatenate(v) for k, v in cols.items()}
            p.update(_load(p, sla, output_len))
            res.points = p
        if res.pool_configs:
            res.prefill = {k: np.concatenate(v) for k, v in pre.items()}
        results.append(res)
    return results


def users_held(batch, users: int | None):
    """Whether a replica at ``batch`` holds its share of ``users`` concurrent users: with ``r =
    ceil(U / batch)`` replicas, ``batch = ceil(U / r)`` (the load each really holds); no users: any
    batch. Whole numbers or integer arrays."""
    if users is None:
        return np.ones_like(np.asarray(batch), dtype=bool) if np.ndim(batch) else True
    return batch == -(-users // -(-users // batch))


def _load(p: dict[str, np.ndarray], sla: SLA, output_len: int) -> dict[str, np.ndarray]:
    """Replicas, GPUs, requests/s and the SLA verdict of every point (module doc)."""
    batch = p["batch"].astype(np.int64)
    rps = batch / (p["ttft_s"] + output_len * p["tpot_s"])       # one replica, requests/s
    ok = (p["ttft_s"] <= sla.ttft_s) & (p["tpot_s"] <= sla.tpot_s)
    if sla.users is not None:
        replicas = -(-sla.users // batch)
        ok &= users_held(batch, sla.users)
    elif sla.rate is not None:
        replicas = np.maximum(1, np.ceil(sla.rate / rps * ROUND)).astype(np.int64)
    else:
        replicas = np.ones_like(batch)
    return {"replicas": replicas, "total_gpus": replicas * p["n_gpus"], "requests_per_s": rps * replicas,
            "tokens_per_s_per_user": 1.0 / p["tpot_s"], "meets_sla": ok}


# -- disaggregated prefill/decode ------------------------------------------------------------------


def _first_per_key(order: np.ndarray, key, top: int) -> list[int]:
    """The first ``top`` indices of ``order`` with distinct ``key(i)`` (each config's best point)."""
    seen, keep = set(), []
    for i in order.tolist():
        k = key(i)
        if k not in seen:
            seen.add(k)
            keep.append(i)
            if len(keep) == top:
                break
    return keep


def _front_rows(search) -> list[dict[str, Any]]:
    """A search's Pareto front of tokens/s/GPU vs tokens/s/user as its rows (empty without points)."""
    p = search.points
    if not p:
        return []
    return search.rows(front(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]))


