"""What-if variants (corpus/variants/): a corpus model with a slot swapped, evaluated by the same walk.

Expectations from outside the engine: DeepSeek-V3 with DSA is what DeepSeek-V3.2 is, so its main
stack must have V3.2's parameter count from the transformers modeling code (tests/test_streams.py,
checked there against the oracle) and V3.2's recorded tensor manifest (count and bytes, from the
modeling code on the meta device); the other variants' changes are derived by hand from the
configs below.
"""
from __future__ import annotations

import re

import pytest
import yaml

from engine.api import evaluate_spec
from engine.language import kv, quantities, storage
from engine.language import variants as variant_rules
from engine.language.reader import Reader
from engine.language.errors import SpecError, Where
from engine.language.ir import Fill
from tests.conftest import SNAPSHOTS, hf_config
from tests.test_streams import HF_PARAMS, V32

SHIPPED = ("DeepSeek-V3-DSA", "Llama-3.1-70B-MLA", "Qwen3-32B-GDN", "Qwen3-235B-A22B-DeepSeekMoE")


@pytest.fixture(scope="module")
def variant_eval(corpus):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = evaluate_spec(corpus, corpus.variants[name].spec)
        return cache[name]
    return get


def test_shipped_variants_load(corpus):
    assert set(SHIPPED) <= set(corpus.variants)
    for name in SHIPPED:
        v = corpus.variants[name]
        assert v.model_id == f"what-if/{name}"
        assert v.model_id not in corpus.models          # never a corpus (verified) model


def test_v3_dsa_main_stack_equals_deepseek_v32(variant_eval):
    """V3 + DSA is V3.2: the HF modeling code's parameter count, and V3.2's tensor manifest but for
    one leaf: V3.2 stores the indexer's weights_proj (64 index heads x hidden 7168) in BF16
    (transformers 5.25 keeps it unquantized), while the variant keeps V3's FP8 block-128 default
    for it: per layer 64 x 7168 x 2 B in V3.2 against 64 x 7168 x 1 B + ceil(64/128) x
    ceil(7168/128) = 56 f32 scales in the variant, one scale tensor more, over 61 layers."""
    ev = variant_eval("DeepSeek-V3-DSA")
    assert int(quantities.params_total(ev.numeric, "main")) == HF_PARAMS[V32]
    manifest = yaml.safe_load((SNAPSHOTS / "deepseek-ai--DeepSeek-V3.2.tensors.yaml").read_text())
    main = [t for t in ev.tensors() if t.stack == "main"]
    layers, n = 61, 64 * 7168
    assert storage.tensor_count(main) == manifest["tensor_count"] + layers == 90915
    assert sum(t.total_bytes for t in main) == manifest["total_bytes"] - layers * (2 * n - (n + 56 * 4))


def test_v3_dsa_indexer_key_cache(variant_eval):
    """One 128-wide indexer key per token and layer (V3.2 config), FP8 with one f32 scale per 128
    elements whatever the KV dtype (vLLM's indexer cache): 61 x (128 + 4) bytes."""
    c = hf_config(V32)
    per_token = kv.bytes_per_token(variant_eval("DeepSeek-V3-DSA").numeric, "bf16")
    assert int(per_token["indexer_key"]) == c["num_hidden_layers"] * (c["index_head_dim"] + 4) == 61 * 132
    assert int(per_token["mla_latent"]) == c["num_hidden_layers"] * c["kv_lora_rank"] * 2


def test_qwen3_32b_gdn_three_of_four(variant_eval, evaluation):
    """48 GDN layers + 16 GQA layers; the state and per-layer sizes by hand from the configs."""
    q3, q35 = hf_config("Qwen/Qwen3-32B"), hf_config("Qwen/Qwen3.5-27B")["text_config"]
    ev = variant_eval("Qwen3-32B-GDN")
    layers = {r.template: len(r.layers) for r in ev.numeric.components.values() if r.template}
    assert layers == {"block": 16, "block_gated_deltanet": 48}
    full = [r.layers for r in ev.numeric.components.values() if r.template == "block"][0]
    assert full == tuple(range(3, 64, 4))
    kvh, dh, L = q3["num_key_value_heads"], q3["head_dim"], q3["num_hidden_layers"]
    assert int(kv.growing_bytes_per_token(ev.numeric, "bf16")) == (L // 4) * 2 * kvh * dh * 2
    hk, hv, dk, dv, ck = (q35[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                           "linear_value_head_dim", "linear_conv_kernel_dim"))
    conv_dim = 2 * hk * dk + hv * dv
    # float32 delta state; the conv state in the KV dtype (BF16): Qwen3.5-27B's 153,944,064 B (README)
    state = 48 * (hv * dk * dv * 4 + conv_dim * (ck - 1) * 2)
    assert int(kv.fixed_bytes_per_request(ev.numeric, "bf16")) == state
    # params: GQA attention (q, k, v, o, q/k norms) out, GDN in, in 48 layers
    h = q3["hidden_size"]
    gqa = h * q3["num_attention_heads"] * dh * 2 + h * kvh * dh * 2 + 2 * dh
    gdn = (h * conv_dim + h * hv * dv + 2 * h * hv + conv_dim * ck + 2 * hv + dv + hv * dv * h)
    base = quantities.params_total(evaluation("Qwen/Qwen3-32B").numeric)
    assert int(quantities.params_total(ev.numeric)) == int(base) + 48 * (gdn - gqa)


def test_llama_mla_cache_and_params(variant_eval, evaluation):
    c = hf_config("meta-llama/Meta-Llama-3.1-70B")
    ev = variant_eval("Llama-3.1-70B-MLA")
    L, h, heads = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
    per_token = kv.bytes_per_token(ev.numeric, "bf16")
    assert (int(per_token["mla_latent"]), int(per_token["mla_rope_key"])) == (L * 512 * 2, L * 64 * 2)
    d = c["hidden_size"] // heads
    gqa = h * heads * d * 2 + h * c["num_key_value_heads"] * d * 2
    mla = (h * 1536 + 1536 + 1536 * heads * (128 + 64) + h * (512 + 64) + 512
           + 512 * heads * (128 + 128) + heads * 128 * h)
    base = quantities.params_total(evaluation("meta-llama/Meta-Llama-3.1-70B").numeric)
    assert int(quantities.params_total(ev.numeric)) == int(base) + L * (mla - gqa)


def test_qwen3_235b_deepseek_moe(variant_eval, evaluation):
    """One shared expert of moe_intermediate_size per MoE layer: 3 x hidden x width more, all active."""
    c = hf_config("Qwen/Qwen3-235B-A22B")
    shared = c["num_hidden_layers"] * 3 * c["hidden_size"] * c["moe_intermediate_size"]
    ev, base = variant_eval("Qwen3-235B-A22B-DeepSeekMoE"), evaluation("Qwen/Qwen3-235B-A22B")
    for fn in (quantities.params_total, quantities.params_active):
        assert int(fn(ev.numeric)) - int(fn(base.numeric)) == shared
    topk = [r for r in ev.numeric.rows.values() if r.op == "topk"]
    assert topk and all(r.leaves and any("e_score_correction_bias" in leaf.key for leaf in r.leaves) for r in topk)


# -- errors: one line, naming what to write ------------------------------------------------------

def _write(tmp_path, corpus, text: str, stem: str = "x"):
    path = tmp_path / "variants" / f"{stem}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return variant_rules.load(Reader(path, tmp_path), stem, corpus)


def test_missing_binding_names_each_dim_and_its_meaning(tmp_path, corpus):
    with pytest.raises(SpecError) as err:
        _write(tmp_path, corpus, "variant: x\nbase: deepseek-ai/DeepSeek-V3\nswaps:\n"
               "  - {slot: attention, component: dsa_attention}\n"
               "bind:\n  index_topk: {value: 2048, src: V3.2}\n")
    text = str(err.value)
    assert "\n" not in text and "x.yaml:5: bind: unbound dims" in text
    for dim in ("n_index_heads", "d_index_head"):
        assert dim in text and f"--bind {dim}=" in text
    assert "index_topk" not in text.split("—")[0].replace("index_topk)", "")   # bound: not reported
    assert corpus.dims["n_index_heads"].doc.split(";")[0].rstrip(".") in text


def test_incompatible_swap_says_why(tmp_path, corpus):
    with pytest.raises(SpecError) as err:
        _write(tmp_path, corpus, "variant: x\nbase: Qwen/Qwen3-32B\nswaps:\n"
               "  - {slot: attention, component: swiglu_mlp}\n")
    text = str(err.value)
    assert "does not fit slot 'attention'" in text and "ffn component" in text and "takes attention" in text
    assert "dsa_attention" in text.split("—")[1]    # what to swap in instead
    with pytest.raises(SpecError, match="mtp_module does not fit slot 'block': it is a mtp component"):
        variant_rules.resolve(corpus, "y", "Qwen/Qwen3-32B",
                              [variant_rules.Swap("block", (), Fill("mtp_module", Where("cli")), Where("cli"))],
                              [], Where("cli"))


def test_unknown_template_and_slot(tmp_path, corpus):
    with pytest.raises(SpecError, match=r"has no layer template 'moe'.*its templates: block"):
        _write(tmp_path, corpus, "variant: x\nbase: Qwen/Qwen3-32B\nswaps:\n"
               "  - {slot: attention, templates: [moe], component: mla_attention}\n")
    with pytest.raises(SpecError, match=r"x.yaml:\d+: bind.hidden: .*already binds 'hidden'"):
        _write(tmp_path, corpus, "variant: x\nbase: Qwen/Qwen3-32B\nswaps:\n"
               "  - {slot: ffn, component: swiglu_mlp}\nbind:\n  hidden: {value: 4096, src: me}\n")


def test_variant_text_is_never_evaluated(tmp_path, corpus):
    """Bindings go through the restricted expression parser like any spec text."""
    v = _write(tmp_path, corpus, "variant: x\nbase: Qwen/Qwen3-235B-A22B\nswaps:\n"
               "  - {slot: ffn, templates: [moe], component: moe, with: {shared_experts: true}}\n"
               "bind:\n  n_shared_experts: {value: \"__import__('os').getpid()\", src: me}\n")
    with pytest.raises(SpecError, match=r"x.yaml:\d+: dims.n_shared_experts"):
        evaluate_spec(corpus, v.spec)


def test_file_name_must_match(tmp_path, corpus):
    with pytest.raises(SpecError, match=re.escape("name the file corpus/variants/y.yaml")):
        _write(tmp_path, corpus, "variant: y\nbase: Qwen/Qwen3-32B\nswaps: [{slot: ffn, component: moe}]\n")


def test_variants_columns_are_documented():
    from engine.batch.results import MODELS_SCHEMA, VARIANTS_SCHEMA
    from tests.conftest import REPO
    doc = (REPO / "docs" / "results.md").read_text()
    for name, (dtype, text) in VARIANTS_SCHEMA.items():
        if name not in MODELS_SCHEMA:
            assert f"| `{name}` | {dtype} | {text} |" in doc, name


def test_swap_in_some_layers_of_a_pattern_schedule(corpus):
    """Nemotron-H's per-layer string: Mamba2 layers among the first ten take GDN, the rest keep Mamba2."""
    pattern = hf_config("nvidia/Nemotron-H-56B-Base-8K")["hybrid_override_pattern"]
    swap = variant_rules.Swap("mixer", ("mamba",), Fill("gated_deltanet", Where("t")), Where("t"), "layer < 10")
    binds = [variant_rules.Bind(d, v, "test", Where("t")) for d, v in
             (("lin_k_heads", 16), ("lin_v_heads", 48), ("lin_dk", 128), ("lin_dv", 128), ("lin_conv_dim", 10240))]
    v = variant_rules.resolve(corpus, "t", "nvidia/Nemotron-H-56B-Base-8K", [swap], binds, Where("t"))
    groups = {r.template: r.layers for r in evaluate_spec(corpus, v.spec).numeric.components.values() if r.template}
    assert groups["mamba_gated_deltanet"] == tuple(i for i, c in enumerate(pattern[:10]) if c == "M")
    assert groups["mamba"] == tuple(i for i, c in enumerate(pattern) if c == "M" and i >= 10)
    assert groups["attention"] == tuple(i for i, c in enumerate(pattern) if c == "*")
