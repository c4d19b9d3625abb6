"""Verification guards: every corpus model validates clean; each guard catches its mutation.

A mutation is a deliberately broken copy of a real spec (or of its evidence) in a temp corpus.
Each must be caught by the guard responsible, with a finding that names the node, while the
real corpus passes every guard.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.language.corpus import load_corpus
from engine.verify.manifest import ManifestTensor, compress, expand_line
from engine.verify.validate import validate
from tests.conftest import MODEL_IDS, REPO

CORPUS = REPO / "corpus"


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_corpus_model_validates_clean(model_id, corpus):
    report = validate(corpus, corpus.models[model_id])
    assert report.errors == [], "\n".join(f.one_line() for f in report.errors)
    assert report.evidence_kind in ("checkpoint-headers", "modeling-code")
    statuses = {r.guard: r.status for r in report.results}
    # the seven guards, then one per published checkpoint the spec lists (checkpoints:)
    fmts = [f"checkpoint {c.format}" for c in corpus.models[model_id].checkpoints]
    assert list(statuses) == ["weight", "packing", "shape", "schedule", "structural", "axiom", "source", *fmts]
    assert "fail" not in statuses.values() and "not run" not in statuses.values()


def test_manifest_ranges_round_trip():
    tensors = [ManifestTensor(f"model.layers.{l}.mlp.experts.{e}.w1.weight", "F8_E4M3", (4, 8))
               for l in [*range(1, 30), 31] for e in range(16)]
    tensors += [ManifestTensor(f"model.layers.{l}.norm.weight", "BF16", (8,)) for l in (0, 2, 3, 4, 9)]
    lines = compress(tensors)
    assert lines == ["model.layers.{0,2..4,9}.norm.weight BF16 [8]",
                     "model.layers.{1..29,31}.mlp.experts.{0..15}.w1.weight F8_E4M3 [4, 8]"]
    back = sorted((t for line in lines for t in expand_line(line)), key=lambda t: t.name)
    assert back == sorted(tensors, key=lambda t: t.name)


# -- mutations ---------------------------------------------------------------------------------------

def mutate(tmp_path: Path, edits: list[tuple[str, str, str]], extra: dict[str, str] | None = None) -> Path:
    """A copy of the corpus with each ``old`` (occurring once) replaced, plus ``extra`` new files."""
    root = tmp_path / "corpus"
    shutil.copytree(CORPUS, root)
    for file, old, new in edits:
        path = root / file
        text = path.read_text()
        assert text.count(old) == 1, f"{file} should contain {old!r} once"
        path.write_text(text.replace(old, new))
    for file, text in (extra or {}).items():
        (root / file).parent.mkdir(parents=True, exist_ok=True)   # e.g. components/drafts/ (empty in git)
        (root / file).write_text(text)
    return root


def findings(root: Path, model: str, guard: str, severity: str = "error"):
    corpus = load_corpus(root)
    report = validate(corpus, corpus.find_model(model))
    assert not report.verified
    return [f for f in report.findings if f.guard == guard and f.severity == severity], report


GPT = "models/openai--gpt-oss-20b.yaml"
DSV3 = "models/deepseek-ai--DeepSeek-V3.yaml"
LLAMA = "models/meta-llama--Meta-Llama-3.1-8B.yaml"


def test_weight_guard_catches_a_tensor_the_spec_does_not_store(tmp_path):
    # the full-attention layers lose their o_proj bias: the checkpoint's bias is claimed by no node
    root = mutate(tmp_path, [(GPT, "o_bias: true, sinks: true, rope_theta", "o_bias: false, sinks: true, rope_theta")])
    found, _ = findings(root, "gpt-oss-20b", "weight")
    assert any(f.node == "main/layers[full]/self_attn/o_proj" and "o_proj.bias" in f.message
               and "claimed by no node" in f.message for f in found)


def test_weight_guard_catches_a_tensor_missing_from_the_checkpoint(tmp_path):
    root = mutate(tmp_path, [("snapshots/meta-llama--Meta-Llama-3.1-8B.tensors.yaml",
                              "- model.norm.weight BF16 [4096]\n", ""),
                             ("snapshots/meta-llama--Meta-Llama-3.1-8B.tensors.yaml",
                              "tensor_count: 291", "tensor_count: 290"),
                             ("snapshots/meta-llama--Meta-Llama-3.1-8B.tensors.yaml",
                              "total_bytes: 16060522496", "total_bytes: 16060514304")])
    found, _ = findings(root, "Llama-3.1-8B", "weight")
    assert [f.node for f in found if "not in the checkpoint" in f.message] == ["main/norm"]


def test_shape_guard_catches_a_wrong_width(tmp_path):
    root = mutate(tmp_path, [(LLAMA, "d_ff: config.intermediate_size", "d_ff: config.intermediate_size // 2")])
    found, _ = findings(root, "Llama-3.1-8B", "shape")
    nodes = {f.node for f in found}
    assert nodes == {"main/layers[block]/mlp/gate_proj", "main/layers[block]/mlp/up_proj",
                     "main/layers[block]/mlp/down_proj"}
    gate = next(f for f in found if f.node.endswith("gate_proj"))
    assert "[14336, 4096] in the checkpoint" in gate.message and "[7168, 4096]" in gate.message
    assert "d_ff" in gate.hint


def test_shape_guard_reports_a_spec_that_does_not_evaluate(tmp_path):
    root = mutate(tmp_path, [("components/library/swiglu_mlp.yaml", "in: \"act|act_fn\", dims: {in: d_ff,",
                              "in: \"act|act_fn\", dims: {in: hidden,")])
    found, report = findings(root, "Llama-3.1-8B", "shape")
    assert len(found) == 1 and "swiglu_mlp.yaml" in found[0].node
    assert {r.guard: r.status for r in report.results}["weight"] == "not run"


def test_packing_guard_catches_a_dtype_swap_with_equal_bytes(tmp_path):
    # MXFP4's E8M0 scales are stored as U8; calling them F8_E4M3 keeps every byte count equal
    root = mutate(tmp_path, [("quant/mxfp4.yaml", '- {key: "{weight}_scales", dtype: U8,',
                              '- {key: "{weight}_scales", dtype: F8_E4M3,')])
    found, report = findings(root, "gpt-oss-20b", "packing")
    assert [r.status for r in report.results if r.guard == "weight"] == ["pass"]   # bytes all agree
    assert {f.node for f in found} == {"main/layers[sliding]/mlp/experts/gate_up_proj",
                                        "main/layers[sliding]/mlp/experts/down_proj",
                                        "main/layers[full]/mlp/experts/gate_up_proj",
                                        "main/layers[full]/mlp/experts/down_proj"}
    assert all("stored as U8 in the checkpoint, F8_E4M3" in f.message for f in found)


def test_packing_guard_catches_an_override_that_hits_nothing(tmp_path):
    root = mutate(tmp_path, [(LLAMA, "quant_context: {default: bf16}",
                              "quant_context: {default: bf16, overrides: {router: f32}}")])
    found, _ = findings(root, "Llama-3.1-8B", "packing")
    assert len(found) == 1 and "override router: f32 stores no checkpoint tensor" in found[0].message
    assert found[0].node.startswith("corpus/models/meta-llama--Meta-Llama-3.1-8B.yaml:")


def test_schedule_guard_catches_a_layer_list_not_covered(tmp_path):
    root = mutate(tmp_path, [(DSV3, 'when: "layer < config.first_k_dense_replace"', 'when: "layer < 2"')])
    found, _ = findings(root, "DeepSeek-V3", "schedule")
    assert len(found) == 1 and found[0].node == "main/layers"
    assert "makes 58 of 61 layers MoE; the spec's schedule makes 59 (layers 2 differ)" in found[0].message


def test_schedule_guard_checks_layer_by_layer_not_just_counts(tmp_path):
    # swapping the map keeps 12 sliding and 12 full layers (and every tensor): only the order is wrong
    root = mutate(tmp_path, [(GPT, "map: {sliding_attention: sliding, full_attention: full}",
                              "map: {sliding_attention: full, full_attention: sliding}")])
    found, report = findings(root, "gpt-oss-20b", "schedule")
    assert {r.guard: r.status for r in report.results}["weight"] == "pass"
    assert len(found) == 1 and found[0].node == "main/layers"
    assert "makes 12 of 24 layers sliding-window; the spec's schedule makes 12" in found[0].message


def test_axiom_and_structural_guards_catch_a_wrong_window(tmp_path):
    root = mutate(tmp_path, [(GPT, "window: config.sliding_window", "window: config.sliding_window // 2")])
    axiom, report = findings(root, "gpt-oss-20b", "axiom")
    assert {f.node for f in axiom} == {"main/layers[sliding]/self_attn/k_cache", "main/layers[sliding]/self_attn/v_cache"}
    assert all("keeps 64 tokens, config.sliding_window = 128" in f.message for f in axiom)
    structural = [f for f in report.errors if f.guard == "structural"]
    assert [f.node for f in structural] == ["main/layers[sliding]/self_attn/scores"]
    assert "binds window = 64, but config.sliding_window = 128" in structural[0].message


def test_structural_guard_catches_a_declared_but_unused_field(tmp_path):
    # the spec still binds the dim but no rope op receives it
    root = mutate(tmp_path, [(LLAMA, "with: {rope_theta: rope_theta, rope_scaling: rope_scaling}",
                              "with: {rope_theta: rope_theta}")])
    found, _ = findings(root, "Llama-3.1-8B", "structural")
    assert len(found) == 1
    assert "config.rope_scaling.factor = 8.0" in found[0].message and "no rope op binds its 'scaling'" in found[0].message


def test_axiom_guard_catches_a_window_the_config_does_not_declare(tmp_path):
    root = mutate(tmp_path, [(LLAMA, "attention: {component: gqa_attention, with: {",
                              "attention: {component: gqa_attention, with: {mask: sliding, window: 4096, ")])
    found, _ = findings(root, "Llama-3.1-8B", "axiom")
    assert any("declares no window" in f.message and f.node.endswith("self_attn/k_cache") for f in found)



def test_axiom_guard_catches_a_compressed_cache_of_one_token_per_entry(tmp_path):
    """A compressed cache keeps one entry per `every` >= 2 tokens (every 1 is a plain cache under
    another name): DeepSeek-V4-Flash's HCA layers given every 1 (mutant compressed-every-one-allowed:
    only every 0 was caught)."""
    root = mutate(tmp_path, [("models/deepseek-ai--DeepSeek-V4-Flash.yaml", "compressed: true, every: 128}}",
                              "compressed: true, every: 1}}")])
    found, _ = findings(root, "DeepSeek-V4-Flash", "axiom")
    assert [(f.node, f.message) for f in found] == [
        ("main/layers[hca]/attn/compressed_cache", "compressed cache keeps one entry per 1 tokens")]

def test_source_guard_catches_a_bogus_anchor(tmp_path):
    root = mutate(tmp_path, [("components/library/gqa_attention.yaml", 'src: "attn_output = self.o_proj(attn_output)"',
                              'src: "attn_output = self.o_proj(attn_output) * self.scale"')])
    found, _ = findings(root, "Qwen3-8B", "source")
    assert [f.node for f in found] == ["main/layers[block]/self_attn/o_proj"]
    assert "does not occur in the forward source" in found[0].message


def test_validate_cli_exit_codes_and_json(tmp_path, capsys):
    from engine.cli import main
    assert main(["validate", "Qwen3-8B"]) == 0
    assert "Qwen/Qwen3-8B: verified against modeling code" in capsys.readouterr().out
    root = mutate(tmp_path, [(GPT, "map: {sliding_attention: sliding, full_attention: full}",
                              "map: {sliding_attention: full, full_attention: sliding}")])
    assert main(["--corpus", str(root), "validate", "gpt-oss-20b", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data[0]["verified"] is False
    errors = [f for g in data[0]["guards"] for f in g["findings"] if f["severity"] == "error"]
    assert errors and set(errors[0]) == {"guard", "severity", "node", "message", "hint"}
    assert errors[0]["guard"] == "schedule" and errors[0]["hint"]


def test_build_skips_an_unverified_spec_and_marks_the_rest_verified(tmp_path, capsys):
    import polars as pl
    from engine.cli import main
    root = mutate(tmp_path, [(GPT, "map: {sliding_attention: sliding, full_attention: full}",
                              "map: {sliding_attention: full, full_attention: sliding}")])
    out = tmp_path / "out"
    grid = REPO / "tests" / "data" / "grid_small.yaml"
    code = main(["--corpus", str(root), "build", "--out", str(out), "--quiet", "--grid", str(grid),
                 "--models", "Qwen3-8B", "gpt-oss-20b", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 0
    assert "skip openai/gpt-oss-20b: not verified (1 guard errors; run `archledger validate openai/gpt-oss-20b`)" in err
    models = pl.read_parquet(out / "results" / "models.parquet")
    assert models.select("model_id", "verified", "verified_against").rows() == [("Qwen/Qwen3-8B", True, "modeling code")]
    manifest = json.loads((out / "results" / "manifest.json").read_text())
    assert list(manifest["skipped"]) == ["openai/gpt-oss-20b"] and "[schedule]" in manifest["skipped"]["openai/gpt-oss-20b"][0]
    assert not (out / "results" / "deployments" / "model=openai--gpt-oss-20b").exists()
    document = json.loads((out / "results" / "models" / "Qwen--Qwen3-8B.json").read_text())
    assert [g["guard"] for g in document["verification"]["guards"]][0] == "weight"
    assert document["verification"]["verified"] is True


# -- hybrid stacks: linear-attention layers and their recurrent states ---------------------------

Q35 = "models/Qwen--Qwen3.5-27B.yaml"
GDN = "components/library/gated_deltanet.yaml"


def test_schedule_guard_catches_a_wrong_linear_attention_pattern(tmp_path):
    # every layer is scheduled as the template the config says, but the map is swapped: 48 full
    # attention layers and 16 linear ones (the tensors differ too; the schedule guard names the layers)
    root = mutate(tmp_path, [(Q35, "map: {linear_attention: linear, full_attention: full}",
                              "map: {linear_attention: full, full_attention: linear}")])
    found, _ = findings(root, "Qwen3.5-27B", "schedule")
    assert len(found) == 2 and all(f.node == "main/layers" for f in found)
    recurrent, attention = sorted(found, key=lambda f: "recurrent" not in f.message)
    assert ("makes 48 of 64 layers linear-attention (recurrent-state); the spec's schedule makes 16"
            in recurrent.message)
    assert "makes 16 of 64 layers attention (history-cache); the spec's schedule makes 48" in attention.message


def test_schedule_guard_knows_linear_attention_layer_by_layer(tmp_path):
    # the same counts (48 linear, 16 full) but the full layers first: only the order is wrong
    root = mutate(tmp_path, [(Q35, "schedule: {by: config.layer_types, map: {linear_attention: linear, full_attention: full}}",
                              'schedule: [{template: full, when: "layer < 16"}, {template: linear}]')])
    found, _ = findings(root, "Qwen3.5-27B", "schedule")
    assert len(found) == 2   # the recurrent layers and the attention layers, each in the wrong places
    assert any("the spec's schedule makes 48 (layers 0, 1, 2, 4, 5, 6, 8, 9 and" in f.message for f in found)
    assert any("layers attention (history-cache); the spec's schedule makes 16 (layers 0, 1, 2" in f.message for f in found)


def test_axiom_guard_catches_a_recurrent_state_left_out(tmp_path):
    root = mutate(tmp_path, [(GDN, "  - {name: recurrent_state, node: core, kind: delta_state, growth: state, dtype: f32}\n", "")])
    found, _ = findings(root, "Qwen3.5-27B", "axiom")
    assert [f.node for f in found] == ["main/layers[linear]/self_attn/core", "main/layers[linear]/self_attn/core@decode"]
    assert all("keeps a state between decode steps but no cache entry declares it" in f.message for f in found)


def test_axiom_guard_catches_a_history_declared_as_a_state(tmp_path):
    # the full-attention layers' keys declared a fixed state: their history would stop growing
    root = mutate(tmp_path, [("components/library/gated_attention.yaml",
                              "{name: key, node: k_cache, kind: kv, growth: every_token}",
                              "{name: key, node: k_cache, kind: kv, growth: state}")])
    found, _ = findings(root, "Qwen3.5-27B", "axiom")
    assert [f.node for f in found] == ["main/layers[full]/self_attn/k_cache"]
    assert "keeps a history that grows with the context" in found[0].message


def test_structural_guard_reads_a_setting_written_twice_once_and_refuses_two_values(tmp_path):
    # nvidia/Qwen3.6-27B-NVFP4's text_config carries partial_rotary_factor both at its top and in
    # rope_parameters (0.25 each); the spec reads the second, which counts for both while they are
    # equal (the corpus validates clean). Two different values are a contradiction to report.
    root = mutate(tmp_path, [("snapshots/nvidia--Qwen3.6-27B-NVFP4.yaml", "\n    partial_rotary_factor: 0.25",
                              "\n    partial_rotary_factor: 0.5")])
    found, _ = findings(root, "Qwen3.6-27B-NVFP4", "structural")
    assert len(found) == 2   # one per entry: each names the other path
    assert "config.partial_rotary_factor = 0.5 but config.rope_parameters.partial_rotary_factor = 0.25" in found[0].message
def test_structural_guard_reads_a_setting_declared_in_two_layouts_as_one(tmp_path):
    """A config may declare the RoPE base twice (transformers 4's ``rope_theta`` and 5's
    ``rope_parameters.rope_theta``: Kimi-K2.7-Code's text_config). The rope op binds one; the other
    is used when it holds the same value (Llama 3.1 8B's 500,000 written in both layouts passes,
    the registry's ``same_as``) and an error naming both when it does not (400,000 beside 500,000)."""
    snapshot = "snapshots/meta-llama--Meta-Llama-3.1-8B.yaml"
    same = mutate(tmp_path / "same", [(snapshot, "  rope_theta: 500000.0\n",
                                       "  rope_theta: 500000.0\n  rope_parameters: {rope_theta: 500000.0}\n")])
    corpus = load_corpus(same)
    report = validate(corpus, corpus.find_model("Llama-3.1-8B"))
    assert [f.one_line() for f in report.errors] == []
    assert "rope_parameters.rope_theta" in next(r.evidence for r in report.results if r.guard == "structural")
    other = mutate(tmp_path / "other", [(snapshot, "  rope_theta: 500000.0\n",
                                         "  rope_theta: 500000.0\n  rope_parameters: {rope_theta: 400000.0}\n")])
    found, _ = findings(other, "Llama-3.1-8B", "structural")
    assert len(found) >= 1 and all("config.rope_parameters.rope_theta = 400000.0" in f.message for f in found)
    # the two layouts disagree: which one the modeling code reads is not the guard's to guess
    assert "config.rope_theta = 500000.0" in found[0].message and "twice, differently" in found[0].message
