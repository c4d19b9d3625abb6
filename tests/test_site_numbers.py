"""Grid rows checked by hand, and the numbers the pages show checked against those rows.

Llama-3.1-8B is built over a tiny grid (one H100 and two, vLLM, BF16 KV, prompts of 1K and 4K
tokens, batches 1 and 8, one per-op point; Qwen3.5-27B beside it: the site is tests/test_site_polish.py's
too, tests/site_helpers.H100_PAIR_GRID), then the site is rendered from the results and driven in
headless Chromium (the fixtures of tests/test_site_browser.py). Every check here reads Llama's rows.

1. A few rows of ``deployments/`` and ``ops/`` against values derived by hand from config.json
   (hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, FFN 14336, vocab 128256) and the H100's
   figures (80 GB, NVLink4 900 GB/s both ways): the grid build is checked absolutely, not only
   against ``archledger deploy`` (tests/test_build.py, a consistency test).
2. The gallery, the model page and one deployment selection: every number shown equals the Parquet
   value it comes from, to the precision displayed (3 significant digits), so a display bug (a
   wrong field, unit, row or phase) cannot hide behind a correct engine.
"""
from __future__ import annotations

import json
import math
import re

import polars as pl
import pytest

from tests.site_helpers import H100_PAIR_GRID, H100_PAIR_MODELS, shared_small_site, served, result_tables
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice. The group holds tests/test_site_numbers.py and
#: tests/test_site_polish.py, which read one small site (tests/site_helpers.H100_PAIR_GRID, one build
#: per process; apart, each module built its own).
pytestmark = pytest.mark.xdist_group("site_h100_pair")

MODEL = "meta-llama/Meta-Llama-3.1-8B"
SLUG = "meta-llama--Meta-Llama-3.1-8B"
GRID = H100_PAIR_GRID

# Llama-3.1-8B by hand (config.json)
HID, L, HEADS, KVH, FF, VOCAB = 4096, 32, 32, 8, 14336, 128256
D = HID // HEADS
PARAMS = L * (2 * HID * HID + 2 * HID * KVH * D + 3 * HID * FF + 2 * HID) + 2 * VOCAB * HID + HID  # 8,030,261,248
NORMS = (2 * L + 1) * HID * 2                  # RMSNorm weights, kept whole on every GPU (bytes)
KV_TOKEN = 2 * L * KVH * D * 2                 # 131,072 B per token, BF16
USABLE = 0.9 * 81559 * 2**20                # nvidia-smi's 81559MiB on an H100 80GB, x --hbm-fraction 0.9
NVLINK4 = 900e9 / 2


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return shared_small_site(tmp_path_factory, GRID, H100_PAIR_MODELS)


@pytest.fixture(scope="module")
def tables(out):
    return result_tables(out)


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


def _one(frame: pl.DataFrame, **where) -> dict:
    for k, v in where.items():
        frame = frame.filter(pl.col(k) == v)
    assert frame.height == 1, (where, frame.height)
    return frame.row(0, named=True)


def _deployment(tables, n_gpus, phase="decode", batch=8, input_len=1024):
    return _one(tables["deployments"], model_id=MODEL, gpu="H100", n_gpus=n_gpus, framework="vllm",
                kv_dtype="bf16", phase=phase, batch=batch, input_len=input_len, output_len=256)


# -- 1. grid rows by hand ---------------------------------------------------------------------------

def test_deployment_rows_by_hand(tables):
    """One H100 (usable 0.9 x 81,559 MiB = 76,968,728,985.6 B): weights 8,030,261,248 x 2 B; KV
    131,072 B/token x 1280; the prefill step of 8192 tokens (8 prompts of 1024) reserves its largest
    kernel, SiLU-and-mul: 3 x 8192 x 14336 x 2 B = 704,643,072 B; vLLM's runtime reserve (its
    non-torch memory, corpus/fusion/vllm.yaml) 0.13 GiB on one GPU; capacity floor((60,908,206,489.6
    - 139,586,437.12 - 704,643,072) / 167,772,160) = 358; 8 whole prompts per step. Two H100 (TP 2):
    matrices halved, norms whole: (16,060,522,496 - 532,480) / 2 + 532,480 = 8,030,527,488 B;
    SiLU-and-mul on half the FFN: 3 x 8192 x 7168 x 2 B = 352,321,536 B; reserve 0.13 + 0.42 GiB
    (collective buffers) = 590,558,003.2 B; 4 of 8 KV heads per GPU: floor((76,968,728,985.6 -
    8,030,527,488 - 590,558,003.2 - 352,321,536) / 83,886,080) = 810 requests."""
    one = _deployment(tables, 1)
    assert PARAMS == 8_030_261_248
    assert one["weight_bytes_per_gpu"] == PARAMS * 2
    assert one["usable_bytes_per_gpu"] == USABLE
    assert one["kv_bytes_per_request"] == KV_TOKEN * 1280 == 167_772_160
    assert one["kv_bytes_per_gpu"] == 8 * KV_TOKEN * 1280
    step = 3 * 8192 * FF * 2
    assert one["activation_bytes_per_gpu"] == step
    reserve = 0.13 * 2**30
    assert one["reserve_bytes_per_gpu"] == reserve
    assert one["max_concurrent_requests"] == math.floor(
        (USABLE - PARAMS * 2 - reserve - step) / (KV_TOKEN * 1280)) == 358
    assert one["max_prefill_batch"] == 8192 // 1024 == 8
    assert one["fits"] and not one["extrapolated"] and one["shortfall_bytes"] == 0
    two = _deployment(tables, 2)
    weights = (PARAMS * 2 - NORMS) / 2 + NORMS
    assert two["weight_bytes_per_gpu"] == weights == 8_030_527_488
    assert two["kv_bytes_per_request_per_gpu"] == KV_TOKEN * 1280 / 2
    assert two["activation_bytes_per_gpu"] == 3 * 8192 * (FF // 2) * 2
    assert two["reserve_bytes_per_gpu"] == (0.13 + 0.42) * 2**30
    assert two["max_concurrent_requests"] == math.floor(
        (USABLE - weights - (0.13 + 0.42) * 2**30 - 3 * 8192 * (FF // 2) * 2) / (KV_TOKEN * 1280 / 2)) == 810


def test_expected_times_deploy_json_equal_the_results_consistency(tables, capsys):
    """Consistency (one source of truth): at a grid point ``archledger deploy --json``'s expected
    TTFT and TPOT are deployments.parquet's row there, and its per-op expected times and their
    sources ops.parquet's rows (H100 has measured vLLM tables: the matmuls, attention and the
    all-reduce read them; a grid that dropped the KV dtype, a GPU's tables or a point would differ).
    A stored time is deploy's float64 rounded to float32 by the one function (engine.batch.schema.
    stored_time): equal through it, so a change of deploy's number beyond 6e-8 relative fails."""
    from engine.batch.schema import stored_time
    from engine.cli import main
    assert main(["deploy", MODEL, "--gpu", "H100", "--tp", "2", "--framework", "vllm", "--kv-dtype", "bf16",
                 "--batch", "8", "--input", "4096", "--output", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    dep = out["deployment"]
    row = _deployment(tables, 2, batch=8, input_len=4096)
    assert dep["n_gpus"] == 2 and dep["config"] == row["config"]
    for key in ("ttft_expected_s", "tpot_expected_s", "tpot_mean_expected_s", "tpot_bound_s", "ttft_bound_s"):
        assert row[key] == stored_time(key, dep[key]), key
    assert row["tpot_expected_s"] >= row["tpot_bound_s"] and row["ttft_expected_s"] >= row["ttft_bound_s"]
    prefill = _deployment(tables, 2, phase="prefill", batch=8, input_len=4096)
    assert prefill["step_expected_s"] == stored_time("step_expected_s", out["phases"]["prefill"]["step_expected_s"])
    ops = tables["ops"].filter((pl.col("model_id") == MODEL) & (pl.col("n_gpus") == 2) & (pl.col("batch") == 8)
                               & (pl.col("input_len") == 4096) & (pl.col("output_len") == 256))
    for phase in ("prefill", "decode"):
        stored = {r["op_uid"]: r for r in ops.filter(pl.col("phase") == phase).iter_rows(named=True)}
        assert len(stored) == len(out["ops"][phase])
        for theirs in out["ops"][phase]:
            r = stored[theirs["op_uid"]]
            assert r["t_expected_s"] == stored_time("t_expected_s", theirs["t_expected_s"]), r["op_uid"]
            assert (r["measured"], r["expected_src"], r["expected_table"], r["expected_nearest"]) == \
                (theirs["measured"], theirs["expected_src"], theirs["expected_table"], theirs["expected_nearest"])
        assert any(r["measured"] for r in stored.values()) and not all(r["measured"] for r in stored.values())
    o_proj = stored["main/layers[block]/self_attn/o_proj"]
    assert o_proj["expected_table"] == "gpus/measured/h100/vllm-0.24.0/gemm-bf16.yaml"
    assert "vllm 0.24.0" in o_proj["expected_src"]


def test_ops_rows_by_hand(tables):
    """The per-op point (8 requests, 4096-token prompts, 256 generated; decode at 4352):
    flash_attention on one GPU: 32 x 8 x 32 heads x 4352 keys x (2 x 128 + 5 + 2 x 128) FLOPs and
    32 x (q + out: 2 x 8 x 32 x 128 x 2 B, K + V: 2 x 8 x 4352 x 8 x 128 x 2 B) bytes; on two GPUs
    (TP 2) the row-parallel down_proj output [8, 4096] is all-reduced: 32 x 2 x 1/2 x 8 x 4096 x 2 B
    = 2,097,152 B over NVLink, 32 calls of 7.8 us latency. Prefill's table is one chunked-prefill
    step: 8 x 4096 = 32,768 prompt tokens in steps of 8192 (2 prompts), so its o_proj all-reduce
    moves 32 x 8192 x 4096 x 2 B. The times are stored as float32 (docs/results.md "Precision"): the
    hand value rounded by engine.batch.schema.stored_time."""
    from engine.batch.schema import stored_time
    ops = tables["ops"].filter((pl.col("model_id") == MODEL) & (pl.col("batch") == 8)
                               & (pl.col("input_len") == 4096) & (pl.col("output_len") == 256))
    ctx = 4096 + 256
    fa = _one(ops, n_gpus=1, phase="decode", op_uid="flash_attention@main/layers[block]/self_attn/scores")
    assert fa["flops"] == L * 8 * HEADS * ctx * (2 * D + 5 + 2 * D)
    assert fa["bytes"] == L * (2 * 8 * HEADS * D * 2 + 2 * 8 * ctx * KVH * D * 2)
    assert fa["t_memory_s"] == stored_time("t_memory_s", fa["bytes"] / 3.35e12)
    down = _one(ops, n_gpus=2, phase="decode", op_uid="main/layers[block]/mlp/down_proj>all_reduce[tp]")
    assert down["comm_bytes"] == L * 2 * 1 / 2 * 8 * HID * 2 == 2_097_152
    # 32 calls, each NCCL's ring latency over 2 NVLink ranks: 6.6 + 2 x 0.6 us (tests/test_hand_comm.py)
    assert down["link"] == "scale_up"
    assert down["t_comm_s"] == stored_time("t_comm_s", 32 * 7.8e-6 + 2_097_152 / NVLINK4)
    o_proj = _one(ops, n_gpus=2, phase="prefill", op_uid="main/layers[block]/self_attn/o_proj>all_reduce[tp]")
    assert o_proj["comm_bytes"] == L * 8192 * HID * 2 == 2_147_483_648


# -- 2. pages show the rows ---------------------------------------------------------------------------

_SI = {"T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0}
_BYTES = {"TB": 1e12, "GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1.0}
_TIME = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15}


def _parse(text: str, units: dict) -> tuple[float, str]:
    """'8.03 G' -> (8.03e9, '8.03'); the mantissa text tells the displayed precision."""
    match = re.fullmatch(r"(-?[0-9.]+(?:e[+-]?\d+)?)\s*(\S*)", text.strip())
    assert match and match.group(2) in units, f"unparseable {text!r}"
    return float(match.group(1)) * units[match.group(2)], match.group(1)


def _shows(text: str, value: float, units: dict, digits: int = 3) -> None:
    """``text`` displays ``value`` at ``digits`` significant digits (half a unit in the last digit,
    plus the 4-digit rounding of the page's data: 0.55 units)."""
    shown, mantissa = _parse(text, units)
    if value == 0:
        assert shown == 0, text
        return
    step = 10 ** (math.floor(math.log10(abs(value))) - digits + 1)
    assert abs(shown - value) <= 0.55 * step, f"page shows {text!r}, the Parquet row holds {value!r}"
    assert len(mantissa.replace("-", "").replace(".", "").lstrip("0")) <= digits, text


def test_gallery_shows_the_models_row(browser, base, tables):
    row = _one(tables["models"], model_id=MODEL)
    tab = _open(browser)
    try:
        tab.goto(base)
        tr = tab.page.locator(f"#gallery tbody tr:has(a[href$='models/{SLUG}/'])")
        assert tr.count() == 1
        for key in ("params_total", "params_active", "kv_bytes_per_token", "max_context"):
            assert int(tr.get_attribute(f"data-{key}")) == row[key], key      # the sort keys, exact
        cells = [tr.locator("td").nth(i).inner_text() for i in range(tr.locator("td").count())]
        # columns: select, family, params, active, attention, KV / token, max context, status
        assert cells[1] == row["family"]
        _shows(cells[2], row["params_total"], _SI)
        _shows(cells[3], row["params_active"], _SI)
        _shows(cells[5], row["kv_bytes_per_token"], _BYTES)
        assert cells[6] == f"{row['max_context'] // 1024}K"
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


def test_model_page_shows_the_models_row(browser, base, tables):
    row = _one(tables["models"], model_id=MODEL)
    tab = _open(browser)
    try:
        tab.goto(f"{base}models/{SLUG}/")
        cards = tab.page.locator("#ov ~ dl.cards > div")
        shown = {cards.nth(i).locator("dt").inner_text(): cards.nth(i).locator("dd").inner_text()
                 for i in range(cards.count())}
        _shows(shown["Parameters"], row["params_total"], _SI)
        _shows(shown["Active per token (with embedding)"], row["params_active"], _SI)
        _shows(shown["Embedding"], row["params_embedding"], _SI)
        assert shown["Layers"] == f"{row['n_layers']:,}"
        assert shown["Max context"] == f"{row['max_context'] // 1024}K"
        _shows(shown["Checkpoint bytes"], row["checkpoint_bytes"], _BYTES)
        assert shown["Checkpoint tensors"] == f"{row['checkpoint_tensors']:,}"
        _shows(shown["KV per token (BF16)"], row["kv_bytes_per_token"], _BYTES)
        _shows(shown["KV fixed per request"], row["kv_fixed_bytes"], _BYTES)
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()


def test_deployment_selection_shows_its_rows(browser, base, tables):
    """Two H100 (TP 2), 8 requests of 4096 + 256 tokens: the summary cards and the memory bar show
    the decode row (TTFT from the same point, prefill's bound beside it), the per-op table the ops
    rows of that point."""
    dec = _deployment(tables, 2, "decode", 8, 4096)
    pre = _deployment(tables, 2, "prefill", 8, 4096)
    tab = _open(browser)
    try:
        tab.goto(f"{base}models/{SLUG}/deploy/?gpu=H100&cfg=2x+tp2&fw=vllm&kv=bf16&input=4096&batch=8")
        tab.page.wait_for_selector("#summary dl.cards")
        tab.page.wait_for_function("() => document.querySelectorAll('#ops tbody tr').length > 0")
        form = tab.page.evaluate("() => Object.fromEntries(['gpu','cfg','fw','kv','input','batch']"
                                 ".map(k => [k, document.querySelector('#pick [name=' + k + ']').value]))")
        assert form == {"gpu": "H100", "cfg": "2x tp2", "fw": "vllm", "kv": "bf16", "input": "4096", "batch": "8"}
        cards = tab.page.locator("#summary dl.cards > div")
        shown = {cards.nth(i).locator("dt").inner_text(): cards.nth(i).locator("dd").inner_text()
                 for i in range(cards.count())}
        assert dec["fits"] and shown["Fits, worst case"] == "yes"
        _shows(shown["TTFT"], dec["ttft_s"], _TIME)
        _shows(shown["TPOT, last token"], dec["tpot_s"], _TIME)
        # the lower bounds beside the estimates: the grid's columns, shown as they are
        _shows(shown["TTFT lower bound"], dec["ttft_bound_s"], _TIME)
        _shows(shown["TPOT last token lower bound"], dec["tpot_bound_s"], _TIME)
        _shows(shown["Decode tokens/s per GPU, worst case"], dec["tokens_per_s_per_gpu"], {"": 1.0}, digits=4)
        assert shown["Max concurrent requests, worst case"] == str(dec["max_concurrent_requests"])
        _shows(shown["Weights per GPU"], dec["weight_bytes_per_gpu"], _BYTES)
        _shows(shown["KV per request"], dec["kv_bytes_per_request"], _BYTES)
        assert shown["Decode bound"] == dec["bound"] and shown["Prefill bound"] == pre["bound"]
        bar = [tab.page.locator("#membar .seg").nth(i).inner_text() for i in range(4)]
        for text, (label, key) in zip(bar, (("weights", "weight_bytes_per_gpu"),
                                            ("prefill", "activation_bytes_per_gpu"), ("KV", "kv_bytes_per_gpu"),
                                            ("free", "free_bytes_per_gpu"))):
            assert text.startswith(label + " "), bar
            _shows(text[len(label) + 1:], dec[key], _BYTES)
        # usable memory in decimal units as every byte figure: 0.9 x 81,559 MiB = 76,968,728,986 B = 77 GB on an H100
        label = tab.page.locator("#membar").get_attribute("aria-label")
        assert USABLE == 0.9 * 81_559 * 2**20 and "of 77 GB usable" in label, label

        ops = tables["ops"].filter((pl.col("model_id") == MODEL) & (pl.col("n_gpus") == 2) & (pl.col("phase") == "decode")
                                   & (pl.col("batch") == 8) & (pl.col("input_len") == 4096) & (pl.col("output_len") == 256))
        # an op's SOL time is not stored (docs/results.md): the largest of its three, the one its bound names
        by_uid = {r["op_uid"]: {**r, "t_sol_s": r[f"t_{r['bound']}_s"]} for r in ops.iter_rows(named=True)}
        assert all(r["t_sol_s"] == max(r["t_compute_s"], r["t_memory_s"], r["t_comm_s"]) for r in by_uid.values())
        rows = tab.page.locator("#ops tbody tr")
        assert rows.count() == len(by_uid)
        for i in range(rows.count()):
            cells = [rows.nth(i).locator("td").nth(j).inner_text() for j in range(10)]
            r = by_uid[cells[0]]
            assert cells[1] == r["kind"], cells
            _shows(cells[2], r["flops"], _SI)
            _shows(cells[3], r["bytes"], _BYTES)
            _shows(cells[4], r["comm_bytes"], _BYTES)
            for j, key in zip((5, 6, 7, 8), ("t_compute_s", "t_memory_s", "t_comm_s", "t_sol_s")):
                if r[key] == 0:
                    assert cells[j] == "0 s", (cells[0], key, cells[j])   # zero prints as 0 (docs/results.md)
                else:
                    _shows(cells[j], r[key], _TIME)
            assert cells[9] == r["bound"], cells
            # the expected time of the grid's per-op point, its measured source in the tooltip (the
            # results' own columns: a tooltip built from another row, or made up, differs)
            tab.page.wait_for_selector("#ops[data-expected-ready=point]")
            expected = rows.nth(i).locator("td").nth(10)
            _shows(expected.inner_text(), r["t_expected_s"], _TIME)
            tip = expected.get_attribute("title")
            if r["measured"]:
                assert tip == (f"measured: {r['expected_src']}; table {r['expected_table']}; measured points around "
                               f"it: {r['expected_nearest']}"), tip
                assert r["expected_table"].startswith("gpus/measured/h100/vllm-") and " at " in r["expected_src"]
            else:
                assert tip == "no measurement: bound / 0.7", tip
        assert any(r["measured"] for r in by_uid.values()) and not all(r["measured"] for r in by_uid.values())
        assert not tab.errors, tab.errors
    finally:
        tab.context.close()
