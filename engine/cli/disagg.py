"""``archledger disagg``: one disaggregated prefill/decode split, its KV transfer and its pool ratio.

Layer: engine.cli (CLI). Plans the prefill pool and the decode pool as ``archledger deploy`` plans
them (:func:`engine.serving.disagg.disaggregate`), prints each pool, the KV transfer per request, the
pool ratio with the replicas it rounds to, and the split's TTFT, TPOT, GPUs, throughput and price;
``--json`` prints the same fields (docs/deployment.md, "Disaggregated prefill/decode").
"""
from __future__ import annotations

import argparse
import json
import sys

from engine.cli import units
from engine.cli.deploy import add_serving_arguments, positive_int, serving_options
from engine.cli.plan import positive_float


def add_parser(sub, parents=()) -> None:
    p = sub.add_parser("disagg", parents=list(parents), help="a disaggregated prefill/decode split: KV transfer, "
                       "pool ratio, TTFT/TPOT and GPUs", description=__doc__.splitlines()[0])
    p.add_argument("model", help="HF id or a unique suffix, e.g. DeepSeek-V3")
    p.add_argument("--prefill", required=True, metavar="'GPU CONFIG'",
                   help="prefill pool replica, a GPU of gpus/ and a config as deploy labels it, e.g. 'H200 tp8' (required)")
    p.add_argument("--decode", required=True, metavar="'GPU CONFIG'",
                   help="decode pool replica, e.g. 'H200 tp8-ep8-dp_attn8' (required)")
    p.add_argument("--batch", type=positive_int, required=True, help="requests one decode replica holds (required)")
    p.add_argument("--prefill-batch", type=positive_int, default=None,
                   help="prompts one prefill replica prefills at once (default: the whole prompts one chunked-prefill "
                        "step holds, dp_attn x max(1, prefill_tokens // input))")
    p.add_argument("--input", type=positive_int, required=True, help="prompt tokens per request (required)")
    p.add_argument("--output", type=positive_int, required=True, help="generated tokens per request (required)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", type=positive_float, default=None, help="requests/s to sustain (default: one decode replica)")
    load.add_argument("--users", type=positive_int, default=None, help="concurrent users to hold (default: one decode replica)")
    add_serving_arguments(p, kv_note=", both pools")
    p.add_argument("--json", action="store_true", help="machine-readable output (same fields)")
    p.set_defaults(func=run)


def split_from_args(args) -> dict:
    from engine.language.api import evaluate_one
    from engine.serving.disagg import Pool, check_load, default_prefill_batch, disaggregate, parse_pool
    from engine.deploy.hardware import load_gpus

    check_load(args.users, args.rate)
    gpus = load_gpus(args.gpus_root)
    prefill_gpu, prefill_config = parse_pool(args.prefill, gpus, "--prefill")
    decode_gpu, decode_config = parse_pool(args.decode, gpus, "--decode")
    options, fusion = serving_options(args)
    ev = evaluate_one(args.model, args.corpus)
    batch_p = args.prefill_batch or default_prefill_batch(prefill_config, args.input, args.prefill_tokens)
    return disaggregate(ev, Pool(prefill_gpu, prefill_config, batch_p), Pool(decode_gpu, decode_config, args.batch),
                        args.input, args.output, options, fusion, users=args.users, rate=args.rate)


def _fit(s: dict, steady: bool = False) -> str:
    """The pool's fit: the prefill pool holds every prompt at once (its worst case); the decode pool
    runs continuous batching (``steady``: its steady-state capacity, the worst case beside it)."""
    fits, cap = (s["fits_steady"], s["max_concurrent_requests_steady"]) if steady else \
        (s["fits"], s["max_concurrent_requests"])
    worst = f"; every request at its last token: {s['max_concurrent_requests']:,}" if steady else ""
    what = "steady-state capacity" if steady else "capacity"
    if fits:
        return f"fits ({what} {cap:,}{worst})"
    return f"DOES NOT FIT: batch {s['batch']} > {what} {cap:,}{worst}"


def run(args: argparse.Namespace) -> int:
    r = split_from_args(args)
    if args.json:
        json.dump(r, sys.stdout, indent=1, default=float)
        print()
        return 0
    p, d = r["prefill"], r["decode"]
    t, b = units.seconds, lambda x: units.si(x, "B")
    print(f"{p['model_id']} disaggregated: input {args.input}, output {args.output} tokens; framework "
          f"{args.framework}, weights {args.weight_format}, KV {args.kv_dtype}"
          + ("  [EXTRAPOLATED: context beyond the model's max_context]" if d["extrapolated"] else ""))
    print(f"  prefill pool: {r['prefill_replicas']} x ({r['prefill_n_gpus']} {r['prefill_gpu']}, {r['prefill_config']}), "
          f"batch {r['prefill_batch']}: TTFT {t(r['prefill_ttft_s'])}, {r['prefill_requests_per_s']:.3g} requests/s "
          f"per replica (batch / TTFT); {_fit(p)}")
    print(f"  decode pool:  {r['decode_replicas']} x ({r['decode_n_gpus']} {r['decode_gpu']}, {r['decode_config']}), "
          f"batch {r['decode_batch']}: TPOT {t(r['tpot_s'])}, {r['decode_requests_per_s']:.3g} requests/s per replica "
          f"(batch / (output x TPOT), TPOT in the steady state); {_fit(d, steady=True)}")
    print(f"  KV per request {b(r['kv_transfer_bytes'])} (every cache at the prompt length); busiest link "
          f"{b(r['kv_link_bytes'])} per GPU (prefill GPU holds {b(p['kv_share_bytes'])}, decode GPU "
          f"{b(d['kv_share_bytes'])}) over {r['kv_link'].replace('_', '-')}: {t(r['kv_transfer_s'])}")
    print(f"  pool ratio {r['pool_ratio']:.3g} prefill replicas per decode replica (decode / prefill requests/s) -> "
          f"{r['prefill_replicas']} prefill + {r['decode_replicas']} decode replicas (prefill rounded up) = "
          f"{r['total_gpus']} GPUs")
    price = (f"; ${r['usd_per_hour']:,.2f}/h, ${r['usd_per_m_tokens']:,.3g} per M output tokens"
             if r["usd_per_m_tokens"] is not None else "; no $/M tokens (a GPU file gives no price)")
    print(f"  TTFT {t(r['ttft_s'])} (prefill {t(r['prefill_ttft_s'])} + transfer {t(r['kv_transfer_s'])}), "
          f"TPOT {t(r['tpot_s'])}; {r['requests_per_s']:.3g} requests/s, {r['tokens_per_s_per_gpu']:,.1f} tok/s/GPU, "
          f"{r['tokens_per_s_per_user']:,.1f} tok/s/user" + price)
    if args.users and not r["users_held_exactly"]:
        print(f"  note: {args.users} users over {r['decode_replicas']} decode replicas is not {args.batch} per replica")
    return 0 if p["fits"] and d["fits_steady"] else 1
