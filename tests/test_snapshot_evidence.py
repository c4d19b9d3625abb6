"""`archledger snapshot` from a local checkpoint and from a Hub on 127.0.0.1, then `validate`.

The checkpoint is real (safetensors files written by the safetensors package, sharded with an
index for the Hub case); its tensor names and shapes are written here from the Llama
architecture, independently of the spec, and the corpus' Llama-3.1 spec is pointed at a tiny
config. The forward source comes from transformers (the ``oracle`` extra).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.cli import main
from engine.language.corpus import load_corpus
from engine.verify.manifest import load as load_manifest
from engine.verify.validate import validate
from tests.conftest import REPO
from tests.hub_server import confine_huggingface_hub, serve_hub, write_checkpoint

#: the forward source comes from transformers (the oracle extra): checked when the tests run, not at
#: collection (conftest.oracle_installed)
pytestmark = pytest.mark.usefixtures("oracle_installed")

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "intermediate_size": 160, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 256, "max_position_embeddings": 2048,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}}


def llama_tensors(cfg: dict) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A Llama checkpoint's tensors, from the architecture (HF LlamaForCausalLM naming)."""
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = h // heads
    out = {"model.embed_tokens.weight": ("BF16", (v, h)), "model.norm.weight": ("BF16", (h,)),
           "lm_head.weight": ("BF16", (v, h))}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": ("BF16", (h,)), p + "post_attention_layernorm.weight": ("BF16", (h,)),
                    p + "self_attn.q_proj.weight": ("BF16", (heads * d, h)),
                    p + "self_attn.k_proj.weight": ("BF16", (kv * d, h)),
                    p + "self_attn.v_proj.weight": ("BF16", (kv * d, h)),
                    p + "self_attn.o_proj.weight": ("BF16", (h, heads * d)),
                    p + "mlp.gate_proj.weight": ("BF16", (f, h)), p + "mlp.up_proj.weight": ("BF16", (f, h)),
                    p + "mlp.down_proj.weight": ("BF16", (h, f))})
    return out


@pytest.fixture
def tiny_corpus(tmp_path) -> Path:
    """The real corpus plus `test/tiny-llama`: the Llama-3.1 spec, no snapshot yet."""
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    spec = (root / "models" / "meta-llama--Meta-Llama-3.1-8B.yaml").read_text()
    spec = spec.replace("model: meta-llama/Meta-Llama-3.1-8B", "model: test/tiny-llama")
    (root / "models" / "test--tiny-llama.yaml").write_text(spec)
    return root


def checkpoint(folder: Path, tensors: dict, shards: int = 1) -> Path:
    write_checkpoint(folder, tensors, shards=shards)
    (folder / "config.json").write_text(json.dumps(TINY))
    return folder


def test_local_checkpoint_snapshot_validates_against_the_matching_spec(tiny_corpus, tmp_path):
    folder = checkpoint(tmp_path / "ckpt", llama_tensors(TINY))
    assert main(["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--checkpoint", str(folder)]) == 0
    manifest = load_manifest(tiny_corpus / "snapshots" / "test--tiny-llama.tensors.yaml")
    assert manifest.provenance["kind"] == "checkpoint-headers"
    assert manifest.provenance["location"] == f"dir:{folder}"
    assert len(manifest.tensors) == 3 + 9 * 2
    data_bytes = (folder / "model.safetensors").stat().st_size
    header = int.from_bytes((folder / "model.safetensors").read_bytes()[:8], "little")
    assert manifest.total_bytes == data_bytes - 8 - header
    corpus = load_corpus(tiny_corpus)
    report = validate(corpus, corpus.models["test/tiny-llama"])
    assert report.verified, "\n".join(f.one_line() for f in report.errors)
    assert report.evidence_label == "checkpoint headers"
    assert {r.guard: r.status for r in report.results}["weight"] == "pass"


def test_local_checkpoint_missing_a_tensor_fails_the_weight_guard(tiny_corpus, tmp_path):
    tensors = llama_tensors(TINY)
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    folder = checkpoint(tmp_path / "ckpt", tensors)
    assert main(["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--checkpoint", str(folder)]) == 0
    assert main(["--corpus", str(tiny_corpus), "validate", "test/tiny-llama"]) == 1
    corpus = load_corpus(tiny_corpus)
    errors = validate(corpus, corpus.models["test/tiny-llama"]).errors
    assert [(f.guard, f.node) for f in errors if "not in the checkpoint" in f.message] == \
        [("weight", "main/layers[block]/self_attn/k_proj")]


def test_hub_snapshot_of_a_sharded_checkpoint(tiny_corpus, tmp_path, monkeypatch):
    confine_huggingface_hub(tmp_path, monkeypatch)
    repos = tmp_path / "repos"
    checkpoint(repos / "test" / "tiny-llama", llama_tensors(TINY), shards=3)
    with serve_hub(repos) as hub:
        assert main(["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--endpoint", hub.endpoint]) == 0
        commit = hub.commit("test/tiny-llama")
        paths = [r.path for r in hub.requests]
    assert any("model.safetensors.index.json" in p for p in paths)
    manifest = load_manifest(tiny_corpus / "snapshots" / "test--tiny-llama.tensors.yaml")
    assert manifest.provenance == {"kind": "checkpoint-headers", "location": f"hub:test/tiny-llama@{commit}",
                                   "files": 3}
    config = (tiny_corpus / "snapshots" / "test--tiny-llama.yaml").read_text()
    assert f"hub:test/tiny-llama@{commit} config.json" in config and "rope_theta: 10000.0" in config
    corpus = load_corpus(tiny_corpus)
    report = validate(corpus, corpus.models["test/tiny-llama"])
    assert report.verified, "\n".join(f.one_line() for f in report.errors)
    assert report.evidence_label == "checkpoint headers"


def test_meta_snapshot_reproduces_the_committed_manifest(tmp_path):
    """The corpus' modeling-code manifests are what `snapshot --meta` writes today."""
    from engine.verify.modeling_code import meta_manifest
    from tests.conftest import hf_config_path
    corpus = load_corpus()
    for model_id in ("meta-llama/Meta-Llama-3.1-8B", "openai/gpt-oss-20b", "deepseek-ai/DeepSeek-V4-Flash"):
        config = json.loads(hf_config_path(model_id).read_text())
        fresh = meta_manifest(config, corpus.schemes, f"hf:{model_id}")
        stored = load_manifest(REPO / "corpus" / "snapshots" / (model_id.replace("/", "--") + ".tensors.yaml"))
        assert fresh.tensors == stored.tensors and fresh.total_bytes == stored.total_bytes


def test_multimodal_prefixes_are_canonicalised_and_vision_tensors_warned(tiny_corpus, tmp_path):
    """A VLM-style checkpoint nests the language model and adds a vision tower."""
    tensors = {name.replace("model.", "model.language_model.", 1): v for name, v in llama_tensors(TINY).items()}
    tensors["model.visual.patch_embed.proj.weight"] = ("BF16", (64, 3, 2, 16, 16))
    folder = checkpoint(tmp_path / "ckpt", tensors)
    assert main(["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--checkpoint", str(folder)]) == 0
    corpus = load_corpus(tiny_corpus)
    report = validate(corpus, corpus.models["test/tiny-llama"])
    assert report.verified, "\n".join(f.one_line() for f in report.errors)
    warnings = [f for f in report.findings if f.severity == "warning"]
    assert [(f.guard, "model.visual.patch_embed.proj.weight" in f.message) for f in warnings] == [("weight", True)]


def test_meta_rerun_with_another_transformers_refuses_without_force(tiny_corpus, tmp_path, capsys):
    """Re-running `snapshot --meta` must not silently rewrite reviewed evidence with whatever
    transformers is installed: evidence recorded with another release is refused in one line
    naming each file and both releases, nothing written; --force re-records it; the same release
    re-records without asking."""
    import transformers
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    run = ["--corpus", str(tiny_corpus), "snapshot", "test/tiny-llama", "--config", str(config), "--meta"]
    snapshots = tiny_corpus / "snapshots"
    files = [snapshots / "test--tiny-llama.tensors.yaml", snapshots / "test--tiny-llama.source.yaml"]
    assert main(run) == 0                                           # first record: nothing to compare with
    installed = transformers.__version__
    assert all(f"transformers {installed}" in f.read_text() for f in files)
    assert main(run) == 0                                           # same release: no question asked
    for f in files:                                                 # as if recorded with an older release
        f.write_text(f.read_text().replace(f"transformers {installed}", "transformers 0.0.1")
                     .replace(f"transformers: {installed}", "transformers: 0.0.1"))
    before = {f: f.read_bytes() for f in files}
    capsys.readouterr()
    assert main(run) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--force" in err and "nothing was written" in err
    for f in files:
        assert f"corpus/snapshots/{f.name}: recorded with transformers 0.0.1, this run has {installed}" in err
    assert {f: f.read_bytes() for f in files} == before
    assert main([*run, "--force"]) == 0
    assert all(f"transformers {installed}" in f.read_text() and "0.0.1" not in f.read_text() for f in files)
