"""The grid build: the default grid end to end, the Parquet schema, CLI agreement, incremental
rebuilds and atomic writes."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import polars as pl
import pytest

from engine.batch import tasks
from engine.batch.results import DEPLOYMENTS_SCHEMA, MODELS_SCHEMA, OPS_SCHEMA, build
from engine.cli import main
from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from engine.batch.grid import load_grid

from tests.conftest import REPO

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid the module's builds (the default grid's sample, the corpus over the tiny grid, the
#: first incremental builds) twice.
pytestmark = pytest.mark.xdist_group("build")

SMALL = Path(__file__).parent / "data" / "grid_small.yaml"
KEY = ["model_id", "gpu", "n_gpus", "tp", "ep", "dp_attn", "pp", "cp", "cp_kind", "framework", "weight_format",
       "kv_dtype", "phase", "batch", "input_len", "output_len"]
DOC = (REPO / "docs" / "results.md").read_text()


#: The default grid is the main job's; the whole corpus over it is a benchmark (benchmarks/build.py).
#: Tests build it for a sample that covers a dense model at two sizes, MLA + MoE with DP-attention
#: and sliding-window attention with MXFP4 experts, and every model over a tiny grid.
DEFAULT_SAMPLE = ["meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B", "deepseek-ai/DeepSeek-V3",
                  "openai/gpt-oss-120b"]
TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"


@pytest.fixture(scope="module")
def default_build(tmp_path_factory):
    """The main job's grid (corpus/grid.yaml) over the sample models."""
    out = tmp_path_factory.mktemp("default")
    return build(load_corpus(), out, models=DEFAULT_SAMPLE, jobs=2)


@pytest.fixture(scope="module")
def corpus_build(tmp_path_factory):
    """Every spec of the corpus over the tiny grid (one GPU type, each model's first fitting count).
    In this process (jobs=1): two --jobs workers each paid the imports and the measured tables again
    (58 -> 53 CPU-s alone), and the module's later in-process builds reuse what it evaluated; the
    worker pool is exercised by :func:`default_build` and the incremental tests (jobs=2)."""
    out = tmp_path_factory.mktemp("corpus")
    return build(load_corpus(), out, grid_path=TINY, jobs=1)


def _scan(results: Path, table: str) -> pl.DataFrame:
    return pl.scan_parquet(str(results / table / "**" / "*.parquet"), hive_partitioning=True).collect()


def test_every_model_builds_with_the_documented_schema(corpus_build):
    results = corpus_build.results
    models = pl.read_parquet(results / "models.parquet")
    corpus = load_corpus()
    declared = {m: spec.unverified for m, spec in corpus.models.items() if spec.unverified}
    published = sorted(set(corpus.models) - set(declared))
    assert sorted(models["model_id"]) == published
    assert dict(models.schema) == {k: v[0] for k, v in MODELS_SCHEMA.items()}
    for table, schema in (("deployments", DEPLOYMENTS_SCHEMA), ("ops", OPS_SCHEMA)):
        frame = _scan(results, table)
        expected = {k: v[0] for k, v in schema.items()}
        assert {k: v for k, v in frame.schema.items() if k != "model"} == expected
        assert set(frame["model_id"]) == set(published), table
        key = KEY + (["op_uid"] if table == "ops" else [])
        assert frame.select(key).is_duplicated().sum() == 0, f"{table}: duplicate keys"
    manifest = json.loads((results / "manifest.json").read_text())
    assert set(manifest["models"]) == set(published)
    assert manifest["unverified"] == declared and not manifest["skipped"]   # listed with the reason, not failed
    assert corpus_build.recomputed and not corpus_build.reused
    d = _scan(results, "deployments")
    assert (d["fits"]).any() and set(d["phase"]) == {"prefill", "decode"}
    for model_id in published:             # every model has a fitting point at its first GPU count
        assert d.filter((pl.col("model_id") == model_id) & pl.col("fits")).height > 0, model_id


def test_default_grid_loads_and_a_sample_builds(default_build):
    from engine.deploy.hardware import load_gpus
    load_grid()
    d = _scan(default_build.results, "deployments")
    assert set(d["gpu"]) == set(load_gpus())             # `gpus: all` reaches every GPU file
    models = pl.read_parquet(default_build.results / "models.parquet")
    assert sorted(models["model_id"]) == sorted(DEFAULT_SAMPLE)
    assert default_build.recomputed and not default_build.reused


def test_units_are_si_and_values_are_sane(default_build):
    d = _scan(default_build.results, "deployments")
    assert (d["step_time_s"] > 0).all() and (d["ttft_s"] > 0).all() and (d["tpot_s"] > 0).all()
    assert (d["weight_bytes_per_gpu"] > 1e8).all()                 # bytes, not GB
    assert (d["hbm_bytes_per_gpu"] >= 80e9).all()
    assert (d["flops"] > 1e6).all()                                # FLOPs, not TFLOPs
    assert set(d["bound"]) <= {"compute", "memory", "comm"} and set(d["phase"]) == {"prefill", "decode"}
    # KV per request = per-token bytes x context for models whose caches all grow with every token
    models = pl.read_parquet(default_build.results / "models.parquet")
    llama = models.filter(pl.col("model_id") == "meta-llama/Meta-Llama-3.1-8B").row(0, named=True)
    per_token = 2 * 32 * 8 * 128 * 2              # K and V, 32 layers, 8 KV heads of 128, BF16 (config.json)
    assert llama["kv_bytes_per_token"] == per_token == 131_072
    rows = d.filter((pl.col("model_id") == llama["model_id"]) & (pl.col("kv_dtype") == "bf16"))
    assert (rows["kv_bytes_per_request"] == per_token * (rows["input_len"] + rows["output_len"])).all()
    fp8 = d.filter((pl.col("model_id") == llama["model_id"]) & (pl.col("kv_dtype") == "fp8"))
    assert (fp8["kv_bytes_per_request"] * 2 == per_token * (fp8["input_len"] + fp8["output_len"])).all()


def test_grid_reaches_past_max_context_and_up_to_capacity(default_build):
    d = _scan(default_build.results, "deployments")
    models = pl.read_parquet(default_build.results / "models.parquet")
    for row in models.iter_rows(named=True):
        mine = d.filter(pl.col("model_id") == row["model_id"])
        assert mine["input_len"].min() == 1024
        assert mine["extrapolated"].any(), row["model_id"]       # points past max_context, flagged
        assert not mine.filter(pl.col("input_len") + pl.col("output_len") <= row["max_context"])["extrapolated"].any()
    fitting = d.filter(pl.col("fits"))
    assert (fitting["batch"] <= fitting["max_concurrent_requests"]).all()
    # the capacity itself is a grid point where it is below the largest batch swept
    caps = d.filter(pl.col("batch") == pl.col("max_concurrent_requests"))
    assert caps.height > 0
    gpus = set(d["gpu"])
    assert {"H100", "H200", "B200", "GB200-NVL72", "MI300X", "MI355X", "Rubin"} <= gpus
    assert d.filter(pl.col("n_gpus") == 72).height > 0              # a whole NVL72 rack
    assert d.filter(pl.col("n_gpus") > 8).height > 0                # multi-node


def _hand_values(model: str, row: dict) -> None:
    """A few grid rows against values derived by hand from config.json and the GPU files."""
    length = row["input_len"] + row["output_len"]
    if model == "meta-llama/Meta-Llama-3.1-70B":           # H100 TP8, FP8 KV, 16384 + 1024 tokens
        norms = (2 * 80 + 1) * 8192 * 2                      # whole on every GPU; matrices split 8 ways
        weights = (70_553_706_496 * 2 - norms) / 8 + norms   # the HF parameter count, BF16
        kv = 2 * 80 * 8 * 128 * 1 * length                   # K and V, 80 layers, 8 KV heads of 128, 1 B
        assert row["weight_bytes_per_gpu"] == weights and row["kv_bytes_per_request"] == kv
        usable = 0.9 * 81559 * 2**20                          # nvidia-smi: 81559MiB per H100
        # prefill step of 8192 tokens (vLLM fusions): the largest kernel is fused add + RMSNorm,
        # residual and x in, both out, [8192 tokens, 8192 hidden] BF16 each: 4 x 8192 x 8192 x 2 B
        step = 4 * 8192 * 8192 * 2
        assert row["activation_bytes_per_gpu"] == step
        # vLLM's runtime reserve at TP 8: 0.13 GiB of non-torch memory + 0.42 GiB of collective buffers
        # (logged by vLLM's Worker.determine_available_memory: 0.13 GiB at TP 1, 0.55 GiB at TP 2)
        reserve = (0.13 + 0.42) * 2**30
        assert math.isclose(row["reserve_bytes_per_gpu"], reserve, rel_tol=1e-12)
        assert row["max_concurrent_requests"] == math.floor((usable - weights - reserve - step) / (kv / 8)) == 163
    elif model == "deepseek-ai/DeepSeek-V3":                 # H200 DP-attention 8 + EP 8, BF16 KV
        kv = 61 * (512 + 64) * 2 * length                    # MLA latent + rotary key, 70,272 B/token
        assert row["kv_bytes_per_request"] == kv and row["kv_bytes_per_gpu"] == 64 / 8 * kv
    else:                                                    # gpt-oss-120b: 18 full + 18 sliding (128) layers
        per_layer_token = 2 * 8 * 64 * 2
        assert row["kv_bytes_per_request"] == (18 * length + 18 * min(length, 128)) * per_layer_token


def test_rows_agree_with_archledger_deploy(default_build, capsys):
    """Consistency of the grid build with `archledger deploy` (both go through sol.summarize, so a
    bug shared by the two passes here), plus hand-derived values for a few of the same rows
    (_hand_values; tests/test_site_numbers.py checks more grid rows by hand on a small build). A
    stored time is the float32 rounding of deploy's float64 (engine.batch.schema.stored_time, docs/
    results.md "Precision"): compared exactly through it, so a change of the engine's number by more
    than float32's 6e-8 fails; the worst-case rate is the documented division of the stored tpot_s."""
    from engine.batch.schema import stored_time
    from engine.serving.steady import worst_rate
    d = _scan(default_build.results, "deployments").with_columns(tokens_per_s_per_gpu=worst_rate())
    ops = _scan(default_build.results, "ops")
    cases = [("deepseek-ai/DeepSeek-V3", "H200", dict(tp=8, ep=8, dp_attn=8), "sglang", "bf16", 64, 4096, 1024),
             ("meta-llama/Meta-Llama-3.1-70B", "H100", dict(tp=8, ep=1, dp_attn=1), "vllm", "fp8", 8, 16384, 1024),
             ("openai/gpt-oss-120b", "MI355X", dict(tp=1, ep=1, dp_attn=1), "vllm", "bf16", 1, 1024, 1024)]
    for model, gpu, config, framework, kv_dtype, batch, inp, out in cases:
        args = ["deploy", model, "--gpu", gpu, "--framework", framework, "--kv-dtype", kv_dtype, "--batch", str(batch),
                "--input", str(inp), "--output", str(out), "--json"]
        for name, value in config.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        assert main(args) == 0
        cli = json.loads(capsys.readouterr().out)
        where = (pl.col("model_id") == model) & (pl.col("gpu") == gpu) & (pl.col("framework") == framework) & \
            (pl.col("kv_dtype") == kv_dtype) & (pl.col("batch") == batch) & (pl.col("input_len") == inp) & \
            (pl.col("output_len") == out) & (pl.col("pp") == 1) & (pl.col("cp") == 1)
        for name, value in config.items():
            where &= pl.col(name) == value
        rows = d.filter(where)
        assert rows.height == 2, (model, rows.height)
        for row in rows.iter_rows(named=True):
            for field in ("weight_bytes_per_gpu", "kv_bytes_per_request", "kv_budget_bytes_per_gpu",
                          "max_concurrent_requests", "fits", "extrapolated"):
                assert row[field] == pytest.approx(cli["deployment"][field], rel=1e-9), (model, field)
            for field in ("ttft_s", "tpot_s", "ttft_bound_s", "tpot_bound_s"):
                assert row[field] == stored_time(field, cli["deployment"][field]), (model, field)
            assert row["tokens_per_s_per_gpu"] == batch / float(stored_time("tpot_s", cli["deployment"]["tpot_s"])) / \
                row["n_gpus"]
            assert row["tokens_per_s_per_gpu"] == pytest.approx(cli["deployment"]["tokens_per_s_per_gpu"], rel=1e-7)
            # a decode row's step is its TPOT (one token per request per step): stored once, as
            # tpot_s, its step_time_s null (results.DECODE_COPIES); a prefill row keeps its step
            assert (row["step_time_s"] is None) == (row["phase"] == "decode"), row["phase"]
            step = row["tpot_s"] if row["phase"] == "decode" else row["step_time_s"]
            assert step == stored_time("step_time_s", cli["phases"][row["phase"]]["step_time_s"])
            assert row["weight_bytes_per_gpu_formula"] and "hidden" in row["weight_bytes_per_gpu_formula"]
            _hand_values(model, row)
        if kv_dtype == "bf16" and (batch, inp, out) in load_grid().ops_points:
            mine = ops.filter(where & (pl.col("phase") == "decode"))
            theirs = {r["op_uid"]: r for r in cli["ops"]["decode"]}
            assert mine.height == len(theirs)
            for row in mine.iter_rows(named=True):
                # the op's SOL time is the largest of its three (not stored: docs/results.md), the one
                # its bound names
                times = {b: row[f"t_{b}_s"] for b in ("compute", "memory", "comm")}
                assert "t_sol_s" not in row and max(times.values()) == times[row["bound"]]
                name = f"t_{row['bound']}_s"
                assert times[row["bound"]] == stored_time(name, theirs[row["op_uid"]]["t_sol_s"])
                assert row["flops_formula"] == theirs[row["op_uid"]]["flops_formula"]


def test_results_doc_lists_every_column():
    for schema in (MODELS_SCHEMA, DEPLOYMENTS_SCHEMA, OPS_SCHEMA):
        for name, (dtype, doc) in schema.items():
            assert f"| `{name}` | {dtype} | {doc} |" in DOC, name


# -- incremental and atomic (small grid, three models, a corpus copy we can edit) -----------------

@pytest.fixture
def small(tmp_path):
    corpus_dir = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus_dir)
    return corpus_dir, tmp_path / "out"


MODELS = ["Qwen3-8B", "gpt-oss-20b", "Mixtral-8x7B-v0.1"]


@pytest.fixture(scope="module")
def _first_builds(tmp_path_factory):
    """A corpus copy with the given models built over the small grid, once per module and model list:
    the incremental tests start from such a first build, each in its own copy of it."""
    done: dict[tuple, tuple] = {}

    def first(models: list[str]):
        if tuple(models) not in done:
            root = tmp_path_factory.mktemp("first")
            shutil.copytree(REPO / "corpus", root / "corpus")
            done[tuple(models)] = root, build(load_corpus(root / "corpus"), root / "out", models, SMALL, jobs=1)
        return done[tuple(models)]
    return first


def _copy_of_first(first_builds, models: list[str], to: Path):
    """A copy of the first build of ``models`` in ``to`` (corpus and output folder, as the build left
    them) and its report. Build inputs hash by content, not place: the copy's models are unchanged."""
    root, report = first_builds(models)
    shutil.copytree(root / "corpus", to / "corpus")
    shutil.copytree(root / "out", to / "out")
    return to / "corpus", to / "out", report


@pytest.fixture
def built(tmp_path, _first_builds):
    return _copy_of_first(_first_builds, MODELS, tmp_path)


def _files(results: Path) -> dict[str, bytes]:
    return {str(p.relative_to(results)): p.read_bytes() for p in results.rglob("*.parquet")}


def test_rebuild_with_nothing_changed_recomputes_nothing(built):
    corpus_dir, out, first = built
    assert len(first.recomputed) == 3 and first.points > 0
    before = _files(out / "results")
    (corpus_dir / "models" / "Qwen--Qwen3-8B.yaml").touch()           # a new mtime is not a change
    second = build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=1)
    assert second.recomputed == [] and sorted(second.reused) == sorted(first.recomputed)
    assert second.points == 0
    assert _files(second.results) == before


def test_touching_one_spec_recomputes_only_that_model(built):
    corpus_dir, out, _ = built
    before = _files(out / "results")
    spec = corpus_dir / "models" / "openai--gpt-oss-20b.yaml"
    spec.write_text(spec.read_text() + "\n# edited\n")
    second = build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=2)
    assert second.recomputed == ["openai/gpt-oss-20b"]
    after = _files(second.results)
    for name, data in before.items():
        if "gpt-oss-20b" not in name and name != "models.parquet":
            assert after[name] == data, name
    # a shared input (a GPU file) changes every model's hash
    tmp_gpus = out.parent / "gpus"
    shutil.copytree(REPO / "gpus", tmp_gpus)
    third = build(load_corpus(corpus_dir), out, MODELS, SMALL, gpu_root=tmp_gpus, jobs=1)
    assert third.recomputed == []            # same files in another folder: content decides
    (tmp_gpus / "h100-sxm.yaml").write_text((tmp_gpus / "h100-sxm.yaml").read_text().replace("hbm_tb_s: 3.35",
                                                                                            "hbm_tb_s: 3.0"))
    fourth = build(load_corpus(corpus_dir), out, MODELS, SMALL, gpu_root=tmp_gpus, jobs=1)
    assert sorted(fourth.recomputed) == sorted(load_corpus(corpus_dir).find_model(m).model_id for m in MODELS)


def test_failed_or_interrupted_build_keeps_previous_results(built, monkeypatch):
    corpus_dir, out, _ = built
    before = _files(out / "results")
    spec = corpus_dir / "models" / "Qwen--Qwen3-8B.yaml"
    spec.write_text(spec.read_text() + "\n# edited\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tasks, "build_model", interrupted)  # what _evaluate calls
    with pytest.raises(KeyboardInterrupt):
        build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=1)
    assert _files(out / "results") == before
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "staging left behind"


def test_bad_grid_is_a_one_line_error_and_nothing_is_written(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(SMALL.read_text().replace("gpu_counts: [1, 2, 8]", "gpu_counts: [1, two]"))
    assert main(["build", "--out", str(tmp_path / "out"), "--grid", str(grid), "--models", "Qwen3-8B"]) == 2
    err = capsys.readouterr().err.strip()
    assert "grid.yaml:" in err and "gpu_counts" in err and "'two' is not a positive integer" in err
    assert "\n" not in err and not (tmp_path / "out" / "results").exists()
    grid.write_text(SMALL.read_text().replace("gpus: [H100, B200]", "gpus: [H100, H1000]"))
    assert main(["build", "--out", str(tmp_path / "out"), "--grid", str(grid), "--models", "Qwen3-8B"]) == 2
    assert "unknown GPU 'H1000'" in capsys.readouterr().err


# -- subsets and other grids: merge, never discard (engine.batch.results.run's rules) ---------------------

QWEN, LLAMA = "Qwen/Qwen3-8B", "meta-llama/Meta-Llama-3.1-8B"


def _run_build(corpus_dir: Path, out: Path, models: list[str], grid: Path) -> int:
    import argparse
    from engine.batch.results import run
    return run(argparse.Namespace(out=str(out), models=models, grid=str(grid), jobs=1, quiet=True,
                                  corpus=str(corpus_dir)))


def test_a_subset_build_keeps_what_it_does_not_name(tmp_path, _first_builds):
    corpus_dir, out, _ = _copy_of_first(_first_builds, ["Qwen3-8B", "Llama-3.1-8B"], tmp_path)
    before = _files(out / "results")
    spec = corpus_dir / "models" / "meta-llama--Meta-Llama-3.1-8B.yaml"
    spec.write_text(spec.read_text() + "\n# edited\n")
    lines = []
    second = build(load_corpus(corpus_dir), out, ["Qwen3-8B"], SMALL, jobs=1, log=lines.append)
    assert (second.recomputed, second.reused, second.stale) == ([], [QWEN], [LLAMA])
    assert _files(second.results) == before                        # nothing discarded, nothing rewritten
    models = json.loads((out / "results" / "manifest.json").read_text())["models"]
    assert models[LLAMA]["stale"] == "inputs changed since it was built" and "stale" not in models[QWEN]
    assert [line for line in lines if "stale" in line] == [
        f"kept 1 model(s) not named as they were, marked stale in manifest.json: {LLAMA} (inputs changed since "
        f"it was built) — rebuild them with --models or a full build"]
    third = build(load_corpus(corpus_dir), out, ["Llama-3.1-8B"], SMALL, jobs=1)
    assert (third.recomputed, third.reused, third.stale) == ([LLAMA], [QWEN], [])
    models = json.loads((out / "results" / "manifest.json").read_text())["models"]
    assert sorted(models) == [QWEN, LLAMA] and not any("stale" in e for e in models.values())
    assert sorted(pl.read_parquet(out / "results" / "models.parquet")["model_id"]) == [QWEN, LLAMA]


def test_another_grid_needs_another_out(small, tmp_path, capsys):
    corpus_dir, out = small
    grid = tmp_path / "grid.yaml"
    grid.write_text(SMALL.read_text())
    assert _run_build(corpus_dir, out, ["Qwen3-8B", "Llama-3.1-8B"], grid) == 0
    before = _files(out / "results")
    other = tmp_path / "other.yaml"
    other.write_text(SMALL.read_text().replace("batches: [1, 8, 64]", "batches: [1, 8]"))
    capsys.readouterr()
    for models in (["Qwen3-8B"], None):                               # a subset or a full build alike
        assert _run_build(corpus_dir, out, models, other) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"error: {out / 'results'}/ holds results over the grid {grid}, not {other}: use another "
                       f"--out for another grid (one results tree mixing grids would mix incomparable rows)")
        assert _files(out / "results") == before
    assert _run_build(corpus_dir, tmp_path / "elsewhere", ["Qwen3-8B"], other) == 0
    # editing the grid file itself is an input change: the unnamed model is kept, stale
    grid.write_text(SMALL.read_text().replace("batches: [1, 8, 64]", "batches: [1, 16]"))
    assert _run_build(corpus_dir, out, ["Qwen3-8B"], grid) == 0
    models = json.loads((out / "results" / "manifest.json").read_text())["models"]
    assert "stale" in models[LLAMA] and "stale" not in models[QWEN]
    # results that hold no model (its only spec was skipped as unverified) take any grid
    (corpus_dir / "snapshots" / "Qwen--Qwen3-8B.tensors.yaml").unlink()
    empty = tmp_path / "empty"
    assert _run_build(corpus_dir, empty, ["Qwen3-8B"], grid) == 0
    shutil.copytree(REPO / "corpus" / "snapshots", corpus_dir / "snapshots", dirs_exist_ok=True)
    assert _run_build(corpus_dir, empty, ["Qwen3-8B"], other) == 0
