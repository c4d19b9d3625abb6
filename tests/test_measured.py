"""Measured kernel tables (gpus/measured/, engine.deploy.measured): the interpolation against hand
arithmetic, bad tables as one-line errors, the import round-trip on a fixture package, and the
expected times of a deployment (never below the bound; the data file's own number on the grid)."""
from __future__ import annotations

import importlib.util
import math
import sys

import pytest
import yaml

from engine.deploy import Scenario
from engine.deploy.measured import (DEFAULT_EFFICIENCY, MAX_POINTS, attention_roof, collective_roof, gemm_roof,
                                    interpolate, interpolate_many, load_measured, nearest, peak_rate)
from engine.language.errors import SpecError

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("benchmarks_import_kernels", REPO / "benchmarks" / "import_kernels.py")
import_kernels = sys.modules.setdefault("benchmarks_import_kernels", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(import_kernels)

SOURCE = {"package": "aiconfigurator-core", "version": "0.12.0", "path": "x/y.parquet", "licence": "Apache-2.0",
          "licence_src": "the fixture"}


def write_table(root, rows, axes=None, kernel="all_reduce", variant="nccl", gpu="H100", framework="nccl",
                version="2.29.2", where=None):
    """One table file under ``root`` (gpus/measured/) at its place, or at ``where``."""
    axes = axes or [{"name": "gpus", "values": [2, 8]}, {"name": "bytes", "values": [1000, 100000]}]
    path = root / (where or f"{gpu.lower()}/{framework}-{version}") / f"{kernel}-{variant}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"kernel": kernel, "variant": variant, "gpu": gpu, "framework": framework,
                                    "framework_version": version, "source": SOURCE, "axes": axes,
                                    "latency_us": rows}, sort_keys=False))
    return path


@pytest.fixture
def tiny(tmp_path):
    """The 2 x 2 all-reduce table of the hand computations: gpus [2, 8] x bytes [1e3, 1e5], µs
    [[10, 100], [20, 400]]."""
    root = tmp_path / "gpus" / "measured"
    write_table(root, [[10, 100], [20, 400]])
    return load_measured(root)[("H100", "nccl", "all_reduce", "nccl")]


def test_interpolation_hand_values(tiny):
    roof = collective_roof("all_reduce")
    us = lambda point: interpolate(tiny, point, roof)[0] * 1e6     # noqa: E731
    # on the grid: the measured number
    assert us((2, 1000)) == pytest.approx(10)
    assert us((8, 100000)) == pytest.approx(400)
    # bytes 1e4: halfway in log between 1e3 and 1e5, so t = exp(0.5 ln 10 + 0.5 ln 100) = sqrt(1000)
    assert us((2, 10000)) == pytest.approx(math.sqrt(1000))                      # 31.62 µs
    # gpus 4: halfway in log between 2 and 8 (ln 2 / ln 4), bytes on the grid: sqrt(10 x 20)
    assert us((4, 1000)) == pytest.approx(math.sqrt(200))                        # 14.14 µs; axes swapped: 31.6
    # both halfway: the geometric mean of the four corners, (10 x 100 x 20 x 400)^(1/4)
    assert us((4, 10000)) == pytest.approx((10 * 100 * 20 * 400) ** 0.25)        # 53.18 µs
    # a quarter of the way in log bytes (1e3 -> 10^3.5): 10^(0.75) x 100^(0.25)... = 10 x 10^0.25
    assert us((2, 10 ** 3.5)) == pytest.approx(10 * 10 ** 0.25)


def test_outside_the_range_continues_the_last_span(tiny):
    roof = collective_roof("all_reduce")
    us = lambda point: interpolate(tiny, point, roof)[0] * 1e6     # noqa: E731
    # 5e5 bytes at 2 GPUs: the last span 1e3 -> 1e5 went 10 -> 100 µs, slope ln 10 / ln 100 = 0.5
    # (under the roofline's 1), so 100 x 5^0.5 = 223.6 µs; the floor of the table's best rate (below)
    # is 5e5 / 1e9 s = 500 µs there, so the floor wins: never more efficient than measured
    t, outside = interpolate(tiny, (2, 5e5), roof)
    assert outside and t * 1e6 == pytest.approx(500)
    # 100 bytes: the same slope downward from 10 µs: 10 / sqrt(10)
    assert us((2, 100)) == pytest.approx(10 / math.sqrt(10))                        # 3.162 µs
    # 16 GPUs at 1e3 bytes: the span 2 -> 8 went 10 -> 20 µs, slope ln 2 / ln 4 = 0.5; the
    # all-reduce roofline 2(g-1)/g went 1 -> 1.75, slope ln 1.75 / ln 4 = 0.404: clipped to it, so
    # 20 x 2^(ln 1.75 / ln 4) = 20 x 1.75^0.5
    assert us((16, 1000)) == pytest.approx(20 * 1.75 ** 0.5)                         # 26.46 µs
    assert not interpolate(tiny, (8, 1000), roof)[1]


def test_outside_the_range_never_beats_the_tables_best_rate(tiny):
    """The floor by hand. The all-reduce roofline is bytes x 2(g - 1)/g: per grid point (g, bytes,
    µs) its work per second is (2, 1e3, 10): 1e3 / 10 µs = 1e8; (2, 1e5, 100): 1e9; (8, 1e3, 20):
    1.75e3 / 20 µs = 8.75e7; (8, 1e5, 400): 1.75e5 / 400 µs = 4.375e8: the peak rate is 1e9 per s.
    At (2, 1e6) the last span's power law gives 100 x 10^0.5 = 316.2 µs (3.2e9 per s, above any
    measurement): the floor 1e6 / 1e9 s = 1,000 µs. At (2, 2e5): 141.4 µs against the floor 200 µs.
    Below the range (100 bytes) the floor is 0.1 µs: the power law's 3.162 µs stands."""
    roof = collective_roof("all_reduce")
    assert peak_rate(tiny, roof) == pytest.approx(1e9)
    us = lambda point: interpolate(tiny, point, roof)[0] * 1e6     # noqa: E731
    assert us((2, 1e6)) == pytest.approx(1000)
    assert us((2, 2e5)) == pytest.approx(200)
    assert us((2, 100)) == pytest.approx(10 / math.sqrt(10))
    # inside the grid the measurement stands even where it is slower than the best rate
    assert us((8, 1000)) == pytest.approx(20)


def test_a_falling_edge_stays_flat(tmp_path):
    """A last span whose time falls (measurement noise) continues flat, never faster with more work;
    here the floor of the best rate is slower still: the edge (2 GPUs, 1e5 bytes in 8 µs, 1.25e10
    per s) is the table's peak rate, so 1e7 bytes take at least 1e7 / 1.25e10 s = 800 µs."""
    root = tmp_path / "gpus" / "measured"
    write_table(root, [[10, 8], [20, 400]])
    table = load_measured(root)[("H100", "nccl", "all_reduce", "nccl")]
    roof = collective_roof("all_reduce")
    assert interpolate(table, (2, 1e7), roof)[0] * 1e6 == pytest.approx(800)
    # the flat continuation alone (a rate the floor does not reach): 2 GPUs, 1.1e5 bytes -> 8 µs x 1
    # against the floor 1.1e5 / 1.25e10 s = 8.8 µs: the floor; the time never falls below the edge's
    assert interpolate(table, (2, 1.1e5), roof)[0] * 1e6 == pytest.approx(8.8)


def _gemm_table(tmp_path):
    """The 2 x 2 x 2 GEMM table of the hand computations: m [1024, 2048] x n [4096, 8192] x k
    [4096, 8192], µs per row (m, n) over k: [100, 200], [300, 400], [500, 600], [700, 1200]."""
    root = tmp_path / "gpus" / "measured"
    write_table(root, [[100, 200], [300, 400], [500, 600], [700, 1200]], kernel="gemm", variant="bf16",
                framework="vllm", version="0.24.0",
                axes=[{"name": "m", "values": [1024, 2048]}, {"name": "n", "values": [4096, 8192]},
                      {"name": "k", "values": [4096, 8192]}])
    return load_measured(root)[("H100", "vllm", "gemm", "bf16")]


def test_gemm_extrapolation_clipped_to_the_roofline(tmp_path):
    """A 2 x 2 x 2 GEMM table. At n = k = 8192 the last m span 1024 -> 2048 went 400 -> 1200 µs
    (slope ln 3 / ln 2 = 1.58); the roofline on 1000 TFLOP/s, 3 TB/s, 2-byte elements is
    compute-bound at both (m 1024: 2mnk / peak = 0.137 ms against (mk + nk + mn) 2 / bw = 0.056 ms;
    m 2048: 0.275 against 0.067 ms), slope 1: clipped, so m 4096 takes 1200 x 2."""
    table = _gemm_table(tmp_path)
    roof = gemm_roof(1000e12, 3e12, 2.0)
    t, outside = interpolate(table, (4096, 8192, 8192), roof)
    assert outside and t * 1e6 == pytest.approx(1200 * 2)
    # inside: (m 2048, n 4096, k 8192) is a grid point: row (m 2048, n 4096), k 8192 -> 600 µs
    assert interpolate(table, (2048, 4096, 8192), roof)[0] * 1e6 == pytest.approx(600)
    # n halfway in log between 4096 and 8192 at m 1024, k 4096: sqrt(100 x 300)
    assert interpolate(table, (1024, 4096 * 2 ** 0.5, 4096), roof)[0] * 1e6 == pytest.approx(math.sqrt(30000))


def test_vectorized_lookup_hand_values(tmp_path):
    """The grid's lookup: every point of an array at once (searchsorted on each sorted axis, the
    2^3 corners of each point's cell), each against log interpolation worked by hand on the
    2 x 2 x 2 GEMM table m [1024, 2048] x n [4096, 8192] x k [4096, 8192], µs (row (m, n), k):
    (1024, 4096): [100, 200], (1024, 8192): [300, 400], (2048, 4096): [500, 600], (2048, 8192): [700, 1200]."""
    table = _gemm_table(tmp_path)
    r = 2 ** 0.5                       # halfway in log between two powers of two
    points = [
        (2048, 4096, 4096),            # a grid corner: 500
        (1024, 8192, 8192),            # another: 400
        (1024 * 2 ** 0.25, 4096, 8192),  # m a quarter of the way in log, n and k on the grid: 200^0.75 x 600^0.25
        (2048, 4096 * r, 4096),        # n halfway at m 2048, k 4096: sqrt(500 x 700)
        (1024, 4096, 4096 * r),        # k halfway at m 1024, n 4096: sqrt(100 x 200)
        (1024 * r, 4096 * r, 4096 * r),  # the cell's centre: the geometric mean of all eight corners
        (2048, 8192, 4096 * 2 ** 0.75),  # k three quarters of the way at (2048, 8192): 700^0.25 x 1200^0.75
    ]
    hand = [500, 400, 200 ** 0.75 * 600 ** 0.25, math.sqrt(500 * 700), math.sqrt(100 * 200),
            (100 * 200 * 300 * 400 * 500 * 600 * 700 * 1200) ** (1 / 8), 700 ** 0.25 * 1200 ** 0.75]
    # 263.2, 591.6, 141.4, 396.0, 1048.7 µs between the corners: a swapped axis, a corner read from
    # the wrong side or a linear (not log) weight gives another number at all but the corners
    t, outside = interpolate_many(table, points, gemm_roof(1000e12, 3e12, 2.0))
    assert list(t * 1e6) == pytest.approx(hand, rel=1e-12)
    assert not outside.any()
    # a point's value does not read its companions: alone it is the same number
    assert interpolate(table, points[5], gemm_roof(1000e12, 3e12, 2.0))[0] * 1e6 == pytest.approx(hand[5], rel=1e-12)
    # outside on m with the others inside, in the same array: (4096, 8192, 8192) continues the
    # compute-bound last span 400 -> 1200 µs clipped to the roofline's slope 1: 1200 x 2 (as
    # test_gemm_extrapolation_clipped_to_the_roofline), the inside points unchanged beside it
    t, outside = interpolate_many(table, [points[2], (4096, 8192, 8192)], gemm_roof(1000e12, 3e12, 2.0))
    assert list(t * 1e6) == pytest.approx([hand[2], 2400], rel=1e-12) and list(outside) == [False, True]
    # the measured points around a point, per axis, as ops.parquet's expected_nearest says them
    assert nearest(table, points[2]) == "m 1024..2048 n 4096 k 8192"
    assert nearest(table, (4096, 8192, 8192)) == "m 2048 n 8192 k 8192"


@pytest.mark.parametrize("change, message", [
    (dict(rows=[[10, 0], [20, 400]]), "latency_us[0][1]: 0 µs is outside the plausible range"),
    (dict(rows=[[10, -5], [20, 400]]), "latency_us[0][1]: -5 µs is outside the plausible range"),
    (dict(rows=[[10, 100]]), "latency_us: 1 rows, the axes ask for 2"),
    (dict(rows=[[10, 100], [20, 400, 500]]), "latency_us[1]: 3 latencies, the last axis has 2 values"),
    (dict(axes=[{"name": "gpus", "values": [8, 2]}, {"name": "bytes", "values": [1000, 100000]}]),
     "axes[0].values: axis gpus is not ascending (8 then 2)"),
    (dict(axes=[{"name": "bytes", "values": [1000, 100000]}, {"name": "gpus", "values": [2, 8]}]),
     "axes ['bytes', 'gpus'] for all_reduce"),
    (dict(kernel="softmax"), "unknown kernel class 'softmax'"),
    (dict(kernel="prefill_mla", axes=[{"name": "batch", "values": [1, 2]}, {"name": "isl", "values": [16, 32]},
                                      {"name": "heads", "values": [16, 128]}], rows=[[1, 2]] * 3),
     "latency_us: 3 rows, the axes ask for 4"),
    (dict(kernel="mla_bmm", axes=[{"name": "tokens", "values": [1, 4]}, {"name": "heads", "values": [128, 16]}]),
     "axes[1].values: axis heads is not ascending (128 then 16)"),
    (dict(kernel="decode_mla", axes=[{"name": "heads", "values": [1, 2]}, {"name": "batch", "values": [1, 2]},
                                     {"name": "ctx", "values": [2, 4]}], rows=[[1, 2]] * 4),
     "axes ['heads', 'batch', 'ctx'] for decode_mla"),
    (dict(where="h200/nccl-2.29.2"), "a H100 nccl 2.29.2 table in h200/nccl-2.29.2/"),
    (dict(kernel="gemm", axes=[{"name": a, "values": list(range(1, 65))} for a in "mnk"]),
     f"262,144 grid points — keep at most {MAX_POINTS:,}"),
])
def test_bad_tables_are_one_line(tmp_path, change, message):
    root = tmp_path / "gpus" / "measured"
    args = dict(rows=[[10, 100], [20, 400]])
    args.update(change)
    path = write_table(root, args.pop("rows"), **args)
    with pytest.raises(SpecError) as e:
        load_measured(root)
    text = str(e.value)
    assert message in text and "\n" not in text
    assert text.startswith("gpus/measured/") and path.name in text


MOE_KEYS = {"names": ["hidden", "inter", "topk", "experts", "moe_tp", "moe_ep"],
            "values": [[2048, 768, 8, 128, 1, 2], [4096, 1536, 8, 128, 1, 8]]}


MLA_AXES = [{"name": "batch", "values": [1, 4]}, {"name": "heads", "values": [16, 128]},
            {"name": "ctx", "values": [1024, 4096]}]


def test_decode_mla_hand_values(tmp_path):
    """A 2 x 2 x 2 decode_mla table (batch [1, 4] x heads [16, 128] x ctx [1024, 4096], µs rows
    [[10, 20], [40, 80], [30, 60], [120, 240]]): on the grid the number; halfway in log on every
    axis the geometric mean of the 8 corners; beyond the largest batch the last span's slope
    (log(30/10) / log 4 = 0.79 at heads 16, ctx 1024), under the roofline's slope 1."""
    root = tmp_path / "gpus" / "measured"
    write_table(root, [[10, 20], [40, 80], [30, 60], [120, 240]], axes=MLA_AXES, kernel="decode_mla",
                variant="bf16_r512", framework="sglang", version="0.5.14")
    table = load_measured(root)[("H100", "sglang", "decode_mla", "bf16_r512")]
    roof = attention_roof("decode_mla")
    us = lambda point: interpolate(table, point, roof)[0] * 1e6     # noqa: E731
    assert us((4, 128, 4096)) == pytest.approx(240)
    assert us((1, 16, 4096)) == pytest.approx(20)
    corners = [10, 20, 40, 80, 30, 60, 120, 240]
    assert us((2, math.sqrt(16 * 128), 2048)) == pytest.approx(math.prod(corners) ** (1 / 8))       # 49.0 µs
    # batch 16 (one span of 4 beyond 4): 30 x (16 / 4)^(ln 3 / ln 4) = 30 x 3 = 90 µs
    t, outside = interpolate(table, (16, 16, 1024), roof)
    assert t * 1e6 == pytest.approx(90) and outside


@pytest.mark.parametrize("keys, kernel, message", [
    (None, "moe", "keys: the moe table lacks keys"),
    (MOE_KEYS, "all_reduce", "keys: the all_reduce table has keys"),
    ({"names": ["hidden", "inter", "topk", "experts", "moe_ep", "moe_tp"], "values": MOE_KEYS["values"]}, "moe",
     "keys.names: keys ['hidden', 'inter', 'topk', 'experts', 'moe_ep', 'moe_tp'] for moe"),
    ({"names": MOE_KEYS["names"], "values": [[2048, 768, 8, 128, 1, 2]] * 2}, "moe", "key [2048, 768, 8, 128, 1, 2] twice"),
    ({"names": MOE_KEYS["names"], "values": [[2048, 768, 8, 128, 1], [4096, 1536, 8, 128, 1, 8]]}, "moe",
     "keys.values[0]: 5 key values for 6 names"),
])
def test_bad_keyed_tables_are_one_line(tmp_path, keys, kernel, message):
    root = tmp_path / "gpus" / "measured"
    axes = [{"name": "tokens", "values": [1, 2]}] if kernel == "moe" else None
    path = write_table(root, [[10, 20], [30, 40]], axes=axes, kernel=kernel)
    if keys is not None:
        data = yaml.safe_load(path.read_text())
        rows = data.pop("latency_us")
        data.update(keys=keys, latency_us=rows)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as e:
        load_measured(root)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_keyed_rows_follow_their_keys(tmp_path):
    root = tmp_path / "gpus" / "measured"
    path = write_table(root, [[10, 20], [30, 40]], axes=[{"name": "tokens", "values": [1, 2]}], kernel="moe",
                       variant="bf16", framework="sglang", version="0.5.14")
    data = yaml.safe_load(path.read_text())
    rows = data.pop("latency_us")
    data.update(keys=MOE_KEYS, latency_us=rows)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    table = load_measured(root)[("H100", "sglang", "moe", "bf16")]
    # the second key's row: [30, 40] µs; 1.414 tokens is halfway in log: sqrt(30 x 40)
    curve = table.curve((4096, 1536, 8, 128, 1, 8))
    assert interpolate(curve, (2 ** 0.5,), lambda n: n)[0] * 1e6 == pytest.approx(math.sqrt(1200))
    assert table.curve((4096, 1536, 8, 128, 2, 4)) is None


def test_unknown_gpu_is_refused(tmp_path):
    root = tmp_path / "gpus" / "measured"
    write_table(root, [[10, 100], [20, 400]], gpu="H999")
    with pytest.raises(SpecError, match="unknown GPU 'H999'"):
        load_measured(root, gpus={"H100": None})


def test_the_repo_tables_load_and_stay_small():
    """Every committed table loads with its GPU known; the whole set stays lean (the import's
    distillation: under 1.6 MB for three frameworks (vLLM, SGLang, TensorRT-LLM) on three GPUs,
    TensorRT-LLM's MoE at two routings, not the package's 80 MB wheel)."""
    from engine.deploy.hardware import load_gpus
    tables = load_measured(REPO / "gpus" / "measured", load_gpus())
    assert {(g, k) for g, _, k, _ in tables} >= {(g, k) for g in ("H100", "H200", "B200")
                                                  for k in ("gemm", "all_reduce", "all_to_all",
                                                            "decode_attention", "prefill_attention", "moe")}
    size = sum(p.stat().st_size for p in (REPO / "gpus" / "measured").rglob("*.yaml"))
    assert size < 1_600_000


# -- the import, on a fixture package -------------------------------------------------------------

def _fixture_package(tmp_path, version="0.12.0"):
    """A package tree like aiconfigurator-core's, with one GPU, one framework and tiny tables."""
    import polars as pl
    site = tmp_path / "site"
    pkg = site / "aiconfigurator_core"
    (site / f"aiconfigurator_core-{version}.dist-info").mkdir(parents=True)
    data = pkg / "systems" / "data" / "h100_sxm"
    rows = []
    for m in (1, 2, 3):                    # m = 3 is off the power-of-two grid: dropped
        for n in (128, 256):
            for k in (128, 256):
                rows.append(dict(m=m, n=n, k=k, latency=0.001 * m + 0.00001 * n + 0.0000001 * k))
    gemm = pl.DataFrame(rows).with_columns(gemm_dtype=pl.lit("bfloat16"), kernel_source=pl.lit("torch"),
                                           device=pl.lit("NVIDIA H100 80GB HBM3"))
    (data / "gemm" / "sglang" / "0.5.14").mkdir(parents=True)
    gemm.write_parquet(data / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet")
    comm = pl.DataFrame([dict(num_gpus=g, message_size=s, latency=0.002 * g + s * 1e-8, backend=b,
                              allreduce_dtype="bfloat16", device="NVIDIA H100 80GB HBM3")
                         for g in (2, 4) for s in (128, 256) for b in ("sglang_graph", "sglang_eager")])
    (data / "comm" / "sglang" / "0.5.14").mkdir(parents=True)
    comm.write_parquet(data / "comm" / "sglang" / "0.5.14" / "custom_allreduce_perf.parquet")
    nccl = pl.DataFrame([dict(num_gpus=g, message_size=s, latency=0.01 * g + s * 1e-8, op_name=op,
                              nccl_dtype=dt, device="NVIDIA H100 80GB HBM3")
                         for g in (2, 8) for s in (256, 512) for op in ("all_reduce", "all_gather", "reduce_scatter",
                                                                        "alltoall") for dt in ("half", "int8")])
    (data / "comm" / "nccl" / "2.29.2").mkdir(parents=True)
    nccl.write_parquet(data / "comm" / "nccl" / "2.29.2" / "nccl_perf.parquet")
    attention = []
    for phase, lengths in (("context", (16, 32)), ("generation", (1, 3))):
        for b in (1, 2):
            for length in lengths:
                for h, kv in ((1, 1), (2, 1), (2, 2), (4, 2), (3, 2)):        # 3 / 2: no whole ratio, dropped
                    for dt in ("bfloat16", "fp8"):
                        attention.append(dict(phase=phase, batch_size=b, isl=length if phase == "context" else 1,
                                              step=0 if phase == "context" else length, num_heads=h,
                                              num_key_value_heads=kv, head_dim=128, window_size=0,
                                              kv_cache_dtype=dt, kernel_source="fa3", device="NVIDIA H100 80GB HBM3",
                                              latency=0.01 * b + 0.001 * length + 0.0001 * h + 0.00001 * kv))
    frame = pl.DataFrame(attention)
    (data / "attention" / "sglang" / "0.5.14").mkdir(parents=True)
    for phase in ("context", "generation"):
        frame.filter(pl.col("phase") == phase).drop("phase").write_parquet(
            data / "attention" / "sglang" / "0.5.14" / f"{phase}_attention_perf.parquet")
    moe = []
    for key, kernel, scale in (((2048, 768, 8, 128, 1, 2), "slow", 2.0), ((2048, 768, 8, 128, 1, 2), "fast", 1.0),
                               ((4096, 1536, 8, 128, 1, 8), "fast", 1.0)):
        for n in import_kernels.MOE_TOKENS:
            if key[0] == 4096 and n == 8192:
                continue                           # an incomplete curve: the shape is left out
            moe.append(dict(zip(("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"),
                                key), num_tokens=n, moe_dtype="bfloat16", distribution="balanced",
                            kernel_source=kernel, device="NVIDIA H100 80GB HBM3", latency=scale * (0.02 + 0.0001 * n)))
    (data / "moe" / "sglang" / "0.5.14").mkdir(parents=True)
    pl.DataFrame(moe).write_parquet(data / "moe" / "sglang" / "0.5.14" / "moe_perf.parquet")
    (pkg / "__init__.py").write_text("")
    return site


@pytest.fixture
def one_gpu_recipe(monkeypatch):
    monkeypatch.setattr(import_kernels, "SYSTEMS", {"h100_sxm": "H100"})
    monkeypatch.setattr(import_kernels, "RECIPES", {"0.12.0": import_kernels.Recipe({"sglang": "0.5.14"}, "2.29.2")})
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [n for n in sys.modules if n.startswith("aiconfigurator_core")]:
        monkeypatch.delitem(sys.modules, name)


def test_import_round_trip(tmp_path, one_gpu_recipe):
    """import -> file -> lookup: a grid point reads back the source's ms x 1000 to 4 digits, the
    element counts become bytes, the off-grid m is dropped, and the files name their source."""
    site = _fixture_package(tmp_path)
    out = tmp_path / "gpus" / "measured"
    assert import_kernels.main(["--site", str(site), "--out", str(out)]) == 0
    tables = load_measured(out)
    gemm = tables[("H100", "sglang", "gemm", "bf16")]
    assert [list(v) for v in gemm.values] == [[1, 2], [128, 256], [128, 256]]
    # m 2, n 256, k 128: 0.002 + 0.00256 + 0.0000128 ms = 4.5728 µs -> 4.573
    assert interpolate(gemm, (2, 256, 128), gemm_roof(1e15, 3e12, 2))[0] == pytest.approx(4.573e-6)
    graph = tables[("H100", "sglang", "all_reduce", "custom_graph")]
    assert list(graph.values[1]) == [256, 512]                        # 128, 256 bf16 elements
    nccl = tables[("H100", "nccl", "all_to_all", "nccl")]             # the source's `alltoall`, half rows
    # 8 GPUs, 512 half elements = 1024 bytes: 0.08 + 512e-8 ms = 80.00512 µs -> 80.01
    assert interpolate(nccl, (8, 1024), collective_roof("all_to_all"))[0] == pytest.approx(80.01e-6)
    decode = tables[("H100", "sglang", "decode_attention", "fp8_d128")]
    # the source's step 3 is 4 cached tokens; batch 2, 2 KV heads, 2 query heads per KV head (4
    # heads): 0.02 + 0.003 + 0.0004 + 0.00002 ms = 23.42 µs
    assert [list(v) for v in decode.values] == [[1, 2], [1, 2], [1, 2], [2, 4]]
    assert interpolate(decode, (2, 2, 2, 4), lambda *a: 1.0)[0] == pytest.approx(23.42e-6)
    moe = tables[("H100", "sglang", "moe", "bf16")]
    # one shape kept (the other lacks 8192 tokens), from the faster kernel source: at 64 tokens
    # 0.02 + 0.0064 ms = 26.4 µs (the slow source: twice that)
    assert list(moe.keys) == [(2048, 768, 8, 128, 1, 2)]
    assert interpolate(moe.curve((2048, 768, 8, 128, 1, 2)), (64,), lambda n: n)[0] == pytest.approx(26.4e-6)
    assert moe.curve((4096, 1536, 8, 128, 1, 8)) is None
    text = (out / "h100" / "sglang-0.5.14" / "gemm-bf16.yaml").read_text()
    assert "licence: Apache-2.0" in text and "aiconfigurator_core/systems/data/h100_sxm/gemm/sglang/0.5.14" in text


def test_import_round_trip_mla(tmp_path, monkeypatch, one_gpu_recipe):
    """A recipe that lists SGLang's MLA reads generation_mla_perf: per KV dtype a decode_mla table
    over batch, heads and context (the source's step + 1), the variant naming the latent rank."""
    import polars as pl
    site = _fixture_package(tmp_path)
    where = site / "aiconfigurator_core/systems/data/h100_sxm/mla/sglang/0.5.14"
    where.mkdir(parents=True)
    pl.DataFrame([dict(batch_size=b, num_heads=h, step=s, kv_cache_dtype=dt, mla_dtype="bfloat16", tp_size=128 // h,
                       kernel_source="flash_attention", device="NVIDIA H100 80GB HBM3",
                       latency=0.01 * b + 0.0001 * h + 0.00001 * s)
                  for b in (1, 2) for h in (16, 128) for s in (1, 3) for dt in ("bfloat16", "fp8")]
                 ).write_parquet(where / "generation_mla_perf.parquet")
    pl.DataFrame([dict(batch_size=b, num_heads=h, isl=n, step=0, kv_cache_dtype="bfloat16", mla_dtype="bfloat16",
                       tp_size=128 // h, kernel_source="flash_attention", device="NVIDIA H100 80GB HBM3",
                       latency=0.1 * b + 0.001 * n + 0.0001 * h)
                  for b in (1, 2) for h in (16, 128) for n in (8, 16, 32)]
                 ).write_parquet(where / "context_mla_perf.parquet")          # isl 8: below 16, dropped
    bmm = site / "aiconfigurator_core/systems/data/h100_sxm/mla_bmm/sglang/0.5.14"
    bmm.mkdir(parents=True)
    pl.DataFrame([dict(op_name=op, bmm_dtype=dt, num_tokens=n, num_heads=h, kernel_source="torch_bmm",
                       device="NVIDIA H100 80GB HBM3", latency=(0.002 if op == "mla_gen_pre" else 0.003) * n + 0.0001 * h)
                  for op in ("mla_gen_pre", "mla_gen_post") for dt in ("bfloat16", "fp8") for n in (1, 4)
                  for h in (16, 128)]).write_parquet(bmm / "mla_bmm_perf.parquet")
    monkeypatch.setattr(import_kernels, "RECIPES", {"0.12.0": import_kernels.Recipe({"sglang": "0.5.14"}, "2.29.2",
                                                                                   mla=("sglang",))})
    out = tmp_path / "gpus" / "measured"
    assert import_kernels.main(["--site", str(site), "--out", str(out)]) == 0
    mla = load_measured(out)[("H100", "sglang", "decode_mla", "fp8_r512")]
    assert [list(v) for v in mla.values] == [[1, 2], [16, 128], [2, 4]]
    # batch 2, 128 heads, step 3 = 4 cached tokens: 0.02 + 0.0128 + 0.00003 ms = 32.83 µs
    assert interpolate(mla, (2, 128, 4), attention_roof("decode_mla"))[0] == pytest.approx(32.83e-6)
    prefill = load_measured(out)[("H100", "sglang", "prefill_mla", "bf16_r512")]
    # 2 prompts of 32 tokens, 16 heads: 0.2 + 0.032 + 0.0016 ms = 233.6 µs
    assert [list(v) for v in prefill.values] == [[1, 2], [16, 32], [16, 128]]
    assert interpolate(prefill, (2, 32, 16), attention_roof("prefill_mla"))[0] == pytest.approx(233.6e-6)
    post = load_measured(out)[("H100", "sglang", "mla_bmm", "post_bf16_r512")]
    # the source's mla_gen_post at 4 tokens, 16 heads: 0.012 + 0.0016 ms = 13.6 µs
    assert [list(v) for v in post.values] == [[1, 4], [16, 128]]
    assert interpolate(post, (4, 16), attention_roof("mla_bmm"))[0] == pytest.approx(13.6e-6)


def test_import_refuses_an_unknown_version(tmp_path, one_gpu_recipe, capsys):
    site = _fixture_package(tmp_path, version="0.11.0")
    out = tmp_path / "gpus" / "measured"
    assert import_kernels.main(["--site", str(site), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "aiconfigurator-core 0.11.0 is not a version this import knows" in err and len(err.splitlines()) == 1
    assert not out.exists()


# -- expected times of a deployment ------------------------------------------------------------------

def _deployment(model, gpu, **kw):
    from pathlib import Path
    from engine.api import evaluate
    from engine.deploy import Options, ParallelConfig, find_gpu, load_gpus, plan
    from engine.deploy.fusion_table import load_tables
    framework = kw.pop("framework", "vllm")
    options = kw.pop("options", {})
    scenario = Scenario(kw.pop("batch", 64), 1024, 1024)
    built = plan(evaluate(model), find_gpu(load_gpus(), gpu), ParallelConfig(**kw),
                 Options(framework=framework, **options),
                 load_tables(Path(REPO / "corpus" / "fusion")).get(framework), scenario)
    return built.at(scenario)


def test_expected_never_below_the_bound_and_reads_the_table():
    d = _deployment("Meta-Llama-3.1-8B", "H100")
    s = d.summary
    assert s["ttft_expected_s"] >= s["ttft_bound_s"] and s["ttft_expected_s"] >= s["ttft_s"]
    assert s["tpot_expected_s"] >= s["tpot_bound_s"] and s["tpot_mean_expected_s"] >= s["tpot_mean_bound_s"]
    for phase in ("prefill", "decode"):
        for row in d.ops[phase]:
            assert row["t_expected_s"] >= row["t_sol_s"]
    # decode o_proj at 64 requests: a GEMM of m 64, n 4096, k 4096 (a grid point), 32 layers;
    # the data file's own number for it
    data = yaml.safe_load((REPO / "gpus/measured/h100/vllm-0.24.0/gemm-bf16.yaml").read_text())
    m, n, k = (a["values"] for a in data["axes"])
    us = data["latency_us"][m.index(64) * len(n) + n.index(4096)][k.index(4096)]
    row = next(r for r in d.ops["decode"] if r["op_name"] == "o_proj")
    assert row["measured"] and "m=64 n=4096 k=4096" in row["expected_src"]
    assert row["t_expected_s"] == pytest.approx(max(us * 1e-6 * 32, row["t_sol_s"]), rel=1e-9)


def test_without_tables_the_default_efficiency_consistency():
    """Consistency: on a GPU without measured tables every op is its bound / DEFAULT_EFFICIENCY and
    the phase times are the no-overlap estimate / DEFAULT_EFFICIENCY (the same composition)."""
    d = _deployment("Meta-Llama-3.1-8B", "MI300X")
    for row in d.ops["decode"]:
        assert not row["measured"] and row["t_expected_s"] == pytest.approx(row["t_sol_s"] / DEFAULT_EFFICIENCY)
    s = d.summary
    assert s["tpot_expected_s"] == pytest.approx(s["tpot_s"] / DEFAULT_EFFICIENCY)
    assert s["ttft_expected_s"] == pytest.approx(s["ttft_s"] / DEFAULT_EFFICIENCY)


def test_all_reduce_reads_the_collective_tables():
    d = _deployment("Meta-Llama-3.1-8B", "H100", tp=2, framework="sglang")
    rows = [r for r in d.ops["decode"] if r["op"] == "all_reduce"]
    assert rows and all(r["measured"] for r in rows)
    # 64 tokens x 4096 hidden x 2 bytes = 524,288 bytes per call on 2 GPUs, the fused all-reduce +
    # norm kernel's message too (not the norm's output besides)
    fused = [r for r in d.ops["decode"] if r["kind"] == "fused" and r["expected_src"].startswith("all_reduce-")]
    assert fused
    for r in rows + fused:
        assert "gpus=2 bytes=524288" in r["expected_src"], r["expected_src"]


def test_partial_sums_are_reduced_at_bf16_under_fp8_activations():
    """Hand derivation: Llama-3.1-8B decode at 64 requests on 2 H100s with FP8 weights and
    activations. o_proj and down_proj are row-parallel FP8 GEMMs whose outputs (BF16, 2 bytes:
    FP8 comes after the all-reduce + norm) are summed over the 2 GPUs: 64 x 4096 x 2 = 524,288
    bytes per call, as with BF16 activations; sent per GPU per call 2 x (2 - 1) / 2 x 524,288 =
    524,288 bytes, x 32 layers. At the FP8 activation's 1 byte it would be half."""
    d = _deployment("Meta-Llama-3.1-8B", "H100", tp=2, framework="sglang",
                    options={"weight_format": "fp8_block128", "act_dtype": "fp8"})
    rows = [r for r in d.ops["decode"] if r["op"] == "all_reduce"]
    fused = [r for r in d.ops["decode"] if r["kind"] == "fused" and r["expected_src"].startswith("all_reduce-")]
    assert rows and fused
    for r in rows + fused:
        assert "gpus=2 bytes=524288" in r["expected_src"], r["expected_src"]
    for r in rows:
        assert r["comm_bytes"] == pytest.approx(524_288 * r["repeat"]), r["op_name"]


def test_fp8_matmuls_read_the_fp8_table():
    """FP8 weights and activations on H100 run at FP8: their GEMMs read the per-tensor fp8 table,
    BF16 ones the bf16 table (a dtype mix-up would read a table twice as slow or fast)."""
    d = _deployment("Meta-Llama-3.1-8B", "H100", options={"weight_format": "fp8_block128", "act_dtype": "fp8"})
    row = next(r for r in d.ops["decode"] if r["op_name"] == "o_proj")
    assert row["compute_dtype"] == "fp8" and row["expected_src"].startswith("gemm-fp8 vllm")
    plain = _deployment("Meta-Llama-3.1-8B", "H100")
    assert next(r for r in plain.ops["decode"] if r["op_name"] == "o_proj")["expected_src"].startswith("gemm-bf16 ")


def test_attention_reads_its_table():
    """Llama-3.1-8B decode on H100 at tp 1: 32 query and 8 KV heads of 128, BF16 cache; the decode
    attention table at (64 requests, 8 KV heads, 4 query heads per KV head, 2048 cached tokens: a
    grid point), the data file's own number x 32 layers."""
    d = _deployment("Meta-Llama-3.1-8B", "H100")
    data = yaml.safe_load((REPO / "gpus/measured/h100/vllm-0.24.0/decode_attention-bf16_d128.yaml").read_text())
    b, kv, r, ctx = (a["values"] for a in data["axes"])
    us = data["latency_us"][(b.index(64) * len(kv) + kv.index(8)) * len(r) + r.index(4)][ctx.index(2048)]
    row = next(r for r in d.ops["decode"] if r["op_name"] == "flash_attention")
    assert "batch=64 kv_heads=8 q_per_kv=4 ctx=2048" in row["expected_src"] and "extrapolated" not in row["expected_src"]
    assert row["t_expected_s"] == pytest.approx(max(us * 1e-6 * 32, row["t_sol_s"]), rel=1e-9)


@pytest.mark.parametrize("degrees, expected", [
    # Llama-3.1-8B: hidden 4096, 32 query and 8 KV heads of 128, FFN 14336; tp 4 splits heads and
    # the FFN by 4: QKV n = (32 + 8 + 8) x 128 / 4 = 1536; o_proj and down_proj are row-parallel,
    # k split: 4096 / 4 = 1024 and 14336 / 4 = 3584; attention holds 8 / 4 = 2 KV heads, 4 query
    # heads per KV head
    (dict(tp=4), {"qkv_proj": "m=64 n=1536 k=4096", "o_proj": "m=64 n=4096 k=1024",
                  "down_proj": "m=64 n=4096 k=3584", "flash_attention": "batch=64 kv_heads=2 q_per_kv=4 ctx=2048"}),
    # two attention replicas: 64 requests are 32 per replica, each GPU whole heads
    (dict(tp=2, dp_attn=2), {"o_proj": "m=32 n=4096 k=4096", "flash_attention": "batch=32 kv_heads=8 q_per_kv=4"}),
])
def test_table_points_are_per_gpu(degrees, expected):
    d = _deployment("Meta-Llama-3.1-8B", "H100", **degrees)
    rows = {r["op_name"]: r for r in d.ops["decode"]}
    for name, at in expected.items():
        assert at in rows[name]["expected_src"], (name, rows[name]["expected_src"])


def test_moe_reads_its_curve():
    """Qwen3-30B-A3B (hidden 2048, experts of 768, top-8 of 128) on 2 H100 at tp 2, ep 2 under
    SGLang, BF16: the fused MoE kernel reads the curve of (2048, 768, 8, 128, moe_tp 1, moe_ep 2) at
    64 tokens (64 requests, one token each: a grid point), the data file's number x 48 layers."""
    d = _deployment("Qwen3-30B-A3B", "H100", tp=2, ep=2, framework="sglang")
    data = yaml.safe_load((REPO / "gpus/measured/h100/sglang-0.5.14/moe-bf16.yaml").read_text())
    row = data["keys"]["values"].index([2048, 768, 8, 128, 1, 2])
    us = data["latency_us"][row][data["axes"][0]["values"].index(64)]
    moe = next(r for r in d.ops["decode"] if r["op"] == "fused_moe")
    assert "tokens=64 hidden=2048 inter=768 topk=8 experts=128 moe_tp=1 moe_ep=2" in moe["expected_src"]
    assert moe["t_expected_s"] == pytest.approx(max(us * 1e-6 * 48, moe["t_sol_s"]), rel=1e-9)


@pytest.fixture(scope="module")
def deepseek_decode():
    """DeepSeek-V3 on 8 H100 under SGLang, tp 8 = dp_attn 8, ep 8, BF16 cache, 512 requests of
    1,024 + 1,024 tokens (one deployment for the MLA decode tests)."""
    return _deployment("DeepSeek-V3", "H100", tp=8, ep=8, dp_attn=8, batch=512, framework="sglang")


def test_mla_decode_reads_its_table(deepseek_decode):
    """DeepSeek-V3 decode on 8 H100 under SGLang, tp 8 = dp_attn 8, ep 8, BF16 cache, 512
    requests: each GPU holds 64 requests and all 128 query heads; the flash_mla step of the 58 MoE
    layers reads decode_mla-bf16_r512 at (64, 128, 2048 cached tokens: a grid point), the data
    file's number x 58."""
    d = deepseek_decode
    data = yaml.safe_load((REPO / "gpus/measured/h100/sglang-0.5.14/decode_mla-bf16_r512.yaml").read_text())
    b, h, ctx = (a["values"] for a in data["axes"])
    us = data["latency_us"][b.index(64) * len(h) + h.index(128)][ctx.index(2048)]
    rows = [r for r in d.ops["decode"] if r["op"] == "flash_mla"]
    moe = next(r for r in rows if float(r["repeat"]) == 58)
    assert "batch=64 heads=128 ctx=2048" in moe["expected_src"]
    assert "decode_mla-bf16_r512 sglang" in moe["expected_src"] and "extrapolated" not in moe["expected_src"]
    assert moe["t_expected_s"] == pytest.approx(max(us * 1e-6 * 58, moe["t_sol_s"]), rel=1e-9)


def test_prefill_mla_reads_its_table():
    """DeepSeek-V3 prefill on 8 H100 under SGLang, tp 8 = dp_attn 8: 8 prompts of 1,024 tokens
    are one per GPU with all 128 heads; the MoE layers' attention reads prefill_mla-bf16_r512 at
    (1, 1024, 128: a grid point), the data file's number x 58. Llama (no latent) has no MLA table."""
    from pathlib import Path
    from engine.api import evaluate
    from engine.deploy import Options, ParallelConfig, find_gpu, load_gpus, plan
    from engine.deploy.fusion_table import load_tables
    scenario = Scenario(8, 1024, 1)
    d = plan(evaluate("DeepSeek-V3"), find_gpu(load_gpus(), "H100"), ParallelConfig(tp=8, ep=8, dp_attn=8),
             Options(framework="sglang"), load_tables(Path(REPO / "corpus" / "fusion")).get("sglang"),
             scenario).at(scenario)
    data = yaml.safe_load((REPO / "gpus/measured/h100/sglang-0.5.14/prefill_mla-bf16_r512.yaml").read_text())
    b, n, h = (a["values"] for a in data["axes"])
    us = data["latency_us"][b.index(1) * len(n) + n.index(1024)][h.index(128)]
    row = next(r for r in d.ops["prefill"] if r["op"] == "flash_attention" and float(r["repeat"]) == 58)
    assert "prefill_mla-bf16_r512 sglang" in row["expected_src"] and "batch=1 isl=1024 heads=128" in row["expected_src"]
    assert row["t_expected_s"] == pytest.approx(max(us * 1e-6 * 58, row["t_sol_s"]), rel=1e-9)
    plain = _deployment("Meta-Llama-3.1-8B", "H100", framework="sglang")
    assert not any("_mla" in r["expected_src"] for r in plain.ops["prefill"])


def test_mla_tables_only_for_their_shape_and_dense_attention():
    """GLM-5's MLA (latent 512 but query/key heads of 192 + 64, value heads of 256) is another
    kernel than the tables' DeepSeek-V3 shape: none of its MLA steps reads an MLA table;
    DeepSeek-V3.2's decode attention is sparse (DSA: min(2048, ctx) tokens): its flash_mla reads
    none, its per-head matmuls (DeepSeek-V3's shapes) do."""
    glm = _deployment("GLM-5", "H100", tp=8, ep=8, dp_attn=8, batch=64, framework="sglang")
    assert not any("_mla" in r["expected_src"] or "mla_" in r["expected_src"]
                   for phase in ("prefill", "decode") for r in glm.ops[phase])
    v32 = {r["op_name"]: r for r in _deployment("DeepSeek-V3.2", "H100", tp=8, ep=8, dp_attn=8, batch=64,
                                                  framework="sglang").ops["decode"]}
    assert v32["flash_mla"]["expected_src"] == f"bound / {DEFAULT_EFFICIENCY:g}"
    assert v32["q_absorb"]["expected_src"].startswith("mla_bmm-pre_")


def test_mla_bmm_reads_its_side(deepseek_decode):
    """The same deployment's per-head matmuls: q_absorb writes the latent (``pre``), the decode
    output's up-projection reads it (``post``); each at 64 tokens and 128 heads on one GPU (grid
    points), the data file's number x 58 MoE layers, at the step's compute dtype."""
    d = deepseek_decode
    for name, side in (("q_absorb", "pre"), ("attn", "post")):
        row = next(r for r in d.ops["decode"] if r["op_name"] == name and float(r["repeat"]) == 58)
        assert "tokens=64 heads=128" in row["expected_src"]
        variant = f"{side}_{row['compute_dtype']}_r512"
        data = yaml.safe_load((REPO / f"gpus/measured/h100/sglang-0.5.14/mla_bmm-{variant}.yaml").read_text())
        n, h = (a["values"] for a in data["axes"])
        us = data["latency_us"][n.index(64)][h.index(128)]
        assert row["expected_src"].startswith(f"mla_bmm-{variant} sglang")
        assert row["t_expected_s"] == pytest.approx(max(us * 1e-6 * 58, row["t_sol_s"]), rel=1e-9)


@pytest.mark.parametrize("command, table", [
    (["deploy", "Qwen3-8B", "--gpu", "H100"], "h100/vllm-0.24.0/gemm-bf16.yaml"),
    (["check"], "h100/vllm-0.24.0/gemm-bf16.yaml"),
    (["deploy", "DeepSeek-V3", "--gpu", "H100", "--framework", "sglang"], "h100/sglang-0.5.14/decode_mla-bf16_r512.yaml"),
])
def test_a_broken_table_stops_the_command_in_one_line(command, table, tmp_path, monkeypatch, capsys):
    """Inside a checkout whose gpus/measured/ table lost a row (a truncated file): `deploy` (this
    GPU's tables: a GEMM table, or an MLA table under SGLang) and `check` (every table) exit 2 with
    one line naming the file and field, and write nothing."""
    import shutil
    from site_builder.cli import main
    shutil.copytree(REPO / "corpus", tmp_path / "corpus")
    (tmp_path / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    shutil.copytree(REPO / "gpus", tmp_path / "gpus")
    path = tmp_path / "gpus/measured" / table
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))                   # the last latency row gone
    monkeypatch.chdir(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert main(command) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"error: gpus/measured/{table}:") and \
        "latency_us: " in captured.err and "rows, the axes ask for" in captured.err, captured.err
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before


#: (model, GPU, framework, KV dtype, degrees, prefill seq per point (ctx below), tables the trees must read)
TREE_CASES = [
    ("Llama-3.1-8B", "H100", "sglang", "fp8", dict(tp=2), [700.0, 8000.0, 3.0],
     {"gemm-bf16.yaml", "decode_attention-fp8_d128.yaml", "all_reduce-custom_graph.yaml", "all_reduce-nccl.yaml"}),
    # DeepSeek-V3's MLA: the prefill points' second has no cached prefix (seq = ctx: prefill_mla
    # applies), the others have one (it does not); decode reads decode_mla and both BMM sides
    ("DeepSeek-V3", "H200", "sglang", "bf16", dict(tp=8, ep=8, dp_attn=8), [700.0, 8700.0, 3.0],
     {"decode_mla-bf16_r512.yaml", "prefill_mla-bf16_r512.yaml", "mla_bmm-pre_fp8_r512.yaml",
      "mla_bmm-post_fp8_r512.yaml"}),   # FP8 weights: the FP8 BMM tables
]


@pytest.mark.parametrize("model, gpu, fw, kv, degrees, prefill_seq, read", TREE_CASES, ids=[c[0] for c in TREE_CASES])
def test_expected_trees_equal_the_lookup_consistency(model, gpu, fw, kv, degrees, prefill_seq, read):
    """Consistency (the engine against itself): each step's exported expected-time tree
    (expected_tree: lookup nodes over distilled tables, evaluated by formula_tree with
    node_lookup) gives what expected_steps gives at off-grid points, inside and outside the
    measured ranges: Llama-3.1-8B on 2x H100 (TP2, SGLang, FP8 KV: GEMMs, FP8-KV attention, both
    all-reduce tables), DeepSeek-V3 on 8x H200 (SGLang, DP8 attention, EP8: the three MLA kernel
    classes, their applicability conditions included); a distilled GEMM table keeps 2 values of k
    (and of n where n is a number: Llama's)."""
    import numpy as np
    from engine.deploy.measured import Lookup, expected_steps, expected_tree, member_ops, node_lookup
    from engine.language import formula_tree
    from tests.deploy_helpers import make_plan
    p = make_plan(model, gpu, fw, None, kv, **degrees)
    s = p.structure
    tables = load_measured(gpu=gpu, framework=fw)
    found = {}

    def ref(entry):
        return found.setdefault(str(entry), (len(found), entry))[0]
    lookups = 0
    for phase, seq in (("prefill", prefill_seq), ("decode", [1.0, 1.0, 1.0])):
        batch, seq, ctx = np.array([3.0, 37.0, 500.0]), np.array(seq), np.array([900.0, 8700.0, 100_000.0])
        values = s.compiled[phase].evaluate(p.gpu, batch, seq, ctx, p.kv_bytes)
        want = expected_steps(p, phase, batch, seq, ctx, tables, values)[0].reshape(len(batch), -1)
        lookup = Lookup(p.gpu, fw, phase, tables, kv, s.config, s.ev.bound)
        trees = [expected_tree(st, lookup, member_ops(s, phase), ref) for st in s.programs[phase].steps]
        evaluate = node_lookup({i: e for i, e in found.values()})
        t_sol = np.broadcast_to(values["t_sol"], (len(trees), len(batch)))
        for j in range(len(batch)):
            env = {"batch": batch[j], "seq": seq[j], "ctx": ctx[j], "kv_bytes": p.kv_bytes}
            for i, tree in enumerate(trees):
                got = formula_tree.evaluate(tree, dict(env, t_sol=t_sol[i, j]), evaluate)
                assert got == pytest.approx(want[j, i], rel=1e-12), (phase, s.programs[phase].steps[i].uid)
        lookups += sum(t[0] == "pw" for t in trees)
    assert lookups >= 10
    gemm = [e for _, e in found.values() if e["axes"] == ["m", "n", "k"]]
    assert gemm and all(len(e["values"][2]) == 2 for e in gemm)
    if model == "Llama-3.1-8B":         # every matmul's n a number (DeepSeek-V3's has one that varies)
        assert all(len(e["values"][1]) == 2 for e in gemm)
    assert {e["path"].rsplit("/", 1)[-1] for _, e in found.values()} >= read
