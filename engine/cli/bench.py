"""``archledger bench``: time loading and evaluating the corpus, and deployment accounting.

Layer: engine.cli. Reports the best of ``--repeat`` runs for: loading + schema-checking the corpus,
per model the two walks plus the overview (params, checkpoint tensors, KV), then deployment
plans (placement + communication + fusion + compile, both bindings, both phases) and the
vectorized evaluation of compiled plans over a batch x context grid (deployment points per
second), and validation (every guard against the recorded evidence). Figures go in README;
tests never assert timings.
"""
from __future__ import annotations

import sys
import time


#: (model, GPU, config) triples the deployment benchmark plans: a dense and an MLA MoE model.
DEPLOY_CASES = (("meta-llama/Meta-Llama-3.1-70B", "H100", dict(tp=8)),
                ("deepseek-ai/DeepSeek-V3", "H200", dict(tp=8, dp_attn=8, ep=8)))


def add_parser(sub, parents=()):
    bench = sub.add_parser("bench", parents=list(parents), help="time loading and evaluating the corpus")
    bench.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    bench.set_defaults(func=run)
    return bench


def _say(text: str) -> None:
    """Progress on stderr (stdout keeps only the figures, for README)."""
    print(f"bench: {text}", file=sys.stderr, flush=True)


def run(args) -> int:
    from engine.language.corpus import forget_loaded, load_corpus
    from engine.language.api import evaluate_spec
    repeat = max(1, args.repeat)
    load_times, model_times = [], {}
    for run_index in range(repeat):
        _say(f"load + evaluate the corpus, run {run_index + 1}/{repeat}")
        forget_loaded()         # a real load each run (the process keeps the corpora it loaded)
        start = time.perf_counter()
        corpus = load_corpus(args.corpus)
        load_times.append(time.perf_counter() - start)
        for model in corpus.models.values():
            start = time.perf_counter()
            evaluate_spec(corpus, model).overview()
            model_times.setdefault(model.model_id, []).append(time.perf_counter() - start)
    best = {k: min(v) for k, v in model_times.items()}
    print(f"corpus load + schema check: {min(load_times) * 1000:8.1f} ms  ({len(best)} models)")
    for model_id, seconds in sorted(best.items(), key=lambda kv: -kv[1]):
        print(f"  {model_id:45s} {seconds * 1000:8.1f} ms  (numeric + symbolic walk + overview)")
    total = min(load_times) + sum(best.values())
    print(f"whole corpus: {total:.2f} s; slowest model {max(best.values()):.2f} s "
          f"(target < 2 s per model); best of {repeat}")
    _say("validate every spec")
    _bench_validate(corpus, repeat)
    _say("deployment plans and vectorized evaluation")
    _bench_deploy(corpus, repeat, getattr(args, "gpus_root", None))
    return 0


def _bench_validate(corpus, repeat: int) -> None:
    """Every guard against the recorded evidence (manifest load and expansion included)."""
    from engine.verify.validate import validate
    times = {}
    for _ in range(repeat):
        for model in corpus.models.values():
            start = time.perf_counter()
            validate(corpus, model)
            times.setdefault(model.model_id, []).append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    slow = max(best, key=best.get)
    print(f"validate: whole corpus {sum(best.values()):.2f} s; slowest {slow} {best[slow]:.2f} s "
          "(walks + manifest expansion + 7 guards)")


def _bench_deploy(corpus, repeat: int, gpus_root=None) -> None:
    import numpy as np
    from engine.deploy import Options, ParallelConfig, load_gpus, load_tables, plan
    from engine.language.api import evaluate_spec
    gpus, table = load_gpus(gpus_root), load_tables(corpus.root / "fusion")["vllm"]
    # the grid as the build evaluates it: batch down a column, context along a row (broadcast)
    batch, ctx = np.arange(1, 257, dtype=float)[:, None], np.linspace(1024, 131072, 400)[None, :]
    points = batch.size * ctx.size
    for model_id, gpu, config in DEPLOY_CASES:
        ev = evaluate_spec(corpus, corpus.models[model_id])
        plan_times, eval_times = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            built = plan(ev, gpus[gpu], ParallelConfig(**config), Options(framework="vllm"), table)
            plan_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            for phase, seq in (("prefill", ctx), ("decode", 1.0)):
                built.structure.compiled[phase].totals(built.gpu, batch, seq, ctx, built.kv_bytes)
            eval_times.append(time.perf_counter() - start)
        rate = 2 * points / min(eval_times)
        print(f"deploy {model_id} on {gpu} {ParallelConfig(**config).label()}: plan {min(plan_times) * 1000:.0f} ms; "
              f"{rate:,.0f} deployment points/s vectorized ({2 * points:,} points, both phases)")
