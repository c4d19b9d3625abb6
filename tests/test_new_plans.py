"""`archledger new` on Kimi K3's published config (corpus/snapshots/moonshotai--Kimi-K3.config.json)
from Kimi-K2.5's spec: what the config says beyond its dims reaches the spec text — fields stored
under another name of the transformers config class, the KDA layers of `linear_attn_config`, config
switches of component options, the compressed-tensors MXFP4 storage — and the fallback snapshot of
a type transformers lacks keeps its text_config. Expectations are read off the published config by
hand (written out below), not from the code under test.
"""
from __future__ import annotations

import json

import pytest
import yaml

from engine.language.corpus import load_corpus
from engine.language.expr import Scope, evaluate
from engine.verify import scaffold, scaffold_plan, scaffold_text
from engine.verify.evidence import registry
from tests.conftest import REPO

#: the oracle extra is needed (config classes' attribute_map): checked when the tests run
pytestmark = pytest.mark.usefixtures("oracle_installed")

K3 = REPO / "corpus" / "snapshots" / "moonshotai--Kimi-K3.config.json"


@pytest.fixture(scope="module")
def k3_spec():
    """(spec dict, to-do lines, notes) of a Kimi K3 spec written like Kimi-K2.5 (no files written)."""
    corpus = load_corpus(REPO / "corpus")
    base = corpus.models["moonshotai/Kimi-K2.5"]
    config = json.loads(K3.read_text())
    reg = registry(corpus.root)
    notes: list[str] = []
    text, todo = scaffold_text.spec_text(
        (REPO / "corpus" / "models" / "moonshotai--Kimi-K2.5.yaml").read_text(), base, "acme/Kimi-K3-test",
        config, scaffold.published_config(corpus.root, base), corpus, reg.top_level_fields(),
        {p.field for p in reg.layer_plans}, reg.prefixes, notes)
    return yaml.safe_load(text), todo, notes, config


def test_fields_are_read_under_the_names_the_config_class_maps(k3_spec):
    """K3's text_config stores num_experts_per_token (16), num_experts (896), num_shared_experts (2)
    where Kimi-K2.5's stores num_experts_per_tok, n_routed_experts, n_shared_experts; transformers'
    KimiLinearConfig.attribute_map names them, so the dims read them and no line asks for them."""
    spec, todo, _, config = k3_spec
    text = config["text_config"]
    assert (text["num_experts_per_token"], text["num_experts"], text["num_shared_experts"]) == (16, 896, 2)
    assert spec["dims"]["top_k"] == "config.num_experts_per_token"
    assert spec["dims"]["n_experts"] == "config.num_experts"
    assert spec["dims"]["n_shared_experts"] == "config.num_shared_experts"
    assert not [line for line in todo if "num_experts_per_tok" in line or "n_routed_experts" in line]


def _template_of(spec: dict, config: dict, layer: int) -> str:
    """The first schedule rule whose condition holds for ``layer`` (the walk's rule)."""
    view = {**config["text_config"], **config}

    def lookup(path):
        value = view
        for part in path:
            value = value[part]
        return value
    for rule in spec["stacks"]["main"]["graph"]["layers"]["schedule"]:
        if "when" not in rule or bool(evaluate(rule["when"], Scope({"layer": layer}, lookup))):
            return rule["template"]
    raise AssertionError(f"no rule for layer {layer}")


def test_kda_layers_of_linear_attn_config_become_kda_templates(k3_spec):
    """linear_attn_config numbers its layers from 1: kda_layers 1, 2, 3, 5, ... 91 and
    full_attn_layers 4, 8, ..., 92, 93. So (from 0) layers 3, 7, ..., 91 and 92 keep MLA, the other
    69 run KDA; layer 0 is the dense one (first_k_dense_replace 1) and a KDA layer."""
    spec, _, _, config = k3_spec
    mla = set(range(3, 92, 4)) | {92}
    assert len(mla) == 24
    for layer in range(93):
        got = _template_of(spec, config, layer)
        if layer == 0:
            assert got == "dense_kda_attention"
        elif layer in mla:
            assert got == "moe", layer
        else:
            assert got == "moe_kda_attention", layer
    kda = spec["templates"]["moe_kda_attention"]["slots"]["attention"]
    assert kda["component"] == "kda_attention"
    # its dims bound to the config's linear_attn_config (num_heads 96, head_dim 128, kernel 4)
    assert spec["dims"]["kda_heads"] == "config.linear_attn_config.num_heads"
    assert spec["dims"]["kda_head_dim"] == "config.linear_attn_config.head_dim"
    assert spec["dims"]["conv_kernel"] == "config.linear_attn_config.short_conv_kernel_size"


def test_config_switches_set_component_options(k3_spec):
    """mla_use_output_gate true, linear_attn_config.use_full_rank_gate true, latent_moe_use_norm
    true in the published config: the MLA, KDA and MoE fills say so."""
    spec, todo, _, config = k3_spec
    text = config["text_config"]
    assert text["mla_use_output_gate"] is True and text["linear_attn_config"]["use_full_rank_gate"] is True
    assert spec["slots"]["attention"]["with"]["output_gate"] is True
    assert spec["templates"]["dense_kda_attention"]["slots"]["attention"]["with"] == {"full_rank_gate": True}
    assert spec["templates"]["moe"]["slots"]["ffn"]["with"]["latent_norm"] is True
    assert not [line for line in todo if "mla_use_output_gate" in line or "latent_moe_use_norm" in line]


def test_compressed_tensors_mxfp4_is_the_quant_context(k3_spec):
    """quantization_config format mxfp4-pack-quantized: the routed experts in the
    mxfp4_pack_quantized scheme, the ignore list's regexes BF16."""
    spec, todo, _, _ = k3_spec
    assert spec["quant_context"]["default"] == "mxfp4_pack_quantized"
    assert spec["quant_context"]["overrides"]["re:.*self_attn.*"] == "bf16"
    assert not [line for line in todo if "quantization_config" in line]


def test_a_fallback_snapshot_of_a_multimodal_config_keeps_its_text_config():
    """The fields a spec reads live in K3's text_config (hidden_size 7168): recorded with it."""
    config = json.loads(K3.read_text())
    fields = scaffold.named_fields(config, {"hidden_size", "model_type"})
    assert fields["model_type"] == "kimi_k3"
    assert fields["text_config"]["hidden_size"] == 7168


def test_set_option_edits_each_form_of_a_fill():
    """A block fill without `with:`, a flow fill with one, a slot shorthand."""
    lines = ["templates:", "  a:", "    component: prenorm_block", "    slots:", "      attention:",
             "        component: mla_attention", "        dims: {d: e}",
             "  b:", "    slots: {attention: {component: mla_attention, with: {rope_theta: r}}}",
             "  c:", "    slots: {attention: mla_attention, ffn: swiglu_mlp}"]
    assert scaffold_plan.set_option(lines, "mla_attention", "output_gate", "true", {"attention", "ffn"}) == 3
    assert lines[6] == "        with: {output_gate: true}"
    assert "{component: mla_attention, with: {output_gate: true, rope_theta: r}}" in lines[9]
    assert lines[-1] == "    slots: {attention: {component: mla_attention, with: {output_gate: true}}, ffn: swiglu_mlp}"


def test_every_registry_switch_and_fill_names_a_component_option():
    """corpus/verification.yaml's switches and layer-plan fills name what the library has."""
    corpus = load_corpus(REPO / "corpus")
    reg = registry(corpus.root)
    assert reg.switches
    for switch in reg.switches:
        assert switch.option in corpus.components[switch.component].options, switch
    for plan in reg.layer_plans:
        if plan.fill:
            assert corpus.components[plan.fill].role == "attention", plan
