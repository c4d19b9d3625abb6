"""``archledger plan``: the fewest GPUs that serve a model within a TTFT/TPOT SLA, and the front.

Layer: engine.cli (CLI). Searches every legal aggregated config up to ``--max-gpus`` and every
batch up to its capacity (:func:`engine.serving.sizing.search`), and every disaggregated pair of a
prefill pool and a decode pool on the given GPU types (:func:`engine.serving.pairing.disaggregated`;
``--no-disagg`` leaves them out; ``--pairs`` which pairs, default one vendor's GPUs on both sides:
:func:`engine.serving.pairing.pair_allowed`). The text is the answer first: one row per GPU type
(aggregated), the disaggregated answers as a table, the fewest GPUs overall (and the lowest $/M
output tokens where another row has it), then short lines of assumptions; ``--detail`` adds per GPU
type the configs with the fewest GPUs, the Pareto front of tokens/s/GPU vs tokens/s/user and the
answer on each time, and the same per (prefill GPU, decode GPU) pair. ``--json`` prints every field
for machines. Exit status 0 when some config meets the SLA, 1 when none does (one line says so), 2
on bad input.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from engine.cli import units
from engine.cli.deploy import add_mtp_arguments, add_serving_arguments, positive_int, serving_options

#: Front points printed as text (evenly spaced, both ends kept); --json has every one.
FRONT_SHOWN = 12
#: = engine.serving.pairing.PAIR_POLICIES and DEFAULT_PAIRS, written out: the parser stays light (no numpy
#: for --help; tests/test_plan.py checks they agree).
PAIR_POLICIES, DEFAULT_PAIRS = ("same-gpu", "same-vendor", "all"), "same-vendor"


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
    add_serving_arguments(p, prefill_tokens=False)
    add_mtp_arguments(p)
    p.add_argument("--top", type=positive_int, default=5,
                   help="configs with the fewest GPUs listed per GPU type (with --detail)")
    p.add_argument("--no-disagg", action="store_true",
                   help="search aggregated serving only (no disaggregated prefill/decode pairs)")
    p.add_argument("--pairs", choices=PAIR_POLICIES, default=DEFAULT_PAIRS,
                   help="which (prefill GPU, decode GPU) pairs disaggregated serving joins: one GPU type, one "
                        f"vendor (gpus/*.yaml vendor:), or any (default: {DEFAULT_PAIRS}; serving frameworks move "
                        "the KV cache between one vendor's GPUs)")
    p.add_argument("--detail", action="store_true",
                   help="also print, per GPU type and per pair, the configs with the fewest GPUs, the Pareto front "
                        "and the answer on each time (default, for any number of GPU types: the answer tables "
                        "and the assumptions only)")
    p.add_argument("--time", choices=("estimate", "expected", "bound"), default=None,
                   help="the time the answer is on: the schedule estimate, the expected time from measured "
                        "kernels (gpus/measured/), or the lower bound (default: expected where the GPU has "
                        "measured tables, else estimate); the other two are printed beside it")
    p.add_argument("--json", action="store_true", help="machine-readable output (every field, every pair searched)")
    p.set_defaults(func=run)


def _time(seconds: float) -> str:
    return units.seconds(seconds)


def _sla_text(args) -> str:
    load = (f"{args.users} concurrent users" if args.users else f"{args.rate:g} requests/s" if args.rate
            else "one replica")
    return f"TTFT <= {_time(args.ttft)}, TPOT <= {_time(args.tpot)}, load: {load}"


def _usd(r: dict) -> str:
    value = r.get("usd_per_m_tokens")
    return f"{value:>8.3g}" if value is not None else f"{'-':>8s}"


def _table(rows: list[dict], front: bool = False) -> list[str]:
    head = (f"    {'GPUs':>5s}  {'replicas x config':28s} {'batch':>6s} {'TTFT':>9s} {'TPOT':>9s} "
            f"{'tok/s/GPU':>10s} {'tok/s/user':>10s} {'$/M tok':>8s}" + ("  SLA" if front else ""))
    lines = [head]
    for r in rows:
        lines.append(f"    {r['total_gpus'] if not front else r['n_gpus']:>5d}  "
                     f"{(str(r['replicas']) if not front else '1') + ' x ' + r['config']:28s} {r['batch']:>6d} "
                     f"{_time(r['ttft_s']):>9s} {_time(r['tpot_s']):>9s} {r['tokens_per_s_per_gpu']:>10.1f} "
                     f"{r['tokens_per_s_per_user']:>10.1f} {_usd(r)}"
                     + (("  yes" if r["sla_latency"] else "  no") if front else ""))
    return lines


def _split_label(r: dict) -> str:
    return (f"{r['prefill_replicas']} x {r['prefill_gpu']} {r['prefill_config']} b{r['prefill_batch']} + "
            f"{r['decode_replicas']} x {r['decode_gpu']} {r['decode_config']}")


def _disagg_table(rows: list[dict], front: bool = False) -> list[str]:
    head = (f"    {'GPUs':>5s}  {'prefill replicas x config + decode replicas x config':62s} {'batch':>6s} "
            f"{'TTFT':>9s} {'KV xfer':>9s} {'TPOT':>9s} {'tok/s/GPU':>10s} {'tok/s/user':>10s} {'$/M tok':>8s}"
            + ("  SLA" if front else ""))
    lines = [head]
    for r in rows:
        lines.append(f"    {r['total_gpus']:>5d}  {_split_label(r):62s} {r['decode_batch']:>6d} {_time(r['ttft_s']):>9s} "
                     f"{_time(r['kv_transfer_s']):>9s} {_time(r['tpot_s']):>9s} {r['tokens_per_s_per_gpu']:>10.1f} "
                     f"{r['tokens_per_s_per_user']:>10.1f} {_usd(r)}"
                     + (("  yes" if r["sla_latency"] else "  no") if front else ""))
    return lines


def _words(time: str, measured: bool = True) -> str:
    """A time in words; a GPU without measured tables has the expected time of no table."""
    from engine.serving.retime import TIME_WORDS
    return TIME_WORDS[time] if measured or time != "expected" else "expected time (no measured tables: bound / 0.7)"


def _answer_text(r: dict, measured: bool = True) -> str:
    price = f", ${r['usd_per_m_tokens']:.3g}/M tokens" if r.get("usd_per_m_tokens") is not None else ""
    gpus = _gpus(r["total_gpus"])
    if r["kind"] == "disaggregated":
        return (f"{r['prefill_gpu']} -> {r['decode_gpu']}: {gpus} (disaggregated: {_split_label(r)}, decode batch "
                f"{r['decode_batch']}, TTFT {_time(r['ttft_s'])} incl. KV transfer {_time(r['kv_transfer_s'])}, TPOT "
                f"{_time(r['tpot_s'])}, {r['tokens_per_s_per_gpu']:,.0f} tok/s/GPU{price})")
    time = r.get("time", "estimate")
    beside = "".join(f"; {_words(t, measured)} TTFT {_time(v['ttft_s'])}, TPOT {_time(v['tpot_s'])}"
                     for t, v in r.get("times", {}).items() if t != time)
    return (f"{r['gpu']}: {gpus} (aggregated: {r['replicas']} x {r['config']}, batch {r['batch']}, TTFT "
            f"{_time(r['ttft_s'])}, TPOT {_time(r['tpot_s'])} ({_words(time, measured)}; TPOT in the steady state, "
            f"{_time(r['tpot_last_s'])} at the last token){beside}, "
            f"{r['tokens_per_s_per_gpu']:,.0f} tok/s/GPU{price})")


def _answers(res, ev, gpu, options, fusion, args, sla, cache=None) -> tuple[str, bool, dict]:
    """One GPU type's answers on each time (engine.serving.retime): (the time it answers on, whether
    the GPU has measured tables for the framework, time -> its answer row or None). The estimate's
    is the search's own cheapest point; the bound's and the expected time's are read from deploy's
    summary (docs/deployment.md "Sizing on another time")."""
    from engine.deploy.measured import load_measured
    from engine.serving.retime import TIMES, PointReader, answer_on, times_of

    # the checkout's gpus/measured, as deploy reads it (not the installed package's)
    tables = load_measured(Path(args.gpus_root) / "measured", gpu=gpu.key, framework=options.framework)
    measured = any(key[1] == options.framework for key in tables)
    used = args.time or ("expected" if measured else "estimate")
    read = PointReader(ev, gpu, options, fusion, args.input, args.output, tables, cache)
    out = {}
    for time in TIMES:
        if time == "estimate":
            top = res.cheapest(1)
            config = {c.label(): c for c in res.configs}[top[0]["config"]] if top else None
            out[time] = dict(top[0], time=time, times=times_of(read(config, top[0]["batch"]))) if top else None
        else:
            out[time] = answer_on(time, res, read, sla)
    return used, measured, out


def _best(rows: list[dict]) -> dict | None:
    return min(rows, key=lambda r: (r["total_gpus"], -r["tokens_per_s_per_gpu"])) if rows else None


def _gpus(n: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{n} GPU{'s' if n != 1 else ''}"


def _counts(most: int) -> str:
    counts = [1 << i for i in range(most.bit_length())]
    return ", ".join(map(str, counts)) if len(counts) <= 4 else f"1, 2, 4 ... {counts[-1]}"


def _thin(rows: list, n: int) -> list:
    if len(rows) <= n:
        return rows
    step = (len(rows) - 1) / (n - 1)
    return [rows[round(i * step)] for i in range(n)]


def _lowest_usd(rows: list[dict]) -> dict | None:
    """The row of the lowest $/M output tokens (the first on a tie); None when no row has a price."""
    priced = [r for r in rows if r.get("usd_per_m_tokens") is not None]
    return min(priced, key=lambda r: r["usd_per_m_tokens"]) if priced else None


def _split_rows(per_pair: list[dict]) -> list[dict]:
    """The disaggregated rows the answer shows: each GPU type's own pair (prefill and decode on it)
    that meets the SLA, in the GPUs' order, then the pair with the fewest GPUs and the pair of the
    lowest $/M tokens over every pair searched, where another pair has it (--detail shows every pair)."""
    answers = [g["cheapest"][0] for g in per_pair if g["cheapest"]]
    rows = [r for r in answers if r["prefill_gpu"] == r["decode_gpu"]]
    for r in (_best(answers), _lowest_usd(answers)):
        if r is not None and not any(r is q for q in rows):
            rows.append(r)
    return rows


def _where(r: dict) -> str:
    return r["gpu"] if r["kind"] == "aggregated" else f"{r['prefill_gpu']} -> {r['decode_gpu']}"


def _answer_lines(per_gpu: list[dict], split: list[dict], args) -> list[str]:
    """The answer: a table of one row per GPU type (aggregated, on the time it answers on, the lower
    bound's TTFT and TPOT beside), the disaggregated rows, the fewest GPUs overall, and the lowest
    $/M tokens where another row has it. The two last lines name a row of the tables, so their
    words and the columns agree."""
    from engine.serving.retime import TIME_WORDS
    lines = ["aggregated (one pool serves prefill and decode), one row per GPU type:",
             f"  {'GPU':12s} {'GPUs':>4s}  {'replicas x config':24s} {'batch':>5s} {'TTFT':>8s} {'TPOT':>8s} "
             f"{'tok/s/GPU':>9s} {'$/M tok':>8s}  {'on':9s} {'bound: TTFT':>11s} {'TPOT':>8s}"]
    shown = []
    for g in per_gpu:
        r = g["answers"][g["time"]]
        if r is None:
            lines.append(f"  {g['gpu']:12s} {'-':>4s}  none meets the SLA")
            continue
        shown.append(r)
        on = g["time"] + ("*" if g["time"] == "expected" and not g["measured_tables"] else "")
        bound = r["times"]["bound"]
        lines.append(f"  {g['gpu']:12s} {r['total_gpus']:>4d}  {str(r['replicas']) + ' x ' + r['config']:24s} "
                     f"{r['batch']:>5d} {_time(r['ttft_s']):>8s} {_time(r['tpot_s']):>8s} "
                     f"{r['tokens_per_s_per_gpu']:>9,.0f} {_usd(r)}  {on:9s} {_time(bound['ttft_s']):>11s} "
                     f"{_time(bound['tpot_s']):>8s}")
    if any(g["time"] == "expected" and not g["measured_tables"] for g in per_gpu):
        lines.append("  * no measured tables for this GPU: its expected time is the bound / 0.7")
    if not args.no_disagg:
        lines += ["", f"disaggregated (a prefill pool -> a decode pool; pairs: {args.pairs}; on the "
                  f"{TIME_WORDS['estimate']}; TTFT includes the KV transfer):"]
        if split:
            lines.append(f"  {'prefill -> decode':26s} {'GPUs':>4s}  {'prefill x config b batch + decode x config':48s} "
                         f"{'batch':>5s} {'TTFT':>8s} {'KV xfer':>8s} {'TPOT':>8s} {'tok/s/GPU':>9s} {'$/M tok':>8s}")
        for r in split:
            pools = (f"{r['prefill_replicas']} x {r['prefill_config']} b{r['prefill_batch']} + "
                     f"{r['decode_replicas']} x {r['decode_config']}")
            lines.append(f"  {_where(r):26s} {r['total_gpus']:>4d}  {pools:48s} {r['decode_batch']:>5d} "
                         f"{_time(r['ttft_s']):>8s} {_time(r['kv_transfer_s']):>8s} {_time(r['tpot_s']):>8s} "
                         f"{r['tokens_per_s_per_gpu']:>9,.0f} {_usd(r)}")
        own = {r["decode_gpu"] for r in split if r["prefill_gpu"] == r["decode_gpu"]}
        missing = [g["gpu"] for g in per_gpu if g["gpu"] not in own]
        if not split:
            lines.append("  no split meets the SLA")
        elif missing:
            lines.append(f"  (no split within one GPU type meets the SLA on {', '.join(missing)})")
    rows = shown + split
    lines.append("")
    best = _best(rows)
    lines.append(f"fewest GPUs overall (then the most tok/s/GPU): {_where(best)}, {best['kind']}, {_gpus(best['total_gpus'])}"
                 + (f" (${best['usd_per_m_tokens']:.3g}/M tokens)" if best.get("usd_per_m_tokens") is not None else ""))
    low = _lowest_usd(rows)
    if low is not None and low is not best and low["usd_per_m_tokens"] < (best.get("usd_per_m_tokens") or math.inf):
        lines.append(f"lowest $/M tokens: {_where(low)}, {low['kind']}, ${low['usd_per_m_tokens']:.3g}/M tokens "
                     f"on {_gpus(low['total_gpus'])}")
    return lines


def _assumptions(args, options, gpus: list) -> list[str]:
    """Short lines: what the numbers assume (framework, dtypes, the search, batch, TPOT, times, prices)."""
    from engine.serving.retime import TIME_WORDS
    priced = [g for g in gpus if g.price_usd_per_hour is not None]
    lines = ["assumptions:",
             f"  framework {args.framework}; weights {args.weight_format}, KV {args.kv_dtype}, activations {args.act_dtype}"
             + (f"; MTP {options.mtp_tokens} draft token(s) at acceptance {options.mtp_acceptance:g}"
                if options.mtp_tokens else ""),
             f"  searched: replicas of {_counts(args.max_gpus)} GPU{'s' if args.max_gpus > 1 else ''} (legal "
             "TP/EP/DP-attention/PP), every batch up to the steady-state capacity; "
             + ("aggregated only" if args.no_disagg else "aggregated and disaggregated"),
             "  batch: requests per replica in the steady state of continuous batching (each request's mean paged KV",
             "         plus the admission headroom)",
             "  TPOT: the decode step at the output's mean context, the mean a request sees (deploy's tpot_mean_s;",
             "        tpot_last_s in --json: at the last token)",
             "  on: the time an answer is on: " + (f"--time {args.time}" if args.time else
                                                   "expected (measured kernels) where gpus/measured/ has the GPU's"),
             *([] if args.time else ["      kernel tables for the framework, else the schedule estimate "
                                     "(--time estimate|expected|bound)"]),
             "  bound: the lower bound of the same point"]
    if not args.no_disagg:
        lines.append(f"  disaggregated: on the {TIME_WORDS['estimate']} alone; pairs: {args.pairs} "
                     "(--pairs same-gpu|same-vendor|all)")
    lines.append("  $/M output tokens = GPUs x $/h / (tokens/s x 3600) x 1e6"
                 + ("" if len(priced) == len(gpus) else "; '-': the GPU has no price in gpus/"))
    lines += [f"  price {g.key}: ${g.price_usd_per_hour:g}/h ({g.price_src.split(';')[0]})" for g in priced] \
        or ["  no GPU here has a price"]
    if not args.detail:
        lines.append("  --detail: per GPU type and pair the configs with the fewest GPUs, the Pareto front, each time's answer")
    return lines


def run(args: argparse.Namespace) -> int:
    from engine.serving.steady import FRONT_BASIS   # polars: never on --help (tests/test_cli_fast.py)
    from engine.language.api import evaluate_one
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.serving.retime import TIME_WORDS, TIMES
    from engine.serving.sizing import SLA, search
    from engine.serving.pairing import disaggregated
    from engine.deploy.structure_cache import StructureCache

    sla = SLA(args.ttft, args.tpot, users=args.users, rate=args.rate)
    all_gpus = load_gpus(args.gpus_root)
    gpus = [find_gpu(all_gpus, name) for name in args.gpu] if args.gpu else [all_gpus[k] for k in sorted(all_gpus)]
    gpus = list({g.key: g for g in gpus}.values())
    options, fusion = serving_options(args)
    ev = evaluate_one(args.model, args.corpus)
    # one structure cache for the search and the answers on the other times (their plans are its structures)
    cache = StructureCache(ev, {options.framework: fusion} if fusion is not None else {})
    results = search(ev, gpus, args.input, args.output, sla, max_gpus=args.max_gpus, options=options,
                     fusion=fusion, pools=not args.no_disagg, cache=cache)
    per_gpu = []
    for res in results:
        front = res.front()
        for row in front:   # the latency half of the SLA (the load half needs replicas, see cheapest)
            row["sla_latency"] = row["ttft_s"] <= sla.ttft_s and row["tpot_s"] <= sla.tpot_s
        cheapest = res.cheapest(args.top)
        # this GPU type's answer on each time; it answers on --time (default: expected where measured)
        used, measured, by_time = _answers(res, ev, next(g for g in gpus if g.key == res.gpu), options, fusion,
                                           args, sla, cache)
        per_gpu.append({"gpu": res.gpu, "time": used, "measured_tables": measured, "configs": len(res.configs),
                        "configs_not_fitting": res.rejected, "points": int(len(res.points.get("batch", ()))),
                        "cheapest": cheapest, "front": front, "answers": by_time})
    per_pair = []
    if not args.no_disagg:
        for pair in disaggregated(ev, results, gpus, args.input, args.output, sla, options, pairs=args.pairs):
            front = pair.front()
            for row in front:   # every disaggregated point is within TTFT (module doc of pairing.disaggregated)
                row["sla_latency"] = row["ttft_s"] <= sla.ttft_s and row["tpot_s"] <= sla.tpot_s
            per_pair.append({"prefill_gpu": pair.prefill_gpu, "decode_gpu": pair.decode_gpu,
                             "points": int(len(pair.points.get("ttft_s", ()))), "cheapest": pair.cheapest(args.top),
                             "front": front})
    answers = [g["answers"][g["time"]] for g in per_gpu if g["answers"][g["time"]]]
    split_answers = [g["cheapest"][0] for g in per_pair if g["cheapest"]]
    answer, split_answer = _best(answers), _best(split_answers)
    long = args.input + args.output > int(ev.numeric.max_context)
    if args.json:
        out = {"model_id": ev.model.model_id, "input_len": args.input, "output_len": args.output,
               "sla": {"ttft_s": sla.ttft_s, "tpot_s": sla.tpot_s, "users": sla.users, "rate_rps": sla.rate},
               "framework": args.framework, "kv_dtype": args.kv_dtype, "act_dtype": args.act_dtype,
               "weight_format": args.weight_format, "max_gpus": args.max_gpus,
               "extrapolated": long, "time": args.time or "default",
               "pairs": None if args.no_disagg else args.pairs, **({"mtp_tokens": options.mtp_tokens, "mtp_acceptance": options.mtp_acceptance}
                                        if options.mtp_tokens else {}),
               "front_basis": FRONT_BASIS, "gpus": per_gpu, "answer": answer,
               "disaggregated": per_pair, "answer_disaggregated": split_answer,
               "prices": {g.key: {"usd_per_hour": g.price_usd_per_hour, "src": g.price_src}
                          for g in gpus if g.price_usd_per_hour is not None}}
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0 if answer or split_answer else 1
    names = ", ".join(g["gpu"] for g in per_gpu)
    if not answer and not split_answer:
        best = [(g["gpu"], min(r["ttft_s"] for r in g["front"]), min(r["tpot_s"] for r in g["front"]))
                for g in per_gpu if g["front"]]
        reach = "; ".join(f"{n} best TTFT {_time(a)}, best TPOT {_time(b)}" for n, a, b in best) or \
            f"the weights and one request's KV fit no config of up to {args.max_gpus} GPUs: raise --max-gpus"
        kinds = "aggregated or disaggregated" if not args.no_disagg else "aggregated"
        print(f"no config of {ev.model.model_id} on {names} ({kinds}, up to {args.max_gpus} GPUs per replica) meets "
              f"{_sla_text(args)} at input {args.input}, output {args.output} ({reach})")
        return 1
    print(f"{ev.model.model_id}: input {args.input}, output {args.output} tokens; {_sla_text(args)}"
          + ("  [EXTRAPOLATED: context beyond the model's max_context]" if long else ""))
    rows = _split_rows(per_pair)
    print("\n" + "\n".join(_answer_lines(per_gpu, rows, args)))
    print("\n" + "\n".join(_assumptions(args, options, gpus)))
    if not args.detail:
        return 0
    for g in per_gpu:
        print(f"\n{g['gpu']} aggregated: {g['configs']} configs served, {g['configs_not_fitting']} that fit no "
              f"request, {g['points']:,} (config, batch) points")
        if g["cheapest"]:
            print("  fewest GPUs that meet the SLA (then the most tokens/s/GPU; not the lowest $/M tokens):")
            print("\n".join(_table(g["cheapest"])))
        else:
            print("  no config meets the SLA")
        if g["front"]:
            shown = _thin(g["front"], FRONT_SHOWN)
            print(f"  Pareto front, tokens/s/GPU vs tokens/s/user ({len(g['front'])} points"
                  + (f", {len(shown)} shown; --json for all" if len(shown) < len(g["front"]) else "")
                  + "; SLA = within TTFT and TPOT):")
            print("\n".join(_table(shown, front=True)))
    for g in per_pair:
        same = g["prefill_gpu"] == g["decode_gpu"]
        print(f"\n{g['prefill_gpu']} prefill -> {g['decode_gpu']} decode, disaggregated: {g['points']:,} points "
              "(decode point + the prefill pool that meets TTFT with the fewest GPUs)")
        if g["cheapest"]:
            print("  fewest GPUs that meet the SLA (then the most tokens/s/GPU); batch = decode batch:")
            print("\n".join(_disagg_table(g["cheapest"][:args.top if same else 1])))
        else:
            print("  no split meets the SLA")
        if g["front"] and same:
            shown = _thin(g["front"], FRONT_SHOWN // 2)
            print(f"  Pareto front ({len(g['front'])} points, {len(shown)} shown; --json for all):")
            print("\n".join(_disagg_table(shown, front=True)))
    if any(g["front"] for g in per_gpu) or any(g["front"] for g in per_pair):
        print("\n" + FRONT_BASIS)
    print("\n" + _times_text(args, per_gpu))
    print("answer, aggregated, on each time:")
    for g in per_gpu:
        r = g["answers"][g["time"]]
        print("  " + (_answer_text(r, g["measured_tables"]) if r else f"{g['gpu']}: none meets the SLA"))
    for time in TIMES:       # the answer each other time gives, beside it (GPU types answering on another)
        for g in per_gpu:
            if g["time"] != time:
                r = g["answers"][time]
                print(f"  {g['gpu']} on the {TIME_WORDS[time]} instead: "
                      + (_gpus(r["total_gpus"]) + f" ({r['replicas']} x {r['config']}, batch {r['batch']}, "
                         f"TTFT {_time(r['ttft_s'])}, TPOT {_time(r['tpot_s'])})" if r else "none meets the SLA")
                      + ("" if g["measured_tables"] or time != "expected" else " (no measured tables: bound / 0.7)"))
    if not args.no_disagg:
        print("answer, disaggregated: " + (_answer_text(split_answer) if split_answer else "none meets the SLA"))
    return 0


def _times_text(args, per_gpu: list[dict]) -> str:
    """One line: which time the answers use, per GPU type where it differs (the default)."""
    from engine.serving.retime import TIME_WORDS
    used = {g["gpu"]: g["time"] for g in per_gpu}
    if args.time:
        head = f"answers on the {TIME_WORDS[args.time]} (--time {args.time})"
    else:
        head = "answers on the " + "; ".join(
            f"{TIME_WORDS[t]} for {', '.join(n for n, u in used.items() if u == t)}"
            for t in dict.fromkeys(used.values())) + " (default: expected where gpus/measured/ has the GPU's " \
            "kernel tables for the framework, else the estimate; --time estimate|expected|bound)"
    return head + "; the tables above are the search's, on the schedule estimate"
