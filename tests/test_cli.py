"""The command line as a user runs it: show (text, --formula, --json), list, build, bench."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from engine.build.results import MODELS_SCHEMA
from engine.cli import main


def test_show_json_carries_numbers_and_formulas(capsys):
    assert main(["show", "DeepSeek-V3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model_id"] == "deepseek-ai/DeepSeek-V3"
    assert data["params_total"]["value"] == 671_026_404_352
    assert "n_layers_moe" in data["params_total"]["formula"]
    assert data["kv_bytes_per_token[mla_latent]"]["value"] == 512 * 61 * 2
    assert data["bound"]["kv_lora_rank"] == 512
    assert data["checkpoint_bytes_by_dtype[F8_E4M3]"]["value"] > 0
    assert data["params_mtp"]["value"] > 0


def test_show_text_and_formula(capsys):
    assert main(["show", "Llama-3.1-8B", "--formula"]) == 0
    out = capsys.readouterr().out
    assert "8,030,261,248" in out
    assert "= 3*d_ff*hidden*n_layers" in out
    assert "bound: " in out and "hidden=4096" in out


def test_show_kv_dtype_fp8_halves_kv(capsys):
    main(["show", "Qwen3-8B", "--json"])
    bf16 = json.loads(capsys.readouterr().out)["kv_bytes_per_token_growing"]["value"]
    main(["show", "Qwen3-8B", "--json", "--kv-dtype", "fp8"])
    fp8 = json.loads(capsys.readouterr().out)["kv_bytes_per_token_growing"]["value"]
    assert bf16 == 2 * fp8


def test_unknown_model_is_one_line_with_the_known_ones(capsys):
    assert main(["show", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown model" in err and "Qwen/Qwen3-8B" in err


def test_ambiguous_model_lists_candidates(capsys):
    assert main(["show", "Qwen3"]) == 2
    err = capsys.readouterr().err
    assert "matches several models" in err and "Qwen/Qwen3-32B" in err


def test_list_names_every_model(capsys, corpus):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(model_id in out for model_id in corpus.models)


def test_build_writes_models_parquet_with_schema(tmp_path, corpus, capsys):
    grid = str(Path(__file__).parent / "data" / "grid_small.yaml")
    assert main(["build", "--out", str(tmp_path), "--grid", grid, "--models", "gpt-oss-20b", "Qwen3-8B",
                 "--quiet"]) == 0
    assert "2 models evaluated, 0 reused" in capsys.readouterr().out
    frame = pl.read_parquet(tmp_path / "results" / "models.parquet")
    assert frame.columns == list(MODELS_SCHEMA)
    assert dict(frame.schema) == {k: v[0] for k, v in MODELS_SCHEMA.items()}
    assert frame["model_id"].n_unique() == frame.height == 2
    row = frame.filter(pl.col("model_id") == "openai/gpt-oss-20b").row(0, named=True)
    assert row["params_total"] == 20_914_757_184
    assert row["kv_fixed_bytes"] > 0 and row["max_context"] == 131072
    assert not list(tmp_path.glob(".results-*")), "staging folder left behind"


def test_bench_reports_every_model(capsys, corpus):
    assert main(["bench", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert all(model_id in out for model_id in corpus.models)
    assert "whole corpus" in out
