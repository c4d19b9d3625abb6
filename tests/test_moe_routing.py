"""Uneven expert routing: an expert-parallel fused MoE reads the measured table of its framework's
routing (``moe_routing:`` of corpus/fusion/<framework>.yaml; docs/deployment.md "Uneven expert
routing"), the balanced table at moe_ep 1 and for a framework that states none.

Expectations come from the data files' own numbers and from hand arithmetic on a two-point table.
"""
from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from engine.deploy.fusion_table import BALANCED, load_table as load_fusion, moe_routing_of
from engine.deploy.measured import Lookup, Table, _tables_for, interpolate
from engine.language.errors import SpecError

from tests.conftest import REPO
from tests.test_measured import _deployment, _fixture_package, import_kernels  # the measured tests' helpers

KEY_EP2 = (8, 4, 2, 4, 1, 2)        # hidden 8, expert inter 4, top-2 of 4 experts, moe_tp 1, moe_ep 2
KEY_EP1 = (8, 4, 2, 4, 2, 1)
BOUND = {"hidden": 8, "d_ff_expert": 4, "top_k": 2, "n_experts": 4}


def _moe(variant: str, us: dict) -> Table:
    """A two-point MoE table (tokens 1 and 2) per key: ``us`` key -> (µs at 1 token, µs at 2)."""
    keys = {k: i for i, k in enumerate(us)}
    seconds = np.array([us[k] for k in us], dtype=float) * 1e-6
    return Table("moe", variant, "H100", "trtllm", "1.3.0rc20", ("tokens",), (np.array([1.0, 2.0]),), seconds,
                 f"gpus/measured/h100/trtllm-1.3.0rc20/moe-{variant}.yaml", "hand", keys)


TABLES = {("H100", "trtllm", "moe", "fp8"): _moe("fp8", {KEY_EP2: (10, 20), KEY_EP1: (12, 24)}),
          ("H100", "trtllm", "moe", "fp8_power_law_1.2"): _moe("fp8_power_law_1.2", {KEY_EP2: (30, 45)})}


def _lookup(tp: int, ep: int, routing: str) -> Lookup:
    return Lookup(SimpleNamespace(key="H100"), "trtllm", "decode", TABLES, "bf16", SimpleNamespace(tp=tp, ep=ep),
                  BOUND, routing)


def test_expert_parallel_reads_the_routing_table_by_hand():
    """At moe_ep 2 under power_law_1.2 the power-law curve: at 1.5 tokens, log-linear between
    (1, 30 µs) and (2, 45 µs): 30 x 1.5^(ln 1.5 / ln 2) = 30 x 1.2677 = 38.03 µs; the balanced
    curve would give 10 x 1.5 = 15 µs (10 -> 20 doubles with the tokens)."""
    [curve] = _tables_for(_lookup(2, 2, "power_law_1.2"), "moe", "fp8")
    assert curve.variant == "fp8_power_law_1.2"
    assert interpolate(curve, (1.5,), lambda n: n)[0] == pytest.approx(30e-6 * 1.5 ** (math.log(1.5) / math.log(2)))
    assert interpolate(curve, (1.5,), lambda n: n)[0] == pytest.approx(38.03e-6, rel=1e-3)
    [balanced] = _tables_for(_lookup(2, 2, BALANCED), "moe", "fp8")
    assert balanced.variant == "fp8" and interpolate(balanced, (1.5,), lambda n: n)[0] == pytest.approx(15e-6)


def test_one_expert_rank_reads_balanced_and_a_missing_routing_reads_nothing():
    """moe_ep 1 (tp 2, ep 1: moe_tp 2): one rank runs every expert, the balanced curve (12 µs at
    1 token) whatever the routing; a routing whose table is not on file has no table (the op
    falls to bound / 0.7), never the balanced one in its place."""
    [curve] = _tables_for(_lookup(2, 1, "power_law_1.2"), "moe", "fp8")
    assert curve.variant == "fp8" and interpolate(curve, (1.0,), lambda n: n)[0] == pytest.approx(12e-6)
    assert _tables_for(_lookup(2, 2, "power_law_1.01"), "moe", "fp8") == []


def _moe_row(framework: str, **degrees) -> dict:
    d = _deployment("Qwen3-235B-A22B", "H200", framework=framework, batch=64, **degrees)
    return next(r for r in d.ops["decode"] if r["op"] == "fused_moe")


def _file_us(framework: str, variant: str, key: list, tokens: int) -> float:
    data = yaml.safe_load((REPO / f"gpus/measured/h200/{framework}/moe-{variant}.yaml").read_text())
    row = data["keys"]["values"].index(key)
    return data["latency_us"][row][data["axes"][0]["values"].index(tokens)]


def test_trtllm_expert_parallel_moe_reads_the_power_law_file():
    """Qwen3-235B-A22B (hidden 4096, experts of 1536, top-8 of 128, 94 layers) on 8 H200 under
    TensorRT-LLM, tp 8 = dp_attn 8, ep 8, BF16: the fused MoE at 64 tokens (a grid point) is the
    power-law file's number x 94 layers; at ep 1 (moe_tp 8) the balanced file's."""
    row = _moe_row("trtllm", tp=8, ep=8, dp_attn=8)
    us = _file_us("trtllm-1.3.0rc20", "bf16_power_law_1.2", [4096, 1536, 8, 128, 1, 8], 64)
    assert "moe-bf16_power_law_1.2 trtllm" in row["expected_src"]
    assert row["t_expected_s"] == pytest.approx(max(us * 1e-6 * 94, row["t_sol_s"]), rel=1e-9)
    row = _moe_row("trtllm", tp=8, ep=1)
    us = _file_us("trtllm-1.3.0rc20", "bf16", [4096, 1536, 8, 128, 8, 1], 64)
    assert "moe-bf16 trtllm" in row["expected_src"]
    assert row["t_expected_s"] == pytest.approx(max(us * 1e-6 * 94, row["t_sol_s"]), rel=1e-9)


def test_the_power_law_file_is_what_its_selection_says():
    """The imported power-law table names its source selection and holds only moe_ep > 1 curves."""
    data = yaml.safe_load((REPO / "gpus/measured/h200/trtllm-1.3.0rc20/moe-fp8_power_law_1.2.yaml").read_text())
    assert "distribution == power_law_1.2" in data["source"]["selection"]
    assert all(k[-1] > 1 for k in data["keys"]["values"])


def test_fusion_tables_state_their_routing(tmp_path):
    """trtllm.yaml states power_law_1.2 with its source; vllm.yaml states none (balanced); an
    unknown routing is one line naming the file and field."""
    trtllm = load_fusion(REPO / "corpus" / "fusion" / "trtllm.yaml")
    assert moe_routing_of(trtllm) == "power_law_1.2" and moe_routing_of(None) == BALANCED
    assert moe_routing_of(load_fusion(REPO / "corpus" / "fusion" / "vllm.yaml")) == BALANCED
    text = (REPO / "corpus" / "fusion" / "trtllm.yaml").read_text()
    path = tmp_path / "trtllm.yaml"
    path.write_text(text.replace("distribution: power_law_1.2", "distribution: zipf", 1))
    with pytest.raises(SpecError) as err:
        load_fusion(path)
    line = err.value.one_line()
    assert "trtllm.yaml:" in line and "distribution" in line and "zipf" in line and "\n" not in line


def test_import_round_trip_of_the_routing_tables(tmp_path, monkeypatch):
    """import -> file -> lookup: a recipe naming ``power_law_1.2`` for a framework writes
    ``moe-bf16_power_law_1.2`` beside the balanced table, with only the moe_ep > 1 curves, each
    read back at the source's ms x 1000: power-law rows at 3 x (0.02 + 0.0001 n) ms, so 64 tokens
    read 3 x 26.4 = 79.2 µs; the balanced table is unchanged (26.4 µs)."""
    import polars as pl
    from engine.deploy.measured import load_measured
    monkeypatch.setattr(import_kernels, "SYSTEMS", {"h100_sxm": "H100"})
    monkeypatch.setattr(import_kernels, "RECIPES", {"0.12.0": import_kernels.Recipe(
        {"sglang": "0.5.14"}, "2.29.2", moe_routing=(("sglang", "power_law_1.2"),))})
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [n for n in sys.modules if n.startswith("aiconfigurator_core")]:
        monkeypatch.delitem(sys.modules, name)
    site = _fixture_package(tmp_path)
    path = site / "aiconfigurator_core/systems/data/h100_sxm/moe/sglang/0.5.14/moe_perf.parquet"
    balanced = pl.read_parquet(path)
    uneven = balanced.with_columns(pl.lit("power_law_1.2").alias("distribution"), pl.col("latency") * 3)
    ep1 = uneven.filter(pl.col("moe_ep_size") == 2).with_columns(pl.lit(1).cast(pl.Int64).alias("moe_ep_size"),
                                                                 pl.lit(2).cast(pl.Int64).alias("moe_tp_size"))
    pl.concat([balanced, uneven, ep1]).write_parquet(path)
    out = tmp_path / "gpus" / "measured"
    assert import_kernels.main(["--site", str(site), "--out", str(out)]) == 0
    tables = load_measured(out)
    power = tables[("H100", "sglang", "moe", "bf16_power_law_1.2")]
    assert list(power.keys) == [(2048, 768, 8, 128, 1, 2)]              # the moe_ep 1 curve is left out
    assert interpolate(power.curve((2048, 768, 8, 128, 1, 2)), (64,), lambda n: n)[0] == pytest.approx(79.2e-6)
    plain = tables[("H100", "sglang", "moe", "bf16")]
    assert interpolate(plain.curve((2048, 768, 8, 128, 1, 2)), (64,), lambda n: n)[0] == pytest.approx(26.4e-6)
