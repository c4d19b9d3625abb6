"""Evidence for what the model is: the text stack of a multimodal checkpoint is built with its own
class, and every recorded snapshot names the checkpoint's own architecture.

The counts here are hand-derived from the published config.json (Qwen3-VL-8B-Instruct, kept in
tests/fixtures/ with its sha256), never read back from the code under test.
"""
from __future__ import annotations

import hashlib
import json

import pytest

from engine.cli import main
from engine.language.yamlio import load_yaml
from engine.verify.manifest import load as load_manifest
from tests.conftest import REPO
from tests.test_snapshot_evidence import TINY, tiny_corpus  # noqa: F401 (a fixture)

#: the oracle extra is needed (torch, transformers): checked when the tests run, not at collection
pytestmark = pytest.mark.usefixtures("oracle_installed")

FIXTURES = REPO / "tests" / "fixtures"
QWEN3_VL_8B = FIXTURES / "Qwen--Qwen3-VL-8B-Instruct.config.json"


def test_fixture_is_the_published_file():
    digest = hashlib.sha256(QWEN3_VL_8B.read_bytes()).hexdigest()
    assert digest == "c1c2ccb5226e1bdb4049e0b27a662ddefd438ba87fa0d316575ffed60938e264"


def qwen3_vl_8b_text_params() -> int:
    """Qwen3-VL-8B's text stack by hand from its text_config: untied embedding and head (V x H
    each), 36 layers of GQA (q, o: H x 32*128; k, v: H x 8*128; q_norm, k_norm: 128 each), a
    SwiGLU MLP (3 x H x 12288) and two RMSNorms (H each), and the final norm. No vision tower:
    its 27 blocks of width 1152 and the merger would add ~0.58 G."""
    vocab, hidden, layers, heads, kv, head_dim, ff = 151936, 4096, 36, 32, 8, 128, 12288
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim + 2 * head_dim
    per_layer = attention + 3 * hidden * ff + 2 * hidden
    total = 2 * vocab * hidden + layers * per_layer + hidden
    assert total == 8_190_735_360   # written out: the figure the checks below must meet
    return total


def test_multimodal_text_stack_is_built_with_its_own_class():
    """`snapshot --meta`'s manifest of a Qwen3-VL config is the language model and the head of
    Qwen3VLForConditionalGeneration, recorded as qwen3_vl_text's Qwen3VLTextModel (never Qwen3's
    code), with no tensor of the vision tower, and its parameters add up to the hand count."""
    from engine.language.corpus import load_corpus
    from engine.verify.modeling_code import meta_manifest, modeling_source
    config = json.loads(QWEN3_VL_8B.read_text())
    manifest = meta_manifest(config, load_corpus().schemes, "hf:Qwen/Qwen3-VL-8B-Instruct")
    assert manifest.provenance["class"] == "Qwen3VLTextModel"
    assert manifest.provenance["model_type"] == "qwen3_vl_text"
    assert manifest.provenance["text_stack_of"].startswith("Qwen3VLForConditionalGeneration")
    names = [t.name for t in manifest.tensors]
    assert not [n for n in names if "visual" in n]
    assert {n.split(".layers.")[0] for n in names if ".layers." in n} == {"model.language_model"}
    assert "lm_head.weight" in names
    assert {t.dtype for t in manifest.tensors} == {"BF16"}   # text_config's dtype: bfloat16
    assert sum(t.numel for t in manifest.tensors) == qwen3_vl_8b_text_params()
    label, _ = modeling_source(config)
    assert label.endswith("transformers/models/qwen3_vl/modeling_qwen3_vl.py")


def test_oracle_counts_the_text_model_without_the_vision_tower():
    """What transformers counts for Qwen3-VL-8B's text model (its language model plus head on
    the meta device) is the hand count; the whole vision-language model is larger."""
    from tests import hf_oracle
    report = hf_oracle.hf_meta_report(QWEN3_VL_8B)
    assert report.total_params == qwen3_vl_8b_text_params()
    assert report.model_class == "Qwen3VLForConditionalGeneration.Qwen3VLTextModel"
    assert not report.tied


def test_corpus_qwen3_vl_8b_is_its_text_stack(evaluation):
    """The corpus spec of Qwen3-VL-8B-Instruct counts the text stack by hand (no vision tower) and
    keeps Qwen3's GQA KV: 36 layers x (K + V) x 8 heads x 128 x 2 bytes per token in BF16."""
    from engine.language import quantities
    numeric = evaluation("Qwen/Qwen3-VL-8B-Instruct").numeric
    assert int(quantities.params_total(numeric)) == qwen3_vl_8b_text_params()
    assert int(quantities.params_active(numeric)) == qwen3_vl_8b_text_params()
    overview = evaluation("Qwen/Qwen3-VL-8B-Instruct").overview()
    assert int(overview["kv_bytes_per_token_growing"].value) == 36 * 2 * 8 * 128 * 2 == 147_456
    assert int(overview["checkpoint_bytes"].value) == 2 * qwen3_vl_8b_text_params()


def test_corpus_qwen3_vl_32b_is_its_text_stack(evaluation):
    """Qwen3-VL-32B-Instruct's text stack by hand from its text_config (h 5120, 64 layers of 64
    query and 8 KV heads of 128, SwiGLU 25600, untied head over 151,936 tokens): the model issue 40
    found "verified" against Qwen3's code, now against its own (the snapshot test above)."""
    from engine.language import quantities
    vocab, hidden, layers, heads, kv, head_dim, ff = 151936, 5120, 64, 64, 8, 128, 25600
    per_layer = (2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim + 2 * head_dim
                 + 3 * hidden * ff + 2 * hidden)
    total = 2 * vocab * hidden + layers * per_layer + hidden
    assert total == 32_762_123_264
    numeric = evaluation("Qwen/Qwen3-VL-32B-Instruct").numeric
    assert int(quantities.params_total(numeric)) == total


# -- every corpus snapshot is the checkpoint's own architecture -------------------------------------

def own_architecture(config: dict) -> tuple[set[str], set[str]]:
    """(model types, class names) a checkpoint's published config.json declares as its own: its
    model_type and its text_config's, the architectures it lists (a model_type transformers lacks,
    Kimi-K2's kimi_k2, is known by the built-in architecture it declares: DeepseekV3ForCausalLM),
    and the classes transformers registers for those model types."""
    from transformers.models.auto import modeling_auto as auto
    mappings = (auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_MAPPING_NAMES,
                auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    types = {config["model_type"], text.get("model_type")} - {None}
    archs = set(config.get("architectures") or []) | set(text.get("architectures") or [])
    # every model type registering a declared class (several share DeepseekV3ForCausalLM: deepseek_v3, sarvam_mla)
    types |= {mt for mapping in mappings for mt, cls in mapping.items() if cls in archs}
    classes = archs | {m[t] for t in types for m in mappings if t in m}
    return types, classes


SNAPSHOTS = REPO / "corpus" / "snapshots"
MANIFESTS = sorted(p for p in SNAPSHOTS.glob("*.tensors.yaml"))


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name.removesuffix(".tensors.yaml"))
def test_every_snapshot_is_verified_against_its_own_architecture(path):
    """No spec is verified against another model's modeling code: the class and model_type each
    modeling-code manifest records are the checkpoint's own (its config.json beside it)."""
    manifest = load_manifest(path)
    if manifest.kind != "modeling-code":
        pytest.skip("checkpoint-header evidence names no class")
    config = json.loads((SNAPSHOTS / path.name.replace(".tensors.yaml", ".config.json")).read_text())
    types, classes = own_architecture(config)
    assert manifest.provenance["class"] in classes
    assert manifest.provenance["model_type"] in types
    # and the forward source the anchors are checked against is that class's own file
    import transformers
    source = load_yaml(path.with_name(path.name.replace(".tensors.", ".source.")), path.name)
    own_file = getattr(transformers, manifest.provenance["class"]).__module__.replace(".", "/") + ".py"
    assert source["source"].endswith(" " + own_file)


def test_own_architecture_refuses_another_models_code():
    """The check above catches the workaround issue 40 found: a Qwen3-VL config snapshotted with
    its model_type rewritten to qwen3 (Qwen3ForCausalLM) is not its own architecture."""
    types, classes = own_architecture(json.loads(QWEN3_VL_8B.read_text()))
    assert "Qwen3ForCausalLM" not in classes and "qwen3" not in types
    assert {"Qwen3VLTextModel", "Qwen3VLForConditionalGeneration"} <= classes
    assert {"qwen3_vl", "qwen3_vl_text"} <= types


# -- one-line errors ---------------------------------------------------------------------------------

def _snapshot(tiny_corpus, tmp_path, config: dict, capsys) -> tuple[int, str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    capsys.readouterr()
    code = main(["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--config", str(path), "--meta"])
    return code, capsys.readouterr().err.strip()


def test_an_architecture_transformers_lacks_is_one_line(tiny_corpus, tmp_path, capsys):
    code, err = _snapshot(tiny_corpus, tmp_path, {**TINY, "model_type": "minimax_m9",
                                                  "architectures": ["MiniMaxM9ForCausalLM"]}, capsys)
    assert code == 2
    assert "\n" not in err and len(err) < 400
    assert "'minimax_m9'" in err and "unverified" in err and "Traceback" not in err
    assert not list((tiny_corpus / "snapshots").glob("test--tiny-llama*"))


def test_a_config_class_without_a_causal_lm_is_one_line(tiny_corpus, tmp_path, capsys):
    """A model_type transformers knows only as a bare text model (Qwen3-VL's qwen3_vl_text on its
    own: no causal-LM class, no vision-language model around it), and one it cannot read."""
    code, err = _snapshot(tiny_corpus, tmp_path, {**TINY, "model_type": "qwen3_vl_text"}, capsys)
    assert code == 2
    assert "\n" not in err and len(err) < 400 and "no causal-LM class for model_type 'qwen3_vl_text'" in err
    assert not list((tiny_corpus / "snapshots").glob("test--tiny-llama*"))
    code, err = _snapshot(tiny_corpus, tmp_path, {**TINY, "model_type": "siglip_vision_model"}, capsys)
    assert code == 2
    assert "\n" not in err and len(err) < 400 and "siglip_vision_model" in err
    assert not list((tiny_corpus / "snapshots").glob("test--tiny-llama*"))


def test_an_unmatched_quantization_config_is_one_short_line(tiny_corpus, tmp_path, capsys):
    """A compressed-tensors config with a 60 KB ignore list that no corpus scheme matches."""
    ignore = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(2000) for p in "qkvo"]
    qc = {"quant_method": "compressed-tensors", "format": "made-up-format", "ignore": ignore}
    assert len(json.dumps(qc)) > 60_000
    code, err = _snapshot(tiny_corpus, tmp_path, {**TINY, "quantization_config": qc}, capsys)
    assert code == 2
    assert "\n" not in err and len(err) < 500
    assert "made-up-format" in err and "corpus/quant" in err
    assert not list((tiny_corpus / "snapshots").glob("test--tiny-llama*"))
