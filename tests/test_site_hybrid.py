"""A hybrid model on the site and in the Parquet, by hand: the flat state beside the growing KV.

Qwen3.5-27B (config text_config: 48 Gated DeltaNet layers and 16 gated full-attention layers) and
Llama-3.1-8B (no recurrent mixer) are built over a tiny grid (one H100, no fusion, BF16 and FP8
KV, contexts of exactly 1K and 1M tokens: prompts of 1,023 and 1,048,575 plus one output token;
per-op tables at 8 requests x 4,096 + 512 and at one request with 4,096- and 8,192-token prompts)
and the site is rendered from the results. Every expectation is derived here from the published
configs:

* per request, the state part is LINEAR x (HV x DK x DV x 4 B (float32 delta state) +
  conv channels x (kernel - 1) x 2 B (BF16 conv state)) = 153,944,064 B at any context; the
  growing part is FULL x 2 (K, V) x n_kv_heads x head_dim x KV bytes x context;
* Llama-3.1-8B has no state part; its KV is 32 x 2 x 8 x 128 x KV bytes x context;
* in decode (ops.parquet) each linear layer reads and writes its delta state and conv state once per
  token, whatever the context, while the attention layers read their whole K and V history;
* in prefill the linear layers' FLOPs double when the prompt doubles.

The pages must show these parts (the model page's cache table and chart, the gallery's mixer label
"gdn + gqa" beside plain "gqa"), each number with its formula.
"""
from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest
import yaml

from site_builder.templating import human_bytes
from tests.conftest import hf_config
from tests.site_helpers import result_tables

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice.
pytestmark = pytest.mark.xdist_group("site_hybrid")

QWEN, LLAMA = "Qwen/Qwen3.5-27B", "meta-llama/Meta-Llama-3.1-8B"
GRID = {
    "doc": "Tiny grid for tests/test_site_hybrid.py.",
    "gpus": ["H100"], "gpu_counts": [1], "beyond_fit": 1,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["none"], "kv_dtypes": ["bf16", "fp8"],
    "scenarios": {"input_lengths": [1023, 1048575], "beyond_max_context": 8, "output_lengths": [1],
                  "batches": [1]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 4096, "output": 512},
                                              {"batch": 1, "input": 4096, "output": 1},
                                              {"batch": 1, "input": 8192, "output": 1}]},
}
K1, M1 = 1024, 1048576
F32, BF16 = 4, 2
KV_BYTES = {"bf16": 2, "fp8": 1}

# Qwen3.5-27B by hand (config.json, text_config)
C = hf_config(QWEN)["text_config"]
LINEAR = C["layer_types"].count("linear_attention")                     # 48
FULL = C["layer_types"].count("full_attention")                         # 16
HK, HV, DK, DV = (C[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                 "linear_value_head_dim"))
CHANNELS = 2 * HK * DK + HV * DV                                         # the conv1d's channels: q, k, v
KERNEL = C["linear_conv_kernel_dim"]
DELTA_STATE = LINEAR * HV * DK * DV * F32
CONV_STATE = LINEAR * CHANNELS * (KERNEL - 1) * BF16
STATE = DELTA_STATE + CONV_STATE
KVH, HEAD = C["num_key_value_heads"], C["head_dim"]


def qwen_kv(context: int, kv_bytes: int = 2) -> int:
    return FULL * 2 * KVH * HEAD * kv_bytes * context


# Llama-3.1-8B by hand
C8 = hf_config(LLAMA)
L8, KVH8, D8 = C8["num_hidden_layers"], C8["num_key_value_heads"], C8["hidden_size"] // C8["num_attention_heads"]


def llama_kv(context: int, kv_bytes: int = 2) -> int:
    return L8 * 2 * KVH8 * D8 * kv_bytes * context


def test_hand_numbers():
    assert (LINEAR, FULL, STATE) == (48, 16, 153_944_064)
    assert qwen_kv(1) == 65_536 and llama_kv(1) == 131_072


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_staged

    root = tmp_path_factory.mktemp("site-hybrid")
    grid = root / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID, sort_keys=False))
    build(load_corpus(), root, ["Qwen3.5-27B", "Llama-3.1-8B"], grid, jobs=1, site=render_staged)
    return root


@pytest.fixture(scope="module")
def tables(out):
    return result_tables(out)


def _model(tables, model_id: str) -> dict:
    return tables["models"].filter(pl.col("model_id") == model_id).row(0, named=True)


# -- Parquet ------------------------------------------------------------------------------------------

def test_models_parquet_splits_the_cache_into_flat_state_and_growing_kv(tables):
    qwen, llama = _model(tables, QWEN), _model(tables, LLAMA)
    assert qwen["kv_state_bytes"] == STATE and llama["kv_state_bytes"] == 0
    for row, kv in ((qwen, qwen_kv), (llama, llama_kv)):
        growing = dict(zip(row["kv_context_lengths"], row["kv_growing_bytes_per_request"]))
        assert growing[K1] == kv(K1) and growing[M1] == kv(M1)
        assert growing[32768] == kv(32768) and growing[131072] == kv(131072)
    # the per-token and fixed columns agree with the parts (no window caches in either model)
    assert qwen["kv_bytes_per_token"] == qwen_kv(1) and qwen["kv_fixed_bytes"] == STATE


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_deployment_rows_split_kv_per_request_at_1k_and_1m(tables, kv_dtype):
    """The state keeps its own dtypes under an FP8 KV cache; only the attention part shrinks."""
    kvb = KV_BYTES[kv_dtype]
    rows = tables["deployments"].filter(pl.col("kv_dtype") == kv_dtype)
    for model_id, state, kv in ((QWEN, STATE, qwen_kv), (LLAMA, 0, llama_kv)):
        mine = rows.filter(pl.col("model_id") == model_id)
        for context in (K1, M1):
            at = mine.filter(pl.col("input_len") + pl.col("output_len") == context)
            assert at.height >= 2, (model_id, context)           # both phases
            for row in at.iter_rows(named=True):
                assert row["kv_state_bytes_per_request"] == state
                assert row["kv_growing_bytes_per_request"] == kv(context, kvb)
                assert row["kv_bytes_per_request"] == state + kv(context, kvb)


# -- decode and prefill SOL in ops.parquet ----------------------------------------------------------

GDN = "main/layers[linear]/self_attn"
ATTN = "main/layers[full]/self_attn"


def _op(tables, phase: str, batch: int, prompt: int, output: int, uid: str) -> dict:
    rows = tables["ops"].filter((pl.col("model_id") == QWEN) & (pl.col("phase") == phase) & (pl.col("batch") == batch)
                                & (pl.col("input_len") == prompt) & (pl.col("output_len") == output)
                                & (pl.col("op_uid") == uid))
    assert rows.height == 1, (phase, batch, prompt, uid)
    return rows.row(0, named=True)


@pytest.fixture(scope="module")
def decode(tables):
    return lambda uid, batch=8, prompt=4096, output=512: _op(tables, "decode", batch, prompt, output, uid)


def test_decode_sol_counts_each_state_once_per_layer_and_the_attention_history(decode):
    """Ops rows of the grid build (8 requests, 4,096-token prompt, 512 generated: context 4,608,
    one H100, unfused, BF16). Per linear layer the delta rule reads q, k (HK heads x DK), v, decay
    and beta (HV heads), writes the output (HV x DV) and reads + writes the float32 state (HV x DK x
    DV x 4 B) once; the conv1d reads its input and writes its output (CHANNELS x 2 B), reads + writes
    its BF16 state (CHANNELS x (kernel - 1)) and reads its weight (CHANNELS x kernel). Per full
    layer the score op reads q and the K history (8 x 4,608 x KVH x HEAD x 2 B) and writes the
    scores (8 x heads x 4,608 x 2 B); the apply op reads the probabilities and the V history and
    writes the output."""
    b, heads = 8, C["num_attention_heads"]
    acts = b * (2 * HK * DK + HV * DV + 2 * HV + HV * DV) * BF16
    assert decode(f"{GDN}/core@decode")["bytes"] == pytest.approx(LINEAR * (acts + 2 * b * HV * DK * DV * F32), rel=1e-12)
    conv = 2 * b * CHANNELS * BF16 + 2 * b * CHANNELS * (KERNEL - 1) * BF16 + CHANNELS * KERNEL * BF16
    assert decode(f"{GDN}/conv1d")["bytes"] == pytest.approx(LINEAR * conv, rel=1e-12)
    ctx = 4096 + 512
    history = b * ctx * KVH * HEAD * BF16                     # K (or V) of 8 requests at 4,608 tokens
    score = history + b * heads * ctx * BF16 + b * heads * HEAD * BF16   # + scores written, q read
    assert decode(f"{ATTN}/scores")["bytes"] == pytest.approx(FULL * score, rel=1e-12)
    assert decode(f"{ATTN}/attn")["bytes"] == pytest.approx(FULL * score, rel=1e-12)


def test_decode_state_traffic_does_not_grow_with_context_but_attention_does(decode):
    short = {u: decode(u, 1, 4096, 1)["bytes"] for u in (f"{GDN}/core@decode", f"{GDN}/conv1d", f"{ATTN}/scores")}
    long = {u: decode(u, 1, 8192, 1)["bytes"] for u in short}
    assert long[f"{GDN}/core@decode"] == short[f"{GDN}/core@decode"]
    assert long[f"{GDN}/conv1d"] == short[f"{GDN}/conv1d"]
    # one request: + 4,096 tokens of K history (and of BF16 scores) per full layer
    extra = FULL * (4096 * KVH * HEAD * BF16 + C["num_attention_heads"] * 4096 * BF16)
    assert long[f"{ATTN}/scores"] - short[f"{ATTN}/scores"] == pytest.approx(extra, rel=1e-12)


def test_prefill_flops_of_the_linear_layers_grow_linearly(tables):
    """Doubling the prompt (4,096 -> 8,192) doubles the delta rule's chunked FLOPs and the conv's;
    the attention score's grow about four times (causal, quadratic)."""
    def flops(uid, prompt):
        return _op(tables, "prefill", 1, prompt, 1, uid)["flops"]
    for uid in (f"{GDN}/core", f"{GDN}/conv1d", f"{GDN}/in_proj_qkv"):
        assert flops(uid, 8192) == pytest.approx(2 * flops(uid, 4096), rel=1e-12), uid
    assert flops(f"{ATTN}/scores", 8192) / flops(f"{ATTN}/scores", 4096) > 3.9


# -- pages --------------------------------------------------------------------------------------------

def _page(out, path: str) -> str:
    return (out / "site" / path / "index.html").read_text()


def _page_data(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S)
    return json.loads(found[1])


def _split_rows(html: str) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(data-part, row heading, [(shown text, formula, where)]) for each row of the cache split table."""
    table = re.search(r'<table class="data" id="kv-split-table">(.*?)</table>', html, re.S)[1]
    rows = []
    for part, body in re.findall(r'<tr (?:class="sum" )?data-part="(\w+)">(.*?)</tr>', table, re.S):
        head = re.sub(r"<[^>]+>", "", re.split(r"<td class=\"n\">", body)[0]).strip()
        cells = re.findall(r'<span class="num" tabindex="-1" data-f="([^"]*)"[^>]*?(?:data-w="([^"]*)")?>([^<]*)</span>', body)
        rows.append((part, head, [(text, formula, where) for formula, where, text in cells]))
    return rows


def test_model_page_shows_the_state_and_the_growing_kv_with_formulas(out):
    rows = _split_rows(_page(out, "models/Qwen--Qwen3.5-27B"))
    sums = {part: cells for part, head, cells in rows if "all entries" in head or "total" in head}
    lengths = ["length = 1024", "length = 32768", "length = 131072", "length = 1048576"]
    assert [w for _, _, w in sums["growing"]] == lengths
    assert [t for t, _, _ in sums["state"]] == [human_bytes(STATE)] * 4           # flat: 154 MB at 1K and 1M
    assert [t for t, _, _ in sums["growing"]] == [human_bytes(qwen_kv(n)) for n in (K1, 32768, 131072, M1)]
    assert [t for t, _, _ in sums["total"]] == [human_bytes(STATE + qwen_kv(n)) for n in (K1, 32768, 131072, M1)]
    assert all(f and "length" not in f for _, f, _ in sums["state"])             # the state's formula has no context
    assert all("length" in f and "n_kv_heads" in f for _, f, _ in sums["growing"])
    entries = {head: cells for part, head, cells in rows if part == "state" and "all entries" not in head}
    assert any("recurrent_state" in h for h in entries) and any("conv_state" in h for h in entries)
    delta = next(c for h, c in entries.items() if "recurrent_state" in h)
    assert delta[0][0] == human_bytes(DELTA_STATE) and "lin_v_heads" in delta[0][1]
    # the non-hybrid model: no state rows, the growing part is the whole
    plain = _split_rows(_page(out, "models/meta-llama--Meta-Llama-3.1-8B"))
    assert {part for part, _, _ in plain} == {"growing", "total"}
    total = next(cells for part, _, cells in plain if part == "total")
    assert [t for t, _, _ in total] == [human_bytes(llama_kv(n)) for n in (K1, 32768, 131072, M1)]


def _series(spec: dict) -> dict[str, dict[int, float]]:
    line = spec["layer"][0]
    assert line["encoding"]["color"]["field"] == "part"
    values = line["data"]["values"] if "values" in line.get("data", {}) else None
    out: dict[str, dict[int, float]] = {}
    for row in values or []:
        out.setdefault(row["part"], {})[row["context"]] = row["bytes"]
    return out


def test_kv_chart_has_the_state_and_the_growing_series(out):
    qwen = _series(_page_data(_page(out, "models/Qwen--Qwen3.5-27B"))["specs"]["model"]["kv"])
    assert set(qwen) == {"state (flat)", "KV (grows with context)", "total"}
    assert set(qwen["state (flat)"].values()) == {STATE}
    for n in (K1, M1):
        assert qwen["KV (grows with context)"][n] == qwen_kv(n)
        assert qwen["total"][n] == STATE + qwen_kv(n)
    llama = _series(_page_data(_page(out, "models/meta-llama--Meta-Llama-3.1-8B"))["specs"]["model"]["kv"])
    assert set(llama) == {"KV (grows with context)", "total"}
    # the deployment page's chart: the same parts, fed from the page's rows
    data = _page_data(_page(out, "models/Qwen--Qwen3.5-27B/deploy"))
    shared = json.loads(gzip.decompress((out / "site" / "data" / "deploy" / "page.json.gz").read_bytes()))  # every deploy page's specs
    assert shared["specs"]["kv"]["layer"][0]["encoding"]["color"]["field"] == "part"
    assert {r["part"] for r in data["kv_rows"]} == {"state (flat)", "KV (grows with context)", "total"}
    # ... and the formulas it evaluates carry the state beside the whole (the "of which flat state"
    # card): flat in the context, the growing part on top, at BF16 KV
    from engine.language.formula_tree import evaluate
    index = out / "site" / "data" / "deploy" / "Qwen--Qwen3.5-27B" / "index.json.gz"
    kv = json.loads(gzip.decompress(index.read_bytes()))["model"]["kv_request"]
    for n in (K1, M1):
        assert evaluate(kv["state"], {"length": n, "kv_bytes": 2}) == STATE
        assert evaluate(kv["all"], {"length": n, "kv_bytes": 2}) == STATE + qwen_kv(n)


def test_gallery_labels_the_mixers(out):
    html = _page(out, "")
    labels = {}
    for row in html.split("<tr ")[1:]:
        slug = re.search(r'href="models/([^/"]+)/"', row)
        cell = re.search(r'<td class="mixers"><span[^>]*>([^<]*)</span>', row)
        if slug and cell:
            labels[slug[1]] = cell[1]
    assert labels == {"Qwen--Qwen3.5-27B": "gdn + gqa", "meta-llama--Meta-Llama-3.1-8B": "gqa"}
    index = {m["model_id"]: m for m in json.loads((out / "site" / "data" / "index.json").read_text())}
    assert index[QWEN]["attention_label"] == "gdn + gqa" and index[LLAMA]["attention_label"] == "gqa"


# -- the label mechanism --------------------------------------------------------------------------------

@pytest.mark.parametrize("model_id, label", [
    ("openai/gpt-oss-20b", "gqa + sliding"),        # config layer_types: sliding_attention and full_attention
    ("deepseek-ai/DeepSeek-V3", "mla"),
    (QWEN, "gdn + gqa"),                            # linear_attention layers first, whatever the layer order
])
def test_attention_label_follows_the_layer_plans(model_id, label):
    from engine.batch.results import attention_label
    from tests.conftest import _evaluation
    assert attention_label(_evaluation(model_id)) == label


def test_a_component_label_must_be_a_short_name(tmp_path):
    from engine.language.corpus import load_corpus
    from engine.language.graph_load import _load_component
    from engine.language.errors import SpecError
    roles = load_corpus().roles
    path = tmp_path / "odd_mixer.yaml"
    body = "component: odd_mixer\nrole: attention\n{label}doc: x\ngraph:\n  o: {{op: linear, in: x, dims: {{in: hidden, out: hidden}}}}\n"
    path.write_text(body.format(label=""))
    assert _load_component(path, tmp_path, roles, True).label == "odd"      # the default: the name without _mixer
    path.write_text(body.format(label="label: 3\n"))
    with pytest.raises(SpecError, match="odd_mixer.yaml:3.*label"):
        _load_component(path, tmp_path, roles, True)
