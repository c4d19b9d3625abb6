"""The grid evaluation's shortcuts (engine/batch/grid_eval.py, engine/deploy/sol.py, engine/deploy/planner.py)
give the numbers of the plain calls they replace.

* the grid asks :func:`engine.deploy.sol.capacity` once per cell over every (KV dtype, output length,
  prompt): each lane equals the call for that KV dtype and output length alone;
* the per-op table's ``bound`` is the largest of the op's three times (compute first, then memory, on
  a tie), read off the table's own time columns;
* :func:`engine.deploy.planner.with_drafts` keeps its draft steps per placed MTP program: a second
  structure of the same placement gets steps equal to a fresh derivation, and the MTP stack's weights
  and layouts are added as before.
"""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def qwen():
    from engine.language.api import evaluate
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.structure_cache import StructureCache
    from engine.deploy.fusion_table import token_limits
    from engine.deploy.hardware import load_gpus
    from engine.deploy.parallel import ParallelConfig
    ev = evaluate("Qwen/Qwen3-8B")
    cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    gpu = load_gpus()["H100"]
    config = ParallelConfig(tp=2)
    limits = token_limits(cache.tables.get("vllm"))
    return ev, cache.structure(config, gpu.scale_up_domain, "vllm", gpu, (len(limits), 0)), gpu


def test_capacity_over_lanes_is_capacity_per_lane(qwen):
    from engine.deploy.sol import capacity
    _, s, gpu = qwen
    usable = gpu.hbm_bytes * 0.9
    inputs = np.array([1024, 4096, 16384, 65536, 131072])
    lanes = [(kv, out) for kv in (2, 1, 4) for out in (256, 1024, 8192)]
    together = capacity(s, usable, np.tile(inputs, len(lanes)), np.repeat([o for _, o in lanes], len(inputs)),
                        np.repeat([k for k, _ in lanes], len(inputs))).reshape(len(lanes), len(inputs))
    for row, (kv, out) in zip(together, lanes):
        alone = capacity(s, usable, inputs, out, kv)
        assert row.tolist() == alone.tolist(), (kv, out)
    assert (together > 0).any() and len(set(together.ravel().tolist())) > 3     # not a degenerate case


def test_op_bound_is_the_largest_time(qwen):
    from engine.deploy import Scenario
    from engine.deploy.op_rows import op_rows_columns
    from engine.deploy.plan import Plan
    _, s, gpu = qwen
    for phase in ("prefill", "decode"):
        cols = op_rows_columns(Plan(s, gpu, "bf16"), phase, [Scenario(1, 4096, 256), Scenario(64, 4096, 256)])
        times = zip(cols["t_compute_s"], cols["t_memory_s"], cols["t_comm_s"])
        want = [("compute", "memory", "comm")[max(range(3), key=lambda j: (t[j], -j))] for t in times]
        assert cols["bound"] == want
        assert all(type(b) is str for b in cols["bound"])
        assert len(cols["bound"]) == len(cols["op_uid"]) > 0 and len(cols["op_uid"]) % 2 == 0   # two points


def test_draft_steps_kept_per_mtp_program_equal_a_fresh_derivation():
    from dataclasses import replace
    from engine.deploy import Options
    from engine.deploy import planner
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.structure import MTP_STACK
    from engine.language.api import evaluate
    ev = evaluate("deepseek-ai/DeepSeek-V3")
    config = ParallelConfig(tp=8, ep=8)
    main = planner.place(ev, config, 8, Options(), False)
    mtp = planner.place(ev, config, 8, Options(framework="none"), False, MTP_STACK)
    empty = replace(main["decode"][0], steps=())
    first = planner.with_drafts(empty, mtp["decode"][0], ev.numeric, 1)
    planner._DRAFT_STEPS.clear()
    fresh = planner.with_drafts(empty, mtp["decode"][0], ev.numeric, 1)
    again = planner.with_drafts(replace(main["decode"][0], steps=()), mtp["decode"][0], ev.numeric, 1)
    assert first.steps == fresh.steps == again.steps and len(first.steps) > 5
    assert all(s.last_token for s in first.steps)
    assert again.stored == {**main["decode"][0].stored, **mtp["decode"][0].stored}
    # k = 2 repeats each draft step twice as often as k = 1 (its calls are linear in k)
    two = planner.with_drafts(empty, mtp["decode"][0], ev.numeric, 2)
    assert [s.uid for s in two.steps] == [s.uid for s in first.steps]
    assert all(b.repeat == 2 * a.repeat for a, b in zip(first.steps, two.steps))
