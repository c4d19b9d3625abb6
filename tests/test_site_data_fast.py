"""The deploy page's per-op expected times and its config twins, read from small hand-made tables
(site_builder.data.expected_ops, site_builder.twins): each expectation is written out by hand here,
so the faster readers (joined by polars, split once) are held to what the page shows."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from site_builder import data, twins

MODEL = "org/Model"


def _results(ops: pl.DataFrame) -> data.Results:
    return data.Results(Path("."), pl.DataFrame({"model_id": [MODEL]}), {}, pl.LazyFrame(), ops.lazy())


def test_expected_ops_keys_and_tooltips_by_hand():
    point = {"gpu": "H100", "n_gpus": 8, "config": "tp8", "framework": "vllm", "kv_dtype": "bf16",
             "batch": 4, "input_len": 1024, "output_len": 128}
    rows = [
        {**point, "phase": "decode", "op_uid": "a", "t_expected_s": 1.5e-5, "measured": True,
         "expected_src": "gemm-bf16 vllm 0.24.0 at m=4", "expected_table": "gpus/measured/h100/x.yaml",
         "expected_nearest": "m 1..8"},
        {**point, "phase": "decode", "op_uid": "b", "t_expected_s": 2.0e-6, "measured": False,
         "expected_src": "bound / 0.7", "expected_table": "", "expected_nearest": ""},
        {**point, "batch": 16, "phase": "decode", "op_uid": "a", "t_expected_s": 3.0e-5, "measured": True,
         "expected_src": "gemm-bf16 vllm 0.24.0 at m=16", "expected_table": None, "expected_nearest": None},
        {**point, "phase": "prefill", "op_uid": "a", "t_expected_s": 9.0, "measured": True,
         "expected_src": "not a decode row", "expected_table": "", "expected_nearest": ""},
        {**point, "phase": "decode", "op_uid": "a", "t_expected_s": 7.0, "measured": True,
         "expected_src": "another model", "expected_table": "", "expected_nearest": ""},
    ]
    frame = pl.DataFrame(rows).with_columns(pl.Series("model_id", [MODEL] * 4 + ["other/Model"]))
    assert data.expected_ops(_results(frame), MODEL) == {
        "H100|8|tp8|vllm|bf16|4|1024|128": {
            "a": [1.5e-5, "measured: gemm-bf16 vllm 0.24.0 at m=4; table gpus/measured/h100/x.yaml; "
                          "measured points around it: m 1..8"],
            "b": [2.0e-6, "no measurement: bound / 0.7"]},
        "H100|8|tp8|vllm|bf16|16|1024|128": {
            "a": [3.0e-5, "measured: gemm-bf16 vllm 0.24.0 at m=16; table None; measured points around it: None"]},
    }


def _deployments(config: str, degrees: tuple, ttft: list[float]) -> list[dict]:
    tp, ep, dp_attn = degrees
    base = {"gpu": "H100", "n_gpus": 8, "framework": "vllm", "kv_dtype": "bf16", "config": config,
            "tp": tp, "ep": ep, "dp_attn": dp_attn, "pp": 1, "cp": 1, "phase": "prefill", "input_len": 1024,
            "output_len": 128, **{c: 1.0 for c in twins.COMPARED}}
    return [{**base, "batch": b, "ttft_s": t} for b, t in zip((1, 8), ttft)]


def test_twins_by_hand():
    # tp8 and tp8ep8 equal at both batches (rows written in opposite orders), tp8dp8 differs at batch 8
    rows = (_deployments("tp8", (8, 1, 1), [0.1, 0.4]) + _deployments("tp8ep8", (8, 8, 1), [0.1, 0.4])[::-1]
            + _deployments("tp8dp8", (8, 8, 8), [0.1, 0.5]))
    found = twins.twins(pl.DataFrame(rows).select([*twins.GROUP, "config", *twins.DEGREES, *twins.POINT,
                                                   *twins.COMPARED]))
    assert [(t["gpu"], t["n_gpus"], t["framework"], t["kv_dtype"], t["configs"]) for t in found] == \
        [("H100", 8, "vllm", "bf16", ["tp8", "tp8ep8"])]
    assert "EP inside TP8 changes nothing" in found[0]["note"]
    # all three equal: one set, no reason claimed (dp_attn differs too)
    rows = [r if r["config"] != "tp8dp8" else {**r, "ttft_s": 0.1 if r["batch"] == 1 else 0.4} for r in rows]
    found = twins.twins(pl.DataFrame(rows).select([*twins.GROUP, "config", *twins.DEGREES, *twins.POINT,
                                                   *twins.COMPARED]))
    assert [t["configs"] for t in found] == [["tp8", "tp8dp8", "tp8ep8"]]
    assert found[0]["note"] == "tp8 and tp8dp8 and tp8ep8 give the same numbers in every row the build evaluated."
