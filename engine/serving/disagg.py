"""Disaggregated prefill/decode: a prefill pool, a decode pool, the KV transfer between them, the pool ratio.

Layer: engine.serving (on planner, sol and hardware; nothing here prints). Each pool is replicas of
one (GPU type, parallel config) as ``archledger deploy`` evaluates it; framework, KV dtype and the
other options are shared. The arithmetic that joins two pools lives in :func:`join` (vectorized),
so :func:`disaggregate` (one split, ``archledger disagg``) and the search of ``archledger plan``
(:func:`engine.serving.pairing.disaggregated`) give the same numbers at the same point.

Rules (also in docs/deployment.md, "Disaggregated prefill/decode"):

* prefill pool: a replica prefills ``b_p`` prompts at once with nothing else in its steps; its TTFT is
  :func:`engine.deploy.sol.summarize`'s at (``b_p``, input, output 1): the prefill server computes
  the prompt and samples the first token, and holds ``b_p`` prompts' KV. One replica completes
  ``X_p = b_p / TTFT_p`` requests/s.
* decode pool: a replica holds ``b_d`` requests; TPOT is ``summarize``'s decode step at (``b_d``,
  input, output), the last position, with no prefill chunk in its steps. One replica completes
  ``X_d = b_d / (output x TPOT)`` requests/s (each request holds a slot for ``output`` steps).
  Memory and capacity as ``deploy`` gives them for that config and batch.
* KV transfer per request: every cache of the model at the prompt length, as the decode pool stores
  it (all layers; sliding-window, compressed and recurrent-state caches by their growth laws, in
  the KV dtype or their own): ``kv_transfer_bytes``. Each GPU moves its own share on its own link,
  all at once: the busiest link carries ``kv_link_bytes`` = max(the bytes one prefill GPU holds of the
  request, the bytes one decode GPU stores of it) at the prompt length (GQA heads split over TP move
  1/TP per GPU; an MLA latent every attention-TP GPU keeps whole moves whole to each).
  Time = alpha + kv_link_bytes / bandwidth, the point-to-point (send/recv) model of the collectives
  (gpus/collectives/nccl.yaml: alpha = base + one hop of the link's class). The link is the scale-up
  one when both pools are the same GPU type and every GPU of the deployment fits one scale-up domain
  (``total_gpus <= domain``, e.g. within a GB200-NVL72 rack), else scale-out at the slower of the two
  GPUs' one-direction bandwidth and the larger alpha.
* TTFT = TTFT_p + transfer; TPOT = TPOT_d.
* pool ratio ``rho = X_d / X_p`` prefill replicas per decode replica. Replicas: decode ``D`` = 1 without
  load, ``ceil(U / b_d)`` for ``U`` concurrent users (the point counts when ``b_d = ceil(U / D)``),
  ``ceil(R / X_d)`` for a rate ``R``; prefill ``P = ceil(demand / X_p)`` with demand = ``D x X_d``
  (``R`` with a rate): rounded up, so prefill never falls behind the decode pool (no prompt queues);
  the spare capacity, less than one replica, sits on the prefill side. GPUs = ``P x G_p + D x G_d``;
  requests/s = ``min(P x X_p, D x X_d)``; tokens/s/GPU = requests/s x output / GPUs (decode tokens);
  tokens/s/user = ``1 / TPOT``.
* $/M tokens (output tokens) = sum of GPUs x $/h / (tokens/s x 3600) x 1e6, where every GPU involved
  has a price (``price:`` in its GPU file); else None.

Invariant: the fields of a split are those of two ``deploy`` points (prefill at output 1, decode at
the given output) joined by the rules above; nothing is estimated twice.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.language import kv
from engine.language.formula_tree import run_arrays
import engine.serving.rules as rules
from engine.language.api import Evaluation
from engine.language.errors import SpecError, Where
from engine.deploy.fusion_table import FusionTable
from engine.deploy.hardware import GPU, find_gpu
from engine.deploy.parallel import MAX_GPUS, ParallelConfig
from engine.deploy.planner import plan
from engine.deploy.legality import check, validate_options
from engine.deploy.plan import summarize_plan
from engine.deploy.structure import MAX_BATCH, Options, Scenario, option_where

#: Output tokens of a prefill-pool request: the first token, sampled where the prompt was computed.
PREFILL_OUTPUT = 1
#: A tolerance for ceilings of ratios that are whole numbers up to rounding (0.9999999 x 3 -> 3).
ROUND = rules.ROUND
#: Fields of one disaggregated row (JSON names; bytes, seconds, requests/s, tokens/s, USD).
FIELDS = ("kind", "prefill_gpu", "prefill_config", "prefill_n_gpus", "prefill_batch", "prefill_replicas",
          "prefill_ttft_s", "prefill_requests_per_s", "decode_gpu", "decode_config", "decode_n_gpus", "decode_batch",
          "decode_replicas", "decode_requests_per_s", "pool_ratio", "kv_transfer_bytes", "kv_link_bytes", "kv_link",
          "kv_transfer_s", "total_gpus", "ttft_s", "tpot_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user",
          "requests_per_s", "usd_per_hour", "usd_per_m_tokens", "meets_sla")


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool's replica: a GPU type, a parallel config (``dp = 1``) and the requests it holds."""

    gpu: GPU
    config: ParallelConfig
    batch: int


@dataclass(frozen=True, slots=True)
class Link:
    """A point-to-point path for the KV: ``name`` (scale_up / scale_out), alpha (s), one-direction B/s."""

    name: str
    alpha_s: float
    bytes_per_s: float

    def time(self, nbytes):
        """Seconds to move ``nbytes`` in one send: alpha + bytes / bandwidth (arrays broadcast)."""
        env = {"alpha": self.alpha_s, "nbytes": np.asarray(nbytes, dtype=float), "bw": self.bytes_per_s}
        return run_arrays(rules.LINK_TIME, env)["seconds"]


def links(prefill_gpu: GPU, decode_gpu: GPU) -> tuple[Link | None, Link]:
    """The scale-up path (None when the pools are different GPU types: they never share a domain) and
    the scale-out path between a prefill GPU and a decode GPU (the slower NIC, the larger alpha)."""
    up = None
    if prefill_gpu.key == decode_gpu.key:
        up = Link("scale_up", prefill_gpu.collective_latency("send_recv", 2, 1), prefill_gpu.scale_up_bytes_per_s)
    path = run_arrays(rules.LINKS, {"p_out_alpha": prefill_gpu.collective_latency("send_recv", 2, 2),
                                    "d_out_alpha": decode_gpu.collective_latency("send_recv", 2, 2),
                                    "p_out_bw": prefill_gpu.scale_out_bytes_per_s, "d_out_bw": decode_gpu.scale_out_bytes_per_s})
    out = Link("scale_out", float(path["out_alpha"]), float(path["out_bw"]))
    return up, out


def transfer_bytes(ev: Evaluation, input_len, kv_bytes: float) -> np.ndarray:
    """KV bytes of one request at the prompt length, every cache of the main stack (all layers)."""
    return np.asarray(kv.request_bytes_fn(ev.numeric)(np.asarray(input_len, dtype=float), kv_bytes), dtype=float)


def replicas(x_p, x_d, batch_d, users: int | None = None, rate: float | None = None) -> dict[str, np.ndarray]:
    """Decode and prefill replicas (module doc), the pool ratio, requests/s and whether a ``users`` load
    is held exactly; arrays broadcast."""
    x_p, x_d = np.asarray(x_p, dtype=float), np.asarray(x_d, dtype=float)
    batch_d = np.asarray(batch_d).astype(np.int64)
    shape = np.broadcast_shapes(x_p.shape, x_d.shape, batch_d.shape)
    exact = np.ones(shape, dtype=bool)
    load = {"x_d": x_d, "batch_d": batch_d, "users": 0 if users is None else users, "has_users": users is not None,
            "rate": 0.0 if rate is None else rate, "has_rate": rate is not None}
    d = run_arrays(rules.DECODE, load)           # the rules' one definition (engine.serving.rules)
    decode = np.broadcast_to(np.asarray(d["decode_replicas"]).astype(np.int64), shape)
    if users is not None:
        exact = np.broadcast_to(batch_d == -(-users // decode), shape)
    r = run_arrays(rules.REPLICAS, {"x_p": x_p, "x_d": x_d, "demand": d["demand"], "decode_replicas": decode})
    prefill = np.asarray(r["prefill_replicas"]).astype(np.int64)
    return {"pool_ratio": np.broadcast_to(r["pool_ratio"], shape), "prefill_replicas": np.broadcast_to(prefill, shape),
            "decode_replicas": decode,
            "requests_per_s": r["requests_per_s"], "exact": exact}


def join(prefill_gpu: GPU, decode_gpu: GPU, *, n_p, batch_p, ttft_p, share_p, n_d, batch_d, tpot_d, share_d,
         kv_request, output_len: int, users: int | None = None, rate: float | None = None) -> dict[str, np.ndarray]:
    """The rules of the module doc over arrays of (prefill point, decode point) pairs: replicas, GPUs,
    the link and the KV transfer, TTFT, throughput and price. ``share_*`` are the KV bytes one GPU of
    each pool holds of a request at the prompt length; ``kv_request`` the request's whole KV."""
    x_p = run_arrays(rules.X_P, {"batch_p": np.asarray(batch_p, dtype=float), "ttft_p": np.asarray(ttft_p, dtype=float)})["x_p"]
    x_d = run_arrays(rules.X_D, {"batch_d": np.asarray(batch_d, dtype=float), "output": output_len,
                                 "tpot_d": np.asarray(tpot_d, dtype=float)})["x_d"]
    r = replicas(x_p, x_d, batch_d, users, rate)
    up, out = links(prefill_gpu, decode_gpu)
    priced = prefill_gpu.price_usd_per_hour is not None and decode_gpu.price_usd_per_hour is not None
    tpot_d = np.asarray(tpot_d, dtype=float)
    j = run_arrays(rules.JOIN, {
        "prefill_replicas": r["prefill_replicas"], "decode_replicas": r["decode_replicas"],
        "requests_per_s": r["requests_per_s"], "n_p": np.asarray(n_p), "n_d": np.asarray(n_d),
        "share_p": np.asarray(share_p, dtype=float), "share_d": np.asarray(share_d, dtype=float),
        "has_up": up is not None, "domain": prefill_gpu.scale_up_domain,
        "up_alpha": up.alpha_s if up else 0.0, "up_bw": up.bytes_per_s if up else 1.0,
        "out_alpha": out.alpha_s, "out_bw": out.bytes_per_s, "output": output_len,
        "ttft_p": np.asarray(ttft_p, dtype=float), "tpot_d": tpot_d,
        "price_p": prefill_gpu.price_usd_per_hour if priced else 0.0,
        "price_d": decode_gpu.price_usd_per_hour if priced else 0.0},
        only=("total_gpus", "kv_link_bytes", "on_up", "kv_transfer_s", "tokens", "ttft_s", "tokens_per_s_per_gpu",
              "tokens_per_s_per_user") + (("usd_per_hour", "usd_per_m_tokens") if priced else ()))
    total = np.asarray(j["total_gpus"]).astype(np.int64)
    on_up = np.broadcast_to(np.asarray(j["on_up"], dtype=bool), np.shape(total))
    return {"prefill_replicas": r["prefill_replicas"], "prefill_requests_per_s": x_p,
            "decode_replicas": r["decode_replicas"], "decode_requests_per_s": x_d, "pool_ratio": r["pool_ratio"],
            "kv_transfer_bytes": np.broadcast_to(np.asarray(kv_request, dtype=float), np.shape(total)),
            "kv_link_bytes": j["kv_link_bytes"], "kv_link": np.where(on_up, "scale_up", "scale_out"),
            "kv_transfer_s": j["kv_transfer_s"], "total_gpus": total, "ttft_s": j["ttft_s"],
            "tpot_s": tpot_d, "tokens_per_s_per_gpu": j["tokens_per_s_per_gpu"],
            "tokens_per_s_per_user": j["tokens_per_s_per_user"],
            "requests_per_s": r["requests_per_s"], "exact": r["exact"],
            "usd_per_hour": j["usd_per_hour"] if priced else None,
            "usd_per_m_tokens": j["usd_per_m_tokens"] if priced else None}


def usd_per_m_tokens(usd_per_hour, tokens_per_s):
    """Dollars per million output tokens: $/h of every GPU / (tokens/s x 3600) x 1e6 (rules.JOIN's)."""
    return run_arrays(rules.JOIN, {"usd_per_hour": np.asarray(usd_per_hour, dtype=float),
                                   "tokens": np.asarray(tokens_per_s, dtype=float)}, only=("usd_per_m_tokens",))["usd_per_m_tokens"]


# -- one split (archledger disagg) -------------------------------------------------------------------

_DEGREE = re.compile(r"^(tp|ep|dp_attn|pp|cp)(\d+)$")


def parse_pool(text: str, gpus: dict[str, GPU], option: str) -> tuple[GPU, ParallelConfig]:
    """``"H200 tp8-ep8-dp_attn8"`` -> (GPU, config): a GPU name of ``gpus/`` and a config label as
    ``deploy`` prints it (degrees tp, ep, dp_attn, pp, cp joined by ``-``; ``ring`` / ``ulysses`` for
    cp; default tp1). Whole-model replicas (``dp``) are the pool ratio's, not the config's."""
    where = Where("<command line>", field=option)
    parts = str(text).split()
    if len(parts) not in (1, 2):
        raise SpecError(where, f"{text!r} is not 'GPU CONFIG'", f"write e.g. {option} 'H200 tp8-ep8-dp_attn8'")
    try:
        gpu = find_gpu(gpus, parts[0])
    except SpecError as exc:
        raise SpecError(where, exc.problem, exc.hint) from None
    degrees: dict[str, Any] = {}
    for token in (parts[1].split("-") if len(parts) == 2 else []):
        m = _DEGREE.match(token)
        if token in ("ring", "ulysses"):
            degrees["cp_kind"] = token
        elif m and m.group(1) not in degrees and 1 <= int(m.group(2)) <= MAX_GPUS:
            degrees[m.group(1)] = int(m.group(2))
        else:
            raise SpecError(where, f"{token!r} in {text!r} is not a parallel degree",
                            "write degrees as deploy labels them: tp8, ep8, dp_attn8, pp2, cp2 (joined by -); "
                            "pool replicas come from the pool ratio")
    return gpu, ParallelConfig(**degrees)


def disaggregate(ev: Evaluation, prefill: Pool, decode: Pool, input_len: int, output_len: int,
                 options: Options = Options(), fusion: FusionTable | None = None, *,
                 users: int | None = None, rate: float | None = None) -> dict[str, Any]:
    """One split: both pools planned as ``deploy`` plans them (fusion decided at each pool's own
    point), joined by :func:`join`; the decode pool at its steady state of continuous batching
    (``tpot_mean_s``, served when ``fits_steady``), as the sizing search serves it. Returns the :data:`FIELDS` row (``meets_sla`` None: no SLA here)
    plus ``prefill`` and ``decode``, each pool's ``summarize`` fields (fits, capacity, memory)."""
    validate_options(options)
    for option, pool in (("--prefill", prefill), ("--decode", decode)):
        problems = check(ev, pool.config)
        if problems:
            raise SpecError(option_where(option), f"{pool.config.label()} cannot run {ev.model.model_id}: "
                            + "; ".join(problems), "pick degrees that divide the model's heads, experts and layers")
        if pool.config.dp != 1:
            raise SpecError(option_where(option), f"dp = {pool.config.dp} in a pool config",
                            "leave dp out: the pool ratio sets the replicas")
    if not (isinstance(input_len, int) and isinstance(output_len, int) and output_len >= 1):
        raise SpecError(option_where("--output"), f"output {output_len!r}", "a disaggregated request needs >= 1 output token")
    summaries = {}
    for name, pool, out_len in (("prefill", prefill, PREFILL_OUTPUT), ("decode", decode, output_len)):
        scenario = Scenario(batch=pool.batch, input_len=input_len, output_len=out_len)   # checks the bounds
        built = plan(ev, pool.gpu, pool.config, options, fusion, scenario)
        s = summarize_plan(built, scenario.batch, input_len, out_len)
        s.pop("phases")
        s = {k: (v.item() if isinstance(v, np.ndarray) else v) for k, v in s.items()}
        s["kv_share_bytes"] = float(built.structure.kv_device_fn(float(input_len), built.kv_bytes))
        summaries[name] = s
    p, d = summaries["prefill"], summaries["decode"]
    kv_request = float(transfer_bytes(ev, input_len, kv.KV_DTYPE_BYTES[options.kv_dtype]))
    joined = join(prefill.gpu, decode.gpu, n_p=prefill.config.n_gpus, batch_p=prefill.batch, ttft_p=p["ttft_s"],
                  share_p=p["kv_share_bytes"], n_d=decode.config.n_gpus, batch_d=decode.batch,
                  # the decode pool runs continuous batching: its steady TPOT (the output's mean context)
                  tpot_d=d["tpot_mean_s"],
                  share_d=d["kv_share_bytes"], kv_request=kv_request, output_len=output_len, users=users, rate=rate)
    row = {"kind": "disaggregated", "prefill_gpu": prefill.gpu.key, "prefill_config": prefill.config.label(),
           "prefill_n_gpus": prefill.config.n_gpus, "prefill_batch": prefill.batch, "prefill_ttft_s": p["ttft_s"],
           "decode_gpu": decode.gpu.key, "decode_config": decode.config.label(), "decode_n_gpus": decode.config.n_gpus,
           "decode_batch": decode.batch, "meets_sla": None}
    for name in FIELDS:
        if name not in row:
            value = joined[name]
            row[name] = None if value is None else np.asarray(value).item()
    row = {name: row[name] for name in FIELDS}
    row["users_held_exactly"] = bool(np.asarray(joined["exact"]).item())
    row["prefill"], row["decode"] = p, d
    return row


def default_prefill_batch(config: ParallelConfig, input_len: int, prefill_tokens: int) -> int:
    """The whole prompts one chunked-prefill step holds: dp_attn x max(1, floor(budget / input))."""
    return min(MAX_BATCH, config.dp_attn * max(1, (prefill_tokens * config.cp) // input_len))


def check_load(users: int | None, rate: float | None) -> None:
    if users is not None and rate is not None:
        raise SpecError(option_where("--users/--rate"), "both a user count and a request rate",
                        "give one load: --users U (concurrent) or --rate R (requests/s)")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise SpecError(option_where("--rate"), f"{rate!r} is not a positive request rate", "e.g. --rate 10")
