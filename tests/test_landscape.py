"""The landscape page and the gallery's trait filter, against hand derivations.

Three models (DeepSeek-V3: MLA, MoE with a shared expert, MTP; Mixtral-8x7B: MoE, GQA; Qwen3-8B:
dense GQA) are built over a tiny grid (one GPU, batch 1) and the site rendered from the results.
Expected numbers are derived here from config.json and gpus/*.yaml (read with yaml.safe_load, not
the engine's loader):

* ridge point of a GPU R = bf16 dense peak FLOP/s / HBM bytes/s; tokens an expert needs so that
  its [d_ff_expert, hidden] matmuls reach R in BF16 (2 B weights and activations):
  2 t h w / (2 h w + 2 t (h + w)) = R  =>  t = 2 R h w / (2 h w - 2 R (h + w)); the whole-model batch
  is t x n_experts / top_k (each token visits top_k of n_experts).
* KV bytes per token: GQA 2 x layers x kv_heads x head_dim x 2 B; MLA (kv_lora_rank +
  qk_rope_head_dim) x layers x 2 B, whatever the context (every-token caches).
* Every landscape table's CSV twin has the table's rows and columns with the same values.
* The gallery's filter bar lists every trait, and its "models by trait" list has exactly the
  models the architecture has: DeepSeek-V3 under MLA and MTP, Mixtral under MoE but not MLA.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import hf_config as config

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its built site twice.
pytestmark = pytest.mark.xdist_group("landscape")

REPO = Path(__file__).resolve().parents[1]
MODELS = ["deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen3-8B"]
GRID = {
    "doc": "Tiny grid for tests/test_landscape.py.",
    "gpus": ["H100"], "gpu_counts": [8], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024], "beyond_max_context": 1, "output_lengths": [256], "batches": [1]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 1, "input": 1024, "output": 256}]},
}
TRAITS = ["moe", "mla", "sparse", "sliding", "compressed", "linear", "hybrid", "mtp"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_site

    root = tmp_path_factory.mktemp("landscape")
    grid = root / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID, sort_keys=False))
    build(load_corpus(), root, MODELS, grid, jobs=1)
    render_site(root / "results", root)
    return root


def _figure(value):
    return value["value"] if isinstance(value, dict) else value


def _gpus() -> dict[str, tuple[float, float]]:
    """gpu name -> (bf16 peak FLOP/s, HBM bytes/s), read from gpus/*.yaml directly."""
    out = {}
    for path in sorted((REPO / "gpus").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        out[data["gpu"]] = (_figure(data["peak_tflops"]["bf16"]) * 1e12, _figure(data["hbm_tb_s"]) * 1e12)
    return out


def _page_tables(html: str) -> dict[str, list[dict[str, str]]]:
    """Each landscape table's rows as {column key: data-v}, read from the page's markup."""
    tables = {}
    for name, body in re.findall(r'<table class="data landscape[a-z ]*" data-table="([a-z_]+)">(.*?)</table>', html, re.S):
        rows = []
        for tr in re.findall(r"<tbody>(.*?)</tbody>", body, re.S)[0].split("</tr>"):
            cells = dict(re.findall(r'data-k="([^"]+)" data-v="([^"]*)"', tr))
            if cells:
                rows.append(cells)
        tables[name] = rows
    return tables


@pytest.fixture(scope="module")
def page(out):
    return _page_tables((out / "site" / "landscape" / "index.html").read_text())


def _row(rows, model_id):
    (row,) = [r for r in rows if r["model_id"] == model_id]
    return row


@pytest.mark.parametrize("model_id, hidden, width, experts, top_k", [
    ("deepseek-ai/DeepSeek-V3", "hidden_size", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok"),
    ("mistralai/Mixtral-8x7B-v0.1", "hidden_size", "intermediate_size", "num_local_experts", "num_experts_per_tok"),
])
def test_ridge_batch_equals_hand_derivation(page, out, model_id, hidden, width, experts, top_k):
    c = config(model_id)
    h, w, n, k = c[hidden], c[width], c[experts], c[top_k]
    row = _row(page["experts"], model_id)
    assert (int(row["n_experts"]), int(row["top_k"]), int(row["d_ff_expert"])) == (n, k, w)
    assert int(row["n_shared_experts"]) == c.get("n_shared_experts", 0)
    gpus = _gpus()
    assert len(gpus) == 12
    for gpu, (peak, bw) in gpus.items():
        r = peak / bw
        t = 2 * r * h * w / (2 * h * w - 2 * r * (h + w))
        assert int(row[f"batch_{gpu}"]) == math.ceil(t * n / k), gpu
    ridges = {r["gpu"]: float(r["ridge"]) for r in page["ridge"]}
    assert ridges == pytest.approx({g: p / b for g, (p, b) in gpus.items()}, rel=1e-12)
    # H100 by hand: 989e12 / 3.35e12 = 295.2 FLOP/B
    assert ridges["H100"] == pytest.approx(295.22, abs=0.01)


def test_dense_model_has_no_experts_row(page):
    assert "Qwen/Qwen3-8B" not in {r["model_id"] for r in page["experts"]}


def test_kv_per_token_cells_equal_hand_derivation(page):
    v3, mix, q8 = config(MODELS[0]), config(MODELS[1]), config(MODELS[2])
    expected = {
        MODELS[0]: (v3["kv_lora_rank"] + v3["qk_rope_head_dim"]) * v3["num_hidden_layers"] * 2,       # 70,272
        MODELS[1]: 2 * mix["num_hidden_layers"] * mix["num_key_value_heads"]
                   * (mix["hidden_size"] // mix["num_attention_heads"]) * 2,                          # 131,072
        MODELS[2]: 2 * q8["num_hidden_layers"] * q8["num_key_value_heads"] * q8["head_dim"] * 2,     # 147,456
    }
    assert expected == {MODELS[0]: 70_272, MODELS[1]: 131_072, MODELS[2]: 147_456}
    for model_id, per_token in expected.items():
        row = _row(page["kv"], model_id)
        assert [int(row[k]) for k in ("kv_4k", "kv_128k", "kv_1m")] == [per_token] * 3


def test_params_cells_match_models_parquet(page, out):
    import polars as pl
    models = pl.read_parquet(out / "results" / "models.parquet")
    for r in models.iter_rows(named=True):
        row = _row(page["params"], r["model_id"])
        assert (int(row["params_total"]), int(row["params_active"])) == (r["params_total"], r["params_active"])
        assert float(row["active_share"]) == pytest.approx(r["params_active"] / r["params_total"])


def test_every_table_has_a_csv_twin_equal_to_it(page, out):
    site = out / "site"
    data = json.loads((out / "results" / "landscape.json").read_text())
    names = [t["name"] for t in data["tables"]]
    assert set(names) == set(page) >= {"traits", "kv", "experts", "ridge", "attention", "params"}
    html = (site / "landscape" / "index.html").read_text()
    for name in names:
        assert f'href="../downloads/landscape/{name}.csv"' in html
        twin = list(csv.DictReader(io.StringIO((site / "downloads" / "landscape" / f"{name}.csv").read_text())))
        assert len(twin) == len(page[name]) > 0, name
        for shown, written in zip(page[name], twin):
            assert {k: written[k] for k in shown} == shown, name


def test_cells_carry_formulas(out):
    """Every number on the page has its formula (the site's tooltip attribute) and the dims it names."""
    import gzip
    import json
    html = (out / "site" / "landscape" / "index.html").read_text()
    texts = json.loads(gzip.decompress((out / "site" / "data" / "landscape-formulas.json.gz").read_bytes()))
    keys = re.findall(r'<span class="num" tabindex="-1" data-fk="(\d+)">', html)
    assert keys and len(keys) == html.count('class="num"')
    spans = [texts[int(k)] for k in keys]           # the page's tooltips, numbered in its formula file
    assert spans and all(f.strip() for f in spans)
    assert any("kv_lora_rank" in f and "where" in f and "kv_lora_rank = 512" in f for f in spans)
    assert any("R = 989e12 / 3.35e12" in f for f in spans)


def test_gallery_filter_lists_traits_with_their_models(out):
    html = (out / "site" / "index.html").read_text()
    boxes = re.findall(r'<input type="checkbox" name="trait" value="([a-z]+)">', html)
    assert boxes == TRAITS
    listed = {key: set(re.findall(r'data-model="([^"]+)"', body))
              for key, body in re.findall(r'<li data-trait="([a-z]+)">(.*?)</li>', html, re.S)}
    assert list(listed) == TRAITS
    v3, mix, q8 = MODELS
    assert listed["mla"] == {v3}
    assert listed["mtp"] == {v3}
    assert listed["moe"] == {v3, mix}
    assert mix not in listed["mla"] and q8 not in listed["moe"]
    assert listed["sparse"] == listed["sliding"] == listed["linear"] == listed["hybrid"] == set()
    # each model row carries its traits for the script, and the rows are grouped by lineage
    assert re.search(r'data-name="DeepSeek-V3"[^>]*data-traits="moe mla mtp"', html)
    heads = re.findall(r'<tr class="lineage" data-lineage="([^"]+)">', html)
    assert heads == ["DeepSeek", "Mistral", "Qwen"]


def test_landscape_is_in_the_nav(out):
    html = (out / "site" / "index.html").read_text()
    assert 'href="landscape/">Landscape</a>' in html


@pytest.mark.parametrize("model_id, expected", [
    # by the architecture as published (model cards, configs), not by the engine
    ("openai/gpt-oss-20b", {"moe", "sliding", "hybrid"}),              # alternating sliding/full layers
    ("Qwen/Qwen3.5-27B", {"linear", "hybrid", "mtp"}),                 # Gated DeltaNet beside full attention; its MTP module
    ("deepseek-ai/DeepSeek-V3.2", {"moe", "mla", "sparse", "mtp"}),    # DSA: top-k sparse MLA
    ("meta-llama/Meta-Llama-3.1-8B", set()),
    ("MiniMaxAI/MiniMax-M2.5", {"moe"}),                               # MTP declared but not modeled
])
def test_traits_from_the_graph(model_id, expected, evaluation):
    from engine.batch.landscape import traits
    assert set(traits(evaluation(model_id))) == expected


def test_bad_lineage_file_is_one_line(tmp_path):
    from engine.batch.landscape import load_lineage
    from engine.language.errors import SpecError
    (tmp_path / "lineage.yaml").write_text("lineages:\n  - lineage: Qwen\n    families: Qwen3\n")
    with pytest.raises(SpecError) as info:
        load_lineage(tmp_path)
    text = str(info.value)
    assert "lineage.yaml:3: lineages[0].families: expected a list" in text and "\n" not in text
    (tmp_path / "lineage.yaml").write_text("lineages:\n  - lineage: Qwen\n    families: [Qwen3, {Qwen3.5: [Qwen/Qwen3.5-27B]}]\n")
    table = load_lineage(tmp_path)
    assert table["families"] == {"Qwen3": ("Qwen", 0), "Qwen3.5": ("Qwen", 1)}
    assert table["models"] == {"Qwen/Qwen3.5-27B": 0}
