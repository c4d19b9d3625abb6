"""The components contract and the inspector documents: first-principles numbers, one source."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.batch.contract import evaluate_contracts
from engine.language.corpus import load_corpus
from engine.batch.export import model_document
from site_builder.cli import main as site_main

from tests.conftest import _evaluation

# the attention contract (corpus/contracts/attention/contract.yaml): hidden 7168; the GQA family's
# sources tie their query heads to the hidden (7168 / 128 = 56)
H, HEADS, D = 7168, 56, 128
LENGTHS = (1024, 4096, 16384, 65536, 131072, 262144, 1048576)


@pytest.fixture(scope="module")
def contract():
    return {v["id"]: v for v in evaluate_contracts(load_corpus())["attention"]["variants"]}


@pytest.mark.parametrize("variant,kv_heads", [("mha", 56), ("gqa", 8), ("mqa", 1), ("sliding", 8)])
def test_gqa_family_params_and_kv_from_first_principles(contract, variant, kv_heads):
    v = contract[variant]
    # q and o are H x (heads*D); k and v are H x (kv_heads*D); biases only on MQA (StarCoder's)
    biases = HEADS * D + 2 * kv_heads * D + H if variant == "mqa" else 0
    assert v["params"]["value"] == 2 * H * HEADS * D + 2 * H * kv_heads * D + biases
    per_token = 2 * kv_heads * D * 2                      # K and V, BF16, one layer
    if variant == "sliding":
        assert v["kv_bytes_per_token"]["value"] == 0      # capped: nothing grows without bound
        assert v["kv_fixed_bytes"]["value"] == 4096 * per_token
        assert v["kv_bytes_per_request"][-1] == 4096 * per_token
    else:
        assert v["kv_bytes_per_token"]["value"] == per_token
        assert v["kv_bytes_per_request"] == [n * per_token for n in LENGTHS]


def test_mla_contract(contract):
    v = contract["mla"]
    heads = 128                                          # DeepSeek-V3's
    q_a, q_b = H * 1536, 1536 * heads * (128 + 64)
    kv_a, kv_b = H * (512 + 64), 512 * heads * (128 + 128)
    o = heads * 128 * H
    norms = 1536 + 512
    assert v["params"]["value"] == q_a + q_b + kv_a + kv_b + o + norms
    assert v["kv_bytes_per_token"]["value"] == (512 + 64) * 2


def test_prefill_grows_and_the_window_caps_decode(contract):
    for v in contract.values():
        assert all(a < b for a, b in zip(v["prefill_s"], v["prefill_s"][1:])), v["id"]
    sliding, gqa = contract["sliding"], contract["gqa"]
    assert sliding["decode_s"][-1] == sliding["decode_s"][2]       # past the window decode stops growing
    assert gqa["decode_s"][-1] > gqa["decode_s"][2]
    assert contract["mqa"]["decode_s"][-1] < contract["gqa"]["decode_s"][-1] < contract["mha"]["decode_s"][-1]


@pytest.mark.parametrize("model_id", ["deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b", "deepseek-ai/DeepSeek-V4-Flash"])
def test_inspector_document_is_one_source_with_the_overview(model_id):
    """Consistency of the inspector document with the overview (both from one evaluation): blocks
    and ops add up to the stack, caches to the KV per token. Plus one absolute anchor per model:
    the parameter total derived from config.json (tests/test_models.py) or the model card."""
    ev = _evaluation(model_id)
    doc = model_document(ev)
    overview = ev.overview()
    assert doc["overview"]["params_total"]["value"] == int(overview["params_total"].value)
    # DeepSeek-V3: deepseek_v3_main() in tests/test_models.py; gpt-oss-20b: the HF modeling code's
    # count (tests/test_hf_oracle.py; "20.91B" on OpenAI's card), by hand 24 layers x (attention
    # with biases and 64 sinks + router + 32 experts with biases + 2 norms) + 2 x 201,088 x 2880
    # + 2880; DeepSeek-V4-Flash: the HF modeling code's count (README)
    absolute = {"deepseek-ai/DeepSeek-V3": 671_026_404_352, "openai/gpt-oss-20b": 20_914_757_184,
                "deepseek-ai/DeepSeek-V4-Flash": 284_332_230_231}
    assert doc["overview"]["params_total"]["value"] == absolute[model_id]
    main = next(c for c in doc["components"] if c["uid"] == "main")
    assert main["params"]["value"] == int(overview["params_total"].value)
    # blocks add up to the stack: every op's params x layers x instances, counted once
    ops = [o for o in doc["ops"] if o["stack"] == "main" and "prefill" in o["phases"] and not o["shares"]]
    assert sum(o["params"]["value"] * o["repeat"]["value"] * o["instances"]["value"] for o in ops) == main["params"]["value"]
    caches = sum(c["bytes_per_token"]["value"] for c in doc["caches"]
                 if c["stack"] == "main" and c["growth"] in ("every_token", "compressed"))
    assert caches == int(overview["kv_bytes_per_token_growing"].value)
    json.dumps(doc)                                          # plain JSON all the way down


def test_archledger_build_renders_the_site(tmp_path, capsys):
    grid = str(Path(__file__).parent / "data" / "grid_small.yaml")
    assert site_main(["build", "--out", str(tmp_path), "--grid", grid, "--models", "Qwen3-8B", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "1 models evaluated" in out and "pages)" in out
    site = tmp_path / "site"
    assert (site / "index.html").exists() and (site / "models" / "Qwen--Qwen3-8B" / "index.html").exists()
    assert (site / "models" / "Qwen--Qwen3-8B" / "deploy" / "index.html").exists()
    assert (site / "downloads" / "models.parquet").exists()
    assert site_main(["site", "--out", str(tmp_path / "nowhere")]) == 2
