"""No kernel a framework runs moves a quadratic amount of HBM traffic.

Production attention kernels (FlashAttention, FlashMLA, FlashInfer, TRT-LLM) keep scores and
probabilities on chip, and DeepGEMM's ``fp8_mqa_logits`` computes the lightning indexer's per-head
scores, ReLU and weighted head sum in one pass, writing only the [queries x keys] logits. So with a
framework's fusion table, a prefill kernel's HBM bytes grow at most linearly with the prompt: every
tensor it reads or writes is a weight, an activation or a cache row per token. A [heads x L x L]
tensor in HBM (tens of TB at the grid's longest prompts) is a kernel no framework runs: doubling the
prompt would quadruple its bytes. This holds for every attention kind in the corpus (GQA, sliding,
chunked, MLA, DSA's indexer, V4's compressor and indexer, the linear mixers).

Expectation from outside the engine: the kernels' own I/O (FlashAttention: q, k, v in, o out;
DeepGEMM fp8_mqa_logits: q, k, weights in, logits [L x L] out: the indexer's logits are the one
output that is quadratic by nature, so they are allowed with the top-k that reads them).
"""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from engine.deploy import Scenario
from tests.conftest import EVERY_MODEL, MODEL_IDS, REPO
from tests.deploy_helpers import make_plan

GRID = yaml.safe_load((REPO / "corpus" / "grid.yaml").read_text())
LONGEST = max(GRID["scenarios"]["input_lengths"])     # the grid's longest prompt (1M tokens)
#: DeepGEMM's indexer writes its [queries x keys] logits and the top-k kernel reads them: the only
#: quadratic I/O of a production DSA / V4 prefill (documented in the indexer_logits fusion rule)
QUADRATIC_BY_NATURE = ("indexer_logits", "token_topk")


def _prefill_bytes(model: str, framework: str, length: int) -> tuple[list, np.ndarray, np.ndarray]:
    p = make_plan(model, "B200", framework, Scenario(1, length, 1), tp=1)
    steps = p.structure.programs["prefill"].steps
    values = p.evaluate("prefill", np.array([1.0, 1.0]), np.array([length, 2 * length], dtype=float),
                        np.array([length, 2 * length], dtype=float))
    return steps, values["bytes"][:, 0], values["bytes"][:, 1]


@EVERY_MODEL
@pytest.mark.parametrize("framework", ["vllm", "sglang"])
@pytest.mark.parametrize("model", [m.split("/")[1] for m in MODEL_IDS])
def test_no_prefill_kernel_moves_quadratic_traffic(model, framework):
    length = LONGEST
    steps, at_l, at_2l = _prefill_bytes(model, framework, length)
    offenders = []
    for step, a, b in zip(steps, at_l, at_2l):
        if step.view or a == 0 or any(k in step.uid or k == step.op for k in QUADRATIC_BY_NATURE):
            continue
        if b > 2.0 * a * (1 + 1e-9):
            offenders.append(f"{step.uid}: {a:.3g} B at {length} -> {b:.3g} B at {2 * length}")
    assert not offenders, f"{model} ({framework}) materializes a quadratic tensor: " + "; ".join(offenders[:4])


def test_dsa_indexer_runs_as_one_fp8_kernel():
    """DeepSeek-V3.2 prefilling 64K tokens on one B200 (SGLang): the indexer is one fused kernel
    whose HBM traffic is its inputs (index queries [L, 64 heads, 128], keys [L, 128], head
    weights [L, 64]) and its [L x L] logits, not three [64 x L x L] tensors; it runs on FP8
    tensor cores. Hence sparse attention prefills faster than DeepSeek-V3's dense MLA."""
    length = 65_536
    p = make_plan("DeepSeek-V3.2", "B200", "sglang", Scenario(1, length, 1), tp=1)
    d = p.at(Scenario(1, length, 1))
    rows = [r for r in d.ops["prefill"] if r["op_uid"].startswith("indexer_logits@")]
    assert rows and all(r["compute_dtype"] == "fp8" for r in rows)
    unfused = [r for r in d.ops["prefill"] if r["op_uid"].endswith(("/index_relu", "/index_sum"))]
    assert not unfused
    v3 = make_plan("DeepSeek-V3", "B200", "sglang", Scenario(1, length, 1), tp=1).at(Scenario(1, length, 1))
    assert d.summary["ttft_s"] < v3.summary["ttft_s"]
