"""``archledger deploy``: one model on one GPU type under one parallel config, at one scenario.

Layer: engine.cli (CLI). Prints memory and capacity, TTFT/TPOT/throughput and the per-op SOL table of
each phase; ``--formula`` adds each row's formulas, ``--json`` prints the same fields with the
names and units of the grid build's Parquet schema (bytes, seconds, FLOPs).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from engine.cli import units
from engine.language.errors import SpecError, Where


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (degrees, GPU counts, token counts, batch)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def add_serving_arguments(p, kv_note: str = "", prefill_tokens: bool = True) -> None:
    """The serving options deploy, plan and disagg share (one place for their names, defaults and
    help): framework, KV / activation dtypes, weight format, usable HBM share and, unless
    ``prefill_tokens`` is false, the chunked-prefill token budget."""
    p.add_argument("--framework", default="vllm", help="fusion table of corpus/fusion/ (vllm, sglang, trtllm) or none")
    p.add_argument("--kv-dtype", default="bf16", help="KV cache dtype (bf16, fp8)" + kv_note)
    p.add_argument("--act-dtype", default="bf16", help="activation dtype (bf16, fp8)")
    p.add_argument("--weight-format", default="checkpoint", help="checkpoint (the spec's own published storage), a published checkpoint of the model by its format "
                        "or Hub id (the spec's `checkpoints:`, e.g. fp8 or Qwen/Qwen3-32B-FP8: that checkpoint's real "
                        "storage), or a quant scheme for every matrix (a what-if)")
    p.add_argument("--hbm-fraction", type=float, default=0.9,  # = structure.HBM_FRACTION (the parser stays light)
                   help="usable share of HBM")
    p.add_argument("--overlap", choices=("none", "two_batch"), default=None,
                   help="schedule estimate's overlap: none (one kernel after another) or two_batch (two "
                        "half-batches, SGLang --enable-two-batch-overlap / DeepSeek dual micro-batch; the "
                        "framework must declare it); default: the framework's own (none for vllm and sglang)")
    if prefill_tokens:
        p.add_argument("--prefill-tokens", type=positive_int, default=8192,
                       help="chunked-prefill token budget per step and replica (vLLM max_num_batched_tokens)")


def serving_options(args):
    """The :class:`engine.deploy.Options` of :func:`add_serving_arguments` (and ``--mtp`` where the
    command has it) and the framework's fusion table (None for ``none``); an unknown framework is
    one line."""
    from engine.deploy import Options
    from engine.deploy.fusion_table import load_tables
    tables = load_tables(Path(args.corpus) / "fusion")
    if args.framework != "none" and args.framework not in tables:
        raise SpecError(Where("<command line>", field="--framework"), f"unknown framework {args.framework!r}",
                        "use none or one of: " + ", ".join(sorted(tables)))
    extra = mtp_options(args) if hasattr(args, "mtp") else {}
    if hasattr(args, "prefill_tokens"):
        extra["prefill_tokens"] = args.prefill_tokens
    table = tables.get(args.framework)
    overlap = getattr(args, "overlap", None) or ""   # checked against the table where the structure is built
    options = Options(framework=args.framework, kv_dtype=args.kv_dtype, act_dtype=args.act_dtype,
                      weight_format=args.weight_format, hbm_fraction=args.hbm_fraction, overlap=overlap, **extra)
    return options, table


def add_mtp_arguments(p) -> None:
    """``--mtp K --acceptance A``: speculative decoding with the model's MTP modules (deploy, plan)."""
    p.add_argument("--mtp", type=int, default=0, metavar="K",
                   help="draft tokens per decode step from the model's MTP modules (one per module; 0 = off)")
    p.add_argument("--acceptance", type=float, default=None, metavar="A",
                   help="acceptance rate of each MTP draft token, 0..1 (with --mtp; e.g. 0.85)")


def mtp_options(args) -> dict:
    """Options fields of ``--mtp`` / ``--acceptance`` (empty when off); the values themselves are
    checked by engine.deploy.legality.validate_options."""
    if not args.mtp:
        if args.acceptance is not None:
            raise SpecError(Where("<command line>", field="--acceptance"), "--acceptance without --mtp",
                            "add --mtp K (draft tokens per step) or leave out --acceptance")
        return {}
    if args.acceptance is None:
        raise SpecError(Where("<command line>", field="--acceptance"), f"--mtp {args.mtp} needs an acceptance rate",
                        "add --acceptance A with 0 <= A <= 1, e.g. --acceptance 0.85")
    return {"mtp_tokens": args.mtp, "mtp_acceptance": args.acceptance}


def add_parser(sub, parents=()) -> None:
    p = sub.add_parser("deploy", parents=list(parents), help="memory, capacity and SOL prefill/decode time on GPUs",
                       description=__doc__.splitlines()[0],
                       epilog="Exit status: 0 when the batch fits, 1 when it does not (the numbers are still "
                              "printed, priced as if it fit: --json's fits and shortfall_bytes say by how much), "
                              "2 on bad input.")
    p.add_argument("model", help="HF id or a unique suffix, e.g. DeepSeek-V3")
    p.add_argument("--gpu", required=True, help="GPU name from gpus/ (e.g. H200, B200, MI300X; required)")
    p.add_argument("--gpus", type=positive_int, default=None, help="GPUs in total (default tp x pp x cp); "
                   "the rest become whole-model replicas")
    p.add_argument("--gpus-per-node", type=positive_int, default=None, help="GPUs per scale-up domain (default: the GPU's)")
    for name, doc in (("tp", "tensor-parallel group size (attention TP x DP-attention)"),
                      ("ep", "expert-parallel degree (divides tp)"),
                      ("dp-attn", "attention data-parallel replicas inside the TP group"),
                      ("pp", "pipeline stages"), ("cp", "context-parallel degree")):
        p.add_argument(f"--{name}", type=positive_int, default=1, help=doc)
    p.add_argument("--cp-kind", default="ring", choices=["ring", "ulysses"],
                   help="context-parallel scheme: ring passes K/V around the group, ulysses all-to-alls heads")
    p.add_argument("--batch", type=positive_int, default=1, help="concurrent requests per model replica")
    p.add_argument("--input", type=positive_int, default=4096, help="prompt tokens per request")
    p.add_argument("--output", type=positive_int, default=1024, help="generated tokens per request")
    add_serving_arguments(p)
    add_mtp_arguments(p)
    p.add_argument("--phase", choices=["prefill", "decode", "both"], default="both",
                   help="which phase's per-op table to print")
    p.add_argument("--unfused", action="store_true", help="also print the program before fusion")
    p.add_argument("--formula", action="store_true", help="print each op's formulas")
    p.add_argument("--json", action="store_true", help="machine-readable output (Parquet field names)")
    p.set_defaults(func=run)


def deployment_from_args(args):
    from engine.language.api import evaluate_one
    from engine.deploy import Scenario, plan
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.deploy.measured import load_measured
    from engine.deploy.plan import Deployment
    from engine.deploy.parallel import ParallelConfig

    ev = evaluate_one(args.model, args.corpus)
    gpu = find_gpu(load_gpus(args.gpus_root), args.gpu)
    replica = args.tp * args.pp * args.cp
    gpus = args.gpus if args.gpus is not None else replica
    if gpus % replica:
        raise SpecError(Where("<command line>", field="--gpus"),
                        f"tp x pp x cp = {replica} does not divide {gpus} GPUs",
                        "make --gpus a multiple of tp x pp x cp (the rest become replicas)")
    config = ParallelConfig(tp=args.tp, ep=args.ep, dp_attn=args.dp_attn, pp=args.pp, cp=args.cp,
                            cp_kind=args.cp_kind, dp=gpus // replica, gpus_per_node=args.gpus_per_node)
    options, fusion = serving_options(args)
    scenario = Scenario(batch=args.batch, input_len=args.input, output_len=args.output)
    built = plan(ev, gpu, config, options, fusion, scenario)
    # the measured kernel tables of the checkout's gpus/ (as its GPU files), this GPU's
    tables = load_measured(Path(args.gpus_root) / "measured", gpu=gpu.key, framework=options.framework)
    return Deployment.build(built, scenario, tables)


def _num(value: float, unit: str = "") -> str:
    return units.si(value, unit)


def _time(seconds: float) -> str:
    return units.seconds(seconds)


def exit_status(summary: dict) -> int:
    """0 when the point fits, 1 when it does not (as ``plan`` exits 1 when nothing fits): a script
    can tell a deployment that runs from one that only has numbers."""
    return 0 if summary["fits"] else 1


def json_text(d, phases: tuple) -> str:
    """``--json``'s text of a deployment (without the final newline)."""
    out = {"deployment": d.summary, "phases": {p: d.phases[p] for p in phases}, "ops": {p: d.ops[p] for p in phases}}
    return json.dumps(out, indent=1, default=float)


def run(args: argparse.Namespace) -> int:
    d = None
    if not (args.formula or args.unfused):     # on a built checkout, from the build's formulas when they answer
        from engine.cli.deploy_fast import stored_deployment
        d = stored_deployment(args)
    if d is None:
        d = deployment_from_args(args)
    phases = ("prefill", "decode") if args.phase == "both" else (args.phase,)
    if args.json:
        print(json_text(d, phases))
        return exit_status(d.summary)
    s = d.summary
    print(f"{s['model_id']} on {s['n_gpus']} x {s['gpu']}  ({d.plan.config.label()}, framework {s['framework']}, "
          f"weights {s['weight_format']}, KV {s['kv_dtype']})")
    print(f"  scenario: batch {s['batch']} per replica, input {s['input_len']}, output {s['output_len']}"
          + ("  [EXTRAPOLATED: context beyond the model's max_context "
             f"{s['max_context']}]" if s["extrapolated"] else ""))
    # every byte figure in decimal units, usable memory included (docs/results.md, "How numbers are printed")
    print(f"  memory per GPU: weights {_num(s['weight_bytes_per_gpu'], 'B')}, KV {_num(s['kv_bytes_per_gpu'], 'B')}, "
          f"prefill activations {_num(s['activation_bytes_per_gpu'], 'B')}, "
          f"runtime reserve {_num(s['reserve_bytes_per_gpu'], 'B')}, usable {_num(s['usable_bytes_per_gpu'], 'B')}")
    print(f"  KV per request {_num(s['kv_bytes_per_request'], 'B')} ({_num(s['kv_bytes_per_request_per_gpu'], 'B')} per GPU); "
          f"KV budget {_num(s['kv_budget_bytes_per_gpu'], 'B')} per GPU; max concurrent requests "
          f"{s['max_concurrent_requests']}; max prefill batch {s['max_prefill_batch']} "
          f"(prefill in {s['prefill_steps']} step(s) of at most "
          f"{d.plan.options.prefill_tokens * d.plan.config.cp} prompt tokens per replica)")
    if s["fits"]:
        print("  fits: yes")
    elif s["weight_bytes_per_gpu"] > s["usable_bytes_per_gpu"]:
        print(f"  fits: NO — the weights alone ({_num(s['weight_bytes_per_gpu'], 'B')} per GPU) exceed the usable "
              f"{_num(s['usable_bytes_per_gpu'], 'B')}: spread them over more GPUs (--tp, --pp, --ep) or store them "
              "narrower (--weight-format); the times below are priced as if it fit")
    else:
        print(f"  fits: NO — batch {s['batch']} exceeds the capacity of {s['max_concurrent_requests']} requests; "
              f"short by {_num(s['shortfall_bytes'], 'B')} per GPU "
              "(fewer requests, more GPUs, or a narrower KV/weight dtype)"
              + (f"; fits the steady state of continuous batching (capacity {s['max_concurrent_requests_steady']})"
                 if s["fits_steady"] else ""))
    if "tokens_per_step" in s:
        k, a = s["mtp_tokens"], s["mtp_acceptance"]
        print(f"  MTP speculative decoding: {k} draft token(s) per step at acceptance {a:g}; a decode step "
              f"({_time(s['decode_step_time_s'])}) verifies {k + 1} tokens per request and runs {k} draft pass(es)")
        print(f"  expected tokens per step {s['tokens_per_step']:.4g} = {s['tokens_per_step_formula']} "
              f"(a = mtp_acceptance = {a:g}, k = mtp_tokens = {k}); TPOT = decode step / tokens per step")
    print(f"  TTFT {_time(s['ttft_s'])}   TPOT {_time(s['tpot_s'])}   "
          f"decode {_num(s['tokens_per_s_per_gpu'])} tok/s/GPU   prefill {_num(s['prefill_tokens_per_s_per_gpu'])} tok/s/GPU"
          f"   (schedule estimate, overlap {s['overlap']})")
    print(f"  lower bound: TTFT {_time(s['ttft_bound_s'])}   TPOT {_time(s['tpot_bound_s'])}   "
          "(per phase the busiest of tensor cores, HBM and each link, everything overlapped; no schedule beats it)")
    if "ttft_expected_s" in s:
        rows = [r for p in phases for r in d.ops[p]]
        print(f"  expected from measured kernels: TTFT {_time(s['ttft_expected_s'])}   TPOT {_time(s['tpot_expected_s'])}   "
              f"({sum(r['measured'] for r in rows)} of {len(rows)} ops from gpus/measured/, the others their SOL / 0.7; "
              "never below the SOL)")
    # the worst case above (every request at its last position); the steady state of continuous
    # batching beside it (docs/deployment.md "Steady-state capacity")
    print(f"  steady state (continuous batching, paged KV): {s['kv_steady_tokens_per_request']:.6g} cache tokens per "
          f"request on average; max concurrent requests {s['max_concurrent_requests_steady']} "
          f"(worst case {s['max_concurrent_requests']}); TPOT mean over the output {_time(s['tpot_mean_s'])}; "
          f"decode {_num(s['tokens_per_s_per_gpu_steady'])} tok/s/GPU")
    if args.formula:
        c = d.plan.structure.config
        bound = {k: int(v) for k, v in sorted(d.plan.structure.ev.bound.items())}
        bound.update({k: getattr(c, k) for k in ("tp", "ep", "dp_attn", "pp", "cp") if getattr(c, k) > 1})
        bound.update({"kv_bytes": d.plan.kv_bytes, "batch": s["batch"] / s["micro_batches"],
                      "seq (prefill)": s["input_len"], "ctx (decode)": s["input_len"] + s["output_len"]})
        if "tokens_per_step" in s:    # the main stack verifies k + 1 tokens; draft rows run at seq = 1
            bound["seq (decode)"] = s["mtp_tokens"] + 1
        print("  formulas bind: " + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                              for k, v in bound.items()))
    tables = [("", d.ops)]
    if args.unfused and s["framework"] != "none":
        tables.append((" (unfused)", d.plan.without_fusion().at(d.scenario).ops))
    for suffix, ops in tables:
        for phase in phases:
            ph = d.phases[phase]
            print(f"\n{phase}{suffix}: SOL {_time(ph['step_time_s'])} ({ph['bound']}-bound; lower bound "
                  f"{_time(ph['step_bound_s'])}; compute "
                  f"{_time(ph['compute_time_s'])}, memory {_time(ph['memory_time_s'])}, comm {_time(ph['comm_time_s'])})")
            print(f"  {'op':58s} {'kind':7s} {'FLOPs':>9s} {'bytes':>9s} {'comm':>9s} {'t_comp':>8s} "
                  f"{'t_mem':>8s} {'t_comm':>8s} {'SOL':>8s}  bound    expected")
            for r in ops[phase]:
                print(f"  {r['op_uid'][-58:]:58s} {r['kind']:7s} {_num(r['flops']):>9s} {_num(r['bytes'], 'B'):>9s} "
                      f"{_num(r['comm_bytes'], 'B'):>9s} {_time(r['t_compute_s']):>8s} {_time(r['t_memory_s']):>8s} "
                      f"{_time(r['t_comm_s']):>8s} {_time(r['t_sol_s']):>8s}  {r['bound']:7s}"
                      + (f"  {_time(r['t_expected_s']):>8s}{' measured' if r['measured'] else ''}"
                         if "t_expected_s" in r else ""))
                if args.formula:
                    print(f"  {'':58s} flops = {r['flops_formula']}")
                    print(f"  {'':58s} bytes = {r['bytes_formula']}")
                    if r["comm_bytes"]:
                        print(f"  {'':58s} comm  = {r['comm_bytes_formula']}")
    return exit_status(s)

