"""The prefill working set's memo is keyed by the token budget too (engine/deploy/sol.py
``prefill_working_set``): a structure asked at the same points under two budgets gets each budget's
own bytes, the same as asked one point at a time (the path that memoizes nothing across budgets).

Planted bug it catches: the vectorized memo keyed by the (prompt, KV size) pairs only, which served
the first budget's working set to every later budget asked at the same points."""
from __future__ import annotations

import numpy as np

from engine.deploy.sol import prefill_working_set
from tests.deploy_helpers import make_plan


def test_working_set_differs_by_budget_and_matches_pointwise():
    structure = make_plan("Llama-3.1-8B", "H100", "vllm", tp=1).structure
    prompts = np.array([1024.0, 4096.0, 16384.0])
    kv = np.full(3, 2.0)
    small = prefill_working_set(structure, prompts, kv, prefill_tokens=4096)
    large = prefill_working_set(structure, prompts, kv, prefill_tokens=32768)
    # a budget of 8x the tokens puts 8x the prompts in the step: the activations grow
    assert (large > small).all()
    for budget, got in ((4096, small), (32768, large)):
        one_by_one = [float(prefill_working_set(structure, p, 2.0, prefill_tokens=budget)) for p in prompts]
        assert got.tolist() == one_by_one
