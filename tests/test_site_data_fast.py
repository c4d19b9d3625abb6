"""The deploy page's per-op expected times and its config twins, read from small hand-made tables
(site_builder.data.expected_files, site_builder.twins): each expectation is written out by hand here,
so the faster readers (joined by polars, split once) are held to what the page shows."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from site_builder import data, twins

MODEL = "org/Model"


def _results(ops: pl.DataFrame) -> data.Results:
    return data.Results(Path("."), pl.DataFrame({"model_id": [MODEL]}), {}, pl.LazyFrame(), ops.lazy())


def test_expected_files_keys_and_tooltips_by_hand():
    """site_builder.data.expected_files: each config file's op uids and distinct tooltips once, each
    point an index per op (-1: the point has no such op), points and ops numbered as first met. By
    hand: tp8's points at batch 4 (ops a, b) and 16 (a only, measured, its table missing: "None"),
    split by a tp4 point between them (its own file, listed second: its point comes second); a
    prefill row, another model's row and a config with no file (tp2) are left out; op a at batch 4
    has two rows: the first's place, the last's tooltip."""
    point = {"gpu": "H100", "n_gpus": 8, "config": "tp8", "framework": "vllm", "kv_dtype": "bf16",
             "batch": 4, "input_len": 1024, "output_len": 128}
    measured = {"measured": True, "expected_table": "gpus/measured/h100/x.yaml", "expected_nearest": "m 1..8"}
    rows = [
        {**point, "phase": "decode", "op_uid": "a", "expected_src": "first row of a", **measured},
        {**point, "phase": "decode", "op_uid": "b", "measured": False,
         "expected_src": "bound / 0.7", "expected_table": "", "expected_nearest": ""},
        {**point, "n_gpus": 4, "config": "tp4", "phase": "decode", "op_uid": "c", "expected_src": "bound / 0.7",
         "measured": False, "expected_table": "", "expected_nearest": ""},
        {**point, "batch": 16, "phase": "decode", "op_uid": "a", "measured": True,
         "expected_src": "gemm-bf16 vllm 0.24.0 at m=16", "expected_table": None, "expected_nearest": None},
        {**point, "phase": "decode", "op_uid": "a", "expected_src": "gemm-bf16 vllm 0.24.0 at m=4", **measured},
        {**point, "phase": "prefill", "op_uid": "a", "expected_src": "not a decode row", **measured},
        {**point, "config": "tp2", "phase": "decode", "op_uid": "a", "expected_src": "no file", **measured},
        {**point, "phase": "decode", "op_uid": "z", "expected_src": "another model", **measured},
    ]
    frame = pl.DataFrame(rows).with_columns(pl.Series("model_id", [MODEL] * 7 + ["other/Model"]),
                                            pl.lit(1e-5).alias("t_expected_s"))
    files = {("H100", "8", "tp8", "vllm"): "f8", ("H100", "4", "tp4", "vllm"): "f4"}
    m4 = "measured: gemm-bf16 vllm 0.24.0 at m=4; table gpus/measured/h100/x.yaml; measured points around it: m 1..8"
    m16 = "measured: gemm-bf16 vllm 0.24.0 at m=16; table None; measured points around it: None"
    found = data.expected_files(_results(frame), MODEL, files)
    assert list(found) == ["f8", "f4"]
    assert found["f8"] == {"ops": ["a", "b"], "tips": [m4, "no measurement: bound / 0.7", m16],
                           "points": {"H100|8|tp8|vllm|bf16|4|1024|128": [0, 1],
                                      "H100|8|tp8|vllm|bf16|16|1024|128": [2, -1]}}
    assert found["f4"] == {"ops": ["c"], "tips": ["no measurement: bound / 0.7"],
                           "points": {"H100|4|tp4|vllm|bf16|4|1024|128": [0]}}


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


def test_same_rows_checks_every_row_by_hand():
    """site_builder.twins.same_rows, handed candidate sets directly (as equal fingerprints would hand
    them): tp8ep8 has tp8's rows in another order (same), tp8dp8 one value off at batch 8 (not the
    same), tp8pp2 only tp8's batch-1 row (not the same); a missing value equals a missing value
    (tp4ep4 vs tp4), not a number (tp4dp4)."""
    rows = (_deployments("tp8", (8, 1, 1), [0.1, 0.4]) + _deployments("tp8ep8", (8, 8, 1), [0.1, 0.4])[::-1]
            + _deployments("tp8dp8", (8, 8, 8), [0.1, 0.5]) + _deployments("tp8pp2", (8, 1, 1), [0.1, 0.4])[:1]
            + [{**r, "n_gpus": 4, "config": c, "ttft_s": t} for c, t in (("tp4", None), ("tp4ep4", None), ("tp4dp4", 0.0))
               for r in _deployments(c, (4, 1, 1), [0.0, 0.0])[:1]])
    frame = pl.DataFrame(rows).select([*twins.GROUP, "config", *twins.DEGREES, *twins.POINT, *twins.COMPARED])
    h100 = {"gpu": "H100", "framework": "vllm", "kv_dtype": "bf16"}
    assert twins.same_rows(frame, [({**h100, "n_gpus": 8}, ["tp8", "tp8ep8"]), ({**h100, "n_gpus": 8}, ["tp8", "tp8dp8"]),
                                   ({**h100, "n_gpus": 4}, ["tp4", "tp4ep4"]), ({**h100, "n_gpus": 4}, ["tp4", "tp4dp4"]),
                                   ({**h100, "n_gpus": 4}, ["tp4", "tp4ep4", "tp4dp4"]),
                                   ({**h100, "n_gpus": 8}, ["tp8", "tp8pp2"])]) == [True, False, True, False, False, False]
