"""The published points of benchmarks/published.py through AIConfigurator's silicon mode, beside ArchLedger's expected time.

Run from the repo root: ``python benchmarks/aiconfigurator_silicon.py [--only ID]``. Needs the pip
package ``aiconfigurator`` (0.12.0 measured) and its ``aiconfigurator-core``; it runs offline (model
configs and the measured kernel database ship inside the packages); without them the script says
so and exits 0. A benchmark, never a test dependency: it prints, it asserts nothing.

Each point of ``benchmarks/data/published.yaml`` is evaluated as benchmarks/published.py does
(``engine.deploy.plan(...).at(scenario)``: the batch per replica, its capacity for an ``output``
point, and the expected throughput from measured kernels), then run through
``cli_estimate(mode="static", database_mode="SILICON")`` at the same model (the corpus model's HF
id), system (``h100_sxm``, ``h200_sxm``, ``b200_sxm``), backend (the framework that measured:
``trtllm`` for the TensorRT-LLM perf-overview rows, which ArchLedger evaluates under its own
TensorRT-LLM fusion and kernel tables, ``framework: trtllm``),
degrees (tp, pp, attention DP; MoE: moe_tp = tp / ep, moe_ep = ep), quantization (the point's
weight format and KV dtype where given, else AIConfigurator's own inference from the checkpoint;
the perf-overview's ModelOpt FP8 rows at AIConfigurator's per-tensor ``fp8``, :func:`quant`)
and batch (a point under a harness, the perf-overview rows under trtllm-bench: each wave of its run
at that wave's batch, the waves' times summed as published.py sums ArchLedger's, :func:`aic_run`): ``batch_size`` = ArchLedger's batch per replica / attention-DP degree (AIConfigurator's
batch is per attention-DP rank). Static batching: one prefill of the batch, then the decode steps;
its TPOT is the mean decode step over the generation (ArchLedger's ``tpot_mean_expected_s`` for an
``output`` point). A ``prefill`` point's output length and a ``decode`` point's are raised to 2
(the static run needs a decode step); the metric reads only TTFT or only TPOT. The same metric
formula as published.py turns AIConfigurator's TTFT and TPOT into tokens/s per GPU.

A point AIConfigurator cannot run (a system without data, a model it does not know, a split it
refuses, out of memory) is listed with its reason and left out of the "both cover" counts.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import published  # noqa: E402  (benchmarks/published.py: the points and ArchLedger's side)
from aiconfigurator_compare import _quiet, offline_aic  # noqa: E402  (the SOL comparison's helpers)

#: ArchLedger GPU -> AIConfigurator system.
SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm"}
#: ArchLedger weight format -> AIConfigurator GEMM / MoE quant mode (absent: its own inference).
QUANT = {"bf16": "bfloat16", "fp8": "fp8", "fp8_block128": "fp8_block"}
KV = {"bf16": "bfloat16", "fp8": "fp8"}


def backend(point) -> str:
    """The AIConfigurator backend of a point: the framework that made the measurement (a
    TensorRT-LLM perf-overview row runs AIConfigurator's ``trtllm`` tables, as ArchLedger's
    ``framework: trtllm`` reads the same tables, imported), else the point's framework."""
    return "trtllm" if point.source.startswith("trtllm") else point.framework


def quant(point, fmt: str) -> str:
    """AIConfigurator's GEMM / MoE quant mode for the point's weight format. The TensorRT-LLM
    perf-overview rows ran ModelOpt FP8 checkpoints (per-tensor scales; the header of
    benchmarks/data/published.yaml), evaluated by ArchLedger as ``fp8_block128`` weights whose FP8
    lookup reads the per-tensor tables first (engine.deploy.measured ``_tables_for``): AIConfigurator
    runs the same per-tensor ``fp8`` tables there, not its ``fp8_block`` ones (a 128-block
    checkpoint's kernels)."""
    if fmt == "fp8_block128" and point.source.startswith("trtllm"):
        return "fp8"
    return QUANT[fmt]


def aic_times(point, model_id: str, batch: int, moe: bool) -> tuple[float, float, bool] | str:
    """AIConfigurator's silicon (TTFT s, TPOT s, whether it reports the point out of memory) at
    the point, or the reason it has no times. Its static run holds every prompt's activations at
    once, so at an ``output`` point's capacity it often reports out of memory; its times are still
    its kernels' and are compared (the row is marked)."""
    from aiconfigurator.cli.api import cli_estimate
    system = SYSTEMS.get(point.gpu)
    if system is None:
        return f"no AIConfigurator system for {point.gpu}"
    e = point.evaluated
    if e["cp"] > 1:
        return "context parallelism"
    # AIConfigurator's tp_size is attention's TP within one attention-DP rank (tp x attention_dp =
    # the GPUs of a replica); ArchLedger's tp is the replica's GPUs per stage, dp_attn of them DP
    kwargs = {"tp_size": e["tp"] // e["dp_attn"], "pp_size": e["pp"], "attention_dp_size": e["dp_attn"]}
    if moe:
        kwargs.update(moe_tp_size=e["tp"] // e["ep"], moe_ep_size=e["ep"])
    fmt, kv = point.options.get("weight_format"), point.options.get("kv_dtype")
    if fmt in QUANT:
        kwargs["gemm_quant_mode"] = kwargs["moe_quant_mode"] = quant(point, fmt)
        if not moe:
            del kwargs["moe_quant_mode"]
    if kv in KV:
        kwargs["kvcache_quant_mode"] = KV[kv]
    per_rank = max(1, batch // e["dp_attn"])
    try:
        r = _quiet(cli_estimate, model_id, system, mode="static", backend_name=backend(point),
                   database_mode="SILICON", isl=point.input_len, osl=max(point.output_len, 2),
                   batch_size=per_rank, **kwargs)
    except Exception as exc:            # noqa: BLE001  (a benchmark: any refusal is a reason, printed)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:90] if str(exc) else ''}"
    return r.ttft / 1e3, r.tpot / 1e3, bool(getattr(r.summary, "_is_oom", False))


def aic_run(point, model_id: str, row: dict, moe: bool) -> tuple[float, bool] | str:
    """AIConfigurator's tokens/s per GPU at the point (and whether it reported out of memory), or
    the reason it has none: at ArchLedger's batch, or for a point under a harness (published.py
    ``harness_run``: the run's waves of requests) at each wave's batch, the waves' times summed as
    ArchLedger's expected sums them (each wave its TTFT plus output_len decode steps)."""
    e = point.evaluated
    replica = e["tp"] * e["pp"] * e["cp"]
    run = row.get("harness")
    batches = run["waves"] if run else [row["batch"]]
    seconds, oom = 0.0, False
    for batch in sorted(set(batches)):
        got = aic_times(point, model_id, batch, moe)
        if isinstance(got, str):
            return got
        ttft, tpot, low = got
        if point.metric != "output":
            summary = {"n_gpus": replica, "dp": 1, "batch": batch, "ttft": ttft, "tpot": tpot}
            return published.throughput(point, summary, "ttft", "tpot"), low
        seconds += batches.count(batch) * (ttft + point.output_len * tpot)
        oom |= low
    return sum(batches) * point.output_len / seconds / replica, oom


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="only points whose id starts with this")
    args = ap.parse_args(argv)
    aic_version = offline_aic()
    if aic_version is None:
        return 0
    _, points = published.load_points()
    if args.only:
        points = [p for p in points if any(p.id.startswith(o) for o in args.only)]
    rows = published.evaluate_points(points)
    ev = published.Evaluator()
    print(f"AIConfigurator {aic_version}, database_mode SILICON, static batching\n")
    print("| point | GPUs | config | metric | ISL/OSL | batch/replica | measured | expected | measured / expected "
          "| AIC silicon | measured / AIC | closer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    both = closer = ours_within = aic_within = 0
    for r in rows:
        p = r["point"]
        evaluation = ev.evaluation(p.model)
        model_id = evaluation.model.model_id
        moe = "n_experts" in evaluation.bound
        got = aic_run(p, model_id, r, moe)
        e = p.evaluated
        config = "-".join(f"{d}{e[d]}" for d in published.DEGREES if e[d] > 1) or "tp1"
        ours = p.measured / r["expected"]
        head = (f"| {p.id} | {p.gpus} x {p.gpu} | {config} | {p.metric} | {p.input_len}/{p.output_len} | "
                f"{r['batch']:,} | {p.measured:,.0f} | {r['expected']:,.0f} | {ours:.2f} |")
        if isinstance(got, str):
            print(f"{head} - ({got}) | - | - |")
            continue
        aic, oom = got
        theirs = p.measured / aic
        better = abs(ours - 1) < abs(theirs - 1)
        both += 1
        closer += better
        ours_within += abs(ours - 1) <= published.WITHIN
        aic_within += abs(theirs - 1) <= published.WITHIN
        print(f"{head} {aic:,.0f}{' (AIC: OOM)' if oom else ''} | {theirs:.2f} | {'ArchLedger' if better else 'AIC'} |")
    print(f"\npoints both cover: {both} of {len(rows)}; ArchLedger's expected closer to the measurement on {closer}; "
          f"within {published.WITHIN:.0%}: ArchLedger expected {ours_within}, AIConfigurator silicon {aic_within}")
    print(published.within_line(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
