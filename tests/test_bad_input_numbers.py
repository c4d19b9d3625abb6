"""Hostile numbers: GPU figures, grid values, parallel degrees and scenario sizes are refused on one
line, and no published number is NaN, infinite or negative.

Bounds (one place each): GPU counts and parallel degrees 1..4096 (engine.deploy.parallel.MAX_GPUS), prompt
and output lengths up to 2**24 tokens and batches up to 2**20 (engine.deploy.MAX_TOKENS and
MAX_BATCH), at most 64 values per grid list and prompts up to 16x a model's max context
(engine.batch.grid.MAX_LIST, MAX_BEYOND_CONTEXT). GPU figures are finite numbers above zero, never
booleans (YAML ``true`` is an int to Python). The backstop (engine/language/finite.py) rejects a model
whose tables would publish a non-finite or negative number, naming the column and the point.
"""
from __future__ import annotations

import math
import re
import shutil
import time
from pathlib import Path

import pytest

from engine import api
from tests.bad_input_helpers import cli_status as main, fresh_api_cache  # noqa: F401 (fixture)
from engine.deploy import MAX_BATCH, MAX_TOKENS, Scenario
from engine.language.errors import SpecError
from engine.language.finite import check_document, check_tables, first_bad
from engine.deploy.parallel import MAX_GPUS, ParallelConfig

REPO = Path(__file__).resolve().parent.parent


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == "", captured.out[:200]
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    return captured.err.rstrip("\n")


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# -- GPU files ------------------------------------------------------------------------------------------

H200 = "h200.yaml"
PEAK = "peak_tflops: {bf16: 989, fp8: 1979}"
UP = "scale_up: {link: NVLink4, gb_s: 900, domain: 8, hw: nvlink}"
GPU_CASES = {   # (old, new, field, says)
    # NaN and infinity are refused by the YAML reader itself (engine.language.yamlio) or by the figure check
    "nan": ("hbm_gb: 141", "hbm_gb: .nan", "hbm_gb", "nan"),
    "inf": ("hbm_gb: 141", "hbm_gb: .inf", "hbm_gb", "inf"),
    "boolean": ("hbm_gb: 141", "hbm_gb: true", "hbm_gb", "expected a number or a mapping, got the boolean true"),
    "string": ("hbm_gb: 141", 'hbm_gb: "141"', "hbm_gb", "expected a number or a mapping, got the string '141'"),
    "zero": ("hbm_gb: 141", "hbm_gb: 0", "hbm_gb", "0 GB is outside the plausible range (above 1 and at most 4,400 GB)"),
    "negative": ("hbm_tb_s: 4.8", "hbm_tb_s: -4.8", "hbm_tb_s", "-4.8 TB/s is outside the plausible range"),
    "nan-peak": (PEAK, "peak_tflops: {bf16: .nan, fp8: 1979}", "peak_tflops.bf16", "nan"),
    "inf-alt": (PEAK, "peak_tflops: {bf16: {value: 989, alt: .inf}, fp8: 1979}", "peak_tflops.bf16", "inf"),
    "estimate-not-a-flag": (PEAK, "peak_tflops: {bf16: {value: 989, estimate: maybe}, fp8: 1979}",
                            "peak_tflops.bf16.estimate", "expected true or false, got the string 'maybe'"),
    "boolean-link": (UP, "scale_up: {link: NVLink4, gb_s: false, domain: 8, hw: nvlink}", "scale_up.gb_s",
                     "got the boolean false"),
    "boolean-domain": (UP, "scale_up: {link: NVLink4, gb_s: 900, domain: true, hw: nvlink}", "scale_up.domain",
                       "expected a whole number, got the boolean true"),
    "huge-domain": (UP, "scale_up: {link: NVLink4, gb_s: 900, domain: 1000000, hw: nvlink}", "scale_up.domain",
                    "expected a GPU count, got 1000000"),
    "negative-scale-out": ("gb_s: 50, hw: net}", "gb_s: -50, hw: net}", "scale_out.gb_s",
                           "-50 GB/s is outside the plausible range"),
    "gpu-name-is-a-path": ("gpu: H200", "gpu: ../../index", "gpu", "GPU name '../../index' is not a valid name"),
}


@pytest.mark.parametrize("case", GPU_CASES.values(), ids=GPU_CASES.keys())
def test_bad_gpu_figure_is_one_line(case, tmp_path, monkeypatch, capsys):
    """`deploy` inside a checkout whose gpus/h200.yaml is broken: exit 2, one line at the figure."""
    old, new, field, says = case
    shutil.copytree(REPO / "corpus", tmp_path / "corpus")
    (tmp_path / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    gpus = tmp_path / "gpus"
    shutil.copytree(REPO / "gpus", gpus)
    text = (gpus / H200).read_text()
    assert text.count(old) == 1, old
    (gpus / H200).write_text(text.replace(old, new))
    line = (gpus / H200).read_text().split(new)[0].count("\n") + 1
    from engine.deploy.hardware import load_gpus
    with pytest.raises(SpecError) as err:
        load_gpus(gpus)
    at = rf"gpus/{H200}:{line}: {re.escape(field)}(\.\w+)?: "      # the YAML reader may name a sub-field
    assert re.match(at, err.value.one_line()) and says in err.value.one_line(), err.value.one_line()
    monkeypatch.chdir(tmp_path)                  # a checkout: deploy reads its gpus/
    before = files_under(tmp_path)
    assert main(["deploy", "Qwen3-8B", "--gpu", "H100"]) == 2
    message = one_line(capsys)
    assert re.match("error: " + at, message) and says in message, message
    problem, dash, hint = message.partition(" — ")
    assert dash and hint
    assert files_under(tmp_path) == before


# -- the grid ------------------------------------------------------------------------------------------

TINY = """\
doc: A one-GPU grid.
gpus: [H100]
gpu_counts: [1]
beyond_fit: 1
parallel:
  max_pp: 1
  cp: [1]
  ep: [1]
  dp_attn: [1]
  tp_in_domain: true
  pp_after_tp: 8
frameworks: [vllm]
kv_dtypes: [bf16]
scenarios:
  input_lengths: [1024]
  beyond_max_context: 2
  output_lengths: [64]
  batches: [1, 8]
ops:
  kv_dtypes: [bf16]
  points:
    - {batch: 1, input: 1024, output: 64}
"""

GRID_CASES = {   # (old, new, field, says, hint)
    "a-billion-gpus": ("gpu_counts: [1]", "gpu_counts: [1000000000]", "gpu_counts[0]",
                       "1,000,000,000 is more than 4,096", "from 1 to 4,096"),
    "zero-gpus": ("gpu_counts: [1]", "gpu_counts: [1, 0]", "gpu_counts[1]", "0 is not a positive integer", "1 to 4,096"),
    "negative-gpus": ("gpu_counts: [1]", "gpu_counts: [-8]", "gpu_counts[0]", "-8 is not a positive integer", "4,096"),
    "boolean-gpus": ("gpu_counts: [1]", "gpu_counts: [true]", "gpu_counts[0]", "True is not a positive integer", "4,096"),
    "fractional-gpus": ("gpu_counts: [1]", "gpu_counts: [2.5]", "gpu_counts[0]", "2.5 is not a positive integer", "4,096"),
    "gpu-counts-not-a-list": ("gpu_counts: [1]", "gpu_counts: 8", "gpu_counts", "expected a non-empty list, got 8",
                              "[a, b]"),
    "gpu-counts-empty": ("gpu_counts: [1]", "gpu_counts: []", "gpu_counts", "expected a non-empty list", "[a, b]"),
    "too-many-values": ("gpu_counts: [1]", "gpu_counts: [" + ", ".join(["1"] * 65) + "]", "gpu_counts",
                        "65 entries, more than 64", "at most 64"),
    "gpu-name-is-a-path": ("gpus: [H100]", "gpus: [../x]", "gpus[0]", "'../x' is not a GPU name", "gpus/*.yaml"),
    "gpus-a-bare-name": ("gpus: [H100]", "gpus: H100", "gpus", "expected a non-empty list, got 'H100'", "[a, b]"),
    "beyond-fit-a-word": ("beyond_fit: 1", "beyond_fit: many", "beyond_fit", "'many' is not a positive integer", "4,096"),
    "max-pp-a-word": ("max_pp: 1", "max_pp: many", "parallel.max_pp", "'many' is not a positive integer", "4,096"),
    "max-pp-zero": ("max_pp: 1", "max_pp: 0", "parallel.max_pp", "0 is not a positive integer", "4,096"),
    "cp-zero": ("cp: [1]", "cp: [0]", "parallel.cp[0]", "0 is not a positive integer", "4,096"),
    "ep-a-word": ("ep: [1]", "ep: [1, all]", "parallel.ep[1]", "'all' is not a positive integer", "or `tp`"),
    "dp-attn-huge": ("dp_attn: [1]", "dp_attn: [5000]", "parallel.dp_attn[0]", "5,000 is more than 4,096", "`tp`"),
    "tp-in-domain-a-string": ("tp_in_domain: true", 'tp_in_domain: "yes"', "parallel.tp_in_domain",
                              "expected true or false, got 'yes'", "tp_in_domain: true"),
    "tp-in-domain-a-number": ("tp_in_domain: true", "tp_in_domain: 1", "parallel.tp_in_domain",
                              "expected true or false, got 1", "tp_in_domain: true"),
    "pp-after-tp-negative": ("pp_after_tp: 8", "pp_after_tp: -2", "parallel.pp_after_tp",
                             "-2 is not a positive integer", "4,096"),
    "unknown-framework": ("frameworks: [vllm]", "frameworks: [vlm]", "frameworks[0]", "unknown framework 'vlm'",
                          "none, sglang, trtllm, vllm"),
    "framework-a-number": ("frameworks: [vllm]", "frameworks: [1]", "frameworks[0]", "unknown framework 1", "vllm"),
    "unknown-kv-dtype": ("kv_dtypes: [bf16]\nscenarios", "kv_dtypes: [fp3]\nscenarios", "kv_dtypes[0]",
                         "unknown kv_dtype 'fp3'", "bf16, fp16, fp8"),
    "prompt-of-a-billion-tokens": ("input_lengths: [1024]", "input_lengths: [1073741824]",
                                   "scenarios.input_lengths[0]", "1,073,741,824 is more than 16,777,216", "16,777,216"),
    "prompt-in-e-notation": ("input_lengths: [1024]", "input_lengths: [1e15]", "scenarios.input_lengths[0]",
                             "'1e15' is not a positive integer", "16,777,216"),
    "prompt-a-float": ("input_lengths: [1024]", "input_lengths: [1.0e+15]", "scenarios.input_lengths[0]",
                       "1000000000000000.0 is not a positive integer", "16,777,216"),
    "beyond-max-context-nan": ("beyond_max_context: 2", "beyond_max_context: .nan", "scenarios.beyond_max_context",
                               "nan", ""),          # refused by the YAML reader or by the range check
    "beyond-max-context-zero": ("beyond_max_context: 2", "beyond_max_context: 0", "scenarios.beyond_max_context",
                                "0 is not a number above 0", "beyond_max_context: 2"),
    "beyond-max-context-huge": ("beyond_max_context: 2", "beyond_max_context: 1000", "scenarios.beyond_max_context",
                                "1000 is not a number above 0 and at most 16", "beyond_max_context: 2"),
    "beyond-max-context-boolean": ("beyond_max_context: 2", "beyond_max_context: true", "scenarios.beyond_max_context",
                                   "True is not a number", "beyond_max_context: 2"),
    "output-zero": ("output_lengths: [64]", "output_lengths: [0]", "scenarios.output_lengths[0]",
                    "0 is not a positive integer", "16,777,216"),
    "batch-a-word": ("batches: [1, 8]", "batches: [1, eight]", "scenarios.batches[1]",
                     "'eight' is not a positive integer", "1,048,576"),
    "batch-huge": ("batches: [1, 8]", "batches: [2000000]", "scenarios.batches[0]", "2,000,000 is more than 1,048,576",
                   "requests per model replica"),
    "ops-kv-dtype": ("  kv_dtypes: [bf16]\n  points", "  kv_dtypes: [fp3]\n  points", "ops.kv_dtypes[0]",
                     "unknown kv_dtype 'fp3'", "bf16"),
    "ops-point-batch-a-word": ("{batch: 1, input: 1024", "{batch: eight, input: 1024", "ops.points[0].batch",
                               "'eight' is not a positive integer", "1,048,576"),
    "ops-point-input-negative": ("input: 1024, output: 64}", "input: -1024, output: 64}", "ops.points[0].input",
                                 "-1024 is not a positive integer", "16,777,216"),
}


@pytest.mark.parametrize("case", GRID_CASES.values(), ids=GRID_CASES.keys())
def test_bad_grid_value_is_one_line_and_writes_nothing(case, tmp_path, capsys):
    old, new, field, says, hint = case
    assert TINY.count(old) == 1, old
    text = TINY.replace(old, new)
    grid = tmp_path / "grid" / "grid.yaml"
    grid.parent.mkdir()
    grid.write_text(text)
    line = text.split(new)[0].count("\n") + 1          # the first line of the edit holds the bad value
    out = tmp_path / "out"
    started = time.perf_counter()
    code = main(["build", "--out", str(out), "--grid", str(grid), "--models", "Qwen3-8B", "--jobs", "1", "--quiet"])
    assert time.perf_counter() - started < 30, "a bad grid must be refused before any work"
    assert code == 2
    message = one_line(capsys)
    assert re.match(rf"error: \S*grid\.yaml:{line}: {re.escape(field)}: ", message), (line, message)
    problem, dash, fix = message.partition(" — ")
    assert says in problem, message
    assert dash and hint in fix, message
    assert files_under(out) == [], "a refused grid wrote files"


def test_the_repo_grids_are_within_the_bounds():
    from engine.batch.grid import load_grid
    for path in (None, REPO / "tests" / "data" / "grid_small.yaml"):
        grid = load_grid(path)
        assert max(grid.gpu_counts) <= MAX_GPUS and max(grid.batches) <= MAX_BATCH
        assert max(grid.input_lengths) <= MAX_TOKENS and grid.frameworks


# -- parallel configs and scenarios ------------------------------------------------------------------------

@pytest.mark.parametrize("degrees,option,says", [
    (dict(tp=0), "--tp", "tp must be an integer from 1 to 4096, got 0"),
    (dict(tp=-8), "--tp", "got -8"),
    (dict(pp=True), "--pp", "pp must be an integer from 1 to 4096, got True"),
    (dict(ep=1.5), "--ep", "got 1.5"),
    (dict(dp_attn="2"), "--dp-attn", "got '2'"),
    (dict(cp=5000), "--cp", "got 5000"),
    (dict(tp=4096, dp=2), "--gpus", "8192 GPUs (dp x pp x cp x tp) is more than 4096"),
    (dict(gpus_per_node=0), "--gpus-per-node", "got 0"),
])
def test_parallel_config_refuses_bad_degrees(degrees, option, says):
    with pytest.raises(SpecError) as err:
        ParallelConfig(**degrees)
    line = err.value.one_line()
    assert line.startswith(f"<command line>: {option}: ") and says in line and "\n" not in line, line
    assert ParallelConfig(tp=8, ep=8, dp_attn=8).n_gpus == 8      # what stays legal


@pytest.mark.parametrize("point,option,says", [
    ((0, 1024, 16), "--batch", "batch must be an integer from 1 to 1,048,576, got 0"),
    ((MAX_BATCH + 1, 1024, 16), "--batch", "got 1048577"),
    ((1, 10 ** 15, 16), "--input", "input_len must be an integer from 1 to 16,777,216, got 1000000000000000"),
    ((1, 0, 16), "--input", "got 0"),
    ((1, 1024, -1), "--output", "output_len must be an integer from 0 to 16,777,216, got -1"),
    ((1, 1024, 2 ** 40), "--output", "got 1099511627776"),
    ((True, 1024, 16), "--batch", "got True"),
    ((1, 1024.0, 16), "--input", "got 1024.0"),
])
def test_scenario_refuses_points_out_of_bounds(point, option, says):
    with pytest.raises(SpecError) as err:
        Scenario(*point)
    line = err.value.one_line()
    assert line.startswith(f"<command line>: {option}: ") and says in line and "\n" not in line, line
    assert Scenario(MAX_BATCH, MAX_TOKENS, MAX_TOKENS).input_len == MAX_TOKENS and Scenario(1, 1, 0).output_len == 0


@pytest.mark.parametrize("argv,option", [
    (["--input", "1000000000000000"], "--input"),     # once published a negative KV size
    (["--output", str(2 ** 30)], "--output"),
    (["--batch", str(2 ** 21)], "--batch"),
    (["--tp", "0"], "--tp"),
    (["--tp", "8192"], "--tp"),
    (["--pp", "-1"], "--pp"),
    (["--gpus-per-node", "0"], "--gpus-per-node"),
])
def test_deploy_refuses_bad_sizes_on_one_line(argv, option, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)            # nothing may be written here either
    assert main(["deploy", "Qwen3-8B", "--gpu", "H100", *argv]) == 2
    message = one_line(capsys)
    assert option in message and " — " in message, message
    assert files_under(tmp_path) == []


def test_deploy_at_the_bounds_publishes_finite_non_negative_numbers(capsys):
    """The largest point the bounds allow still gives finite, non-negative numbers (no overflow)."""
    import json
    assert main(["deploy", "Qwen3-8B", "--gpu", "H100", "--input", str(MAX_TOKENS), "--output", str(MAX_TOKENS),
                 "--batch", str(MAX_BATCH), "--json"]) == 1      # far past one GPU's memory: exit 1
    out = json.loads(capsys.readouterr().out)
    assert out["deployment"]["fits"] is False
    numbers = [v for v in out["deployment"].values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert numbers and all(math.isfinite(v) and v >= 0 for v in numbers)
    assert out["deployment"]["kv_bytes_per_request"] > 1e12          # 2**25 tokens of Qwen3-8B KV: big, exact
    for phase in out["ops"].values():
        for row in phase:
            assert all(math.isfinite(row[k]) and row[k] >= 0 for k in ("flops", "bytes", "t_sol_s"))


# -- the backstop: nothing non-finite or negative is published ---------------------------------------------

@pytest.fixture(scope="module")
def qwen(corpus):
    return corpus.models["Qwen/Qwen3-8B"]


def _table(**columns):
    base = {"gpu": ["H100", "H100", "B200"], "config": ["tp1"] * 3, "phase": ["prefill", "decode", "decode"],
            "batch": [1, 8, 64], "fits": [True, False, True], "parts": [[], ["a"], []], "repeat": [1, None, 3]}
    return {**base, **columns}


@pytest.mark.parametrize("column,values,says", [
    ("kv_bytes_per_request", [1.0, float("nan"), 2.0], "nan is not finite at gpu=H100, config=tp1, phase=decode, batch=8"),
    ("kv_bytes_per_request", [1.0, 2.0, -1.1795e17], "-1.1795e+17 is negative at gpu=B200"),
    ("ttft_s", [float("inf"), 1.0, 1.0], "inf is not finite at gpu=H100, config=tp1, phase=prefill, batch=1"),
    ("max_concurrent_requests", [3, -1, 0], "-1 is negative"),
    ("flops", [1.0, None, "many"], "'many' is not a number"),
])
def test_check_tables_rejects_a_planted_bad_number(qwen, column, values, says):
    with pytest.raises(SpecError) as err:
        check_tables(qwen, {"deployments": _table(**{column: values})})
    line = err.value.one_line()
    assert line.startswith(f"corpus/models/Qwen--Qwen3-8B.yaml:1: deployments.{column}: "), line
    assert says in line and "\n" not in line and "nothing was written" in line


def test_check_tables_passes_labels_flags_missing_values_and_zeros(qwen, monkeypatch):
    from engine.language import finite
    check_tables(qwen, {"ops": _table(flops=[0.0, 1e30, 5], intensity=[None, 3.5, 0])})
    assert first_bad([1, 2, None]) is None and first_bad(["a", "b"]) is None and first_bad([True, False]) is None
    assert first_bad([-1.0, 2.0]) == (0, "-1.0 is negative")
    # a column named signed may be negative, never NaN
    monkeypatch.setattr(finite, "SIGNED", frozenset({"margin_bytes"}))
    check_tables(qwen, {"deployments": _table(margin_bytes=[-5.0, 1.0, 0.0])})
    with pytest.raises(SpecError, match="nan is not finite"):
        check_tables(qwen, {"deployments": _table(margin_bytes=[-5.0, float("nan"), 0.0])})


def test_check_document_rejects_a_planted_bad_number(qwen):
    document = {"overview": {"params_total": {"value": 8, "formula": "x"}}, "ops": [{"flops_prefill": {"value": 1.0}},
                                                                                     {"bytes_decode": -3.0}]}
    check_document(qwen, {"ok": [0, 1.5, {"a": 2}], "flags": [True, False], "none": None})
    with pytest.raises(SpecError) as err:
        check_document(qwen, document)
    assert "document.ops[1].bytes_decode: -3.0 is negative" in err.value.one_line()
    document["ops"][1]["bytes_decode"] = float("nan")
    with pytest.raises(SpecError, match=r"document\.ops\[1\]\.bytes_decode: nan is not finite"):
        check_document(qwen, document)


def test_build_refuses_a_model_whose_tables_hold_a_nan(tmp_path, monkeypatch, capsys):
    """The check sits between evaluation and writing in the real build: a NaN planted in what the
    grid evaluation returns fails the build on one line, and no results are written."""
    from engine.batch import grid_eval
    real = grid_eval.evaluate_model

    def planted(*args, **kwargs):
        deployments, ops, points = real(*args, **kwargs)
        deployments["kv_bytes_per_request"][0] = float("nan")
        return deployments, ops, points

    monkeypatch.setattr(grid_eval, "evaluate_model", planted)
    grid = tmp_path / "grid" / "grid.yaml"
    grid.parent.mkdir()
    grid.write_text(TINY)
    out = tmp_path / "out"
    assert main(["build", "--out", str(out), "--grid", str(grid), "--models", "Qwen3-8B", "--jobs", "1",
                 "--quiet"]) == 2
    message = one_line(capsys)
    assert message.startswith("error: corpus/models/Qwen--Qwen3-8B.yaml:1: deployments.kv_bytes_per_request: nan "
                              "is not finite at gpu=H100"), message
    assert not (out / "results").exists() and not [f for f in files_under(out) if f.endswith((".parquet", ".json"))]
