"""DeepSeek-V4-Flash and -Pro: hyper-connections, compressed sparse / heavily compressed
attention, hash-routed MoE, FP4 experts, MTP.

External facts: parameter counts of transformers 5.24's ``DeepseekV4ForCausalLM`` built on the
meta device from the published configs (it omits the MTP module); the MTP module, cache entries
and storage formats written out below from DeepSeek's inference code (inference/model.py) and
the configs' fields.
"""
from __future__ import annotations

import math

import pytest
import sympy

from engine.language import kv, quantities, storage, symbols
from engine.deploy import Options, place
from engine.deploy.parallel import ParallelConfig
from tests.conftest import hf_config as config

FLASH, PRO = "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"
#: transformers 5.24 DeepseekV4ForCausalLM on the meta device, sum of parameters().
HF_PARAMS = {FLASH: 284_332_230_231, PRO: 1_572_997_179_491}


@pytest.mark.parametrize("model_id", [FLASH, PRO])
def test_params_equal_hf_modeling_code(model_id, evaluation):
    assert int(quantities.params_total(evaluation(model_id).numeric)) == HF_PARAMS[model_id]


def _swa_layer_params(c: dict) -> int:
    """One sliding-window layer, from inference/model.py's modules (K=V head, grouped output)."""
    D, H, d, q, G, R = (c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"],
                        c["o_groups"], c["o_lora_rank"])
    n, E, I = c["hc_mult"], c["n_routed_experts"], c["moe_intermediate_size"]
    attention = q * D + q + H * d * q + d * D + d + (G * R) * (H * d // G) + D * G * R + H   # ... + attn_sink
    hyper = 2 * ((2 + n) * n * n * D + (2 + n) * n + 3)                                      # hc_attn_*, hc_ffn_*
    moe = E * D + 3 * E * I * D + 3 * c["n_shared_experts"] * I * D                           # gate, experts, shared
    return attention + hyper + moe + 2 * D                                                   # attn_norm, ffn_norm


@pytest.mark.parametrize("model_id", [FLASH, PRO])
def test_mtp_module_params(model_id, evaluation):
    """MTP (not in the HF class): a sliding-window layer + e_proj, h_proj, enorm, hnorm, norm and
    its own hc_head; embedding and head are shared with the main model."""
    c = config(model_id)
    D, n = c["hidden_size"], c["hc_mult"]
    assert c["compress_ratios"][c["num_hidden_layers"]] == 0            # the MTP layer slides only
    expected = _swa_layer_params(c) + 2 * D * D + 3 * D + (n * n * D + n + 1)
    assert int(quantities.params_total(evaluation(model_id).numeric, "mtp")) == expected


@pytest.mark.parametrize("model_id", [FLASH, PRO])
def test_layer_plan_follows_compress_ratios_and_hash_layers(model_id, evaluation):
    c = config(model_id)
    ratios = c["compress_ratios"][:c["num_hidden_layers"]]
    kind = {0: "swa", 4: "csa", 128: "hca"}
    want = {}
    for layer, ratio in enumerate(ratios):
        name = kind[ratio] + ("_hash" if layer < c["num_hash_layers"] else "")
        want.setdefault(name, []).append(layer)
    a = evaluation(model_id).numeric
    got = {comp.template: list(comp.layers) for comp in a.components.values() if comp.template and comp.stack == "main"}
    assert got == want
    hashed = [r for r in a.rows.values() if r.op == "hash_route"]
    assert {r.uid.split("]")[0] + "]" for r in hashed} == {f"main/layers[{t}]" for t in want if t.endswith("_hash")}
    table = [leaf for r in hashed for leaf in r.leaves]
    assert {(tuple(int(x.size) for x in leaf.axes), leaf.kind) for leaf in table} == \
        {((c["vocab_size"], c["num_experts_per_tok"]), "buffer")}
    stream = next(s for s in a.streams if s.name == "token_ids")
    assert sorted({reader for _, reader, _ in stream.pairs}) == list(range(c["num_hash_layers"]))
    assert {producer for producer, _, _ in stream.pairs} == {-1}        # the stack's token ids


@pytest.mark.parametrize("model_id", [FLASH, PRO])
@pytest.mark.parametrize("length", [4096, 4099, 131072, 1048576])
def test_kv_bytes_per_request(model_id, length, evaluation):
    """Every layer keeps a window of `sliding_window` 512-wide K=V entries; a layer with
    compress ratio m adds floor(L/m) compressed entries (a window still filling has no entry yet:
    at 4099 tokens 1024 ratio-4 and 32 ratio-128 entries, not 1025 and 33); ratio-4 layers also floor(L/4) indexer
    keys of index_head_dim (inference/model.py: kv_cache_size = window + max_seq_len // ratio),
    in FP8 with one f32 scale per 128 (vLLM: head_dim + head_dim // 128 * 4 = 132 B) whatever
    the KV dtype. Each compressor also keeps two F32 buffers (kv_state, score_state) of
    coff x m rows by coff x width (coff 2 with CSA's overlapping windows, 1 for HCA):
    HCA 2 x 128 x 512 x 4 = 0.5 MiB, CSA 2 x 8 x 1024 x 4 + its indexer's 2 x 8 x 256 x 4 = 80 KiB."""
    c = config(model_id)
    d, di, w = c["head_dim"], c["index_head_dim"], c["sliding_window"]
    elements, indexer_bytes, state_bytes = 0, 0, 0
    for ratio in c["compress_ratios"][:c["num_hidden_layers"]]:
        elements += min(length, w) * d
        if ratio:
            elements += (length // ratio) * d
            coff = 2 if ratio == 4 else 1
            state_bytes += 2 * (coff * ratio) * (coff * d) * 4
        if ratio == 4:
            indexer_bytes += (length // 4) * (di + di // 128 * 4)
            state_bytes += 2 * (2 * 4) * (2 * di) * 4
    a = evaluation(model_id).numeric
    assert int(kv.bytes_per_request(a, length, "bf16")) == 2 * elements + indexer_bytes + state_bytes
    assert int(kv.bytes_per_request(a, length, "fp8")) == elements + indexer_bytes + state_bytes
    assert int(kv.bytes_per_request(a, length, "bf16", part="state")) == state_bytes


def test_compressor_state_per_layer_by_hand(evaluation):
    """The compressor's F32 kv_state + score_state per request and layer, from the Flash config
    (head_dim 512, index_head_dim 128; HCA ratio 128 without overlap, CSA ratio 4 with it):
    HCA 2 x (1 x 128) x (1 x 512) x 4 B = 524,288 B = 0.5 MiB, more than HCA's own KV at 32K
    (32768 / 128 x 512 x 2 + the 128-token window x 512 x 2 = 393,216 B = 0.375 MiB);
    CSA 2 x 8 x 1024 x 4 = 65,536 B and its indexer's 2 x 8 x 256 x 4 = 16,384 B."""
    a = evaluation(FLASH).numeric
    hca = [c for c in a.caches if c.node_uid.startswith("main/layers[hca]/") and c.growth == "state"]
    csa = {c.name: c for c in a.caches if c.node_uid.startswith("main/layers[csa]/") and c.growth == "state"}
    assert [int(c.per_token) * 4 for c in hca] == [524_288] and hca[0].dtype == "f32"
    assert {n: int(c.per_token) * 4 for n, c in csa.items()} == {"compressor_state": 65_536,
                                                                  "index_compressor_state": 16_384}
    assert all(c.dtype == "f32" for c in csa.values())
    hca_kv = [c for c in a.caches if c.node_uid.startswith("main/layers[hca]/") and c.growth != "state"]
    kv_32k = sum(int(kv.entry_bytes_per_request(c, 32768, "bf16")) / int(c.repeat) for c in hca_kv)
    assert kv_32k == 393_216 < 524_288


def _at(expr, seq, ctx):
    return int(sympy.sympify(expr).subs({symbols.dim(symbols.BATCH): 1, symbols.dim(symbols.SEQ): seq,
                                         symbols.dim(symbols.CTX): ctx}))


def test_csa_attention_grows_with_context_times_topk(evaluation):
    """Query i sees min(index_topk, floor(i / 4)) compressed entries: past 4 x index_topk tokens
    each new query adds index_topk pairs; HCA's all-entries attention adds floor(i / 128)."""
    c = config(FLASH)
    k, m, H, d = c["index_topk"], 4, c["num_attention_heads"], c["head_dim"]
    a = evaluation(FLASH).numeric
    csa = a.rows["main/layers[csa]/attn/compressed_scores"]
    hca = a.rows["main/layers[hca]/attn/all_compressed_scores"]

    def pairs(n, cap=None, every=4):
        return sum(min(cap, i // every) if cap else i // every for i in range(1, n + 1))

    for n in (8192, 16384):
        assert _at(csa.flops, n, n) == 2 * H * d * pairs(n, k)
        assert _at(hca.flops, n, n) == 2 * H * d * pairs(n, every=128)
    assert _at(csa.flops, 16384, 16384) - _at(csa.flops, 8192, 8192) == 2 * H * d * k * 8192
    assert 16384 > k * m


def test_csa_decode_reads_only_the_selected_entries(evaluation):
    from engine.deploy.step_functions import KV_BYTES
    c = config(FLASH)
    steps = {s.uid: s for s in place(evaluation(FLASH), ParallelConfig(), 8, Options(), False)["decode"][0].steps}
    subs = {symbols.dim(symbols.BATCH): 1, symbols.dim(symbols.SEQ): 1, symbols.dim(symbols.CTX): 1048576, KV_BYTES: 1}
    layer = "main/layers[csa]/attn/"
    assert int(sympy.sympify(steps[layer + "selected_rows"].out_read).subs(subs)) == c["index_topk"] * c["head_dim"]
    assert int(sympy.sympify(steps[layer + "compressed_cache"].out_read).subs(subs)) == 1048576 // 4 * c["head_dim"]
    assert int(sympy.sympify(steps[layer + "window_cache"].out_read).subs(subs)) == c["sliding_window"] * c["head_dim"]


def _matrix_bytes(fmt: str, rows: int, cols: int) -> int:
    if fmt == "fp4":   # I8 [rows, cols/2] + F8_E8M0 scale [rows, cols/32]
        return rows * cols // 2 + rows * cols // 32
    return rows * cols + 4 * math.ceil(rows / 128) * math.ceil(cols / 128)   # FP8 + F32 block scales


def test_checkpoint_stores_fp4_experts_fp8_blocks_and_f32_mixing(evaluation):
    c = config(FLASH)
    D, I, E, n = c["hidden_size"], c["moe_intermediate_size"], c["n_routed_experts"], c["hc_mult"]
    layers = c["num_hidden_layers"]
    tensors = [t for t in evaluation(FLASH).tensors() if t.stack == "main"]
    by = {}
    for t in tensors:
        by.setdefault(t.role, 0)
        by[t.role] += int(t.total_bytes)
    assert by["experts"] == layers * E * (2 * _matrix_bytes("fp4", I, D) + _matrix_bytes("fp4", D, I))
    assert by["shared_experts"] == layers * (2 * _matrix_bytes("fp8", I, D) + _matrix_bytes("fp8", D, I))
    assert by["hyper_connection"] == 4 * (layers * 2 * ((2 + n) * n * n * D + (2 + n) * n + 3) + n * n * D + n + 1)
    dtypes = {t.key.rsplit(".", 1)[-1]: t.dtype for t in tensors if ".experts." in t.key}
    assert dtypes == {"weight": "I8", "scale": "F8_E8M0"}
    assert {t.dtype for t in tensors if t.key.endswith("tid2eid")} == {"I64"}
    assert {t.dtype for t in tensors if t.key.endswith(("wkv.weight", "wgate.weight")) and "compressor" in t.key} == {"BF16"}


def test_pro_experts_split_over_expert_parallelism(evaluation):
    """EP 8 over 384 experts: each GPU stores 48 experts of every layer, whole."""
    c = config(PRO)
    D, I, E = c["hidden_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    placer = place(evaluation(PRO), ParallelConfig(tp=8, ep=8), 8, Options(), False)["prefill"][1]
    stored = placer.stored["main/layers[csa]/ffn/experts/gate_proj"]
    assert int(stored) == E // 8 * _matrix_bytes("fp4", I, D)


def test_token_id_stream_is_drawn_from_the_stack_input(evaluation):
    """The hash-routed layers read the stack's token ids: the stack drawing joins them."""
    from engine.batch.export import model_document
    from site_builder.graphs import level_graph
    doc = model_document(evaluation(FLASH))
    stream = next(s for s in doc["streams"] if s["name"] == "token_ids")
    assert stream["reader_layers"] == "0-2" and stream["producer_layers"] == ""
    graph = level_graph(doc, "main")
    edges = {(e["src"], e["dst"]): e["label"] for e in graph["edges"] if e.get("kind") == "stream"}
    assert edges == {("in:tokens", "main/layers[swa_hash]"): "stream token_ids (layers 0-1)",
                     ("in:tokens", "main/layers[csa_hash]"): "stream token_ids (layer 2)"}


@pytest.mark.parametrize("model_id", [FLASH, PRO])
def test_kv_growth_per_context_token(model_id, evaluation):
    """Past the window, a request grows by d / m elements per compressed layer (3440 - 21 x 32 =
    2768 for Flash) in the KV dtype and, per CSA layer, one 132 B FP8 indexer key (128 + an f32
    scale) per 4 tokens."""
    c = config(model_id)
    d, di = c["head_dim"], c["index_head_dim"]
    ratios = [r for r in c["compress_ratios"][:c["num_hidden_layers"]] if r]
    elements = sum(sympy.Rational(d, r) for r in ratios)
    indexer = sum(sympy.Rational(di + di // 128 * 4, 4) for r in ratios if r == 4)
    assert elements + sum(sympy.Rational(di, 4) for r in ratios if r == 4) == {FLASH: 3440, PRO: 4924}[model_id]
    assert kv.growing_bytes_per_token(evaluation(model_id).numeric) == 2 * elements + indexer


@pytest.mark.parametrize("model_id", [FLASH, PRO])
def test_attention_label_and_kinds_say_the_same(model_id, evaluation):
    """The gallery's label and its tooltip (models.parquet attention_label, attention_kinds) agree on
    sliding layers, expected from the published config: every V4 layer keeps a local window, and only
    a layer of compress_ratio 0 keeps nothing else (a sliding-window layer); the others' compressed
    entries grow with context. So V4-Flash (swa layers) reads "v4 + sliding" with a ``+window`` kind,
    V4-Pro (none) "v4" with none."""
    from engine.batch.results import attention_kinds, attention_label
    c = config(model_id)
    ratios = c["compress_ratios"][:c["num_hidden_layers"]]
    ev = evaluation(model_id)
    sliding, growing = 0 in ratios, any(r > 0 for r in ratios)
    assert attention_kinds(ev) == sorted(["v4_attention"] * growing + ["v4_attention+window"] * sliding)
    assert attention_label(ev) == " + ".join(["v4"] * growing + ["sliding"] * sliding)
