"""Capacity, fit and the prefill schedule come from one rule (docs/deployment.md "Memory and capacity").

Properties over models (dense, MoE with DP-attention, a pipeline, a hybrid), prompt and output
lengths and every batch from 1 to past the capacity (context parallelism too), evaluated in one
vectorized call per draw:

* ``fits`` is exactly ``batch <= max_concurrent_requests``;
* ``shortfall_bytes`` is 0 exactly when it fits;
* ``max_prefill_batch <= max_concurrent_requests``;
* ``fits_steady`` is exactly ``batch <= max_concurrent_requests_steady``, and ``tpot_mean_s <= tpot_s``;
* the memory fields add up: weights + runtime reserve + working set + KV + free = usable when it fits;
* TTFT never falls when the batch grows (more prompts are never served sooner);
* with pp = 1, TTFT = steps x one prefill step, steps = max(min(pp, batch),
  ceil(ceil(batch / dp_attn) x input / (cp x 8192))); with pp > 1 at least steps / pp of them.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.deploy.plan import summarize_plan
from tests.deploy_helpers import make_plan

CASES = [
    dict(model="Llama-3.1-8B", gpu="H100", framework="vllm", tp=1),
    dict(model="Llama-3.1-70B", gpu="H100", framework="vllm", tp=8),
    dict(model="Llama-3.1-70B", gpu="H100", framework="none", tp=4, pp=2),
    dict(model="Qwen3-30B-A3B", gpu="H100", framework="sglang", tp=8, dp_attn=8, ep=8),
    dict(model="Qwen3.5-27B", gpu="H200", framework="vllm", tp=2),
    dict(model="Llama-3.1-8B", gpu="H100", framework="vllm", tp=1, cp=2),
]


@pytest.fixture(scope="module", params=range(len(CASES)), ids=lambda i: "-".join(map(str, CASES[i].values())))
def plan(request):
    case = dict(CASES[request.param])
    return make_plan(case.pop("model"), case.pop("gpu"), case.pop("framework"), **case)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(input_len=st.sampled_from([1, 100, 1000, 4096, 8192, 8193, 30000, 131072]),
       output_len=st.sampled_from([0, 1, 256, 1024, 16384]))
def test_one_rule(plan, input_len, output_len):
    batch = np.arange(1, 2049)
    s = summarize_plan(plan, batch, input_len, output_len)
    cap, fits, short = s["max_concurrent_requests"], s["fits"], s["shortfall_bytes"]
    assert np.array_equal(fits, batch <= cap)
    assert np.array_equal(short == 0, fits)
    assert (s["max_prefill_batch"] <= cap).all()
    assert len(np.unique(cap)) == 1                           # a property of the point, not of the batch
    # the steady state (engine.deploy.admission): its own fit, the same inequality; decode at the
    # output's mean context never slower than at the last token (costs never fall with context)
    assert np.array_equal(s["fits_steady"], batch <= s["max_concurrent_requests_steady"])
    assert (s["tpot_mean_s"] <= s["tpot_s"]).all()
    used = (s["weight_bytes_per_gpu"] + s["reserve_bytes_per_gpu"] + s["activation_bytes_per_gpu"]
            + s["kv_bytes_per_gpu"] + s["free_bytes_per_gpu"])
    np.testing.assert_allclose(used[fits], s["usable_bytes_per_gpu"][fits], rtol=1e-9)
    ttft = s["ttft_s"]
    assert (np.diff(ttft) >= -1e-12 * ttft[1:]).all(), np.flatnonzero(np.diff(ttft) < 0)[:5]
    c = plan.structure.config
    per_rank = -(-batch // c.dp_attn)
    steps = np.maximum(np.minimum(c.pp, batch), -(-per_rank * input_len // (c.cp * 8192)))
    assert np.array_equal(s["prefill_steps"], steps)
    step = s["phases"]["prefill"]["step_time_s"]
    if c.pp == 1:
        np.testing.assert_allclose(ttft, steps * step, rtol=1e-12)
    else:
        assert (ttft >= steps * step / c.pp * (1 - 1e-12)).all()
