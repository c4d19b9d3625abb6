"""Sizing: the cheapest aggregated deployments that meet a latency SLA, and the throughput front.

Layer: engine.deploy (on planner and sol; nothing here prints). :func:`search` walks, for each GPU
type, every GPU count that is a power of two up to a limit, every legal TP / EP / DP-attention / PP
config at that count (:func:`engine.deploy.parallel.enumerate_configs` filtered by
:func:`engine.deploy.planner.check`; ``dp = 1``: whole-model replicas are counted separately) and
every batch from 1 to the config's capacity, and evaluates each config's batches in vectorized
:func:`engine.deploy.sol.summarize` calls (one per fusion token regime), so no point is planned
twice. :func:`front` is the Pareto front of tokens/s/GPU against tokens/s/user.

Rules (also in docs/deployment.md, "Sizing: archledger plan"):

* a point (config, batch) is *served* when it fits (``fits``) and ``batch <= max_concurrent_requests``;
  it *meets the SLA* when also ``ttft_s <= ttft`` and ``tpot_s <= tpot``. ``batch`` is requests per
  model replica, as in ``archledger deploy``; the numbers are those ``deploy`` prints at that point.
* replicas: without load, one replica. With ``users = U`` concurrent users, ``r = ceil(U / batch)``
  replicas and the point is kept only when ``batch = ceil(U / r)`` (the load a replica really
  holds). With ``rate = R`` requests/s, a replica at batch ``b`` completes ``b / (TTFT + output x
  TPOT)`` requests/s (Little's law with the batch's own latency: ``b`` requests in flight, each
  alive one prefill and ``output`` decode steps); ``r = ceil(R / that)``.
* cost: GPUs = ``r x n_gpus``; the cheapest point has the fewest GPUs, ties broken by the highest
  tokens/s/GPU (decode tokens, ``batch / TPOT / replica GPUs``); tokens/s/user = ``1 / TPOT``.
* the front is over every served point of a GPU type (all configs, all batches), SLA or not: a
  point is on it when no other point has at least its tokens/s/GPU and tokens/s/user and more of one.

Invariant: every point reported (cheapest or front) is a (legal config, batch) that was evaluated,
with the fields :func:`engine.deploy.sol.summarize` gave it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.spec.api import Evaluation
from engine.spec.errors import SpecError
from engine.deploy.fusion import FusionTable
from engine.deploy.hardware import GPU
from engine.deploy.parallel import MAX_GPUS, ParallelConfig, enumerate_configs
from engine.deploy.planner import build_structure, check, place, validate_options
from engine.deploy.sol import summarize
from engine.deploy.structure import (MAX_BATCH, PHASES, PREFILL_TOKENS, Options, option_where, prefill_program_batch,
                                      program_batch)

#: Every batch up to this is evaluated; above it, batches step by :data:`BATCH_STEP` (a ratio) up
#: to the capacity (itself included). The front and the cheapest point move by well under 1% with it.
DENSE_BATCHES = 512
BATCH_STEP = 1.01
#: Fields of one reported point (JSON names; seconds, tokens/s, requests/s).
POINT_FIELDS = ("gpu", "config", "n_gpus", "tp", "ep", "dp_attn", "pp", "replicas", "total_gpus", "batch",
                "ttft_s", "tpot_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "requests_per_s",
                "max_concurrent_requests", "meets_sla")


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

    def rows(self, index) -> list[dict[str, Any]]:
        """Points as dicts (:data:`POINT_FIELDS`), in the order of ``index``."""
        out = []
        for i in np.asarray(index, dtype=int).tolist():
            c = self.configs[int(self.points["config"][i])]
            row = {"gpu": self.gpu, "config": c.label(), "n_gpus": c.n_gpus, "tp": c.tp, "ep": c.ep,
                   "dp_attn": c.dp_attn, "pp": c.pp}
            for name in POINT_FIELDS[len(row):]:
                value = self.points[name][i]
                row[name] = value.item() if hasattr(value, "item") else value
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
        seen, keep = set(), []
        for i in order.tolist():
            if p["config"][i] not in seen:
                seen.add(p["config"][i])
                keep.append(i)
                if len(keep) == top:
                    break
        return self.rows(keep)

    def front(self) -> list[dict[str, Any]]:
        """The Pareto front of tokens/s/GPU vs tokens/s/user over every served point, fastest user first."""
        p = self.points
        if not p:
            return []
        return self.rows(front(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]))


def front(x, y) -> np.ndarray:
    """Indices of the non-dominated points of (x, y), both to maximize, in decreasing x.

    A point is dominated when another has x and y at least as large and one of them larger; of
    exact duplicates one is kept."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not x.size:
        return np.zeros(0, dtype=int)
    order = np.lexsort((-y, -x))              # x decreasing, then y decreasing
    ys = y[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(ys)[:-1]))
    return order[ys > best_before]


def batch_list(cap: int, users: int | None = None) -> np.ndarray:
    """Batches searched under capacity ``cap``: every one up to :data:`DENSE_BATCHES`, then steps of
    :data:`BATCH_STEP`, the capacity itself, and (with ``users``) every ``ceil(users / r)``."""
    cap = min(int(cap), MAX_BATCH)
    dense = np.arange(1, min(cap, DENSE_BATCHES) + 1)
    extra = []
    if cap > DENSE_BATCHES:
        n = int(math.log(cap / DENSE_BATCHES) / math.log(BATCH_STEP)) + 1
        extra = [np.unique(np.floor(DENSE_BATCHES * BATCH_STEP ** np.arange(1, n + 1))).astype(int), [cap]]
        if users is not None:
            r = np.arange(1, -(-users // DENSE_BATCHES) + 1)
            extra.append(-(-users // r))
    out = np.concatenate([dense, *[np.asarray(e, dtype=int) for e in extra]]) if extra else dense
    return np.unique(out[(out >= 1) & (out <= cap)])


def _device_tokens(config: ParallelConfig, batch: np.ndarray, input_len: int,
                   prefill_tokens: int = PREFILL_TOKENS, decode_seq: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """:func:`engine.deploy.structure.tokens_per_device` over an array of batches (prefill: one
    chunked-prefill step's tokens; decode: ``decode_seq`` per request)."""
    pre = np.asarray(prefill_program_batch(config, batch, input_len, prefill_tokens), dtype=float)
    dec = np.asarray(program_batch(config, batch), dtype=float) * decode_seq
    return np.ceil(pre * input_len / (config.dp_attn * config.cp)), np.ceil(dec / config.dp_attn)


def _thresholds(table: FusionTable | None, gpu: GPU, config: ParallelConfig, phase: str) -> list[int]:
    """The token limits (``max_tokens``) of the rules that can apply to ``phase`` on ``gpu`` under
    ``config`` (arch, phases and min_degree hold: they do not depend on tokens). Fusion is decided by
    which of them a point's tokens per device exceed, so the points of one regime share one
    structure; a rule whose other conditions fail never matches, whatever the tokens."""
    if table is None:
        return []
    out = set()
    for r in table.rules:
        when = r.when
        if not r.enabled or "max_tokens" not in when or ("arch" in when and gpu.arch not in when["arch"]):
            continue
        if "phases" in when and phase not in when["phases"]:
            continue
        if any(getattr(config, name, 1) < least for name, least in (when.get("min_degree") or {}).items()):
            continue
        out.add(when["max_tokens"])
    return sorted(out)


def _representative(limits: list[int], regime: int) -> int | None:
    if not limits:
        return None
    return limits[regime] if regime < len(limits) else limits[-1] + 1


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


class _Evaluator:
    """Structures per (config, domain, fusion regime), placements per (config, domain), shared
    between GPU types of one search."""

    def __init__(self, ev: Evaluation, options: Options, fusion: FusionTable | None):
        self.ev, self.options, self.fusion = ev, options, fusion
        self.kv_bytes = float(_kv_bytes(options))
        self.placements: dict = {}
        self.structures: dict = {}

    def limits(self, config: ParallelConfig, gpu: GPU) -> tuple[list[int], list[int]]:
        return tuple(_thresholds(self.fusion, gpu, config, phase) for phase in PHASES)

    def structure(self, config: ParallelConfig, gpu: GPU, regimes: tuple[int, int]):
        domain = gpu.scale_up_domain
        table = self.fusion
        arch = tuple(r.name for r in table.rules if "arch" not in r.when or gpu.arch in r.when["arch"]) if table else ()
        key = (config, domain, arch, regimes)
        if key not in self.structures:
            pkey = (config, domain)
            if pkey not in self.placements:
                # the search prints no formulas: the numeric placement stands in for the symbolic one
                numeric = place(self.ev, config, domain, self.options, False)
                self.placements[pkey] = (numeric, numeric)
            tokens = {p: _representative(limits, r) for p, limits, r in zip(PHASES, self.limits(config, gpu), regimes)}
            self.structures[key] = build_structure(self.ev, config, self.options, domain, table, gpu, tokens,
                                                   self.placements[pkey])
        return self.structures[key]

    def regimes(self, config: ParallelConfig, gpu: GPU, batch: np.ndarray, input_len: int) -> list[tuple[int, int]]:
        """Per batch, the (prefill, decode) regime: how many of each phase's limits its tokens per
        device exceed (a limit is inclusive: tokens <= max_tokens fuses)."""
        tokens = _device_tokens(config, batch, input_len, self.options.prefill_tokens, self.options.decode_seq)
        codes = [np.searchsorted(np.asarray(limits, dtype=float), t, side="left")
                 for limits, t in zip(self.limits(config, gpu), tokens)]
        return list(zip(codes[0].tolist(), codes[1].tolist()))

    def evaluate(self, config: ParallelConfig, gpu: GPU, batch: np.ndarray, input_len: int, output_len: int
                 ) -> dict[str, np.ndarray]:
        """summarize() fields at every batch (one call per fusion regime)."""
        regimes = self.regimes(config, gpu, batch, input_len)
        out: dict[str, np.ndarray] = {}
        for regime in sorted(set(regimes)):
            sel = np.array([i for i, r in enumerate(regimes) if r == regime])
            s = self.structure(config, gpu, regime)
            got = summarize(s, [gpu], 0, self.kv_bytes, batch[sel], input_len, output_len, self.options.hbm_fraction,
                            self.options.prefill_tokens)
            for name in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "fits", "max_concurrent_requests"):
                if name not in out:
                    out[name] = np.zeros(batch.shape, dtype=np.asarray(got[name]).dtype)
                out[name][sel] = got[name]
        return out


def _kv_bytes(options: Options) -> int:
    from engine.spec.kv import KV_DTYPE_BYTES
    return KV_DTYPE_BYTES[options.kv_dtype]


def _stored_bytes(ev: Evaluation) -> float:
    return float(sum(t.total_bytes for t in ev.tensors() if t.stack == "main"))


def search(ev: Evaluation, gpus: list[GPU], input_len: int, output_len: int, sla: SLA, *, max_gpus: int = 8,
           options: Options = Options(), fusion: FusionTable | None = None) -> list[GPUSearch]:
    """Every served (legal config, batch) point on each GPU type, with replicas, GPUs and whether it
    meets ``sla`` (see the module doc for the rules). One :class:`GPUSearch` per GPU, in order."""
    if not (isinstance(max_gpus, int) and 1 <= max_gpus <= MAX_GPUS):
        raise SpecError(option_where("--max-gpus"), f"{max_gpus!r} is not a GPU count",
                        f"write a whole number from 1 to {MAX_GPUS}")
    if not (isinstance(input_len, int) and input_len >= 1 and isinstance(output_len, int) and output_len >= 1):
        raise SpecError(option_where("--input/--output"), f"input {input_len!r}, output {output_len!r}",
                        "both must be whole numbers >= 1 (TPOT needs at least one output token)")
    validate_options(options, ev)
    configs = legal_configs(ev, max_gpus)
    stored = _stored_bytes(ev) if options.weight_format == "checkpoint" else 0.0
    evaluator = _Evaluator(ev, options, fusion)
    results = []
    for gpu in gpus:
        usable = gpu.hbm_bytes * options.hbm_fraction
        res = GPUSearch(gpu.key)
        cols: dict[str, list] = {k: [] for k in ("config", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu",
                                                 "max_concurrent_requests", "n_gpus")}
        for config in configs:
            if stored / config.n_gpus >= usable:          # a lower bound on any split's weights per GPU
                res.rejected += 1
                continue
            # the batches to try: up to the capacity summarize() reports (its fit then decides
            # which of them are served)
            cap = int(evaluator.evaluate(config, gpu, np.array([1]), input_len, output_len)
                      ["max_concurrent_requests"][0])
            if cap < 1:
                res.rejected += 1
                continue
            batch = batch_list(cap, sla.users)
            got = evaluator.evaluate(config, gpu, batch, input_len, output_len)
            served = got["fits"].astype(bool) & (batch <= got["max_concurrent_requests"])
            if not served.any():
                res.rejected += 1
                continue
            res.configs.append(config)
            n = int(served.sum())
            cols["config"].append(np.full(n, len(res.configs) - 1))
            cols["batch"].append(batch[served])
            cols["n_gpus"].append(np.full(n, config.n_gpus))
            for name in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "max_concurrent_requests"):
                cols[name].append(np.asarray(got[name])[served])
        if res.configs:
            p = {k: np.concatenate(v) for k, v in cols.items()}
            p.update(_load(p, sla, output_len))
            res.points = p
        results.append(res)
    return results


def _load(p: dict[str, np.ndarray], sla: SLA, output_len: int) -> dict[str, np.ndarray]:
    """Replicas, GPUs, requests/s and the SLA verdict of every point (module doc)."""
    batch = p["batch"].astype(np.int64)
    rps = batch / (p["ttft_s"] + output_len * p["tpot_s"])       # one replica, requests/s
    ok = (p["ttft_s"] <= sla.ttft_s) & (p["tpot_s"] <= sla.tpot_s)
    if sla.users is not None:
        replicas = -(-sla.users // batch)
        ok &= batch == -(-sla.users // replicas)
    elif sla.rate is not None:
        replicas = np.maximum(1, np.ceil(sla.rate / rps * (1 - 1e-12))).astype(np.int64)
    else:
        replicas = np.ones_like(batch)
    return {"replicas": replicas, "total_gpus": replicas * p["n_gpus"], "requests_per_s": rps * replicas,
            "tokens_per_s_per_user": 1.0 / p["tpot_s"], "meets_sla": ok}
