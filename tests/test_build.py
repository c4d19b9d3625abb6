"""The grid build: the default grid end to end, the Parquet schema, CLI agreement, incremental
rebuilds and atomic writes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from engine import build as build_mod
from engine.build import DEPLOYMENTS_SCHEMA, MODELS_SCHEMA, OPS_SCHEMA, build
from engine.cli import main
from engine.corpus import load_corpus
from engine.errors import SpecError
from engine.grid import load_grid

from tests.conftest import REPO

SMALL = Path(__file__).parent / "data" / "grid_small.yaml"
KEY = ["model_id", "gpu", "n_gpus", "tp", "ep", "dp_attn", "pp", "cp", "cp_kind", "framework", "weight_format",
       "kv_dtype", "phase", "batch", "input_len", "output_len"]
DOC = (REPO / "docs" / "results.md").read_text()


@pytest.fixture(scope="module")
def default_build(tmp_path_factory):
    """The main job: every spec over the default grid (corpus/grid.yaml)."""
    out = tmp_path_factory.mktemp("default")
    report = build(load_corpus(), out, jobs=2)
    return report


def _scan(results: Path, table: str) -> pl.DataFrame:
    return pl.scan_parquet(str(results / table / "**" / "*.parquet"), hive_partitioning=True).collect()


def test_default_build_covers_every_model_with_the_documented_schema(default_build):
    results = default_build.results
    models = pl.read_parquet(results / "models.parquet")
    corpus = load_corpus()
    assert sorted(models["model_id"]) == sorted(corpus.models)
    assert dict(models.schema) == {k: v[0] for k, v in MODELS_SCHEMA.items()}
    for table, schema in (("deployments", DEPLOYMENTS_SCHEMA), ("ops", OPS_SCHEMA)):
        frame = _scan(results, table)
        expected = {k: v[0] for k, v in schema.items()}
        assert {k: v for k, v in frame.schema.items() if k != "model"} == expected
        assert set(frame["model_id"]) == set(corpus.models), table
        key = KEY + (["op_uid"] if table == "ops" else [])
        assert frame.select(key).is_duplicated().sum() == 0, f"{table}: duplicate keys"
    manifest = json.loads((results / "manifest.json").read_text())
    assert set(manifest["models"]) == set(corpus.models)
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
    rows = d.filter((pl.col("model_id") == llama["model_id"]) & (pl.col("kv_dtype") == "bf16"))
    assert (rows["kv_bytes_per_request"] == llama["kv_bytes_per_token"] * (rows["input_len"] + rows["output_len"])).all()
    fp8 = d.filter((pl.col("model_id") == llama["model_id"]) & (pl.col("kv_dtype") == "fp8"))
    assert (fp8["kv_bytes_per_request"] * 2 == llama["kv_bytes_per_token"] * (fp8["input_len"] + fp8["output_len"])).all()


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


def test_rows_agree_with_archledger_deploy(default_build, capsys):
    d = _scan(default_build.results, "deployments")
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
            for field in ("weight_bytes_per_gpu", "kv_bytes_per_request", "kv_budget_bytes_per_gpu", "ttft_s",
                          "tpot_s", "tokens_per_s_per_gpu", "max_concurrent_requests", "fits", "extrapolated"):
                assert row[field] == pytest.approx(cli["deployment"][field], rel=1e-9), (model, field)
            assert row["step_time_s"] == pytest.approx(cli["phases"][row["phase"]]["step_time_s"], rel=1e-9)
            assert row["weight_bytes_per_gpu_formula"] and "hidden" in row["weight_bytes_per_gpu_formula"]
        if kv_dtype == "bf16" and (batch, inp, out) in load_grid().ops_points:
            mine = ops.filter(where & (pl.col("phase") == "decode"))
            theirs = {r["op_uid"]: r for r in cli["ops"]["decode"]}
            assert mine.height == len(theirs)
            for row in mine.iter_rows(named=True):
                assert row["t_sol_s"] == pytest.approx(theirs[row["op_uid"]]["t_sol_s"], rel=1e-9)
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


def _files(results: Path) -> dict[str, bytes]:
    return {str(p.relative_to(results)): p.read_bytes() for p in results.rglob("*.parquet")}


def test_rebuild_with_nothing_changed_recomputes_nothing(small):
    corpus_dir, out = small
    first = build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=1)
    assert len(first.recomputed) == 3 and first.points > 0
    before = _files(first.results)
    (corpus_dir / "models" / "Qwen--Qwen3-8B.yaml").touch()           # a new mtime is not a change
    second = build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=1)
    assert second.recomputed == [] and sorted(second.reused) == sorted(first.recomputed)
    assert second.points == 0
    assert _files(second.results) == before


def test_touching_one_spec_recomputes_only_that_model(small):
    corpus_dir, out = small
    first = build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=1)
    before = _files(first.results)
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


def test_failed_or_interrupted_build_keeps_previous_results(small, monkeypatch):
    corpus_dir, out = small
    build(load_corpus(corpus_dir), out, MODELS, SMALL, jobs=1)
    before = _files(out / "results")
    spec = corpus_dir / "models" / "Qwen--Qwen3-8B.yaml"
    spec.write_text(spec.read_text() + "\n# edited\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod, "build_model", interrupted)
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
