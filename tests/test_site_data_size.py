"""What the deploy page fetches, trimmed to what it reads (site_builder.data; issue 42's site budget).

* Trees, formula texts and measured tables travel once per model (split_formulas): each (config,
  scale-up domain) file of a model's formulas used to carry its own copy of them (GLM-5.2: 30
  copies); the files now hold their programs and name one common file (``COMMON``). A hand-written
  formula document checks what lands where and that a lookup resolved through the shared file gives
  the number the document's own tree and table give.
* Front files hold the stored fields the chart needs, column-wise (front_files); the rates are divided
  where the file is read (tests/test_site_offgrid.py checks the page's against the grid rows).
* Expected-time files hold each op's tooltip per grid point, each distinct tooltip once (expected_files:
  tests/test_site_data_fast.py).
"""
from __future__ import annotations

import json
import math

from engine.language import formula_tree as ft
from site_builder.data import COMMON, split_formulas

#: Three measured tables (engine.deploy.measured.lookup_table's JSON: axes, their values, µs per
#: point, the roofline tree); table 2 is read by no tree, so it must not be shipped. A 2 x 2 grid per
#: table, by hand: table i at (batch 2, seq 20), a measured point, is 4 x (i + 1) µs.
LOOKUPS = [{"name": f"t{i}", "path": f"gpus/measured/t{i}.csv", "axes": ["batch", "seq"], "values": [[1, 2], [10, 20]],
            "us": [1.0 * (i + 1), 2.0 * (i + 1), 3.0 * (i + 1), 4.0 * (i + 1)], "roof": ["*", "batch", "seq"]}
           for i in range(3)]
#: Trees: 0-1 step fields, 2 the expected time of config A's step (reads table 0 and 1), 3 config
#: B's step (reads table 1 only), 4 the KV per device.
TREES = ["batch", 0,
         ["+", ["lookup", 0, "batch", "seq"], ["lookup", 1, "batch", "seq"]],
         ["pw", [["lookup", 1, "batch", "seq"], [">", "batch", 0]], ["t_sol", True]],
         ["*", "length", "kv_bytes"]]
STEP = [0, 1, 1, 1, 1, 1, 0, 0, -1, 0, 0, 0, 0, 0, 0]      # 5 trees, 6 numbers, 4 strings


def document() -> dict:
    configs = [{"key": key, "n_gpus": 8, "config": name, "kv_dev": 4, "weight_formula": 0}
               for key, name in (("8-tp8-d8", "tp8"), ("8-tp4-pp2-d8", "tp4-pp2"))]
    options = [{"gpu": "H100", "framework": "vllm", "kv_dtypes": ["bf16"], "config": c, "prefill": [c], "decode": [c],
                "expected": {"bf16": {"prefill": [c], "decode": [c]}}} for c in (0, 1)]
    return {"programs": [[STEP], [STEP]], "trees": TREES, "strings": ["uid"], "expected": [[2], [3]],
            "lookups": LOOKUPS, "configs": configs, "options": options, "format": 1}


def test_config_files_name_one_shared_file_holding_exactly_what_they_index():
    """Both config files name the shared file and hold only their programs; the shared file holds
    each tree and string once (numbered by first use: the programs' step fields, then the
    expected-time lists: trees 0, 1, then 2 and 3, the two configs' expected-time trees) and exactly
    the tables the trees read (0 and 1; table 2 is read by no tree)."""
    _, files = split_formulas(document())
    bodies = {k: json.loads(v) for k, v in files.items()}
    shared = bodies.pop(COMMON)
    assert set(bodies) == {"8-tp8-d8", "8-tp4-pp2-d8"}
    assert all(set(b) == {"programs", "expected", "common"} and b["common"] == COMMON for b in bodies.values())
    assert shared["trees"] == TREES[:4] and shared["strings"] == ["uid"]     # the KV tree (4) travels in index.json
    assert [b["expected"] for b in bodies.values()] == [[[2]], [[3]]]
    assert [b["programs"] for b in bodies.values()] == [[[STEP]]] * 2
    assert shared["lookups"] == {"0": LOOKUPS[0], "1": LOOKUPS[1]}


def test_a_lookup_through_the_shared_file_equals_the_documents_own_tree_and_table():
    """The reference resolved (as static/js/deploy_eval.js does: the shared file's trees and tables
    in place) gives, per config, the value the document's own expected-time tree and table give; by
    hand at (batch 2, seq 20): config A reads 4e-6 + 8e-6, config B 8e-6."""
    from engine.deploy.measured import node_lookup
    doc = document()
    _, files = split_formulas(doc)
    shared = json.loads(files[COMMON])
    through_file = node_lookup({int(k): v for k, v in shared["lookups"].items()})
    own = node_lookup(dict(enumerate(doc["lookups"])))
    env = {"batch": 2, "seq": 20, "t_sol": 0.0}
    for key, list_index, hand in (("8-tp8-d8", 0, 12e-6), ("8-tp4-pp2-d8", 1, 8e-6)):
        body = json.loads(files[key])
        got = ft.evaluate(shared["trees"][body["expected"][0][0]], env, through_file)
        want = ft.evaluate(doc["trees"][doc["expected"][list_index][0]], env, own)
        assert got == want
        assert math.isclose(got, hand, rel_tol=1e-12), (key, got)


def test_front_file_holds_the_charts_stored_fields_column_wise(tmp_path):
    """site_builder.data.front_files: per (framework, KV dtype, prompt, output) the flagged decode
    rows' stored fields the chart needs, one list per column, in front order (by GPU, fastest user
    first), the rates as the build computes them (engine.serving.steady.front_point: tokens/s per GPU =
    batch / mean TPOT / GPUs, per user = 1 / mean TPOT; the page computes nothing)."""
    import types

    import polars as pl

    from site_builder.data import FRONT_FIELDS, front_files

    def row(gpu, n, batch, tpot_mean, on, phase="decode"):
        return {"model_id": "m/x", "gpu": gpu, "n_gpus": n, "config": f"tp{n}", "batch": batch, "framework": "vllm",
                "kv_dtype": "bf16", "input_len": 1024, "output_len": 256, "phase": phase, "on_front": on,
                "ttft_s": 0.5, "tpot_mean_s": tpot_mean, "tpot_s": tpot_mean * 1.25,
                "max_concurrent_requests_steady": 40, "max_concurrent_requests": 30}
    part = tmp_path / "deployments" / "model=m--x"
    part.mkdir(parents=True)
    pl.DataFrame([row("H100", 2, 8, 0.02, True), row("B200", 1, 1, 0.004, True), row("H100", 2, 1, 0.01, True),
                  row("H100", 2, 4, 0.015, False), row("H100", 2, 8, 0.02, False, phase="prefill")]
                 ).write_parquet(part / "part.parquet")
    out = front_files(types.SimpleNamespace(root=tmp_path), "m/x")
    assert list(out) == [("vllm", "bf16", 1024, 256)]
    front = out[("vllm", "bf16", 1024, 256)]
    assert front["columns"] == list(FRONT_FIELDS) == ["gpu", "n_gpus", "config", "batch", "ttft_s", "tpot_s", "tpot_last_s",
                                                      "tokens_per_s_per_gpu", "tokens_per_s_per_user"]
    assert front["values"][:7] == [["B200", "H100", "H100"], [1, 2, 2], ["tp1", "tp2", "tp2"], [1, 1, 8], [0.5, 0.5, 0.5],
                                   [0.004, 0.01, 0.02], [0.004 * 1.25, 0.01 * 1.25, 0.02 * 1.25]]
    # by hand: 1 / 0.004 / 1 = 250, 1 / 0.01 / 2 = 50, 8 / 0.02 / 2 = 200 per GPU; 250, 100, 50 per user
    assert front["values"][7:] == [[250.0, 50.0, 200.0], [250.0, 100.0, 50.0]]


def test_front_file_writes_a_stored_float32_time_as_its_shortest_decimal(tmp_path):
    """A partition as the build writes it stores its times as float32 (docs/results.md "Precision"):
    the front file holds each as the shortest decimal that reads back as that float32 (0.02 and 0.025,
    not 0.019999999552965164), and the rates as float64 divisions of the stored value. By hand: the
    float32 nearest 0.02 is 0x3CA3D70A = 0.0199999995529651641845703125, so 8 requests on 2 GPUs give
    8 / that / 2 = 200.0000045 tokens/s per GPU, not 200."""
    import struct
    import types

    import polars as pl

    from site_builder.data import front_files
    stored = struct.unpack(">f", bytes.fromhex("3CA3D70A"))[0]
    part = tmp_path / "deployments" / "model=m--x"
    part.mkdir(parents=True)
    pl.DataFrame({"model_id": ["m/x"], "gpu": ["H100"], "n_gpus": [2], "config": ["tp2"], "batch": [8],
                  "framework": ["vllm"], "kv_dtype": ["bf16"], "input_len": [1024], "output_len": [256],
                  "phase": ["decode"], "on_front": [True], "ttft_s": pl.Series([0.5], dtype=pl.Float32),
                  "tpot_mean_s": pl.Series([0.02], dtype=pl.Float32), "tpot_s": pl.Series([0.025], dtype=pl.Float32),
                  "max_concurrent_requests_steady": [40], "max_concurrent_requests": [30]}).write_parquet(part / "part.parquet")
    values = front_files(types.SimpleNamespace(root=tmp_path), "m/x")[("vllm", "bf16", 1024, 256)]["values"]
    assert values[4:7] == [[0.5], [0.02], [0.025]]
    assert values[7][0] == 8 / stored / 2 and abs(values[7][0] - 200.0000044703484) < 1e-9 and values[8][0] == 1 / stored
    from site_builder.data import compact_json
    assert compact_json(values[5]) == "[0.02]"


def test_partition_writer_round_trips_every_value_bit_for_bit(tmp_path):
    """The deployments/ops writer (engine.batch.results.write_parquet with the partitions' zstd level,
    rows in PARTITION_ORDER) loses nothing: floats that no decimal rounding keeps (a third, 2^-1074,
    the largest double, 0.1 + 0.2), int64 beyond 2^53 and nulls read back equal, bit for bit. (The
    encodings and orders measured against it, none of them smaller: benchmarks/downloads.py.)"""
    import struct

    import polars as pl

    from engine.batch.results import PARTITION_ORDER, ZSTD_LEVEL, write_parquet
    odd = [1 / 3, 5e-324, 1.7976931348623157e308, 0.1 + 0.2, None]
    frame = pl.DataFrame({"gpu": ["H100", "B200", "H100", "A100", "H100"], "n_gpus": [8, 1, 8, 2, 8],
                          "config": ["tp8", "tp1", "tp8", "tp2", "tp8"], "framework": ["vllm"] * 5,
                          "kv_dtype": ["bf16"] * 5, "input_len": [1024] * 5, "output_len": [256] * 5,
                          "batch": [1, 2, 3, 4, 5], "phase": ["decode", "prefill", "decode", "decode", "prefill"],
                          "tpot_s": odd, "bytes": [2 ** 53 + 1, 0, -1, 2 ** 62, None]}).sort(PARTITION_ORDER, maintain_order=True)
    path = tmp_path / "part.parquet"
    write_parquet(frame, path, statistics=True, compression="zstd", compression_level=ZSTD_LEVEL)
    back = pl.read_parquet(path)
    assert back.equals(frame)
    bits = [None if v is None else struct.pack("<d", v) for v in back["tpot_s"]]
    assert bits == [None if v is None else struct.pack("<d", v) for v in frame["tpot_s"]]
    assert back["bytes"].to_list() == frame["bytes"].to_list() and 2 ** 53 + 1 in back["bytes"].to_list()
