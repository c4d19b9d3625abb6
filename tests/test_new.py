"""``archledger new``: a checkpoint of a known family, written, recorded, validated and counted.

The end-to-end test runs the command on a small Qwen3 config (tests/data/new/, tied embeddings:
the head must share the embedding's weights) in a copy of the corpus; its expectations come from
outside the scaffold: transformers' meta-device count (tests/hf_oracle.py), a hand count, and the
corpus' own loader and validator reading what was written. The refusal tests each give one bad
input and check one error line, exit status 2 and a corpus left byte for byte as it was.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from site_builder import cli
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "data" / "new" / "tiny-qwen3.config.json"


def _tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` (and beside it: a leftover temp folder) by content hash."""
    return {str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.parent.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("new") / "corpus"
    shutil.copytree(REPO / "corpus", root)
    return root


def _run(capsys, corpus: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--corpus", str(corpus), "new", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_new_writes_records_and_verifies_a_config_of_a_known_family(capsys, tmp_path):
    pytest.importorskip("transformers")
    from engine.language import quantities
    from engine.language.corpus import load_corpus
    from engine.language.evaluate import Binding, walk_model
    from engine.verify.validate import validate
    from tests import hf_oracle
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    code, out, err = _run(capsys, corpus, "acme/Tiny-Qwen3", "--config", str(FIXTURE))
    assert code == 0, out + err
    assert "verified" in out and "with no hand edit" in out
    spec = corpus / "models" / "acme--Tiny-Qwen3.yaml"
    assert spec.read_text().startswith("model: acme/Tiny-Qwen3\n")
    snapshots = corpus / "snapshots"
    assert (snapshots / "acme--Tiny-Qwen3.config.json").read_bytes() == FIXTURE.read_bytes()
    sha = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    assert (f"| `acme--Tiny-Qwen3.config.json` | https://huggingface.co/acme/Tiny-Qwen3/blob/main/config.json "
            f"| `{sha}` |") in (snapshots / "README.md").read_text()
    assert "acme/Tiny-Qwen3" in (corpus / "lineage.yaml").read_text()
    tensors = (snapshots / "acme--Tiny-Qwen3.tensors.yaml").read_text()
    assert "kind: modeling-code" in tensors and "Qwen3ForCausalLM" in tensors
    assert (snapshots / "acme--Tiny-Qwen3.source.yaml").exists()
    loaded = load_corpus(corpus)
    model = loaded.models["acme/Tiny-Qwen3"]
    assert validate(loaded, model).verified
    ours = int(quantities.params_total(walk_model(loaded, model, Binding("numeric"))))
    theirs = hf_oracle.hf_meta_report(FIXTURE).total_params
    # by hand: embedding 256x64 (the head is tied to it); per layer q 64x64, k and v 64x32 each,
    # o 64x64, q/k norms 16 each, SwiGLU 3x64x128, two norms of 64; a final norm of 64
    layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 2 * 16 + 3 * 64 * 128 + 2 * 64
    assert ours == theirs == 256 * 64 + 2 * layer + 64
    assert f"ArchLedger {ours:,}, transformers (meta device) {theirs:,}" in out
    from engine.batch.landscape import load_lineage
    table = load_lineage(corpus)
    assert table["models"]["acme/Tiny-Qwen3"] > table["models"]["Qwen/Qwen3-8B"]   # appended to Qwen3's release list


BAD = {
    "not JSON": ("acme/X", "{not json", "not JSON"),
    "a JSON list": ("acme/X", "[1, 2]", "JSON object"),
    "no model_type": ("acme/X", json.dumps({"hidden_size": 64}), "no model_type"),
    "an unknown family": ("acme/X", json.dumps({"model_type": "no_such_family", "architectures": ["NoSuchForCausalLM"]}),
                          "no corpus family has model_type 'no_such_family'"),
    "an id without org": ("Tiny-Qwen3", None, "not a Hugging Face id"),
    "an id with a path": ("acme/../x", None, "not a Hugging Face id"),
    "an existing spec": ("Qwen/Qwen3-8B", None, "the spec exists"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_new_refuses_in_one_line_and_writes_nothing(case, capsys, corpus_copy, tmp_path):
    model_id, text, says = BAD[case]
    config = tmp_path / "config.json"
    if text is None:
        shutil.copy(FIXTURE, config)
    else:
        config.write_text(text)
    before = _tree(corpus_copy)
    code, out, err = _run(capsys, corpus_copy, model_id, "--config", str(config))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    assert _tree(corpus_copy) == before


def test_new_force_rewrites_an_existing_spec(capsys, tmp_path):
    """--force: the refusal above goes, and the rewritten spec is the scaffold's (its id kept)."""
    pytest.importorskip("transformers")
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    config = corpus / "snapshots" / "Qwen--Qwen3-8B.config.json"
    code, out, err = _run(capsys, corpus, "Qwen/Qwen3-8B", "--config", str(config), "--force")
    assert code == 0, out + err
    assert "like Qwen/Qwen3-8B" not in out   # the spec being rewritten is not its own base
    text = (corpus / "models" / "Qwen--Qwen3-8B.yaml").read_text()
    assert text.startswith("model: Qwen/Qwen3-8B\n") and "name: Qwen3 8B" in text
    assert (corpus / "lineage.yaml").read_text() == (REPO / "corpus" / "lineage.yaml").read_text()


def _lineage(tmp_path: Path, text: str) -> dict:
    from engine.batch.landscape import load_lineage
    (tmp_path / "lineage.yaml").write_text(text)
    return load_lineage(tmp_path)


def test_a_repeated_lineage_continues_it(tmp_path):
    """What `new` appends: an entry naming a lineage again extends its family's release list and
    places a new family after the lineage's others (not at generation 0)."""
    table = _lineage(tmp_path, "lineages:\n  - lineage: Z\n    families: [A, {B: [z/b1, z/b2]}]\n"
                               "  - lineage: Z\n    families:\n      - B: [z/b3]\n      - C\n")
    assert table["models"] == {"z/b1": 0, "z/b2": 1, "z/b3": 2}
    assert table["families"] == {"A": ("Z", 0), "B": ("Z", 1), "C": ("Z", 2)}


def test_a_repeated_family_places_its_new_models_beside_the_ones_it_names(tmp_path):
    """`[z/b1, z/b1.5]` at the end puts z/b1.5 between z/b1 and z/b2 (release order); new models
    named before a known one go just before it."""
    table = _lineage(tmp_path, "lineages:\n  - lineage: Z\n    families: [{B: [z/b1, z/b2]}]\n"
                               "  - lineage: Z\n    families:\n      - B: [z/b1, z/b1.5]\n"
                               "  - lineage: Z\n    families:\n      - B: [z/b0.1, z/b0.2, z/b1]\n")
    assert sorted(table["models"], key=table["models"].get) == ["z/b0.1", "z/b0.2", "z/b1", "z/b1.5", "z/b2"]


def test_a_family_in_two_lineages_is_one_line(tmp_path):
    from engine.language.errors import SpecError
    with pytest.raises(SpecError, match="family 'B' is already in lineage 'Z'"):
        _lineage(tmp_path, "lineages:\n  - lineage: Z\n    families: [B]\n  - lineage: Y\n    families: [B]\n")


def test_new_takes_the_quant_context_from_quantization_config(capsys, tmp_path):
    """The same small Qwen3 published as FP8 with 128x128 block scales (the quantization_config of
    Qwen3-32B-FP8): the spec stores its linear weights as fp8_block128 and the weight guard holds
    each tensor and scale to the manifest transformers' quantizer rule gives (embedding, tied head
    and norms stay BF16)."""
    pytest.importorskip("transformers")
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    config = json.loads(FIXTURE.read_text())
    config["quantization_config"] = {"activation_scheme": "dynamic", "quant_method": "fp8", "weight_block_size": [128, 128]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = _run(capsys, corpus, "acme/Tiny-Qwen3-FP8", "--config", str(path))
    assert code == 0, out + err
    spec = (corpus / "models" / "acme--Tiny-Qwen3-FP8.yaml").read_text()
    assert "quant_context:\n  default: fp8_block128\n  overrides:\n    embedding: bf16\n" in spec   # the tied head stores nothing
    tensors = (corpus / "snapshots" / "acme--Tiny-Qwen3-FP8.tensors.yaml").read_text()
    assert "q_proj.weight F8_E4M3 [64, 64]" in tensors and "q_proj.weight_scale_inv F32 [1, 1]" in tensors


def test_a_recorded_configs_row_keeps_its_place_in_the_snapshots_readme():
    """scaffold_text.readme_text: a config recorded again replaces its row where it stands (the same hash
    leaves the text byte for byte; a new hash changes that line only), a new config's row goes after
    the last row. By hand on a three-row table."""
    from engine.verify.scaffold_text import readme_text
    text = ("# Snapshots\n\n| file | source | sha256 |\n|---|---|---|\n"
            "| `a--A.config.json` | https://huggingface.co/a/A/blob/main/config.json | `11` |\n"
            "| `b--B.config.json` | https://huggingface.co/b/B/blob/main/config.json | `22` |\n"
            "| `c--C.config.json` | https://huggingface.co/c/C/blob/main/config.json | `33` |\n\nNotes.\n")
    assert readme_text(text, "a/A", "11") == text
    again = readme_text(text, "a/A", "99").splitlines()
    assert again[4] == "| `a--A.config.json` | https://huggingface.co/a/A/blob/main/config.json | `99` |"
    assert again[:4] + again[5:] == text.splitlines()[:4] + text.splitlines()[5:]
    added = readme_text(text, "d/D", "44").splitlines()
    assert added[7] == "| `d--D.config.json` | https://huggingface.co/d/D/blob/main/config.json | `44` |"
    assert added[8:] == ["", "Notes."]


def test_a_quantization_config_no_scheme_matches_is_a_to_do_with_its_whole_advice(capsys, tmp_path):
    """A format no corpus scheme stores (compressed-tensors' NVFP4 packing, nvfp4-pack-quantized: the
    corpus's nvfp4 is ModelOpt's) is one to-do line naming the format and ending with what to write: the scheme's `hf:` keys, then
    quant_context (it was cut at 200 characters, mid-word, before the advice)."""
    pytest.importorskip("transformers")
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    config = json.loads(FIXTURE.read_text())
    config["quantization_config"] = {"format": "nvfp4-pack-quantized", "global_compression_ratio": None,
                                     "kv_cache_scheme": None, "quant_method": "compressed-tensors",
                                     "ignore": [f"model.layers.{i}.self_attn.q_proj" for i in range(500)]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = _run(capsys, corpus, "acme/Tiny-Qwen3-NVFP4", "--config", str(path))
    line = next(line for line in (out + err).splitlines() if "quantization_config:" in line)
    assert "nvfp4-pack-quantized" in line and "compressed-tensors" in line
    assert line.rstrip().endswith("add `hf:` keys to the scheme in corpus/quant/ that stores this format; then set quant_context")
    assert "model.layers.499" not in line          # the 500-entry ignore list is not quoted


def test_an_unquantized_checkpoint_of_a_quantized_base_is_bf16_with_its_f32_buffers():
    """Consistency of the text rewrite: DeepSeek-V3's FP8 spec, given a config without
    quantization_config, becomes BF16 and keeps only the overrides that name a buffer's own dtype
    (the routing bias transformers creates in float32)."""
    from engine.language.corpus import load_corpus
    from engine.verify.scaffold import published_config
    from engine.verify.scaffold_text import spec_text
    corpus = load_corpus()
    base = corpus.models["deepseek-ai/DeepSeek-V3"]
    config = {k: v for k, v in published_config(corpus.root, base).items() if k != "quantization_config"}
    text, todo = spec_text((corpus.root / "models" / "deepseek-ai--DeepSeek-V3.yaml").read_text(), base,
                           "acme/DeepSeek-V3-BF16", config, published_config(corpus.root, base), corpus, set(), set())
    assert "quant_context:\n  default: bf16\n  overrides:\n    router.e_score_correction_bias: f32\n" in text
    assert "fp8" not in text.split("quant_context:")[1].split("\n\n")[0]
    assert todo == []


def test_a_config_without_a_layer_count_binds_it_to_its_per_layer_list(capsys, tmp_path):
    """Nemotron 3 Nano's published config rewritten the way later Nemotron 3 configs are (Ultra):
    layers_block_type instead of hybrid_override_pattern, no num_hidden_layers. The layer count
    becomes len(config.layers_block_type); the pattern the base spec schedules by comes from
    transformers' NemotronHConfig (with that class as its src) and equals the published one; the
    count equals transformers' for the original config."""
    pytest.importorskip("transformers")
    from tests import hf_oracle
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    published = corpus / "snapshots" / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.config.json"
    config = json.loads(published.read_text())
    pattern = config.pop("hybrid_override_pattern")
    del config["num_hidden_layers"]
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}   # NemotronHConfig's legacy names
    config["layers_block_type"] = [names[c] for c in pattern]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, out, err = _run(capsys, corpus, "acme/Nano-Listed", "--config", str(path),
                          "--like", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert code in (0, 1), out + err
    spec = (corpus / "models" / "acme--Nano-Listed.yaml").read_text()
    assert "  n_layers: len(config.layers_block_type)\n" in spec
    assert f'  hybrid_override_pattern: {{value: "{pattern}", src: "transformers ' in spec
    assert "NemotronHConfig.hybrid_override_pattern" in spec
    theirs = hf_oracle.hf_meta_report(published).total_params
    assert f"ArchLedger {theirs:,}, transformers (meta device) {theirs:,}" in out


def test_the_display_name_follows_the_bases_habit_by_token_kind():
    """The base's display name is its repo name with each hyphen kept or made a space; the choice
    per pair of token kinds (word, size) carries over: "Qwen3-VL 8B Instruct" keeps the hyphen
    inside the family name, so its 30B-A3B sibling is "Qwen3-VL 30B-A3B Instruct" (two sizes the
    base never joins keep theirs). A base that joins the same kinds both ways has no habit: the
    repo name as it is."""
    from types import SimpleNamespace as base
    from engine.verify.scaffold_text import display_name
    vl = base(model_id="Qwen/Qwen3-VL-8B-Instruct", display_name="Qwen3-VL 8B Instruct")
    assert display_name(vl, "Qwen/Qwen3-VL-30B-A3B-Instruct") == "Qwen3-VL 30B-A3B Instruct"
    assert display_name(vl, "Qwen/Qwen3-VL-2B-Instruct") == "Qwen3-VL 2B Instruct"
    assert display_name(base(model_id="Qwen/Qwen3-8B", display_name="Qwen3 8B"), "Qwen/Qwen3-0.6B") == "Qwen3 0.6B"
    mixed = base(model_id="acme/Big-Model-Two-7B", display_name="Big Model-Two 7B")   # word-word both ways
    assert display_name(mixed, "acme/Big-Model-Two-9B") == "Big-Model-Two-9B"
    llama = base(model_id="meta-llama/Llama-4-Scout-17B-16E-Instruct", display_name="Llama-4-Scout-17B-16E")
    assert display_name(llama, "meta-llama/Llama-4-Maverick-17B-128E-Instruct") == "Llama-4-Maverick-17B-128E-Instruct"


def test_the_bases_notes_are_dropped_when_they_describe_its_own_sizes():
    """Notes naming the base's size ("Qwen3 8B's ...") or quoting a value the new config changes,
    also under text_config and written with thousands separators, are the base's, not this
    checkpoint's; notes that name neither stay."""
    from types import SimpleNamespace as base
    from engine.verify.scaffold_text import notes_outdated
    sized = base(model_id="Qwen/Qwen3-VL-8B-Instruct", notes="The text stack: Qwen3 8B's dense GQA transformer.")
    same = {"text_config": {"hidden_size": 64}}
    assert notes_outdated(sized, same, same, "Qwen/Qwen3-VL-2B-Instruct")
    assert not notes_outdated(sized, same, same, "Qwen/Qwen3-VL-8B-Thinking")
    quoted = base(model_id="acme/M-1", notes="RoPE base 5,000,000 and a dense MLP.")
    assert notes_outdated(quoted, {"text_config": {"rope_theta": 1000000}}, {"text_config": {"rope_theta": 5000000}}, "acme/M-2")
    assert not notes_outdated(quoted, {"text_config": {"rope_theta": 5000000, "hidden_size": 8}},
                              {"text_config": {"rope_theta": 5000000, "hidden_size": 4}}, "acme/M-2")


def test_per_module_quantization_becomes_one_override_per_module_kind():
    """ModelOpt MIXED_PRECISION names each module by its checkpoint path (nvidia/Qwen3.6-27B-NVFP4):
    the spec gets one main-stack glob per module kind, the layer index made `*` and the multimodal
    prefix made canonical (an MTP module, mtp.layers..., is not covered). A kind stored two ways
    across layers cannot be one override: a to-do line, and nothing written."""
    from types import SimpleNamespace as scheme
    from engine.verify.scaffold_quant import _module_overrides
    fp8, w4 = scheme(name="fp8_per_tensor"), scheme(name="nvfp4_w4a16")
    prefixes = (("model.language_model.", "model."),)
    listed = {"lm_head": w4, **{f"model.language_model.layers.{i}.mlp.down_proj": w4 for i in range(4)},
              **{f"model.language_model.layers.{i}.self_attn.q_proj": fp8 for i in (3, 7)}}
    todo: list[str] = []
    assert _module_overrides(listed, prefixes, todo) == [
        ("lm_head", "nvfp4_w4a16"), ("model.layers.*.mlp.down_proj", "nvfp4_w4a16"),
        ("model.layers.*.self_attn.q_proj", "fp8_per_tensor")]
    assert todo == []
    listed["model.language_model.layers.2.mlp.down_proj"] = fp8
    assert _module_overrides(listed, prefixes, todo) is None
    assert len(todo) == 1 and "model.layers.*.mlp.down_proj" in todo[0]


def test_a_field_transformers_never_reads_is_a_note_not_a_to_do():
    """nvidia/Qwen3.6-27B-NVFP4's text_config adds output_gate_type ("swish"), which neither
    transformers' Qwen3.5 modeling file nor its configuration file mentions: it cannot change the
    evidence, so it is said, not left to a person. A field the code reads is not in that set."""
    pytest.importorskip("transformers")
    from engine.verify.modeling_code import unread_fields
    config = json.loads((REPO / "corpus" / "snapshots" / "nvidia--Qwen3.6-27B-NVFP4.config.json").read_text())
    assert unread_fields(config, {"output_gate_type", "linear_num_value_heads", "linear_conv_kernel_dim"}) == {"output_gate_type"}


def test_a_base_of_another_model_type_gets_the_configs_type_and_a_family_to_confirm():
    """--like across model types (Qwen3-VL-30B-A3B's config, Qwen3-30B-A3B's spec): the spec is
    written with the config's model_type (the loader would refuse the base's), and the family,
    the base's, is a to-do line for a person."""
    from engine.language.corpus import load_corpus
    from engine.verify.scaffold import published_config
    from engine.verify.scaffold_text import spec_text
    corpus = load_corpus()
    base = corpus.models["Qwen/Qwen3-30B-A3B"]
    config = json.loads((corpus.root / "snapshots" / "Qwen--Qwen3-VL-30B-A3B-Instruct.config.json").read_text())
    text, todo = spec_text((corpus.root / "models" / "Qwen--Qwen3-30B-A3B.yaml").read_text(), base,
                           "acme/VL-MoE", config, published_config(corpus.root, base), corpus, set(), set())
    assert "\nmodel_type: qwen3_vl_moe\n" in text and "\nfamily: Qwen3\n" in text
    assert [line for line in todo if line.startswith("family: Qwen3 is Qwen/Qwen3-30B-A3B's (model_type qwen3_moe)")]
def test_a_multimodal_quantized_checkpoint_of_a_text_family_gets_its_type_and_its_storage():
    """Consistency of the text rewrite on Kimi-K2.5's published config (corpus/snapshots) from Kimi
    K2 Instruct's spec: the model_type becomes the config's (kimi_k25); the wrapper's keys (vision
    settings) and the generation defaults transformers 4.x wrote into its text_config are no
    to-do; the quant context comes from the text_config's quantization_config (compressed-tensors
    int4, group 32) with its ignore list, entry by entry, as BF16 module-path overrides, and the
    base's BF16 router and F32 routing bias kept."""
    from engine.language.corpus import load_corpus
    from engine.verify.evidence import registry
    from engine.verify.scaffold import published_config
    from engine.verify.scaffold_text import spec_text
    corpus = load_corpus()
    base = corpus.models["moonshotai/Kimi-K2-Instruct"]
    config = json.loads((corpus.root / "snapshots" / "moonshotai--Kimi-K2.5.config.json").read_text())
    reg = registry(corpus.root)
    text, todo = spec_text((corpus.root / "models" / "moonshotai--Kimi-K2-Instruct.yaml").read_text(), base,
                           "acme/Kimi-K2.5-copy", config, published_config(corpus.root, base), corpus,
                           reg.top_level_fields(), {p.field for p in reg.layer_plans})
    assert todo == []
    assert "\nmodel_type: kimi_k25\n" in text
    assert text.endswith("quant_context:\n  default: int4_g32_packed\n  overrides:\n    embedding: bf16\n    lm_head: bf16\n"
                         "    router: bf16\n    router.e_score_correction_bias: f32\n"
                         '    "re:.*self_attn.*": bf16\n    "re:.*shared_experts.*": bf16\n'
                         '    "re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*": bf16\n')
