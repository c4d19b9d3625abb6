"""The time columns' stored precision (docs/results.md "Precision"), by hand.

engine.batch.schema.stored_time rounds a float64 time to the float32 its column stores: a lower
bound down (the largest float32 not above it), any other time to the nearest. The expectations are
IEEE 754 single-precision bit patterns written out here (0.1 is 0x3DCCCCCD to the nearest, above
0.1; its predecessor 0x3DCCCCCC is below; 0.7 is 0x3F333333 to the nearest, below 0.7), not values
the code under test computes.
"""
from __future__ import annotations

import struct

import numpy as np
import polars as pl


def _f32(hex_bits: str) -> float:
    """The float32 of big-endian bit pattern ``hex_bits``, as a Python float (exact)."""
    return struct.unpack(">f", bytes.fromhex(hex_bits))[0]


def test_a_bound_whose_nearest_float32_is_above_it_is_stored_as_the_predecessor():
    from engine.batch.schema import stored_time
    above, below = _f32("3DCCCCCD"), _f32("3DCCCCCC")
    assert below < 0.1 < above                                    # 0.1 lies between the two
    assert float(stored_time("tpot_s", 0.1)) == above             # an estimate: the nearest
    assert float(stored_time("tpot_bound_s", 0.1)) == below       # a bound: down, still a bound
    assert float(stored_time("step_bound_s", 0.1)) == below
    assert float(stored_time("t_expected_s", 0.1)) == above       # ops: the nearest
    # 0.7's nearest float32 is already below it: the bound is that one
    near = _f32("3F333333")
    assert near < 0.7
    assert float(stored_time("ttft_bound_s", 0.7)) == float(stored_time("ttft_s", 0.7)) == near


def test_a_value_that_is_a_float32_is_stored_unchanged():
    from engine.batch.schema import stored_time
    for value in (0.375, 2.0 ** -20, 0.0, 3.0, _f32("3DCCCCCD")):
        for name in ("tpot_s", "tpot_bound_s", "tpot_mean_bound_s", "compute_time_s"):
            assert float(stored_time(name, value)) == value, (name, value)


def test_an_order_between_two_times_holds_as_stored():
    """Planted pairs (expected, bound) with expected >= bound, in float64: stored, expected >= bound
    still. 0.7 = 0.7 is the case a float64 bound beside a float32 estimate would break (the
    estimate's nearest float32 is below 0.7); 0.1 + 2^-60 just above a bound of 0.1."""
    from engine.batch.schema import stored_time
    expected = np.array([0.7, 0.1, 0.1 + 2.0 ** -60, 1e-6, 3.0])
    bound = np.array([0.7, 0.1, 0.1, 1e-6, 2.999999])
    assert (expected >= bound).all()
    stored_e, stored_b = stored_time("tpot_expected_s", expected), stored_time("tpot_bound_s", bound)
    assert stored_e.dtype == stored_b.dtype == np.float32
    assert (stored_e >= stored_b).all() and (stored_b.astype(np.float64) <= bound).all()
    assert float(stored_e[0]) < 0.7            # why the bound is rounded too: a float64 bound would be above it
    # the array form is the scalar form, element by element
    assert [float(stored_time("tpot_bound_s", b)) for b in bound] == stored_b.astype(np.float64).tolist()


def test_the_schema_stores_every_time_as_float32_and_the_worst_rate_nowhere():
    """The columns docs/results.md "Precision" names (written out here) are Float32, the four lower
    bounds the ones rounded down; every other float column stays Float64; tokens_per_s_per_gpu is a
    documented division (UNSTORED), not a column; the written frame rounds through stored_time."""
    from engine.batch.parquet_writer import _frame
    from engine.batch.schema import DEPLOYMENTS_SCHEMA, LOWER_BOUNDS, OPS_SCHEMA, UNSTORED
    times = {"ttft_s", "tpot_s", "tpot_mean_s", "ttft_bound_s", "tpot_bound_s", "tpot_mean_bound_s", "ttft_expected_s",
             "tpot_expected_s", "tpot_mean_expected_s", "step_time_s", "step_bound_s", "step_expected_s",
             "compute_time_s", "memory_time_s", "comm_time_s"}
    assert {k for k, (t, _) in DEPLOYMENTS_SCHEMA.items() if t == pl.Float32} == times
    assert {k for k, (t, _) in OPS_SCHEMA.items() if t == pl.Float32} == {"t_compute_s", "t_memory_s", "t_comm_s",
                                                                          "t_expected_s"}
    assert LOWER_BOUNDS == {"ttft_bound_s", "tpot_bound_s", "tpot_mean_bound_s", "step_bound_s"}
    assert "tokens_per_s_per_gpu" not in DEPLOYMENTS_SCHEMA and "batch / tpot_s / GPUs" in UNSTORED["tokens_per_s_per_gpu"]
    schema = {"tpot_s": DEPLOYMENTS_SCHEMA["tpot_s"], "tpot_bound_s": DEPLOYMENTS_SCHEMA["tpot_bound_s"],
              "flops": DEPLOYMENTS_SCHEMA["flops"]}
    columns = {"tpot_s": np.array([0.1]), "tpot_bound_s": np.array([0.1]), "flops": np.array([0.1])}
    frame = _frame(columns, schema)
    assert frame.row(0) == (_f32("3DCCCCCD"), _f32("3DCCCCCC"), 0.1)
    assert columns["tpot_bound_s"][0] == 0.1                  # the caller's columns are not changed


def test_the_worst_case_rate_is_a_float64_division_of_the_stored_time():
    """engine.serving.steady.worst_rate: batch / tpot_s / n_gpus from the stored float32 time, in
    float64 (polars alone would divide a Float32 in float32). By hand: 8 / 0x3DCCCCCD / 2."""
    from engine.serving.steady import steady_rate, worst_rate
    tpot = _f32("3DCCCCCD")
    frame = pl.DataFrame({"batch": [8], "n_gpus": [2], "tpot_s": pl.Series([tpot], dtype=pl.Float32),
                          "tpot_mean_s": pl.Series([tpot], dtype=pl.Float32)})
    got = frame.select(worst=worst_rate(), steady=steady_rate())
    assert got.dtypes == [pl.Float64, pl.Float64]
    assert got.row(0) == (8 / tpot / 2, 8 / tpot / 2) and got.row(0)[0] != 40.0
