"""Gemma 4 26B-A4B (text stack) and MiMo-V2-Flash: external facts.

Every expectation is derived here from the published config.json (hand formulas written out
below) or taken from the transformers 5.24 modeling code built on the meta device; none is copied
from the engine. Gemma 4: five sliding layers (8 KV heads of 256, window 1,024) per global layer
(2 KV heads of 512, values = the key projection: no v_proj), a dense MLP beside 128 experts in
every layer. MiMo-V2-Flash: 39 sliding layers (8 KV heads, sinks, window 128) and 9 full layers
(4 KV heads), 192-wide keys and 128-wide values, layer 0 dense, three MTP layers (vLLM's
MiMoV2FlashMTP: a sliding-window attention layer with a dense MLP, sharing embedding and head).
"""
from __future__ import annotations

import pytest

from engine.language import kv, quantities
from tests.conftest import hf_config, hf_config_path

GEMMA, MIMO = "google/gemma-4-26B-A4B", "XiaomiMiMo/MiMo-V2-Flash"
BF16 = 2


def _gemma():
    return hf_config(GEMMA)["text_config"]


def _gemma_layers(c):
    sliding = c["layer_types"].count("sliding_attention")
    return sliding, c["num_hidden_layers"] - sliding


def gemma_params(c) -> int:
    h, heads, e, i = c["hidden_size"], c["num_attention_heads"], c["num_experts"], c["moe_intermediate_size"]
    sliding, full = _gemma_layers(c)
    d, kvh = c["head_dim"], c["num_key_value_heads"]
    dg, kvg = c["global_head_dim"], c["num_global_key_value_heads"]
    attn_sliding = h * heads * d + 2 * h * kvh * d + heads * d * h + 2 * d      # q, k, v, o, q_norm, k_norm
    attn_full = h * heads * dg + h * kvg * dg + heads * dg * h + 2 * dg          # K = V: no v_proj
    rest = (7 * h                                   # input, post-attention, pre/post FFN, post_1, post_2, pre_2 norms
            + 3 * h * c["intermediate_size"]        # dense gelu-tanh MLP
            + h + e * h + e                         # router scale, proj, per-expert scale
            + e * 3 * h * i)                        # experts: gate_up [E, 2I, H] and down [E, H, I]
    return (c["vocab_size"] * h + h                 # embedding (the head is tied to it), final norm
            + sliding * (attn_sliding + rest) + full * (attn_full + rest))


def _mimo_attention(c, kv_heads, sinks):
    h, heads, d, dv = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["v_head_dim"]
    return h * heads * d + h * kv_heads * d + h * kv_heads * dv + heads * dv * h + (heads if sinks else 0)


def mimo_params(c) -> int:
    h, e, i = c["hidden_size"], c["n_routed_experts"], c["moe_intermediate_size"]
    total = 2 * c["vocab_size"] * h + h             # embedding, untied head, final norm
    for layer in range(c["num_hidden_layers"]):
        sliding = c["hybrid_layer_pattern"][layer] == 1
        total += 2 * h + _mimo_attention(c, c["swa_num_key_value_heads"] if sliding else c["num_key_value_heads"],
                                         sliding)
        total += e * h + e * 3 * h * i if c["moe_layer_freq"][layer] else 3 * h * c["intermediate_size"]
    return total


#: transformers 5.24, ``AutoModelForCausalLM.from_config`` on the meta device, ``sum(p.numel())``
#: (Gemma 4: the text stack's Gemma4ForCausalLM built from text_config; the whole checkpoint with
#: its vision tower is 25,805,933,872).
HF_PARAMS = {GEMMA: 25_233_141_760, MIMO: 308_778_768_832}


def test_params_hand_formula_equals_hf_and_engine(evaluation):
    assert gemma_params(_gemma()) == HF_PARAMS[GEMMA]
    assert mimo_params(hf_config(MIMO)) == HF_PARAMS[MIMO]
    for model, expected in HF_PARAMS.items():
        assert int(quantities.params_total(evaluation(model).numeric)) == expected


def test_hf_meta_count_is_the_recorded_one():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import hf_oracle
    for model, expected in HF_PARAMS.items():
        assert hf_oracle.hf_meta_report(hf_config_path(model)).total_params == expected


def test_active_params(evaluation):
    c = _gemma()
    idle = (c["num_experts"] - c["top_k_experts"]) * 3 * c["hidden_size"] * c["moe_intermediate_size"]
    assert int(quantities.params_active(evaluation(GEMMA).numeric)) == gemma_params(c) - idle * c["num_hidden_layers"]
    m = hf_config(MIMO)
    idle = (m["n_routed_experts"] - m["num_experts_per_tok"]) * 3 * m["hidden_size"] * m["moe_intermediate_size"]
    assert int(quantities.params_active(evaluation(MIMO).numeric)) == mimo_params(m) - idle * sum(m["moe_layer_freq"])
    # the names say it: about 4B active of 26B, and 15B of 309B (MiMo's card: 15B active, 309B total)
    assert round(int(quantities.params_active(evaluation(GEMMA).numeric)) / 1e9, 1) == 3.8
    assert round(int(quantities.params_active(evaluation(MIMO).numeric)) / 1e9) == 15


def test_mimo_mtp_layers(evaluation):
    """Three MTP layers as vLLM builds them (enorm, hnorm, eh_proj [H, 2H], a sliding-window
    attention layer with sinks and a dense MLP, input and pre-MLP norms, final_layernorm); the
    embedding and head are the main model's."""
    m = hf_config(MIMO)
    h = m["hidden_size"]
    layer = (2 * h + 2 * h * h + h + _mimo_attention(m, m["swa_num_key_value_heads"], True) + h
             + 3 * h * m["intermediate_size"] + h)
    assert int(quantities.params_total(evaluation(MIMO).numeric, stack="mtp")) == 3 * layer


def gemma_kv(length: int) -> int:
    c = _gemma()
    sliding, full = _gemma_layers(c)
    per_sliding = 2 * c["num_key_value_heads"] * c["head_dim"] * BF16                 # K and V
    per_full = 2 * c["num_global_key_value_heads"] * c["global_head_dim"] * BF16      # K = V, both cached (as HF)
    return sliding * per_sliding * min(length, c["sliding_window"]) + full * per_full * length


def mimo_kv(length: int) -> int:
    m = hf_config(MIMO)
    full = m["hybrid_layer_pattern"].count(0)
    sliding = m["num_hidden_layers"] - full
    per_sliding = m["swa_num_key_value_heads"] * (m["head_dim"] + m["v_head_dim"]) * BF16
    per_full = m["num_key_value_heads"] * (m["head_dim"] + m["v_head_dim"]) * BF16
    return sliding * per_sliding * min(length, m["sliding_window"]) + full * per_full * length


@pytest.mark.parametrize("length", [4096, 131072, 1048576])
def test_kv_bytes_per_request(length, evaluation):
    assert int(kv.bytes_per_request(evaluation(GEMMA).numeric, length, "bf16")) == gemma_kv(length)
    assert int(kv.bytes_per_request(evaluation(MIMO).numeric, length, "bf16")) == mimo_kv(length)
    assert int(kv.bytes_per_request(evaluation(MIMO).numeric, length, "fp8")) == mimo_kv(length) // 2


def test_kv_written_out():
    # Gemma 4 at 4K: 25 x 8,192 B x 1,024 + 5 x 4,096 B x 4,096; MiMo at 4K: 39 x 5,120 B x 128 + 9 x 2,560 B x 4,096
    assert gemma_kv(4096) == 25 * 8192 * 1024 + 5 * 4096 * 4096 == 293_601_280
    assert mimo_kv(4096) == 39 * 5120 * 128 + 9 * 2560 * 4096 == 119_930_880


def _layer_leaves(analysis, layer: int) -> dict[str, tuple[int, ...]]:
    out = {}
    for row in analysis.rows.values():
        if row.stack != "main" or "prefill" not in row.phases or row.shares:
            continue
        group = next((c for u, c in analysis.components.items() if c.template and row.uid.startswith(u + "/")), None)
        if group is None or layer not in group.layers:
            continue
        lead = (int(row.instances),) if row.stacked else ()
        for leaf in row.leaves:
            if leaf.kind == "param":
                out[leaf.key.replace("{expert}", "*").format(layer=layer)] = lead + tuple(int(a.size) for a in leaf.axes)
    return out


@pytest.mark.parametrize("layer", [0, 5])   # a sliding layer and a global one
def test_gemma_layer_names_and_shapes_match_hf(layer, evaluation):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import hf_oracle
    report = hf_oracle.hf_meta_report(hf_config_path(GEMMA))
    theirs = {k: v for k, v in report.params.items() if k.startswith(f"model.layers.{layer}.")}
    assert _layer_leaves(evaluation(GEMMA).numeric, layer) == theirs


@pytest.mark.parametrize("layer", [0, 1, 5])   # dense + full, MoE + sliding, MoE + full
def test_mimo_layer_names_and_shapes_match_hf(layer, evaluation):
    """Every name and shape outside the experts (transformers fuses them into [E, 2I, H] tensors;
    the checkpoint and the spec keep one tensor per expert, checked by the weight guard); the sink
    is ``sinks`` in transformers' module and ``attention_sink_bias`` in the checkpoint."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests import hf_oracle
    report = hf_oracle.hf_meta_report(hf_config_path(MIMO))
    theirs = {k.replace(".self_attn.sinks", ".self_attn.attention_sink_bias"): v for k, v in report.params.items()
              if k.startswith(f"model.layers.{layer}.") and ".mlp.experts." not in k}
    ours = {k: v for k, v in _layer_leaves(evaluation(MIMO).numeric, layer).items() if ".mlp.experts." not in k}
    assert ours == theirs


def test_schedule_guard_reads_mimo_hybrid_layer_pattern(tmp_path):
    """hybrid_layer_pattern is a per-layer plan (corpus/verification.yaml): a spec that gives
    layer 1 full attention where the config says sliding is caught layer by layer."""
    from tests.test_guards import findings, mutate
    root = mutate(tmp_path, [("models/XiaomiMiMo--MiMo-V2-Flash.yaml", 'when: "config.hybrid_layer_pattern[layer] == 1"}',
                              'when: "config.hybrid_layer_pattern[layer] == 1 and layer != 1"}')])
    found, _ = findings(root, "MiMo-V2-Flash", "schedule")
    assert any("hybrid_layer_pattern" in f.message and "(layers 1 differ)" in f.message for f in found), found


def test_gemma_global_kv_heads_replicate_under_tp4(evaluation):
    """At TP 4 the sliding layers' 8 KV heads split four ways, the global layers' 2 KV heads only
    two ways (each GPU keeps one head: a template's own KV-head count, not the model's 8)."""
    from engine.deploy import Options, Scenario, load_gpus, load_tables, plan
    from engine.deploy.parallel import ParallelConfig
    c = _gemma()
    sliding, full = _gemma_layers(c)
    p = plan(evaluation(GEMMA), load_gpus()["H100"], ParallelConfig(tp=4), Options(framework="vllm"),
             load_tables()["vllm"])
    s = p.at(Scenario(batch=8, input_len=4096, output_len=512)).summary
    length = 4096 + 512
    per_gpu = (sliding * 2 * c["num_key_value_heads"] * c["head_dim"] * BF16 * min(length, c["sliding_window"]) / 4
               + full * 2 * c["num_global_key_value_heads"] * c["global_head_dim"] * BF16 * length / 2)
    assert float(s["kv_bytes_per_request_per_gpu"]) == pytest.approx(per_gpu, rel=1e-12)
    assert float(s["kv_bytes_per_request"]) == pytest.approx(gemma_kv(length), rel=1e-12)


def test_parallel_check_reads_each_layers_own_head_width(evaluation):
    """The TP divisibility check counts KV heads in `n_kv_heads * d_v_head` with the values the
    row was built from (d_v_head is bound in the attention fill, d_head is 512 in global layers)."""
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.legality import check
    assert check(evaluation(GEMMA), ParallelConfig(tp=2)) == []
    assert check(evaluation(MIMO), ParallelConfig(tp=8, ep=8, dp_attn=8)) == []


def test_gemma_double_wide_mlp_is_a_per_layer_dim(tmp_path):
    """Gemma4TextMLP: the last num_kv_shared_layers layers get intermediate_size x 2 when
    use_double_wide_mlp is set. This checkpoint sets neither; with both set (as in a config that
    shares KV) the spec's per-layer d_ff splits each template by width, and the MLP parameters are
    the hand sum. (KV sharing itself is not modelled: only the MLP width rule is checked here.)"""
    from engine.api import evaluate_spec
    from engine.language.corpus import load_corpus
    from tests.test_guards import mutate
    snap = "snapshots/google--gemma-4-26B-A4B.yaml"
    root = mutate(tmp_path, [(snap, "num_kv_shared_layers: 0", "num_kv_shared_layers: 10"),
                             (snap, "use_double_wide_mlp: false", "use_double_wide_mlp: true")])
    corpus = load_corpus(root)
    a = evaluate_spec(corpus, corpus.models[GEMMA]).numeric
    c = _gemma()
    h, d_ff, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    mlp = sum(int(r.params * r.repeat) for u, r in a.rows.items() if "/mlp/" in u and r.stack == "main")
    assert mlp == (layers - 10) * 3 * h * d_ff + 10 * 3 * h * 2 * d_ff
    groups = {r.layers for r in a.components.values() if r.template}
    kinds = ("sliding_attention", "full_attention")
    assert groups == {tuple(i for i in span if c["layer_types"][i] == kind)
                      for span in (range(20), range(20, 30)) for kind in kinds}
