"""The grid evaluation's shortcuts around the phase evaluation give what the plain code gives.

* :func:`engine.deploy.op_rows.op_rows_columns` keeps the GPU-free part of a per-op table (labels,
  FLOPs and bytes, intensity) per program pair, KV size and point set (``_point_rows``): a table
  asked for a second GPU type, or again, equals the one computed from the plan's own
  :meth:`engine.deploy.Plan.evaluate` (consistency test), and another KV dtype or point set
  is seen (not served from the memo);
* :meth:`engine.batch.columns.Columns.repeat` lengthens the last run when it holds the very same
  value: the joined columns equal a plain concatenation of every chunk, value types included, and
  values that are equal but not the same (0.0 and -0.0, 1 and True, 1 and 1.0) stay apart.
"""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def plans():
    from engine.language.api import evaluate
    from engine.deploy.fusion_table import load_tables, token_limits
    from engine.deploy.structure_cache import StructureCache
    from engine.deploy.hardware import load_gpus
    from engine.deploy.parallel import ParallelConfig
    ev = evaluate("Qwen/Qwen3-8B")
    cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    gpus = load_gpus()
    limits = token_limits(cache.tables.get("vllm"))
    # two GPU types of one scale-up domain and arch share the structure object (the grid's case)
    by_class: dict = {}
    for g in gpus.values():
        by_class.setdefault((g.scale_up_domain, g.arch), []).append(g)
    pair = next(v for v in by_class.values() if len(v) >= 2)[:2]
    config = ParallelConfig(tp=2)
    s = cache.structure(config, pair[0].scale_up_domain, "vllm", pair[0], (len(limits), 0))
    assert cache.structure(config, pair[1].scale_up_domain, "vllm", pair[1], (len(limits), 0)) is s
    return s, pair


def _plain(plan, phase, points):
    """The per-op numbers as the code before the memo computed them: every value of the plan's own
    evaluation at the points, gathered point-major."""
    from engine.deploy.cost import intensity, scenario_point
    from engine.deploy.structure import prefill_program_batch, program_batch
    s, options = plan.structure, plan.options
    batch = np.array([prefill_program_batch(s.config, p.batch, p.input_len, options.prefill_tokens)
                      if phase == "prefill" else program_batch(s.config, p.batch) for p in points], dtype=float)
    where = [scenario_point(phase, p.input_len, p.output_len, options.decode_seq) for p in points]
    values = plan.evaluate(phase, batch, np.array([w["seq"] for w in where], dtype=float),
                           np.array([w["ctx"] for w in where], dtype=float), weights=True)
    keep = [i for i, step in enumerate(s.programs[phase].steps) if not step.view]
    v = {k: a[keep].T.reshape(-1) for k, a in values.items()}
    return {"flops": v["flops"], "bytes": v["bytes"], "weight_bytes": v["weight_bytes"],
            "comm_bytes": v["comm_bytes"], "intensity": intensity(v["flops"], v["bytes"]),
            "t_compute_s": v["t_compute"], "t_memory_s": v["t_memory"], "t_comm_s": v["t_comm"],
            "t_sol_s": v["t_sol"], "op_uid": [s.programs[phase].steps[i].uid for i in keep] * len(points)}


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def test_op_rows_memo_consistency_over_gpus_kv_and_points(plans):
    from engine.deploy import Scenario
    from engine.deploy import op_rows
    from engine.deploy.plan import Plan
    s, pair = plans
    op_rows._POINT_ROWS.clear()
    asked = [([Scenario(1, 4096, 1024), Scenario(64, 4096, 1024)], "bf16"),
             ([Scenario(1, 4096, 1024), Scenario(64, 4096, 1024)], "fp8"),      # another KV size
             ([Scenario(8, 16384, 1024)], "bf16")]                              # another point set
    for points, kv_dtype in asked:
        for phase in ("prefill", "decode"):
            for gpu in pair + pair:                    # the second round is served by the memo
                plan = Plan(s, gpu, kv_dtype)
                got = op_rows.op_rows_columns(plan, phase, points, arrays=True)
                want = _plain(plan, phase, points)
                for name, value in want.items():
                    if name == "op_uid":
                        assert got[name] == value
                    else:
                        assert _same_bits(got[name], value), (name, phase, gpu.key, kv_dtype)
                listed = op_rows.op_rows_columns(plan, phase, points)
                assert listed["flops"] == got["flops"].tolist() and type(listed["flops"]) is list
    # the two GPU types differ in their times, not in their GPU-free numbers (the memo's premise)
    a, b = (op_rows.op_rows_columns(Plan(s, g, "bf16"), "decode", [Scenario(64, 4096, 1024)], arrays=True)
            for g in pair)
    assert _same_bits(a["flops"], b["flops"]) and _same_bits(a["bytes"], b["bytes"])
    fp8 = op_rows.op_rows_columns(Plan(s, pair[0], "fp8"), "decode", [Scenario(64, 4096, 1024)], arrays=True)
    assert not _same_bits(a["bytes"], fp8["bytes"])          # a KV size change is seen


def test_plan_kv_bytes_is_the_options_kv_dtype(plans):
    from dataclasses import replace
    from engine.deploy.plan import Plan
    from engine.language import kv
    s, pair = plans
    for kv_dtype in ("", "bf16", "fp8"):
        plan = Plan(s, pair[0], kv_dtype)
        assert plan.kv_bytes == kv.KV_DTYPE_BYTES[plan.options.kv_dtype]
    other = Plan(replace(s, options=replace(s.options, kv_dtype="fp8")), pair[0])
    assert other.kv_bytes == kv.KV_DTYPE_BYTES["fp8"] == kv.KV_DTYPE_BYTES[other.options.kv_dtype]


def _plain_join(chunks):
    values = []
    for kind, value, count in chunks:
        values.extend([value] * count if kind == "repeat" else list(value))
    return values


@pytest.mark.parametrize("chunks", [
    [("repeat", "m", 3), ("repeat", "m", 2), ("add", ["a", "b"], 0), ("repeat", "m", 1)],
    [("repeat", 4, 2), ("repeat", 4, 3), ("add", np.array([1, 2]), 0), ("repeat", 4, 1), ("repeat", 8, 2)],
    [("repeat", 0.0, 2), ("repeat", -0.0, 2), ("repeat", 0.0, 1)],           # equal floats, other bits
    [("repeat", 1, 2), ("repeat", True, 2), ("repeat", 1, 1)],              # equal, other types
    [("repeat", 1, 2), ("repeat", 1.0, 2), ("add", np.array([2.5]), 0)],
    [("repeat", 2.5, 2), ("repeat", 2.5, 3), ("add", np.array([2.5]), 0)],
    [("repeat", np.float64(0.5), 2), ("repeat", np.float64(0.5), 1)],
    [("repeat", "x", 2), ("add", np.array(["p", "q"]), 0), ("repeat", "x", 2)],
])
def test_columns_merged_runs_equal_plain_concatenation(chunks):
    from engine.batch.columns import Columns, _Constant
    merged, apart = Columns(), Columns()
    for kind, value, count in chunks:
        if kind == "repeat":
            merged.repeat("c", value, count)
            apart._chunks["c"].append(_Constant(value, count))     # one chunk per call, as before merging
        else:
            merged.add("c", value)
            apart.add("c", value)
    got, plain = merged.joined()["c"], apart.joined()["c"]
    want = _plain_join(chunks)
    assert type(got) is type(plain)
    if isinstance(got, list):
        assert got == plain == want and [type(v) for v in got] == [type(v) for v in plain]
    else:
        assert got.dtype == plain.dtype and got.tobytes() == plain.tobytes()
        assert got.tolist() == want and np.signbit(got).tolist() == np.signbit(np.array(want, dtype=float)).tolist()


def test_columns_merge_only_the_same_value():
    from engine.batch.columns import Columns
    cols = Columns()
    for value in ("a", "a", "b", "b", "a"):
        cols.repeat("t", value, 2)
    assert [(c.value, c.count) for c in cols._chunks["t"]] == [("a", 4), ("b", 4), ("a", 2)]
    cols.repeat("f", 0.0, 1)
    cols.repeat("f", -0.0, 1)
    assert len(cols._chunks["f"]) == 2
    assert np.signbit(cols.joined()["f"]).tolist() == [False, True]


def test_tokens_at_consistency_with_tokens_per_device():
    """The grid's vectorized tokens per device equal :func:`engine.deploy.tokens_per_device` per
    point, over the configs of corpus models (TP, EP, DP-attention, PP) and odd batches (the
    capacities the grid adds)."""
    from engine.batch.grid import input_lengths, load_grid, model_cells
    from engine.batch.grid_eval import _tokens_at
    from engine.deploy import Scenario, tokens_per_device
    from engine.deploy.hardware import load_gpus
    from engine.language.api import evaluate
    grid, gpus = load_grid(), load_gpus()
    checked = set()
    for model in ("deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-8B"):
        ev = evaluate(model)
        stored = float(sum(t.total_bytes for t in ev.tensors() if t.stack == "main"))
        inputs = input_lengths(grid, int(ev.numeric.max_context))
        configs = list(dict.fromkeys(c for _, c in model_cells(ev, grid, gpus, stored)))
        for config in configs[:: max(1, len(configs) // 40)]:
            pairs = [(b, inp) for inp in inputs for b in (*grid.batches, 3, 7, 37, 129, 999, 1023)]
            want = [tokens_per_device(config, Scenario(b, inp, 1024)) for b, inp in pairs]
            assert _tokens_at(config, pairs) == want, config
            assert all(type(t["prefill"]) is int and type(t["decode"]) is int for t in _tokens_at(config, pairs[:3]))
            checked.add((config.dp_attn > 1, config.pp > 1))
    assert len(checked) >= 3          # configs with and without DP-attention and pipelines
