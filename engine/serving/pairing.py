"""Disaggregated sizing: which prefill and decode GPU types pair, and the cheapest pair of a
prefill pool and a decode pool meeting an SLA (``archledger plan``'s disaggregated answer).

Layer: engine.serving (on :mod:`engine.serving.sizing`'s searches and :mod:`engine.serving.disagg`'s
join; nothing here evaluates a point itself). The arithmetic of :func:`prefill_choice` is
engine.serving.rules' (LAST, CHOICE), which the sizing page (static/js/sizing.js) runs too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.language.api import Evaluation
from engine.deploy.hardware import GPU
from engine.deploy.structure import Options
from engine.language.formula_tree import run_arrays
import engine.serving.rules as rules
from engine.serving.staircase import staircase
from engine.serving.disagg import FIELDS as DISAGG_FIELDS, join, links, transfer_bytes
from engine.serving.sizing import SLA, GPUSearch, _first_per_key, _front_rows, _kv_bytes


@dataclass
class DisaggSearch:
    """Disaggregated points of one (prefill GPU, decode GPU) pair: every served decode point joined
    with its cheapest prefill choice (:func:`disaggregated`), as columns of :data:`DISAGG_FIELDS`."""

    prefill_gpu: str
    decode_gpu: str
    points: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, list[str]] = field(default_factory=dict)   # config labels the index columns point to
    decode_points: int = 0            # served decode points tried
    n_gpus: dict[str, list[int]] = field(default_factory=dict)

    def rows(self, index) -> list[dict[str, Any]]:
        """Points as dicts (:data:`DISAGG_FIELDS`), in the order of ``index``."""
        p, out = self.points, []
        for i in np.asarray(index, dtype=int).tolist():
            row: dict[str, Any] = {"kind": "disaggregated", "prefill_gpu": self.prefill_gpu,
                                   "prefill_config": self.labels["prefill"][int(p["prefill_config"][i])],
                                   "prefill_n_gpus": self.n_gpus["prefill"][int(p["prefill_config"][i])],
                                   "decode_gpu": self.decode_gpu,
                                   "decode_config": self.labels["decode"][int(p["decode_config"][i])],
                                   "decode_n_gpus": self.n_gpus["decode"][int(p["decode_config"][i])]}
            for name in DISAGG_FIELDS:
                if name not in row:
                    value = p[name][i] if p.get(name) is not None else None
                    row[name] = value.item() if hasattr(value, "item") else value
            out.append({name: row[name] for name in DISAGG_FIELDS})
        return out

    def cheapest(self, top: int = 5) -> list[dict[str, Any]]:
        """The best SLA-meeting point of each (prefill config, decode config) pair, cheapest first
        (fewest GPUs, then the highest tokens/s/GPU)."""
        p = self.points
        if not p:
            return []
        idx = np.flatnonzero(p["meets_sla"])
        order = idx[np.lexsort((-p["tokens_per_s_per_gpu"][idx], p["total_gpus"][idx]))]
        return self.rows(_first_per_key(order, lambda i: (int(p["prefill_config"][i]), int(p["decode_config"][i])), top))

    def front(self) -> list[dict[str, Any]]:
        """The Pareto front of tokens/s/GPU vs tokens/s/user over every point, fastest user first."""
        return _front_rows(self)


#: Which (prefill GPU, decode GPU) pairs a disaggregated search joins (:func:`pair_allowed`).
PAIR_POLICIES = ("same-gpu", "same-vendor", "all")


#: The default: one vendor's GPUs on both sides. A disaggregated deployment moves the KV cache GPU
#: to GPU with a KV connector on each vendor's own stack: vLLM's NixlConnector builds on NIXL on
#: NVIDIA GPUs and on RIXL (AMD's port) on ROCm (https://docs.vllm.ai/en/stable/features/
#: nixl_connector_usage/, "Installation"); a transfer between two vendors' GPUs exists only as
#: host-staged proofs of concept outside a framework's release (vllm-project/vllm-neuron#26:
#: Trainium prefill -> H100 decode through CPU memory, seven patches; qualcomm/vllm-qaic#121), and
#: the join's scale-out link (engine.serving.disagg.links) is a GPU-to-GPU RDMA path that such a
#: staging does not have. ``all`` keeps every ordered pair for what-if questions.
DEFAULT_PAIRS = "same-vendor"


def pair_allowed(prefill: GPU, decode: GPU, policy: str = DEFAULT_PAIRS) -> bool:
    """Whether ``policy`` (:data:`PAIR_POLICIES`) pairs a prefill pool of ``prefill`` GPUs with a
    decode pool of ``decode`` GPUs: ``same-gpu`` one GPU type, ``same-vendor`` one ``vendor:`` of
    gpus/*.yaml, ``all`` any. The one rule plan's search and the build's sizing rows read."""
    if policy not in PAIR_POLICIES:
        raise ValueError(f"unknown pair policy {policy!r}: one of {', '.join(PAIR_POLICIES)}")
    if policy == "same-gpu":
        return prefill.key == decode.key
    return policy == "all" or prefill.vendor == decode.vendor


def disaggregated(ev: Evaluation, results: list[GPUSearch], gpus: list[GPU], input_len: int, output_len: int,
                  sla: SLA, options: Options = Options(), pairs: str = DEFAULT_PAIRS) -> list[DisaggSearch]:
    """Disaggregated points for every ordered pair of the searched GPU types (``search(..., pools=True)``)
    that ``pairs`` allows (:func:`pair_allowed`; the others are not searched and not returned).

    Each served decode point (config, ``b_d``: the aggregated search's points, whose TPOT and capacity
    a decode pool shares) is joined with the prefill (config, batch) that needs the fewest prefill GPUs
    for the decode replicas' demand among the prefill points whose TTFT plus the scale-out KV transfer
    (an upper bound of the transfer) is within ``sla.ttft_s``: per prefill config the fewest replicas
    its fastest batch within the bound needs, then the batch of the shortest TTFT that needs no more;
    across configs the fewest GPUs, then the shortest TTFT. Decode points no prefill choice brings
    within the TTFT bound are left out. The joined fields are :func:`engine.serving.disagg.join`'s, the link
    the point's own (scale-up when the whole deployment fits one domain of one GPU type)."""
    by_key = {g.key: g for g in gpus}
    kv_request = float(transfer_bytes(ev, input_len, _kv_bytes(options)))
    out = []
    for pres in results:
        for dres in results:
            if not pair_allowed(by_key[pres.gpu], by_key[dres.gpu], pairs):
                continue
            pair = DisaggSearch(pres.gpu, dres.gpu)
            pair.labels = {"prefill": [c.label() for c in pres.pool_configs], "decode": [c.label() for c in dres.configs]}
            pair.n_gpus = {"prefill": [c.n_gpus for c in pres.pool_configs], "decode": [c.n_gpus for c in dres.configs]}
            out.append(pair)
            if not pres.prefill or not dres.points:
                continue
            pair.points = pair_points(by_key[pres.gpu], by_key[dres.gpu], pres, dres, kv_request, output_len, sla)
            pair.decode_points = int(len(dres.points["batch"]))
    return out


def pair_points(pgpu: GPU, dgpu: GPU, pres: GPUSearch, dres: GPUSearch, kv_request: float, output_len: int,
                sla: SLA) -> dict[str, np.ndarray]:
    """The disaggregated points of one (prefill GPU, decode GPU) pair under ``sla`` (:func:`disaggregated`'s
    rules), as columns: every decode point of ``dres`` some prefill choice brings within the TTFT bound,
    ``decode_point`` its index among ``dres.points`` (columns ``prefill_config`` / ``decode_config`` index
    ``pres.pool_configs`` / ``dres.configs``). Empty when none is. Each decode point's columns depend on
    that point, the prefill points and the bounds only (engine/serving/disagg_sizing.py relies on it)."""
    d = dres.points
    kd = d["config"].astype(int)
    share_d = np.array([dres.kv_share[c] for c in dres.configs])
    share_p = np.array([pres.kv_share[c] for c in pres.pool_configs])
    n_p = np.array([c.n_gpus for c in pres.pool_configs])
    _, scale_out = links(pgpu, dgpu)
    # decode replicas and the demand they put on the prefill pool (the prefill choice does not change them)
    x_d = run_arrays(rules.X_D, {"batch_d": d["batch"], "output": output_len, "tpot_d": d["tpot_s"]})["x_d"]
    demand = run_arrays(rules.DECODE, {"x_d": x_d, "batch_d": np.asarray(d["batch"]).astype(np.int64),
                                       "users": sla.users or 0, "has_users": sla.users is not None,
                                       "rate": sla.rate or 0.0, "has_rate": sla.rate is not None})["demand"]
    demand = np.broadcast_to(np.asarray(demand, dtype=float), x_d.shape)
    staircases = prefill_staircases(pres, lambda c: transfer_time(scale_out, share_p[c], share_d))
    choice, cost, ttft, batch = prefill_choice(staircases, sla.ttft_s, kd, demand, n_p)
    i = np.flatnonzero(np.isfinite(cost))
    if not i.size:
        return {}
    c, k = choice[i], kd[i]
    b_p, t_p = batch[i], ttft[i]
    j = join(pgpu, dgpu, n_p=n_p[c], batch_p=b_p, ttft_p=t_p, share_p=share_p[c],
             n_d=d["n_gpus"][i], batch_d=d["batch"][i], tpot_d=d["tpot_s"][i], share_d=share_d[k],
             kv_request=kv_request, output_len=output_len, users=sla.users, rate=sla.rate)
    points = {name: np.asarray(j[name]) for name in DISAGG_FIELDS if name in j and j[name] is not None}
    points.update({"prefill_config": c, "prefill_batch": b_p, "prefill_ttft_s": t_p,
                   "decode_config": k, "decode_batch": d["batch"][i], "decode_point": i})
    if j["usd_per_hour"] is None:
        points["usd_per_hour"] = points["usd_per_m_tokens"] = None
    points["meets_sla"] = (points["ttft_s"] <= sla.ttft_s) & (points["tpot_s"] <= sla.tpot_s) & np.asarray(j["exact"])
    return points


def transfer_time(link, share_p, share_d) -> np.ndarray:
    """Seconds to send the larger of the pools' KV shares over ``link`` (rules.TRANSFER)."""
    env = {"share_p": np.asarray(share_p, dtype=float), "share_d": np.asarray(share_d, dtype=float),
           "alpha": link.alpha_s, "bw": link.bytes_per_s}
    return run_arrays(rules.TRANSFER, env)["seconds"]


def prefill_staircases(pres: GPUSearch, transfer) -> list[tuple]:
    """Per prefill config of ``pres``: its points by TTFT (a stable sort), their batches, the most
    requests/s within each TTFT and the first point reaching it, and ``transfer(c)``: the KV
    transfer time per decode config (the TTFT a point's prefill leaves under a bound)."""
    out = []
    pc = pres.prefill["config"]
    for c in range(len(pres.pool_configs)):
        sel = np.flatnonzero(pc == c)
        out.append((*staircase(pres.prefill["ttft_s"][sel], pres.prefill["batch"][sel]), transfer(c)))
    return out


def prefill_choice(staircases: list[tuple], bound, kd: np.ndarray, demand: np.ndarray, n_p: np.ndarray,
                   which: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Each decode point's prefill pool under TTFT ``bound`` (``kd`` its decode config, ``demand``
    the requests/s it puts on the pool; ``bound`` one bound, or an array of them and ``which`` the
    one of each point: a point's numbers are those it has alone under its bound): per prefill
    config the fewest replicas that carry the demand within the bound, then the shortest TTFT that
    needs no more; of the configs, the fewest GPUs, then the shortest TTFT (ttft / 2 bound < 0.5
    GPU), the first config on a tie. Returns per point its choice and the choice's GPUs (inf: no
    config has a point within the bound, no prefill pool), TTFT and batch. :func:`pair_points` and
    engine/serving/disagg_sizing.py's probes (a bisection level's bounds in one call)."""
    bounds = np.atleast_1d(np.asarray(bound, dtype=float))
    which = np.zeros(len(kd), dtype=np.intp) if which is None else which
    half = run_arrays(rules.HALF, {"bound": bounds})["half"][which]
    n = len(kd)
    choice, cost, ttft, batch = np.zeros(n, dtype=np.intp), np.full(n, np.inf), np.zeros(n), np.zeros(n, dtype=np.int64)
    least = np.full(n, np.inf)            # the choice's GPUs + TTFT / 2 bound
    cell = which * len(staircases[0][4]) + kd if staircases else kd    # a point's (bound, decode config)
    # a config's key is at least its GPU count where the bound is positive (reps >= 1, and TTFT / 2
    # bound >= 0 adds nothing negative): a point whose best key so far is no larger cannot take it
    # (only a key below the best so far does), so the config is not evaluated there
    open_ = ~(half > 0)
    for c, (t, b, best, arg, seconds) in enumerate(staircases):
        # the TTFT bound left after the (scale-out, an upper bound) transfer, per bound and decode config
        last = run_arrays(rules.LAST, {"t": t, "bound": bounds[:, None], "seconds": seconds})["last"]
        j = last.ravel()[cell]
        live = (j >= 0) & ((least > n_p[c]) | open_)
        if not live.size:
            continue
        if live.all():       # every point has a point of the config within its bound and may take it:
            at, d, h, low = None, demand, half, least    # the arrays themselves, no gathered copies
        else:
            at = np.flatnonzero(live)
            if not len(at):
                continue
            j, d, h, low = j[at], demand[at], half[at], least[at]
        # fewest prefill replicas for the demand, then the shortest TTFT that still needs no more
        got = run_arrays(rules.CHOICE, {"t": t, "b": b, "best": best, "arg": arg, "demand": d, "j": j,
                                        "half": h, "n_p": n_p[c]}, only=("key", "pick"))
        pick, gpus, seconds_p, key = got["pick"], got["gpus"], got["ttft"], got["key"]
        better = np.flatnonzero(key < low)
        if at is None and len(better) == n:       # every point takes it (the first config reached):
            choice[:], least[:], cost[:], ttft[:], batch[:] = c, key, gpus, seconds_p, b[pick]    # whole copies
            continue
        i = better if at is None else at[better]
        choice[i], least[i], cost[i], ttft[i], batch[i] = c, key[better], gpus[better], seconds_p[better], b[pick[better]]
    return choice, cost, ttft, batch
