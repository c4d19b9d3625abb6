"""The sizing search's capacities in one evaluation per config and structure, and its memo of the
steady state's tokens (engine/serving/sizing.py, fourth round: issue 42).

* :meth:`engine.serving.sizing._Evaluator.capacities` evaluates capacity() once for every GPU type
  whose batch 1 has one structure (their usable bytes as a column): each row is checked against a
  hand derivation (Qwen3-30B-A3B's KV per token, the room left by weights, reserve and the prefill
  working set) and, as a consistency test, against capacity() called for that GPU alone; the search
  run with the grouping gives the points of a search whose capacities are asked one GPU at a time.
* :meth:`engine.serving.sizing._Evaluator.cannot_fit`'s steady tokens are kept per (admission
  policy, prompt, output): hand values under two frameworks' policies, and no key shared between
  lengths or policies.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.deploy import Options
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.sol import capacity
from engine.serving import sizing
from engine.serving.sizing import SLA, search

from tests.deploy_helpers import structure_cache
from tests.test_sizing_speed3 import assert_same

MOE = "Qwen/Qwen3-30B-A3B"
#: Qwen3-30B-A3B's KV per token: 48 layers x 4 KV heads x head_dim 128 x (K, V) x 2 bytes (bf16)
KV_PER_TOKEN = 48 * 4 * 128 * 2 * 2


@pytest.fixture(scope="module")
def cache():
    return structure_cache(MOE)


def gpus(*names):
    return [find_gpu(load_gpus(), g) for g in names]


def test_capacities_rows_by_hand_and_each_gpus_own_capacity(cache):
    options = Options(framework="vllm")
    ev = sizing._Evaluator(cache.ev, options, cache.tables["vllm"], cache)
    group = gpus("H100", "H200", "B200")
    config = ParallelConfig(tp=1)
    s = ev.first(config, group[0], 8192)
    assert all(ev.first(config, g, 8192) is s for g in group)     # one structure for the three
    outs = np.array([1024, 1])
    got = ev.capacities(config, group, 8192, outs)
    assert got.shape == (3, 2)
    # by hand: the KV of one request at 8192 + 1024 and 8192 + 1 tokens on one GPU, in the room
    # usable - weights - reserve - the prefill working set (tp=1: one attention replica)
    assert float(s.kv_device_fn(9216.0, 2.0)) == 9216 * KV_PER_TOKEN == 905_969_664
    act = float(sizing.capacity_terms(s, 8192, outs, 2.0, options.prefill_tokens)[1])
    for row, gpu in zip(got.tolist(), group):
        room = gpu.hbm_bytes * 0.9 - s.weight_bytes_per_gpu - s.reserve_bytes_per_gpu - act
        assert row == [int(room // (9216 * KV_PER_TOKEN)), int(room // (8193 * KV_PER_TOKEN))], gpu.key
    assert got[0].tolist() == [17, 19]           # H100: 15.6 GB of room over 906 MB and 805 MB
    # consistency: each row is capacity() at that GPU alone, worst case and steady
    for steady, lengths in ((False, outs), (True, outs[:1])):
        rows = ev.capacities(config, group, 8192, lengths, steady=steady)
        for row, gpu in zip(rows, group):
            want = capacity(s, gpu.hbm_bytes * options.hbm_fraction, 8192, lengths, ev.kv_bytes,
                            options.prefill_tokens, steady=steady)
            assert row.dtype == want.dtype and np.array_equal(row, want), (gpu.key, steady)
    # larger memory, more requests (the rows are the GPUs', in order)
    assert got[0, 0] < got[1, 0] < got[2, 0]


@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_search_with_grouped_capacities_consistency_with_one_gpu_at_a_time(monkeypatch, cache, framework):
    names = ("H100", "H200", "B200", "MI300X")
    run = lambda: search(cache.ev, gpus(*names), 8192, 1024, SLA(1e30, 1e30), max_gpus=4,
                         options=Options(framework=framework), fusion=cache.tables[framework], pools=True,
                         cache=cache)
    grouped = sizing._Evaluator.capacities
    sizes = []

    def spy(self, config, members, input_len, output_len, steady=False):
        sizes.append(len(members))
        return grouped(self, config, members, input_len, output_len, steady)

    monkeypatch.setattr(sizing._Evaluator, "capacities", spy)
    fast = run()
    assert max(sizes) > 1                 # some config's GPU types were evaluated together

    def alone(self, config, members, input_len, output_len, steady=False):
        return np.stack([grouped(self, config, [g], input_len, output_len, steady)[0] for g in members])

    monkeypatch.setattr(sizing._Evaluator, "capacities", alone)
    assert_same(fast, run())
    assert sum(len(r.points.get("batch", ())) for r in fast) > 1000


def test_steady_tokens_memo_by_policy_and_lengths(cache):
    config, gpu = ParallelConfig(tp=1), gpus("H100")[0]
    none = sizing._Evaluator(cache.ev, Options(framework="none"), None, cache)
    vllm = sizing._Evaluator(cache.ev, Options(framework="vllm"), cache.tables["vllm"], cache)
    for ev in (none, vllm):
        for input_len in (8192, 1024):
            for out in (1024, 1):       # (one length per call: the check stops at the first that fits)
                assert not ev.cannot_fit(config, gpu, input_len, np.array([out]))
    # framework none: token pages, no headroom: I + (O - 1) / 2
    policy = next(iter(none._steady))[0]
    assert none._steady[policy, 8192, 1024] == 8192 + 1023 / 2
    assert none._steady[policy, 1024, 1024] == 1024 + 1023 / 2
    assert none._steady[policy, 8192, 1] == 8192
    # vLLM's 16-token pages: context 8192 + m holds 8192 + 16 ceil(m / 16) tokens, m = 0 .. 1023; the
    # mean of 16 ceil(m / 16) is (16 x 16 x (1 + ... + 63) + 15 x 1024) / 1024 = 519
    paged = next(iter(vllm._steady))[0]
    assert paged.page_tokens == 16 and paged != policy
    assert vllm._steady[paged, 8192, 1024] == 8192 + (16 * 16 * 63 * 64 // 2 + 15 * 1024) / 1024 == 8711
    assert vllm._steady[paged, 8192, 1] == 8192          # one output token: the prompt's 512 whole pages
    # no key shared between prompts, outputs or policies
    assert len(none._steady) == len(vllm._steady) == 4
    assert not set(none._steady) & set(vllm._steady)
