"""Streams and DeepSeek Sparse Attention: DeepSeek-V3.2, GLM-5, GLM-5.2.

Expectations come from outside the engine: parameter counts of the transformers 5.24 modeling
code built on the meta device from each published config.json, cache widths from the configs'
definitions (MLA latent + rotary key per layer, one indexer key per indexer layer), the DSA
paper's cost model (each query attends min(position, index_topk) keys), and GLM-5.2's
indexer_types list for which layer feeds which.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import sympy

from engine.language import kv, quantities, symbols
from engine.api import evaluate_spec
from engine.language.corpus import load_corpus
from engine.deploy import Options, Scenario, place
from engine.language.errors import SpecError
from engine.deploy.parallel import ParallelConfig
from engine.verify.validate import validate
from tests.conftest import REPO, hf_config as config

CORPUS_ROOT = REPO / "corpus"
from tests.test_guards import mutate

V32, GLM5, GLM52 = "deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5", "zai-org/GLM-5.2"

#: transformers 5.24 ``AutoModelForCausalLM.from_config`` on the meta device (no MTP: the HF
#: classes drop the checkpoint's layer num_hidden_layers), ``sum(p.numel() for p in parameters())``.
HF_PARAMS = {V32: 671_877_929_216, GLM5: 743_911_199_232, GLM52: 743_377_000_704}


@pytest.mark.parametrize("model_id", sorted(HF_PARAMS))
def test_dsa_params_equal_hf_modeling_code(model_id, evaluation):
    assert int(quantities.params_total(evaluation(model_id).numeric)) == HF_PARAMS[model_id]


def _reader_type() -> str:
    """GLM-5.2's config.json ``indexer_types`` names two kinds of layer: "full" (computes its top-k)
    and the kind that reuses the latest full layer's top-k; read the second off the config."""
    kinds = set(config(GLM52)["indexer_types"])
    assert len(kinds) == 2 and "full" in kinds, kinds
    return next(k for k in kinds if k != "full")


def test_glm52_drops_57_indexers(evaluation):
    """GLM-5.2 differs from GLM-5 only by the indexers of its shared layers (same dims)."""
    c = config(GLM52)
    indexer = (c["index_n_heads"] * c["index_head_dim"] * c["q_lora_rank"] + c["index_head_dim"] * c["hidden_size"]
               + 2 * c["index_head_dim"] + c["index_n_heads"] * c["hidden_size"])   # wq_b, wk, k_norm, weights_proj
    shared = c["indexer_types"].count(_reader_type())
    assert shared == 57
    a5, a52 = evaluation(GLM5).numeric, evaluation(GLM52).numeric
    assert int(quantities.params_total(a5) - quantities.params_total(a52)) == shared * indexer
    shared_rows = [r for u, r in a52.rows.items() if u.startswith("main/layers[moe_shared]/")]
    assert shared_rows and not any("indexer" in leaf.key for r in shared_rows for leaf in r.leaves)
    assert not any(c.node_uid.startswith("main/layers[moe_shared]/") and c.kind == "indexer_key"
                   for c in a52.caches)


@pytest.mark.parametrize("model_id", [V32, GLM5, GLM52])
@pytest.mark.parametrize("length", [4096, 131072, 1048576])
def test_dsa_kv_bytes_per_request(model_id, length, evaluation):
    """Per token: every layer caches the MLA latent (kv_lora_rank) and its rotary key
    (qk_rope_head_dim) in the KV dtype; every layer that runs an indexer caches one index_head_dim
    key in FP8 plus one f32 scale per 128 elements whatever the KV dtype (vLLM's indexer cache:
    head_dim + head_dim // 128 * 4 bytes, 132 for a 128-wide key)."""
    c = config(model_id)
    layers = c["num_hidden_layers"]
    indexer_layers = c.get("indexer_types", ["full"] * layers).count("full")
    index_key = indexer_layers * (c["index_head_dim"] + c["index_head_dim"] // 128 * 4)
    mla = {"mla_latent": layers * c["kv_lora_rank"], "mla_rope_key": layers * c["qk_rope_head_dim"]}
    a = evaluation(model_id).numeric
    for kv_dtype, element in (("bf16", 2), ("fp8", 1)):
        per_token = {**{k: v * element for k, v in mla.items()}, "indexer_key": index_key}
        assert {k: int(v) for k, v in kv.bytes_per_token(a, kv_dtype).items()} == per_token
        assert int(kv.bytes_per_request(a, length, kv_dtype)) == sum(per_token.values()) * length


def _at(expr, batch, seq, ctx):
    return int(sympy.sympify(expr).subs({symbols.dim(symbols.BATCH): batch, symbols.dim(symbols.SEQ): seq,
                                         symbols.dim(symbols.CTX): ctx}))


def test_dsa_prefill_attention_grows_with_context_times_topk(evaluation):
    """Past index_topk, sparse attention adds index_topk pairs per new query (linear in context);
    the indexer that picks them scores every earlier token (quadratic, but 128-wide one-key)."""
    c = config(V32)
    k, heads = c["index_topk"], c["num_attention_heads"]
    d_qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    a = evaluation(V32).numeric
    scores = a.rows["main/layers[moe]/self_attn/scores"]
    index = a.rows["main/layers[moe]/self_attn/index_scores"]

    def pairs(n):   # the paper's sparse pattern: query i attends min(i, k) keys
        return k * (k + 1) // 2 + (n - k) * k if n > k else n * (n + 1) // 2

    for n in (32768, 65536):
        assert _at(scores.flops, 1, n, n) == 2 * heads * d_qk * pairs(n)
    linear = _at(scores.flops, 1, 65536, 65536) - _at(scores.flops, 1, 32768, 32768)
    assert linear == 2 * heads * d_qk * k * 32768
    dense = evaluation("deepseek-ai/DeepSeek-V3").numeric.rows["main/layers[moe]/self_attn/scores"]
    assert _at(dense.flops, 1, 65536, 65536) > 15 * _at(scores.flops, 1, 65536, 65536)
    hi, di = c["index_n_heads"], c["index_head_dim"]
    assert _at(index.flops, 1, 65536, 65536) == 2 * hi * di * 65536 * 65537 // 2


def test_dsa_decode_reads_only_the_selected_rows(evaluation):
    """Absorbed decode gathers index_topk latent rows; the indexer still reads every key, in FP8
    with one f32 scale per 128 elements (132 B per 128-wide key) whatever the KV dtype."""
    from engine.deploy.step_functions import KV_BYTES
    c = config(V32)
    plan = place(evaluation(V32), ParallelConfig(), 8, Options(), False)["decode"][0]
    steps = {s.uid: s for s in plan.steps}

    def read(uid, ctx, kv_bytes):
        subs = {symbols.dim(symbols.BATCH): 1, symbols.dim(symbols.SEQ): 1, symbols.dim(symbols.CTX): ctx,
                KV_BYTES: kv_bytes}
        return int(sympy.sympify(steps[uid].out_read).subs(subs))

    layer = "main/layers[moe]/self_attn/"
    key_bytes = c["index_head_dim"] + c["index_head_dim"] // 128 * 4      # 128 fp8 + one f32 scale
    for ctx, kv_bytes in ((131072, 1), (65536, 2)):
        assert read(layer + "latent_rows", ctx, kv_bytes) == c["index_topk"] * c["kv_lora_rank"] * kv_bytes
        assert read(layer + "rope_key_rows", ctx, kv_bytes) == c["index_topk"] * c["qk_rope_head_dim"] * kv_bytes
        assert read(layer + "latent_cache", ctx, kv_bytes) == ctx * c["kv_lora_rank"] * kv_bytes
        assert read(layer + "index_key_cache", ctx, kv_bytes) == ctx * key_bytes == ctx * 132
    assert steps[layer + "index_scores"].inputs[1] in (layer + "index_k_head", layer + "index_key_cache")
    # decode's KV read per token at 64K, BF16 KV, all 61 layers: 2048 gathered latent + rope rows
    # (2048 x 576 x 2) and every indexer key (65536 x 132): 61 x 11,010,048 B = 0.6255 GiB (the
    # issue's 0.63; BF16 indexer keys, 65536 x 256, made it 1.087 GiB)
    per_layer = sum(read(layer + n, 65536, 2) for n in ("latent_rows", "rope_key_rows", "index_key_cache"))
    assert per_layer == 2048 * 576 * 2 + 65536 * 132 == 11_010_048
    assert c["num_hidden_layers"] * per_layer / 2**30 == pytest.approx(0.6255, abs=1e-4)


def test_glm52_shared_layers_read_the_latest_full_layer(evaluation):
    types = config(GLM52)["indexer_types"]
    stream = next(s for s in evaluation(GLM52).numeric.streams if s.name == "index_topk")
    expected = [(max(j for j in range(i) if types[j] == "full"), i) for i, t in enumerate(types) if t == _reader_type()]
    assert [(p, r) for p, r, _ in stream.pairs] == expected
    assert [l for l, _ in stream.producers] == [i for i, t in enumerate(types) if t == "full"]
    assert stream.src == "prev_topk_indices=topk_indices"


def test_glm52_stream_crossing_a_pipeline_stage_is_a_send_recv(evaluation):
    """With pp stages, a shared layer on a later stage than its full layer receives the top-k."""
    ev = evaluation(GLM52)
    types = config(GLM52)["indexer_types"]
    n = len(types)
    for pp in (1, 2, 4):
        steps = place(ev, ParallelConfig(tp=8, pp=pp), 8, Options(), False)["decode"][0].steps
        sends = {s.uid: s for s in steps if s.op == "send_recv"}
        stage = [min(pp - 1, i * pp // n) for i in range(n)]
        crossings = {(j, b) for i, t in enumerate(types) if t == _reader_type()
                     for j in [max(j for j in range(i) if types[j] == "full")]
                     for b in range(stage[j], stage[i])}
        stream_send = sends.get("main/layers[moe_shared]/self_attn/shared_topk>send_recv[pp]")
        if not crossings:
            assert stream_send is None and (pp > 1 or not sends)
            continue
        assert int(stream_send.repeat) == len(crossings)
        topk = config(GLM52)["index_topk"]
        assert sympy.simplify(stream_send.comm_bytes - topk * 4 * symbols.dim(symbols.BATCH)   # int32 indices
                              * symbols.dim(symbols.SEQ)) == 0


def test_dsa_models_deploy_with_dp_attention_and_ep(evaluation):
    """Per-device KV under DP attention: the MLA latent and indexer keys are whole per request and
    each GPU holds only its replica's requests; EP splits the 256 experts."""
    from engine.deploy import plan
    from engine.deploy.hardware import load_gpus
    c = config(V32)
    # BF16 latent + rotary key, FP8 indexer key with one f32 scale per 128: 61 x (576 x 2 + 132)
    per_token = c["num_hidden_layers"] * ((c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2
                                          + c["index_head_dim"] + c["index_head_dim"] // 128 * 4)
    ev = evaluation(V32)
    batch, prompt = 64, 4096
    d = plan(ev, load_gpus()["H200"], ParallelConfig(tp=8, dp_attn=8, ep=8), Options(), None,
             Scenario(batch, prompt, 256)).at(Scenario(batch, prompt, 256))
    ctx = prompt + 256
    assert d.summary["kv_bytes_per_request_per_gpu"] == per_token * ctx
    assert d.summary["kv_bytes_per_gpu"] == batch / 8 * per_token * ctx


# -- the stream language -------------------------------------------------------------------------------

def evaluate_in(root: Path, model: str):
    corpus = load_corpus(root)
    return evaluate_spec(corpus, corpus.find_model(model))


GLM52_FILE = "models/zai-org--GLM-5.2.yaml"


def test_reader_without_producer(tmp_path):
    root = mutate(tmp_path, [(GLM52_FILE, """          - {template: dense, when: "config.mlp_layer_types[layer] == 'dense'"}""",
                              """          - {template: moe_shared, when: "layer == 0"}
          - {template: dense, when: "config.mlp_layer_types[layer] == 'dense'"}""")])
    with pytest.raises(SpecError) as err:
        evaluate_in(root, GLM52)
    assert "layer 0 (moe_shared) reads stream 'index_topk' but no earlier layer publishes it" in str(err.value)
    assert "dsa_attention.yaml" in str(err.value) and "stream_out: index_topk" in str(err.value)


def test_two_producers_in_one_layer(tmp_path):
    root = mutate(tmp_path, [("components/library/dsa_attention.yaml",
                              "index_sum: {op: weighted_head_sum, in: [index_relu, index_weights], when: indexer}",
                              "index_sum: {op: weighted_head_sum, in: [index_relu, index_weights], when: indexer, "
                              "stream_out: index_topk}")])
    with pytest.raises(SpecError) as err:
        evaluate_in(root, GLM52)
    assert "stream 'index_topk' has two producers in template 'dense'" in str(err.value)
    assert "index_sum" in str(err.value) and "selected" in str(err.value)


def test_stream_src_not_in_the_source_snapshot(tmp_path):
    root = mutate(tmp_path, [(GLM52_FILE, 'index_topk: {src: "prev_topk_indices=topk_indices"}',
                              'index_topk: {src: "prev_topk_indices=reused_indices"}')])
    corpus = load_corpus(root)
    report = validate(corpus, corpus.find_model(GLM52))
    errors = [f for f in report.errors if f.guard == "source"]
    assert len(errors) == 1 and errors[0].node == "main/layers~index_topk"
    assert "prev_topk_indices=reused_indices" in errors[0].message


def test_undeclared_stream_and_missing_carried_stream(tmp_path):
    root = mutate(tmp_path, [(GLM52_FILE, '          index_topk: {src: "prev_topk_indices=topk_indices"}\n', "")])
    with pytest.raises(SpecError) as err:
        evaluate_in(root, GLM52)
    assert "stream 'index_topk' is not declared" in str(err.value)
    llama = "models/meta-llama--Meta-Llama-3.1-8B.yaml"
    root = mutate(tmp_path / "b", [(llama, ', streams: {hidden: {carries: true, src: "hidden_states = decoder_layer("}}', "")])
    with pytest.raises(SpecError) as err:
        load_corpus(root)
    assert "a layer stack declares the streams it carries" in str(err.value)
    assert "carries: true" in str(err.value)


def test_reaching_into_a_stack_is_rejected_with_the_stream_form(tmp_path):
    llama = "models/meta-llama--Meta-Llama-3.1-8B.yaml"
    root = mutate(tmp_path, [(llama, "norm: {op: rmsnorm, in: layers,", "norm: {op: rmsnorm, in: layers.3,")])
    with pytest.raises(SpecError) as err:
        load_corpus(root)
    message = str(err.value)
    assert "meta-llama--Meta-Llama-3.1-8B.yaml" in message and "reaches into the layer stack 'layers'" in message
    assert "from: hidden" in message and "take: each" in message


# -- append streams on a toy model (Llama-3.1-8B dims) ---------------------------------------------------

TOY = """model: test/toy-streams
model_type: llama
family: test
snapshot: meta-llama--Meta-Llama-3.1-8B
dims:
  hidden: config.hidden_size
  vocab: config.vocab_size
  n_layers: config.num_hidden_layers
  n_heads: config.num_attention_heads
  n_kv_heads: config.num_key_value_heads
  d_head: config.hidden_size // config.num_attention_heads
  d_ff: config.intermediate_size
max_context: config.max_position_embeddings
drafts: [dwa_block, tap_block]
templates:
  block: {component: prenorm_block, slots: {attention: gqa_attention, ffn: swiglu_mlp}}
  TEMPLATE
stacks:
  main:
    inputs: {tokens: [batch, seq]}
    graph:
      embed_tokens: {op: embedding, in: tokens, dims: {vocab: vocab, dim: hidden}, role: embedding, module: model.embed_tokens}
      layers:
        repeat: n_layers
        in: embed_tokens
        module: model.layers
        streams:
          hidden: {carries: true, src: "hidden_states = decoder_layer("}
          STREAM
        schedule:
          SCHEDULE
      norm: {op: rmsnorm, in: layers, dims: {dim: hidden}, role: norm, module: model.norm}
      lm_head: {op: linear, in: norm, dims: {in: hidden, out: vocab}, role: lm_head, module: lm_head}
"""

DWA = """component: dwa_block
role: block
doc: DenseFormer layer - its input is a learned depth-weighted average of every earlier layer input.
inputs: [x]
graph:
  history: {reads: outputs, take: all}
  dwa: {op: depth_weighted_sum, in: history}
  block: {component: prenorm_block, in: dwa, module: ""}
"""

TAP = """component: tap_block
role: block
doc: DeepStack-style layer - adds one archived hidden state to its input.
inputs: [x]
graph:
  tap: {reads: taps, take: each}
  mixed: {op: add, in: [x, tap]}
  block: {component: prenorm_block, in: mixed, module: ""}
"""


def toy(tmp_path: Path, template: str, stream: str, schedule: str) -> Path:
    text = TOY.replace("TEMPLATE", template).replace("STREAM", stream).replace("SCHEDULE", schedule)
    return mutate(tmp_path, [], {"models/test--toy-streams.yaml": text, "components/drafts/dwa_block.yaml": DWA,
                                 "components/drafts/tap_block.yaml": TAP})


def test_take_all_groups_layers_by_visible_history(tmp_path):
    root = toy(tmp_path, "dwa: {component: dwa_block, slots: {attention: gqa_attention, ffn: swiglu_mlp}}",
               'outputs: {from: hidden, before: "layer >= 0", src: "hidden_states = decoder_layer("}',
               "- {template: dwa}")
    ev = evaluate_in(root, "test/toy-streams")
    a = ev.numeric
    groups = sorted((c.uid, c.layers) for c in a.components.values() if c.template)
    layers = 32
    assert len(groups) == layers                      # layer i sees i + 1 archived inputs
    assert ("main/layers[dwa:h1]", (0,)) in groups and ("main/layers[dwa:h32]", (31,)) in groups
    dwa = sum(int(r.params * r.repeat) for r in a.rows.values() if r.op == "depth_weighted_sum")
    assert dwa == layers * (layers + 1) // 2          # DenseFormer: one weight per (layer, earlier input)
    base = evaluate_in(root, "meta-llama/Meta-Llama-3.1-8B").numeric
    assert int(quantities.params_total(a)) == int(quantities.params_total(base)) + dwa
    # symbolic = numeric, also across the history groups
    subs = {symbols.dim(k): v for k, v in ev.bound.items()}
    assert quantities.params_total(ev.symbolic).subs(subs) == quantities.params_total(a)
    stream = next(s for s in a.streams if s.name == "outputs")
    assert len(stream.pairs) == layers * (layers + 1) // 2 and stream.take == ("all",)


def test_take_each_hands_one_element_per_reading_layer(tmp_path):
    root = toy(tmp_path, "tapped: {component: tap_block, slots: {attention: gqa_attention, ffn: swiglu_mlp}}",
               'taps: {from: hidden, after: "layer % 8 == 7", src: "hidden_states = decoder_layer("}',
               '- {template: tapped, when: "layer % 8 == 0 and layer > 0"}\n          - {template: block}')
    a = evaluate_in(root, "test/toy-streams").numeric
    stream = next(s for s in a.streams if s.name == "taps")
    assert [(p, r) for p, r, _ in stream.pairs] == [(7, 8), (15, 16), (23, 24)]
    root = toy(tmp_path / "few", "tapped: {component: tap_block, slots: {attention: gqa_attention, ffn: swiglu_mlp}}",
               'taps: {from: hidden, after: "layer % 8 == 7", src: "hidden_states = decoder_layer("}',
               '- {template: tapped, when: "layer % 4 == 0 and layer > 0"}\n          - {template: block}')
    with pytest.raises(SpecError) as err:
        evaluate_in(root, "test/toy-streams")
    assert "`take: each` on stream 'taps': 7 layers read it but it has 4 elements" in str(err.value)
    assert "tap_block.yaml" in str(err.value)


def test_take_each_of_an_element_archived_later_is_rejected(tmp_path):
    root = toy(tmp_path, "tapped: {component: tap_block, slots: {attention: gqa_attention, ffn: swiglu_mlp}}",
               'taps: {from: hidden, after: "layer % 8 == 7", src: "hidden_states = decoder_layer("}',
               '- {template: tapped, when: "layer == 2 or layer == 3"}\n          - {template: block}')
    with pytest.raises(SpecError) as err:
        evaluate_in(root, "test/toy-streams")
    assert "layer 2 takes element 0, which is archived after it runs" in str(err.value)


def test_glm52_page_lists_streams_and_draws_cross_layer_edges(tmp_path):
    """The model page says who produces and who reads each stream; the stack drawing joins the
    producing layer groups to the reading one with stream edges."""
    import re

    from engine.batch.results import build
    from site_builder.render import render_site
    build(load_corpus(), tmp_path, ["GLM-5.2"], REPO / "tests" / "data" / "grid_small.yaml", jobs=1)
    page = (render_site(tmp_path / "results", tmp_path) / "models" / "zai-org--GLM-5.2" / "index.html").read_text()
    section = page[page.index('<h2 id="streams">'):]
    section = re.sub(r"<[^>]+>", " ", section[:section.index("</section>")])
    types = config(GLM52)["indexer_types"]
    assert "main/layers~index_topk" in section and "prev_topk_indices=topk_indices" in section
    assert f"({types.count(_reader_type())} reads)" in section
    assert "layers 0-2, 6, 10," in section and "layers 3-5, 7-9," in section
    edges = re.findall(r'class="edge kind-stream" data-src="([^"]+)" data-dst="([^"]+)"', page)
    assert sorted(edges) == [("main/layers[dense]", "main/layers[moe_shared]"),
                             ("main/layers[moe]", "main/layers[moe_shared]")]


#: transformers 5.24 meta build, one full-indexer MoE decoder layer's parameters (attention with
#: indexer, routed + shared experts, router, two norms).
HF_MOE_LAYER = {V32: 11_521_245_440, GLM5: 9_877_404_416, GLM52: 9_877_404_416}


@pytest.mark.parametrize("model_id", sorted(HF_MOE_LAYER))
def test_dsa_mtp_module_params(model_id, evaluation):
    """The MTP module (stored as layer num_hidden_layers, not built by transformers): one MoE
    decoder layer with its own indexer + its own embedding and head + eh_proj (2h x h) + enorm,
    hnorm and the head norm."""
    c = config(model_id)
    h, v = c["hidden_size"], c["vocab_size"]
    a = evaluation(model_id).numeric
    assert int(quantities.params_total(a, "mtp")) == HF_MOE_LAYER[model_id] + 2 * v * h + 2 * h * h + 3 * h


# -- cross-layer KV: a stream read from a cache is stored once and read by the reader ------------------

CLA = """component: cla_attention
role: attention
doc: Cross-layer attention (CLA) - a layer computes its own queries and attends the K/V cache the previous layer published.
inputs: [x]
graph:
  q_proj: {op: linear, in: x, dims: {in: hidden, out: n_heads * d_head}}
  q: {op: split_heads, in: q_proj, dims: {heads: n_heads, head_dim: d_head}}
  k: {reads: shared_k}
  v: {reads: shared_v}
  scores: {op: attention_score, in: [q, k]}
  probs: {op: softmax, in: scores}
  attn: {op: attention_apply, in: [probs, v]}
  merged: {op: merge_heads, in: attn, attrs: {name: d_attn}}
  o_proj: {op: linear, in: merged, dims: {in: n_heads * d_head, out: hidden}}
"""


def test_cross_layer_kv_is_stored_once_and_read_by_the_reader(tmp_path):
    gqa = (CORPUS_ROOT / "components" / "library" / "gqa_attention.yaml").read_text()
    producer = gqa.replace("component: gqa_attention", "component: cla_producer") \
        .replace("  k_cache: {op: kv_cache, in: k_rope}", "  k_cache: {op: kv_cache, in: k_rope, stream_out: shared_k}") \
        .replace("  v_cache: {op: kv_cache, in: v_heads}", "  v_cache: {op: kv_cache, in: v_heads, stream_out: shared_v}")
    root = toy(tmp_path, "sharer: {component: prenorm_block, slots: {attention: cla_attention, ffn: swiglu_mlp}}\n"
               "  owner: {component: prenorm_block, slots: {attention: cla_producer, ffn: swiglu_mlp}}",
               'shared_k: {src: "hidden_states = decoder_layer("}\n          shared_v: {src: "hidden_states = decoder_layer("}',
               '- {template: owner, when: "layer % 2 == 0"}\n          - {template: sharer}')
    (root / "components" / "drafts").mkdir(parents=True, exist_ok=True)
    (root / "components" / "drafts" / "cla_attention.yaml").write_text(CLA)
    (root / "components" / "drafts" / "cla_producer.yaml").write_text(producer)
    text = (root / "models" / "test--toy-streams.yaml").read_text()
    (root / "models" / "test--toy-streams.yaml").write_text(text.replace("drafts: [dwa_block, tap_block]",
                                                                         "drafts: [cla_attention, cla_producer]"))
    ev = evaluate_in(root, "test/toy-streams")
    a = ev.numeric
    base = evaluate_in(root, "meta-llama/Meta-Llama-3.1-8B").numeric
    # stored once: half the layers own a cache, so KV per token halves
    assert int(kv.growing_bytes_per_token(a)) * 2 == int(kv.growing_bytes_per_token(base))
    assert [(p, r) for p, r, _ in next(s for s in a.streams if s.name == "shared_k").pairs] == \
        [(i - 1, i) for i in range(1, 32, 2)]
    # read by the reader: its decode attention reads the whole shared cache, like the owner's
    from engine.deploy.step_functions import KV_BYTES
    steps = {s.uid: s for s in place(ev, ParallelConfig(), 8, Options(), False)["decode"][0].steps}
    subs = {symbols.dim(symbols.BATCH): 1, symbols.dim(symbols.SEQ): 1, symbols.dim(symbols.CTX): 4096, KV_BYTES: 2}
    c = config("meta-llama/Meta-Llama-3.1-8B")
    cache = 4096 * c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"]) * 2
    reader = steps["main/layers[sharer]/self_attn/scores"]
    owner = steps["main/layers[owner]/self_attn/scores"]
    key_read = lambda step: int(sympy.sympify(steps[step.inputs[1]].out_read).subs(subs))
    assert key_read(reader) == key_read(owner) == cache


def test_a_declared_stream_nobody_publishes(tmp_path):
    root = mutate(tmp_path, [("components/library/dsa_attention.yaml", "when: indexer, stream_out: index_topk, src:",
                              "when: indexer, src:")])
    with pytest.raises(SpecError) as err:
        evaluate_in(root, GLM52)
    assert "no layer publishes stream 'index_topk'" in str(err.value)
    assert "dsa_attention.yaml" in str(err.value) and "stream_out: index_topk" in str(err.value)
