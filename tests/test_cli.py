"""The command line as a user runs it: show (text, --formula, --json), list, build, bench."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from engine.batch.results import MODELS_SCHEMA
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
    # the MTP module by hand from config.json (hidden h 7168, vocab 129,280, one MoE layer of 256 + 1
    # shared experts of 2048, MLA with q_lora 1536, kv_lora 512, 128 heads of 128 + 64 rope, v 128):
    # its own embed and head 2 x 7168 x 129,280, eh_proj 2h x h, five h-wide norms (enorm, hnorm,
    # shared_head.norm and the layer's two), attention q_a 7168 x 1536 + q_b 1536 x 128 x 192 +
    # kv_a 7168 x 576 + kv_b 512 x 128 x 256 + o 128 x 128 x 7168 + norms 1536 + 512, experts
    # 257 x 3 x 2048 x 7168 and the router 7168 x 256 (its correction bias is a buffer, as in
    # params_total)
    h, v = 7168, 129_280
    attention = h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h + 1536 + 512
    mtp = 2 * h * v + 2 * h * h + 5 * h + attention + 257 * 3 * 2048 * h + h * 256
    assert data["params_mtp"]["value"] == mtp == 13_463_426_048


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
    # window-capped caches at full window (config.json): 12 of 24 layers slide over 128 tokens,
    # K and V of 8 heads x 64, BF16: 12 x 128 x 8 x 64 x 2 x 2 B
    assert row["kv_fixed_bytes"] == 12 * 128 * 8 * 64 * 2 * 2 == 3_145_728 and row["max_context"] == 131072
    assert not list(tmp_path.glob(".results-*")), "staging folder left behind"


@pytest.mark.long
def test_bench_reports_every_model(capsys, corpus):
    assert main(["bench", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert all(model_id in out for model_id in corpus.models)
    assert "whole corpus" in out
