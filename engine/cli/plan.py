"""``archledger plan``: the fewest GPUs that serve a model within a TTFT/TPOT SLA, and the front.

Layer: engine.cli (CLI). Searches every legal aggregated config up to ``--max-gpus`` and every
batch up to its capacity (:func:`engine.deploy.sizing.search`), prints per GPU type the cheapest
configs that meet the SLA and the Pareto front of tokens/s/GPU vs tokens/s/user; ``--json`` prints
the same for machines. Exit status 0 when some config meets the SLA, 1 when none does (one line
says so), 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from engine.cli import units
from engine.cli.deploy import add_mtp_arguments, mtp_options, positive_int
from engine.spec.errors import SpecError, Where

#: Front points printed as text (evenly spaced, both ends kept); --json has every one.
FRONT_SHOWN = 12


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (seconds, requests/s)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


def add_parser(sub, parents=()) -> None:
    p = sub.add_parser("plan", parents=list(parents), help="fewest GPUs that meet a TTFT/TPOT SLA, and the "
                       "tokens/s/GPU vs tokens/s/user front", description=__doc__.splitlines()[0])
    p.add_argument("model", help="HF id or a unique suffix, e.g. DeepSeek-V3")
    p.add_argument("--input", type=positive_int, required=True, help="prompt tokens per request (required)")
    p.add_argument("--output", type=positive_int, required=True, help="generated tokens per request (required)")
    p.add_argument("--gpu", action="append", default=None,
                   help="GPU name from gpus/ (repeat for several; default: every GPU of gpus/)")
    p.add_argument("--ttft", type=positive_float, required=True, help="time to first token bound, seconds (required)")
    p.add_argument("--tpot", type=positive_float, required=True,
                   help="time per output token bound, seconds (required; 0.05 = 20 tokens/s/user)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", type=positive_float, default=None,
                      help="requests/s to sustain (replicas added; default: one replica)")
    load.add_argument("--users", type=positive_int, default=None,
                      help="concurrent users to hold (replicas added; default: one replica)")
    p.add_argument("--max-gpus", type=positive_int, default=8,
                   help="largest model replica searched (GPU counts 1, 2, 4 ... up to it)")
    p.add_argument("--framework", default="vllm", help="fusion table of corpus/fusion/ (vllm, sglang) or none")
    p.add_argument("--kv-dtype", default="bf16", help="KV cache dtype (bf16, fp8)")
    p.add_argument("--act-dtype", default="bf16", help="activation dtype (bf16, fp8)")
    p.add_argument("--weight-format", default="checkpoint", help="checkpoint, or a quant scheme for every matrix")
    p.add_argument("--hbm-fraction", type=float, default=0.9,  # = structure.HBM_FRACTION (the parser stays light)
                   help="usable share of HBM")
    add_mtp_arguments(p)
    p.add_argument("--top", type=positive_int, default=5, help="cheapest configs listed per GPU type")
    p.add_argument("--json", action="store_true", help="machine-readable output (same fields)")
    p.set_defaults(func=run)


def _time(seconds: float) -> str:
    return units.seconds(seconds)


def _sla_text(args) -> str:
    load = (f"{args.users} concurrent users" if args.users else f"{args.rate:g} requests/s" if args.rate
            else "one replica")
    return f"TTFT <= {_time(args.ttft)}, TPOT <= {_time(args.tpot)}, load: {load}"


def _table(rows: list[dict], front: bool = False) -> list[str]:
    head = (f"    {'GPUs':>5s}  {'replicas x config':28s} {'batch':>6s} {'TTFT':>9s} {'TPOT':>9s} "
            f"{'tok/s/GPU':>10s} {'tok/s/user':>10s}" + ("  SLA" if front else ""))
    lines = [head]
    for r in rows:
        lines.append(f"    {r['total_gpus'] if not front else r['n_gpus']:>5d}  "
                     f"{(str(r['replicas']) if not front else '1') + ' x ' + r['config']:28s} {r['batch']:>6d} "
                     f"{_time(r['ttft_s']):>9s} {_time(r['tpot_s']):>9s} {r['tokens_per_s_per_gpu']:>10.1f} "
                     f"{r['tokens_per_s_per_user']:>10.1f}" + (("  yes" if r["sla_latency"] else "  no") if front else ""))
    return lines


def _counts(most: int) -> str:
    counts = [1 << i for i in range(most.bit_length())]
    return ", ".join(map(str, counts)) if len(counts) <= 4 else f"1, 2, 4 ... {counts[-1]}"


def _thin(rows: list, n: int) -> list:
    if len(rows) <= n:
        return rows
    step = (len(rows) - 1) / (n - 1)
    return [rows[round(i * step)] for i in range(n)]


def run(args: argparse.Namespace) -> int:
    from engine.spec.api import evaluate
    from engine.deploy import Options
    from engine.deploy.fusion import load_tables
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.deploy.sizing import SLA, search

    sla = SLA(args.ttft, args.tpot, users=args.users, rate=args.rate)
    all_gpus = load_gpus(args.gpus_root)
    gpus = [find_gpu(all_gpus, name) for name in args.gpu] if args.gpu else [all_gpus[k] for k in sorted(all_gpus)]
    gpus = list({g.key: g for g in gpus}.values())
    tables = load_tables(Path(args.corpus) / "fusion")
    if args.framework != "none" and args.framework not in tables:
        raise SpecError(Where("<command line>", field="--framework"), f"unknown framework {args.framework!r}",
                        "use none or one of: " + ", ".join(sorted(tables)))
    ev = evaluate(args.model, args.corpus)
    options = Options(framework=args.framework, kv_dtype=args.kv_dtype, act_dtype=args.act_dtype,
                      weight_format=args.weight_format, hbm_fraction=args.hbm_fraction, **mtp_options(args))
    results = search(ev, gpus, args.input, args.output, sla, max_gpus=args.max_gpus, options=options,
                     fusion=tables.get(args.framework))
    per_gpu = []
    for res in results:
        front = res.front()
        for row in front:   # the latency half of the SLA (the load half needs replicas, see cheapest)
            row["sla_latency"] = row["ttft_s"] <= sla.ttft_s and row["tpot_s"] <= sla.tpot_s
        per_gpu.append({"gpu": res.gpu, "configs": len(res.configs), "configs_not_fitting": res.rejected,
                        "points": int(len(res.points.get("batch", ()))), "cheapest": res.cheapest(args.top),
                        "front": front})
    answers = [g["cheapest"][0] for g in per_gpu if g["cheapest"]]
    long = args.input + args.output > int(ev.numeric.max_context)
    if args.json:
        out = {"model_id": ev.model.model_id, "input_len": args.input, "output_len": args.output,
               "sla": {"ttft_s": sla.ttft_s, "tpot_s": sla.tpot_s, "users": sla.users, "rate_rps": sla.rate},
               "framework": args.framework, "kv_dtype": args.kv_dtype, "act_dtype": args.act_dtype,
               "weight_format": args.weight_format, "max_gpus": args.max_gpus,
               "extrapolated": long, **({"mtp_tokens": options.mtp_tokens, "mtp_acceptance": options.mtp_acceptance}
                                        if options.mtp_tokens else {}), "gpus": per_gpu,
               "answer": min(answers, key=lambda r: (r["total_gpus"], -r["tokens_per_s_per_gpu"])) if answers else None}
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0 if answers else 1
    names = ", ".join(g["gpu"] for g in per_gpu)
    if not answers:
        best = [(g["gpu"], min(r["ttft_s"] for r in g["front"]), min(r["tpot_s"] for r in g["front"]))
                for g in per_gpu if g["front"]]
        reach = "; ".join(f"{n} best TTFT {_time(a)}, best TPOT {_time(b)}" for n, a, b in best) or \
            f"the weights and one request's KV fit no config of up to {args.max_gpus} GPUs: raise --max-gpus"
        print(f"no config of {ev.model.model_id} on {names} (up to {args.max_gpus} GPUs per replica) meets "
              f"{_sla_text(args)} at input {args.input}, output {args.output} ({reach})")
        return 1
    print(f"{ev.model.model_id}: input {args.input}, output {args.output} tokens; {_sla_text(args)}")
    print(f"  framework {args.framework}, weights {args.weight_format}, KV {args.kv_dtype}, activations "
          f"{args.act_dtype}"
          + (f", MTP {options.mtp_tokens} draft token(s) at acceptance {options.mtp_acceptance:g}"
             if options.mtp_tokens else "")
          + f"; aggregated configs of {_counts(args.max_gpus)} GPUs "
          "(legal TP/EP/DP-attention/PP), every batch up to capacity"
          + ("  [EXTRAPOLATED: context beyond the model's max_context]" if long else ""))
    for g in per_gpu:
        print(f"\n{g['gpu']}: {g['configs']} configs served, {g['configs_not_fitting']} that fit no request, "
              f"{g['points']:,} (config, batch) points")
        if g["cheapest"]:
            print("  cheapest that meet the SLA (fewest GPUs, then tokens/s/GPU):")
            print("\n".join(_table(g["cheapest"])))
        else:
            print("  no config meets the SLA")
        if g["front"]:
            shown = _thin(g["front"], FRONT_SHOWN)
            print(f"  Pareto front, tokens/s/GPU vs tokens/s/user ({len(g['front'])} points"
                  + (f", {len(shown)} shown; --json for all" if len(shown) < len(g["front"]) else "")
                  + "; SLA = within TTFT and TPOT):")
            print("\n".join(_table(shown, front=True)))
    print("\nanswer: " + "; ".join(f"{r['gpu']}: {r['total_gpus']} GPU{'s' if r['total_gpus'] > 1 else ''} ({r['replicas']} x {r['config']}, batch "
                                   f"{r['batch']}, TTFT {_time(r['ttft_s'])}, TPOT {_time(r['tpot_s'])}, "
                                   f"{r['tokens_per_s_per_gpu']:,.0f} tok/s/GPU)" for r in answers))
    return 0
