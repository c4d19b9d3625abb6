"""Side by side with NVIDIA's AIConfigurator in SOL database mode: TTFT and TPOT of the same scenarios.

Run from the repo root: ``python benchmarks/aiconfigurator_compare.py [--detail] [--speed]``. Needs the pip
package ``aiconfigurator`` (0.12.0 measured; it runs offline: model configs and system files ship
inside the package); without it the script says so and exits 0. Never a test dependency: the
numbers are printed for docs/deployment.md ("Side by side with AIConfigurator"), not asserted.

Both sides price the same thing: BF16 weights, activations and KV for Llama-3.1-70B and
Qwen3-32B, the checkpoint's MXFP4 experts with BF16 activations for gpt-oss-120b; vLLM on both
sides (ArchLedger's ``corpus/fusion/vllm.yaml`` fusions, AIConfigurator's ``vllm`` backend);
static batching (one prefill of ``batch`` prompts, then ``output - 1`` decode steps).

* AIConfigurator: ``cli_estimate(mode="static", database_mode="SOL")``. Its TPOT is the mean
  decode step over the generation (contexts ``input + 1 .. input + output - 1``, sampled every
  32 steps), its TTFT the prefill of the whole batch.
* ArchLedger: ``engine.deploy.plan(...).at(scenario)``. TTFT is the same prefill. ArchLedger's
  TPOT is the step at the last position (``input + output``, an upper bound over the
  generation); to compare the same step this script evaluates it at ``output / 2``, the mean
  decode context (attention reads grow linearly with the context, so the mean step is the step
  at the mean context). The column ``no alpha`` is ArchLedger with the collectives' per-call
  latency set to zero (the GPU without its NCCL latency model), which AIConfigurator's SOL mode
  does not charge.

``--speed`` times both sides instead, in this one process, at each scenario's first batch (issue 42's
ratios). AIConfigurator: ``cli_estimate`` the first time (its tables loaded) and again (best of 3:
warm), as called above; and warm with ``backend_version`` given (best of 3, same numbers): without
it every call resolves the latest database version by parsing a few hundred of the package's YAML
files (about 0.58 s of the 0.59 s here); given, a warm estimate is its database view and the
estimate itself (about 5 ms), AIConfigurator's own warm path. ArchLedger: first the process is
warmed on a model of none of the scenarios' families (``WARM_MODEL``, each scenario's GPU: imports,
the GPU's measured tables, the rooflines; that first estimate is printed too), then per scenario a
full estimate of a fresh plan (a model this process never placed: placement, fusion, compiling the
step functions, then the point: ``plan(...).at``, the spec's walk timed apart), the per-op table
read from it (``.ops``: made on first read, with every step's formulas printed; timed apart), and a
warm re-evaluation of that plan at another point (``.at`` at a new batch, best of 5). Wall clock,
``time.perf_counter``; printed, never asserted.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import io
import logging
import os
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# (label, ArchLedger model, AIC model, ArchLedger GPU, AIC system, TP, AIC MoE kwargs, batches)
SCENARIOS = [
    ("Llama-3.1-70B TP8 H100", "meta-llama/Meta-Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B",
     "H100", "h100_sxm", 8, {}, (1, 64)),
    ("Qwen3-32B TP2 H200", "Qwen/Qwen3-32B", "Qwen/Qwen3-32B", "H200", "h200_sxm", 2, {}, (1, 64)),
    # batch 16: from 32 AIConfigurator reports OOM (its static prefill holds the activations of
    # batch x input tokens at once, 0.69 GiB per 4096-token prompt, beside 56 GiB of weights)
    ("gpt-oss-120b 1x H100", "openai/gpt-oss-120b", "openai/gpt-oss-120b", "H100", "h100_sxm", 1,
     {"moe_tp_size": 1, "moe_ep_size": 1}, (1, 16)),
]
INPUT, OUTPUT = 4096, 1024
FRAMEWORK = "vllm"


def _quiet(fn, *args, **kwargs):
    """Call ``fn`` with AIConfigurator's logging and deprecation chatter swallowed."""
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def offline_aic() -> str | None:
    """The installed aiconfigurator's version, set up to run offline and quietly; None (after a
    line saying so) where it is not installed."""
    try:
        import aiconfigurator  # noqa: F401
        from importlib.metadata import version
        aic_version = version("aiconfigurator")
    except ImportError:
        print("aiconfigurator is not installed (pip install aiconfigurator); nothing to compare.")
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    return aic_version


def aic_estimate(model: str, system: str, tp: int, batch: int, moe: dict, version: str | None = None):
    """AIConfigurator's static SOL estimate: (TTFT s, TPOT s, per-op ms dicts, OOM flag); ``version``:
    its database version (None: the latest, resolved by the call)."""
    from aiconfigurator.cli.api import cli_estimate

    r = _quiet(cli_estimate, model, system, mode="static", backend_name=FRAMEWORK, database_mode="SOL",
               isl=INPUT, osl=OUTPUT, batch_size=batch, tp_size=tp, backend_version=version, **moe)
    s = r.summary
    steps = OUTPUT - 1
    ops = {"prefill": dict(s._context_latency_dict),
           "decode": {k: v / steps for k, v in s._generation_latency_dict.items()}}
    return r.ttft / 1e3, r.tpot / 1e3, ops, bool(s._is_oom)


def archledger(ev, gpu, tp: int, batch: int, output: int):
    """ArchLedger's deployment at one scenario (vLLM fusions, BF16 KV and activations)."""
    from engine.deploy import Options, Scenario, plan
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.parallel import ParallelConfig

    scenario = Scenario(batch=batch, input_len=INPUT, output_len=output)
    table = load_tables(REPO / "corpus" / "fusion").get(FRAMEWORK)
    built = plan(ev, gpu, ParallelConfig(tp=tp), Options(framework=FRAMEWORK, kv_dtype="bf16"), table, scenario)
    return built.at(scenario)


def _best(fn, runs: int) -> float:
    """The best wall time of ``runs`` calls of ``fn`` (seconds)."""
    import time
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


#: The model the process is warmed on before ``--speed`` times fresh plans (no scenario's family).
WARM_MODEL = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


def aic_version(system: str) -> str:
    """The database version ``cli_estimate`` resolves for ``system`` and this backend when none is given."""
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version
    return _quiet(get_latest_database_version, system=system, backend=FRAMEWORK)


def speed(gpus) -> None:
    """Print issue 42's two ratios per scenario (module docstring: what each side's time covers)."""
    from engine.deploy import Options, Scenario, plan
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import find_gpu
    from engine.deploy.parallel import ParallelConfig
    from engine.language.api import evaluate

    table = load_tables(REPO / "corpus" / "fusion").get(FRAMEWORK)
    options = Options(framework=FRAMEWORK, kv_dtype="bf16")
    warm_ev = evaluate(WARM_MODEL, str(REPO / "corpus"))
    for gpu_name in dict.fromkeys(s[3] for s in SCENARIOS):
        scenario = Scenario(batch=1, input_len=INPUT, output_len=OUTPUT)
        first = _best(lambda: plan(warm_ev, find_gpu(gpus, gpu_name), ParallelConfig(tp=2), options, table,
                                   scenario).at(scenario).ops, 1)
        print(f"ArchLedger's first estimate in this process on {gpu_name} ({WARM_MODEL}, TP 2, per-op table "
              f"included: imports, the GPU's measured tables): {_ms(first)} ms")
    print()
    print("| scenario | AIC first / warm | AIC warm, version given | ArchLedger walk | full estimate | per-op table | "
          "warm re-evaluation | full vs AIC warm | warm vs AIC warm | full vs AIC version given | "
          "warm vs AIC version given |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, al_model, aic_model, gpu_name, system, tp, moe, batches in SCENARIOS:
        batch = batches[0]
        aic_first = _best(lambda: aic_estimate(aic_model, system, tp, batch, moe), 1)
        aic_warm = _best(lambda: aic_estimate(aic_model, system, tp, batch, moe), 3)
        version = aic_version(system)
        same = aic_estimate(aic_model, system, tp, batch, moe, version)[:2] == \
            aic_estimate(aic_model, system, tp, batch, moe)[:2]
        aic_pinned = _best(lambda: aic_estimate(aic_model, system, tp, batch, moe, version), 3)
        holder = {}
        walk = _best(lambda: holder.update(ev=evaluate(al_model, str(REPO / "corpus"))), 1)
        gpu = find_gpu(gpus, gpu_name)
        scenario = Scenario(batch=batch, input_len=INPUT, output_len=OUTPUT)

        def full():
            holder["plan"] = plan(holder["ev"], gpu, ParallelConfig(tp=tp), options, table, scenario)
            holder["at"] = holder["plan"].at(scenario)

        full_s = _best(full, 1)
        ops_s = _best(lambda: holder["at"].ops, 1)
        points = iter(range(batch + 1, batch + 100))
        warm = _best(lambda: holder["plan"].at(Scenario(batch=next(points), input_len=INPUT, output_len=OUTPUT)), 5)
        note = "" if same else " (different TTFT/TPOT!)"
        print(f"| {label}, batch {batch} | {_ms(aic_first)} / {_ms(aic_warm)} ms | {_ms(aic_pinned)} ms{note} | "
              f"{_ms(walk)} ms | {_ms(full_s)} ms | {_ms(ops_s)} ms | {warm * 1e3:,.3f} ms | "
              f"{aic_warm / full_s:,.1f}x | {aic_warm / warm:,.0f}x | {aic_pinned / full_s:,.2f}x | "
              f"{aic_pinned / warm:,.2f}x |")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detail", action="store_true", help="print both sides' per-op times")
    parser.add_argument("--speed", action="store_true", help="time both sides' estimates (issue 42's ratios)")
    args = parser.parse_args()
    aic_version = offline_aic()
    if aic_version is None:
        return 0

    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.language.api import evaluate

    gpus = load_gpus(REPO / "gpus")
    if args.speed:
        print(f"ArchLedger vs AIConfigurator {aic_version} (SOL database mode, {FRAMEWORK} backend), "
              f"input {INPUT}, output {OUTPUT}, {datetime.date.today().isoformat()}: wall clock in one process.\n")
        speed(gpus)
        return 0
    rows = []
    for label, al_model, aic_model, gpu_name, system, tp, moe, batches in SCENARIOS:
        ev = evaluate(al_model, str(REPO / "corpus"))
        gpu = find_gpu(gpus, gpu_name)
        beta_only = dataclasses.replace(gpu, collectives=None)
        for batch in batches:
            aic_ttft, aic_tpot, aic_ops, oom = aic_estimate(aic_model, system, tp, batch, moe)
            pre = archledger(ev, gpu, tp, batch, OUTPUT)
            mid = archledger(ev, gpu, tp, batch, OUTPUT // 2)
            pre0 = archledger(ev, beta_only, tp, batch, OUTPUT)
            mid0 = archledger(ev, beta_only, tp, batch, OUTPUT // 2)
            rows.append((label, batch, pre.summary["ttft_s"], pre0.summary["ttft_s"], aic_ttft,
                         mid.summary["tpot_s"], mid0.summary["tpot_s"], aic_tpot, pre.summary["tpot_s"],
                         oom or not pre.summary["fits"]))
            if args.detail:
                for phase, al in (("prefill", pre), ("decode", mid)):
                    print(f"\n## {label}, batch {batch}, {phase}")
                    print("ArchLedger (ms):")
                    for op in al.ops[phase]:
                        print(f"  {op['op_uid'][:70]:70s} {op['t_sol_s'] * 1e3:10.4f}  {op['bound']}")
                    print("AIConfigurator SOL (ms):")
                    for name, ms in aic_ops[phase].items():
                        print(f"  {name:70s} {ms:10.4f}")

    today = datetime.date.today().isoformat()
    print(f"\nArchLedger vs AIConfigurator {aic_version} (SOL database mode, {FRAMEWORK} backend), "
          f"input {INPUT}, output {OUTPUT}, {today}. Times in ms. TPOT at the mean decode context "
          f"({INPUT + OUTPUT // 2}); 'no alpha' = ArchLedger without collective per-call latency.\n")
    print("| scenario | batch | TTFT ArchLedger | TTFT no alpha | TTFT AIC | ratio | "
          "TPOT ArchLedger | TPOT no alpha | TPOT AIC | ratio | within 10% |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (label, batch, ttft, ttft0, aic_ttft, tpot, tpot0, aic_tpot, _last, oom) in rows:
        r1, r2 = ttft / aic_ttft, tpot / aic_tpot
        ok = "yes" if abs(r1 - 1) <= 0.10 and abs(r2 - 1) <= 0.10 else "no"
        note = " (AIC: OOM)" if oom else ""
        print(f"| {label}{note} | {batch} | {_ms(ttft)} | {_ms(ttft0)} | {_ms(aic_ttft)} | {r1:.3f} | "
              f"{_ms(tpot)} | {_ms(tpot0)} | {_ms(aic_tpot)} | {r2:.3f} | {ok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
