"""What-if: TensorRT-LLM's CUDA-graph batch padding on the perf-overview rows (not in the results).

Run from the repo root: ``python benchmarks/cuda_graph_padding.py [--only ID]``. Offline.

The mechanism, read from TensorRT-LLM's source (docs/deployment.md "TensorRT-LLM under attention
DP: what runs"): with ``cuda_graph_config.enable_padding`` a generation-only step is padded with
dummy generation requests up to the smallest captured batch size at or above the batch
(``_get_padded_batch`` / ``_round_up_batch_size``; under attention DP the batch is first the
largest over the attention ranks), unless the padded batch exceeds ``max_batch_size`` or the
largest captured size. The perf-overview recipe captures :data:`CAPTURED`. A dummy request runs
every token-proportional kernel (projections, MoE, the MoE's all-gather / reduce-scatter, norms)
with a KV cache of one block, so its attention is negligible.

For each TensorRT-LLM row this prints the per-rank decode batch at ArchLedger's capacity, the
padded batch, and the row's measured / expected if every decode step were padded: the decode
step's expected time plus the expected-time difference of its non-attention ops between the
padded and the real batch (attention kept at the real requests). Whether a row pads also
depends on trtllm-bench's max_batch_size for it (tensorrt_llm/bench/build/tuning.py), which
this script does not evaluate: the column is what padding would cost where it happens.
"""
from __future__ import annotations

import argparse
import bisect
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from published import Evaluator, column, load_points, throughput, tpot_bases  # noqa: E402

#: cuda_graph_config.batch_sizes of the perf-overview's llm_options.yml (dense and MoE recipes),
#: docs/source/performance/perf-overview.md of NVIDIA/TensorRT-LLM @ 00f37686.
CAPTURED = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)
#: Ops whose work is per request and context (kept at the real requests).
PER_CONTEXT = ("flash_attention", "flash_mla", "attention_score", "softmax", "attention_apply")


def padded(batch: int) -> int:
    """The smallest captured size at or above ``batch`` (the batch itself beyond the largest)."""
    i = bisect.bisect_left(CAPTURED, batch)
    return CAPTURED[i] if i < len(CAPTURED) else batch


def token_ops_s(ops: list[dict]) -> float:
    """Expected seconds of a decode step's token-proportional ops."""
    return sum(r["t_expected_s"] for r in ops if r["op"] not in PER_CONTEXT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="only points whose id starts with this")
    args = ap.parse_args(argv)
    from engine.deploy import Options, ParallelConfig, Scenario, find_gpu, plan
    _, points = load_points()
    points = [p for p in points if p.framework == "trtllm" and p.metric == "output"
              and (not args.only or any(p.id.startswith(o) for o in args.only))]
    ev = Evaluator()
    print("| point | config | decode batch per rank | padded | measured / expected | if padded |")
    print("|---|---|---|---|---|---|")
    for p in points:
        s = ev.summary(p)
        e = p.evaluated
        dp = e["dp_attn"] or 1
        batch = int(s["batch"])
        rank = math.ceil(batch / dp)
        pad = padded(rank)
        ttft, tpot = column(s, "ttft_s", "expected"), column(s, tpot_bases(p), "expected")
        expected = throughput(p, s, ttft, tpot)
        model = ev.evaluation(p.model)
        config = ParallelConfig(tp=e["tp"], ep=e["ep"], dp_attn=e["dp_attn"], pp=e["pp"], cp=e["cp"], dp=1,
                                gpus_per_node=p.gpus_per_node)
        options = Options(framework=p.framework, **p.options)
        fusion = ev.tables.get(p.framework)

        def ops(n: int) -> list[dict]:
            sc = Scenario(batch=n, input_len=p.input_len, output_len=p.output_len)
            return plan(model, find_gpu(ev.gpus, p.gpu), config, options, fusion, sc).at(sc).ops["decode"]

        extra = token_ops_s(ops(pad * dp)) - token_ops_s(ops(batch)) if pad != rank else 0.0
        s2 = dict(s, **{tpot: float(s[tpot]) + extra})
        if_padded = throughput(p, s2, ttft, tpot)
        cfg = "-".join(f"{k}{e[k]}" for k in ("tp", "ep", "dp_attn") if e[k] and (k == "tp" or e[k] > 1))
        print(f"| {p.id} | {cfg} | {rank} | {pad} | "
              f"{p.measured / expected:.2f} | {p.measured / if_padded:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
