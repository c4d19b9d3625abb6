"""Quantized checkpoints: the schemes real checkpoints use, byte for byte by hand, and the
exclusion lists (compressed-tensors / ModelOpt `ignore`, `modules_to_not_convert`, ModelOpt's
per-module `quantized_layers`) honoured by `snapshot --meta` and by the spec's quant_context.
"""
from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.language.corpus import load_corpus
from engine.language.module_patterns import exclusions, first_match, matches
from engine.language.storage import scheme_tensors
from engine.verify.manifest import load as load_manifest
from engine.verify.validate import validate
from tests.test_snapshot_evidence import TINY, tiny_corpus  # noqa: F401 (a fixture)

#: the oracle extra is needed (snapshot --meta builds with transformers): checked when the tests run,
#: not at collection (conftest.oracle_installed)
pytestmark = pytest.mark.usefixtures("oracle_installed")

ROWS, COLS = 256, 512          # one small layer: n = 131,072 weights
N = ROWS * COLS


def stored(scheme: str) -> list[tuple[str, str, tuple]]:
    tensors = scheme_tensors("m.w.weight", (), ROWS, COLS, load_corpus().schemes[scheme])
    return [(key, dtype, tuple(int(d) for d in shape)) for key, dtype, shape in tensors]


def nbytes(tensors) -> int:
    """Bytes by hand: element sizes written out here, not read from the engine's dtype table."""
    size = {"U8": 1, "I8": 1, "F8_E4M3": 1, "BF16": 2, "F32": 4, "I32": 4}
    total = 0
    for _, dtype, shape in tensors:
        count = 1
        for d in shape:
            count *= d
        total += count * size[dtype]
    return total


def test_nvfp4_layer_bytes_by_hand():
    """NVFP4 (ModelOpt): n*4/8 payload bytes, one FP8 scale per 16 weights (1 byte each), one F32
    global scale and one F32 activation scale."""
    assert stored("nvfp4") == [("m.w.weight", "U8", (256, 256)), ("m.w.weight_scale", "F8_E4M3", (256, 32)),
                               ("m.w.weight_scale_2", "F32", ()), ("m.w.input_scale", "F32", ())]
    assert nbytes(stored("nvfp4")) == N * 4 // 8 + N // 16 + 4 + 4 == 73_736


def test_nvfp4_weight_only_layer_bytes_by_hand():
    """W4A16_NVFP4: the same weights and scales, no activation scale."""
    assert nbytes(stored("nvfp4_w4a16")) == N * 4 // 8 + N // 16 + 4 == 73_732
    assert [t[0] for t in stored("nvfp4_w4a16")] == ["m.w.weight", "m.w.weight_scale", "m.w.weight_scale_2"]


def test_fp8_per_tensor_layer_bytes_by_hand():
    """FP8 per-tensor static: one byte per weight, one F32 weight scale, one F32 input scale."""
    assert stored("fp8_per_tensor") == [("m.w.weight", "F8_E4M3", (256, 512)), ("m.w.weight_scale", "F32", ()),
                                        ("m.w.input_scale", "F32", ())]
    assert nbytes(stored("fp8_per_tensor")) == N + 4 + 4 == 131_080


def test_int4_group32_packed_layer_bytes_by_hand():
    """compressed-tensors pack-quantized int4, group 32: eight values per int32 (n/8 x 4 bytes),
    one BF16 scale per 32 weights, the 2-element int32 shape."""
    assert stored("int4_g32_packed") == [("m.w.weight_packed", "I32", (256, 64)),
                                         ("m.w.weight_scale", "BF16", (256, 16)), ("m.w.weight_shape", "I32", (2,))]
    assert nbytes(stored("int4_g32_packed")) == N // 8 * 4 + N // 32 * 2 + 2 * 4 == 73_736


def test_mxfp4_layer_bytes_by_hand():
    """MXFP4 (gpt-oss): 32-element blocks of 16 bytes, one U8 E8M0 scale per block."""
    assert nbytes(stored("mxfp4")) == N // 32 * 16 + N // 32 == 69_632


def test_mxfp4_pack_quantized_layer_bytes_by_hand():
    """compressed-tensors mxfp4-pack-quantized (Kimi K3's experts): two E2M1 values per byte
    (U8 [rows, cols/2]) and one U8 E8M0 scale per 32 weights; no global or activation scale."""
    assert stored("mxfp4_pack_quantized") == [("m.w.weight_packed", "U8", (256, 256)),
                                              ("m.w.weight_scale", "U8", (256, 16))]
    assert nbytes(stored("mxfp4_pack_quantized")) == N // 2 + N // 32 == 69_632


def test_every_scheme_names_its_source():
    """Each quantized format says where its layout comes from (`src:` in corpus/quant)."""
    from tests.conftest import REPO
    for scheme in ("nvfp4", "nvfp4_w4a16", "fp8_per_tensor", "int4_g32_packed", "mxfp4", "fp8_block128",
                   "mxfp4_pack_quantized"):
        text = (REPO / "corpus" / "quant" / f"{scheme}.yaml").read_text()
        assert "\nsrc: " in text, scheme


def test_patterns_follow_each_formats_rule():
    """compressed-tensors `re:` entries match from the start of the path; globs (ModelOpt, HF)
    match the module or a parent of it; a layer index is not a prefix of a longer one."""
    assert matches("re:.*self_attn.*", "language_model.model.layers.3.self_attn.q_proj")
    assert matches("re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "model.layers.0.mlp.gate_proj")
    assert not matches("re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "model.layers.3.mlp.experts.0.gate_proj")
    assert matches("vision_tower", "vision_tower.blocks.0.fc1") and not matches("lm_head", "model.lm_head")
    assert matches("model.layers.1.*", "model.layers.1.mlp") and not matches("model.layers.1.*", "model.layers.10.mlp")
    assert matches("model.layers.*.self_attn", "model.layers.{layer}.self_attn.q_proj")



def test_every_formats_exclusion_list_is_read():
    """Each format names its unquantized modules under its own key: compressed-tensors and ModelOpt's
    config.json ``ignore``, ModelOpt's ``exclude_modules`` (nvidia/MiniMax-M3-NVFP4's config.json,
    quant_algo MIXED_PRECISION, its list's first entries below) and Hugging Face's
    ``modules_to_not_convert``; the patterns come in the keys' order (mutant
    exclusions-no-modelopt-file: ``exclude_modules`` not read, the vision tower quantized)."""
    minimax_m3_nvfp4 = {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
                        "exclude_modules": ["lm_head", "model.embed_tokens", "vision_tower",
                                            "language_model.model.layers.10.block_sparse_moe.gate"]}
    assert exclusions(minimax_m3_nvfp4) == minimax_m3_nvfp4["exclude_modules"]
    assert first_match(exclusions(minimax_m3_nvfp4), "vision_tower.blocks.0.attn.qkv") == "vision_tower"
    assert exclusions({"ignore": ["lm_head"], "modules_to_not_convert": ["re:.*gate$"]}) == ["lm_head", "re:.*gate$"]
    assert exclusions({"quant_method": "fp8"}) == [] and exclusions(None) == []

# -- snapshot --meta honours the exclusion lists -----------------------------------------------------


H, F, V, KV = 64, 160, 256, 32          # TINY: hidden, intermediate, vocab, k/v width (2 heads x 16)
LINEARS = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (KV, H), "self_attn.v_proj": (KV, H),
           "self_attn.o_proj": (H, H), "mlp.gate_proj": (F, H), "mlp.up_proj": (F, H), "mlp.down_proj": (H, F)}
NORMS = 2 * H                           # two RMSNorms per layer, BF16


def bf16(rows, cols):
    return rows * cols * 2


def nvfp4(rows, cols):
    return rows * cols // 2 + rows * cols // 16 + 4 + 4


def int4(rows, cols):
    return rows * cols // 2 + rows * cols // 32 * 2 + 8


def fp8(rows, cols):
    return rows * cols + 4 + 4


def w4a16(rows, cols):
    return rows * cols // 2 + rows * cols // 16 + 4


def layer_bytes(fmt) -> int:
    """One TINY layer, each linear stored by ``fmt(module) -> bytes function``."""
    return sum(fmt(name)(*shape) for name, shape in LINEARS.items()) + NORMS * 2


def manifest_for(tiny_corpus, tmp_path, qc: dict):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY, "quantization_config": qc}))
    assert main(["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--config", str(config), "--meta"]) == 0
    return load_manifest(tiny_corpus / "snapshots" / "test--tiny-llama.tensors.yaml")


OUTER = bf16(V, H) * 2 + H * 2          # embedding, head (untied), final norm: BF16


def test_compressed_tensors_ignore_regexes(tiny_corpus, tmp_path):
    """Kimi-K2.5's format: int4 group-32 packed, attention and the head in `ignore` (`re:`)."""
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 32,
                                                    "strategy": "group", "symmetric": True}}},
          "ignore": ["lm_head", "re:.*self_attn.*"]}
    m = manifest_for(tiny_corpus, tmp_path, qc)
    names = {t.name: t for t in m.tensors}
    assert names["model.layers.0.self_attn.q_proj.weight"].dtype == "BF16"
    assert names["model.layers.1.mlp.down_proj.weight_packed"].shape == (H, F // 8)
    assert "model.layers.0.mlp.gate_proj.weight" not in names
    assert m.total_bytes == OUTER + 2 * layer_bytes(lambda n: bf16 if n.startswith("self_attn") else int4)


def mxfp4(rows, cols):
    return rows * cols // 2 + rows * cols // 32


#: moonshotai/Kimi-K3 config.json text_config.quantization_config, copied (its ignore list shortened
#: to the entries a llama layer has: self_attn, the dense MLP's projections, the head)
KIMI_K3_QC = {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
              "quantization_status": "compressed",
              "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "input_activations": None,
                                            "targets": ["Linear"],
                                            "weights": {"num_bits": 4, "type": "float", "group_size": 32,
                                                        "strategy": "group", "symmetric": True,
                                                        "scale_dtype": "torch.uint8", "dynamic": False}}},
              "ignore": ["re:.*self_attn.*", "re:.*lm_head.*"]}


def test_compressed_tensors_mxfp4_matches_its_scheme(tiny_corpus, tmp_path):
    """Kimi K3's format (mxfp4-pack-quantized) is matched by the mxfp4_pack_quantized scheme's
    `hf:` keys: the MLP's linears as weight_packed [rows, cols/2] + weight_scale [rows, cols/32]
    (U8 both), attention and the head BF16 (`ignore`)."""
    m = manifest_for(tiny_corpus, tmp_path, KIMI_K3_QC)
    names = {t.name: t for t in m.tensors}
    assert names["model.layers.0.mlp.down_proj.weight_packed"].shape == (H, F // 2)
    assert names["model.layers.0.mlp.down_proj.weight_scale"].shape == (H, F // 32)
    assert names["model.layers.0.mlp.down_proj.weight_scale"].dtype == "U8"
    assert names["model.layers.1.self_attn.o_proj.weight"].dtype == "BF16"
    assert m.total_bytes == OUTER + 2 * layer_bytes(lambda n: bf16 if n.startswith("self_attn") else mxfp4)


def test_modelopt_nvfp4_ignore_globs(tiny_corpus, tmp_path):
    """An NVFP4 checkpoint that keeps its first layer and the head in BF16 (`model.layers.0*`)."""
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head", "model.layers.0*"]}
    m = manifest_for(tiny_corpus, tmp_path, qc)
    assert m.total_bytes == OUTER + layer_bytes(lambda n: bf16) + layer_bytes(lambda n: nvfp4)


def test_fp8_per_tensor_static(tiny_corpus, tmp_path):
    """Qwen3-32B-FP8-Static-PerTensor's quantization_config (no quant_method; ModelOpt FP8)."""
    qc = {"config_groups": {"group_0": {"input_activations": {"dynamic": False, "num_bits": 8, "type": "float"},
                                        "weights": {"dynamic": False, "num_bits": 8, "type": "float"}}},
          "ignore": ["lm_head"], "quant_algo": "FP8", "kv_cache_scheme": "FP8",
          "producer": {"name": "modelopt", "version": "0.31.0"}}
    m = manifest_for(tiny_corpus, tmp_path, qc)
    assert m.total_bytes == OUTER + 2 * layer_bytes(lambda n: fp8)
    assert m.provenance["quantization"].startswith("fp8_per_tensor")


def test_modelopt_mixed_precision_per_module(tiny_corpus, tmp_path):
    """Qwen3.6-27B-NVFP4's form: each quantized module named with its algorithm, by the
    checkpoint's multimodal path (model.language_model...); an unlisted module stays BF16."""
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "ignore": ["mtp*"],
          "quantized_layers": {"model.language_model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
                               "model.language_model.layers.1.mlp.down_proj":
                                   {"quant_algo": "W4A16_NVFP4", "group_size": 16}}}
    m = manifest_for(tiny_corpus, tmp_path, qc)
    names = {t.name: t for t in m.tensors}
    assert names["model.layers.0.self_attn.q_proj.weight"].dtype == "F8_E4M3"
    assert names["model.layers.1.mlp.down_proj.weight"].shape == (H, F // 2)
    assert m.total_bytes == (OUTER + layer_bytes(lambda n: fp8 if n == "self_attn.q_proj" else bf16)
                             + layer_bytes(lambda n: w4a16 if n == "mlp.down_proj" else bf16))


def test_modelopt_mixed_precision_quantizes_a_listed_head(tiny_corpus, tmp_path):
    """nvidia/Qwen3.6-27B-NVFP4 lists lm_head in quantized_layers (W4A16_NVFP4): the head is
    stored so, although an unlisted head stays BF16 (the rule of transformers' own quantizers)."""
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
          "quantized_layers": {"lm_head": {"quant_algo": "W4A16_NVFP4", "group_size": 16}}}
    m = manifest_for(tiny_corpus, tmp_path, qc)
    names = {t.name: t for t in m.tensors}
    assert (names["lm_head.weight"].dtype, names["lm_head.weight"].shape) == ("U8", (V, H // 2))
    assert names["model.embed_tokens.weight"].dtype == "BF16"
    assert m.total_bytes == OUTER - bf16(V, H) + w4a16(V, H) + 2 * layer_bytes(lambda n: bf16)


def test_spec_quant_context_honours_the_ignore_list(tiny_corpus, tmp_path):
    """The spec side: NVFP4 by default with the checkpoint's ignore list written as a module-path
    override verifies against the manifest transformers and that list give; without the override
    the packing guard names the attention leaves stored in BF16."""
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["lm_head", "*.self_attn*"]}
    manifest_for(tiny_corpus, tmp_path, qc)
    spec = tiny_corpus / "models" / "test--tiny-llama.yaml"
    plain = spec.read_text().replace("quant_context: {default: bf16}",
                                     "quant_context: {default: nvfp4, overrides: {embedding: bf16, lm_head: bf16}}")
    spec.write_text(plain)
    corpus = load_corpus(tiny_corpus)
    errors = validate(corpus, corpus.models["test/tiny-llama"]).errors
    assert {f.node for f in errors if f.guard == "packing"} >= {"main/layers[block]/self_attn/q_proj"}
    spec.write_text(plain.replace("lm_head: bf16}", 'lm_head: bf16, "*.self_attn*": bf16}'))
    corpus = load_corpus(tiny_corpus)
    report = validate(corpus, corpus.models["test/tiny-llama"])
    assert report.verified, "\n".join(f.one_line() for f in report.errors)


def test_a_bad_pattern_override_is_one_line(tiny_corpus, capsys):
    """A module-path override that is not a valid regex names the spec, its line and the field."""
    (tiny_corpus / "models" / "test--tiny-llama.yaml").unlink()
    spec = tiny_corpus / "models" / "Qwen--Qwen3-8B.yaml"
    spec.write_text(spec.read_text().replace("quant_context: {default: bf16}",
                                             'quant_context: {default: bf16, overrides: {"re:(self_attn": fp8_block128}}'))
    capsys.readouterr()
    assert main(["--corpus", str(tiny_corpus), "check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Qwen--Qwen3-8B.yaml:" in err and "quant_context.overrides.re:(self_attn" in err
    assert "bad pattern" in err and "re:<regex>" in err


def test_a_published_per_layer_ignore_list_collapses_to_spec_patterns():
    """Gemma-4-26B-A4B-NVFP4's ignore list names the attention, router and dense MLP of each of
    its 30 layers: three patterns over every layer, nothing left for a person. Qwen3.5-122B's names
    the Gated DeltaNet of its linear layers only: every layer that has one (each fourth layer is
    full attention), once the caller says which layers have a `linear_attn`. A list naming some
    layers of a kind (the first ones) is returned as it is."""
    from engine.language.module_patterns import canonical, collapse_layers
    gemma = ["lm_head", "model.embed_vision*"] + [f"model.language_model.layers.{i}.{m}*" for i in range(30)
                                                  for m in ("mlp", "router", "self_attn")]
    kept, partial = collapse_layers(gemma, 30)
    assert partial == []
    assert kept == ["lm_head", "model.embed_vision*", "model.language_model.layers.*.mlp*",
                    "model.language_model.layers.*.router*", "model.language_model.layers.*.self_attn*"]
    assert canonical(kept[2], [("model.language_model.", "model.")]) == "model.layers.*.mlp*"
    linear = {i for i in range(48) if i % 4 != 3}
    qwen = ["lm_head"] + [f"model.language_model.layers.{i}.linear_attn*" for i in sorted(linear)]
    assert collapse_layers(qwen, 48) == (["lm_head"], [f"model.language_model.layers.{i}.linear_attn*"
                                                         for i in sorted(linear)])
    assert collapse_layers(qwen, 48, lambda pattern: linear) == (
        ["lm_head", "model.language_model.layers.*.linear_attn*"], [])
    assert collapse_layers(["model.layers.0.mlp*", "model.layers.1.mlp*"], 4) == (
        [], ["model.layers.0.mlp*", "model.layers.1.mlp*"])


def test_a_whole_layer_exclusion_counts_towards_every_shape_of_that_layer():
    """Kimi-K2.6-NVFP4's ignore list, by hand: layer 0 (the dense layer) whole, then the attention
    and the shared experts of layers 1..3 (of 4). Attention and shared experts are then named in
    every layer (one pattern each); layer 0 itself is named alone (a person's to-do)."""
    from engine.language.module_patterns import collapse_layers
    listed = ["lm_head", "model.layers.0*"] + [f"model.layers.{i}.{m}*" for i in (1, 2, 3)
                                              for m in ("mlp.shared_experts", "self_attn")]
    assert collapse_layers(listed, 4) == (["lm_head", "model.layers.*.mlp.shared_experts*", "model.layers.*.self_attn*"],
                                          ["model.layers.0*"])
    # without the whole-layer entry, layers 1..3 are some layers only
    assert collapse_layers(["model.layers.1.self_attn*", "model.layers.2.self_attn*", "model.layers.3.self_attn*"], 4)[0] == []


# -- new --checkpoint: which modules a quantized checkpoint keeps unquantized ------------------------

TINY_QWEN3 = json.loads((__import__("tests.conftest", fromlist=["REPO"]).REPO
                         / "tests" / "data" / "new" / "tiny-qwen3.config.json").read_text())


def test_an_exclusion_naming_no_linear_is_no_override():
    """GLM-5-FP8's modules_to_not_convert names norms and parameters beside linears; quantizers
    convert linear layers only, so of this list (tiny Qwen3, 2 layers) only the q_proj entries
    become an override: `model.layers.*.self_attn.q_proj: bf16`; the norms and `k_norm.bias`
    change no storage (as bf16 overrides they would clobber a finer f32 one)."""
    from engine.verify.scaffold_quant import _quant
    corpus = load_corpus()
    config = {**TINY_QWEN3, "quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic",
        "modules_to_not_convert": ["model.layers.0.input_layernorm", "model.layers.1.input_layernorm",
                                   "model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj",
                                   "model.layers.0.self_attn.k_norm.bias", "model.layers.1.self_attn.k_norm.bias"]}}
    lines, todo = ["quant_context: {default: bf16}"], []
    _quant(lines, config, TINY_QWEN3, corpus, todo)
    assert lines[:2] == ["quant_context:", "  default: fp8_block128"]
    overrides = [line.strip() for line in lines[3:]]
    assert '"model.layers.*.self_attn.q_proj": bf16' in overrides
    assert not [o for o in overrides if "layernorm" in o or "k_norm" in o], overrides
    assert not todo


def test_a_router_with_a_bias_beside_its_weight_is_kept_unquantized():
    """A manifest (hand-made) where each layer's router weight is BF16 with its F32 correction bias
    beside it and q_proj is FP8 with its scale: the router is a kind of linear kept unquantized
    (the bias is no scale), q_proj is quantized."""
    from engine.verify.add_checkpoint import _kept_matrices
    from engine.verify.manifest import Manifest, ManifestTensor
    from engine.verify.scaffold import Result
    tensors = []
    for layer in (0, 1):
        tensors += [ManifestTensor(f"model.layers.{layer}.mlp.gate.weight", "BF16", (8, 64)),
                    ManifestTensor(f"model.layers.{layer}.mlp.gate.e_score_correction_bias", "F32", (8,)),
                    ManifestTensor(f"model.layers.{layer}.self_attn.q_proj.weight", "F8_E4M3", (64, 64)),
                    ManifestTensor(f"model.layers.{layer}.self_attn.q_proj.weight_scale_inv", "F32", (1, 1))]
    manifest = Manifest("hand", {"kind": "modeling_code"}, 0, tensors)
    quant = ["  default: fp8_block128"]
    out = _kept_matrices(quant, manifest, (), Result("a/b", "a/c"))
    assert out == quant + ["  overrides:", '    "model.layers.*.mlp.gate": bf16']
    # where the base stores the bias by `role.leaf` (F32), the router is named by its role: a
    # module path override would come first and store the bias BF16 (GLM-5-FP8's 75 routers)
    quant = ["  default: fp8_block128", "  overrides:", "    router.e_score_correction_bias: f32"]
    out = _kept_matrices(quant, manifest, (), Result("a/b", "a/c"))
    assert out == quant + ["    router: bf16"]
