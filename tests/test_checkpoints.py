"""Several published checkpoints of one spec (``checkpoints:``, ``archledger new --checkpoint``).

End to end on the small Qwen3 of tests/data/new/ (tied embeddings): ``new`` writes it as a spec,
then ``new --checkpoint`` adds two quantized configs of it (DeepSeek-style FP8 128x128 blocks, the
quantization_config of Qwen/Qwen3-32B-FP8, and ModelOpt's FP8 per-tensor static scheme, that of
Qwen/Qwen3-32B-FP8-Static-PerTensor) to the base spec with their evidence. The expectations come
from outside the code under test: the stored bytes are derived by hand below from the dims and the
published formats (one F32 scale per 128x128 block; ModelOpt's scalar weight_scale and input_scale
per linear), the grid's rows per format from which GPUs have FP8 tensor cores (H100 and B200 do,
A100 does not: NVIDIA's datasheets). The guard tests each give one bad input and check one error
line, exit status 2 and a corpus left byte for byte as it was.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from site_builder import cli
from tests.conftest import REPO

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``): its tests spread over two
#: workers built its module fixture (two checkpoints of a tiny model) on each.
pytestmark = pytest.mark.xdist_group("checkpoints")

FIXTURE = REPO / "tests" / "data" / "new" / "tiny-qwen3.config.json"
BLOCK_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
# Qwen/Qwen3-32B-FP8-Static-PerTensor's quantization_config, as published
STATIC_FP8 = {"config_groups": {"group_0": {"input_activations": {"dynamic": False, "num_bits": 8, "type": "float"},
                                            "weights": {"dynamic": False, "num_bits": 8, "type": "float"},
                                            "targets": ["Linear"]}},
              "ignore": ["lm_head"], "quant_algo": "FP8", "kv_cache_scheme": "FP8",
              "producer": {"name": "modelopt", "version": "0.29.0"}}

# By hand, per layer of the tiny Qwen3 (hidden 64, 4 heads of 16, 2 KV heads, SwiGLU 128):
# linear weights q 64x64, k 32x64, v 32x64, o 64x64, gate and up 128x64, down 64x128
LINEARS = [64 * 64, 32 * 64, 32 * 64, 64 * 64, 128 * 64, 128 * 64, 64 * 128]
VECTORS = 16 + 16 + 64 + 64            # q_norm, k_norm, the two layer norms
EMBED, FINAL_NORM, LAYERS = 256 * 64, 64, 2
BF16_BYTES = 2 * (LAYERS * (sum(LINEARS) + VECTORS) + EMBED + FINAL_NORM)   # the head is tied: no bytes
# FP8: one byte per weight; every matrix is at most 128x128, so one F32 scale (4 bytes) each
FP8_BLOCK_BYTES = LAYERS * (sum(LINEARS) + 4 * len(LINEARS) + 2 * VECTORS) + 2 * (EMBED + FINAL_NORM)
# ModelOpt FP8 static: one byte per weight, a scalar F32 weight_scale and input_scale per linear
FP8_STATIC_BYTES = LAYERS * (sum(LINEARS) + 8 * len(LINEARS) + 2 * VECTORS) + 2 * (EMBED + FINAL_NORM)


def _run(capsys, corpus: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--corpus", str(corpus), "new", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.parent.rglob("*")) if p.is_file()}


def _config(tmp: Path, name: str, **changes) -> Path:
    config = json.loads(FIXTURE.read_text())
    config.update(changes)
    path = tmp / f"{name}.config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """A corpus copy holding acme/Tiny-Qwen3 with its FP8 and FP8-static checkpoints; the outputs."""
    pytest.importorskip("transformers")
    import contextlib
    import io
    tmp = tmp_path_factory.mktemp("checkpoints")
    corpus = tmp / "corpus"
    shutil.copytree(REPO / "corpus", corpus)
    outs = []
    runs = [("acme/Tiny-Qwen3", "--config", str(FIXTURE)),
            ("acme/Tiny-Qwen3-FP8", "--config", str(_config(tmp, "fp8", quantization_config=BLOCK_FP8)),
             "--like", "acme/Tiny-Qwen3", "--checkpoint"),
            ("acme/Tiny-Qwen3-FP8-Static", "--config", str(_config(tmp, "static", quantization_config=STATIC_FP8)),
             "--like", "acme/Tiny-Qwen3", "--checkpoint", "--format", "fp8-static")]
    for args in runs:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--corpus", str(corpus), "new", *args])
        outs.append((code, out.getvalue(), err.getvalue()))
    return corpus, outs


def test_a_quantized_config_of_a_corpus_model_becomes_its_checkpoint_with_evidence(two_checkpoints):
    from engine.language.api import evaluate_spec
    from engine.language.corpus import load_corpus
    from engine.verify.validate import validate
    corpus, outs = two_checkpoints
    for code, out, err in outs:
        assert code == 0, out + err
    assert "verified as a checkpoint of acme/Tiny-Qwen3, with no hand edit" in outs[1][1]
    assert not (corpus / "models" / "acme--Tiny-Qwen3-FP8.yaml").exists()     # no spec of its own
    spec = (corpus / "models" / "acme--Tiny-Qwen3.yaml").read_text()
    assert ("checkpoints:\n  - model: acme/Tiny-Qwen3-FP8\n    format: fp8\n    quant_context:\n"
            "      default: fp8_block128\n") in spec
    assert "  - model: acme/Tiny-Qwen3-FP8-Static\n    format: fp8-static\n" in spec
    snapshots = corpus / "snapshots"
    raw = (snapshots / "acme--Tiny-Qwen3-FP8.config.json").read_bytes()
    assert json.loads(raw)["quantization_config"] == BLOCK_FP8
    assert f"`{hashlib.sha256(raw).hexdigest()}`" in (snapshots / "README.md").read_text()
    tensors = (snapshots / "acme--Tiny-Qwen3-FP8.tensors.yaml").read_text()
    assert "q_proj.weight F8_E4M3 [64, 64]" in tensors and "q_proj.weight_scale_inv F32 [1, 1]" in tensors
    static = (snapshots / "acme--Tiny-Qwen3-FP8-Static.tensors.yaml").read_text()
    assert "q_proj.input_scale F32 []" in static
    loaded = load_corpus(corpus)
    model = loaded.models["acme/Tiny-Qwen3"]
    report = validate(loaded, model)
    assert report.verified, [f.one_line() for f in report.errors]
    guards = {r.guard: r.status for r in report.results}
    assert guards["checkpoint fp8"] == guards["checkpoint fp8-static"] == "pass"
    formats = {f["format"]: (f["model_id"], int(f["bytes"].value)) for f in evaluate_spec(loaded, model).weight_formats()}
    assert formats == {"checkpoint": ("acme/Tiny-Qwen3", BF16_BYTES), "fp8": ("acme/Tiny-Qwen3-FP8", FP8_BLOCK_BYTES),
                       "fp8-static": ("acme/Tiny-Qwen3-FP8-Static", FP8_STATIC_BYTES)}


def test_the_grid_has_rows_for_each_checkpoint_where_its_format_is_native(two_checkpoints, tmp_path):
    import polars as pl
    from engine.batch import grid_eval
    from engine.language.api import evaluate_spec
    from engine.language.corpus import load_corpus
    corpus, _ = two_checkpoints
    import yaml
    grid = yaml.safe_load((REPO / "corpus" / "grid.yaml").read_text())
    grid.update(gpus=["A100", "H100", "B200"], gpu_counts=[1, 2], frameworks=["vllm"], kv_dtypes=["bf16"])
    grid["scenarios"].update(input_lengths=[1024], batches=[1])
    grid["checkpoints"] = {"gpus": ["A100", "H100", "B200"], "frameworks": ["vllm"], "kv_dtypes": ["bf16"]}
    grid.pop("sizing", None)
    small = tmp_path / "grid.yaml"
    small.write_text(yaml.safe_dump(grid))
    loaded = load_corpus(corpus)
    ev = evaluate_spec(loaded, loaded.models["acme/Tiny-Qwen3"])
    deployments, _, _ = grid_eval.evaluate_model(ev, small)
    rows = pl.DataFrame({k: deployments[k] for k in ("gpu", "weight_format", "tp", "weight_bytes_per_gpu")})
    where = {f: sorted(set(rows.filter(pl.col("weight_format") == f)["gpu"])) for f in set(rows["weight_format"])}
    # the spec's own storage on every GPU; FP8 checkpoints only where FP8 tensor cores exist (not A100)
    assert where == {"checkpoint": ["A100", "B200", "H100"], "fp8": ["B200", "H100"], "fp8-static": ["B200", "H100"]}
    one = rows.filter(pl.col("tp") == 1)
    # weights per GPU at TP 1: the stored bytes, plus the tied head's 256x64 GEMM operand, which the
    # deploy memory counts as a matrix of its own in the format's scheme (as it does for every spec:
    # the deploy rows do not read `shares:`); FP8 block: one byte each and 2 scales (256 rows / 128)
    head = {"checkpoint": 2 * 256 * 64, "fp8": 256 * 64 + 2 * 4, "fp8-static": 256 * 64 + 4 + 4}
    stored = {"checkpoint": BF16_BYTES, "fp8": FP8_BLOCK_BYTES, "fp8-static": FP8_STATIC_BYTES}
    for fmt in stored:
        assert set(one.filter(pl.col("weight_format") == fmt)["weight_bytes_per_gpu"]) == {stored[fmt] + head[fmt]}, fmt

def test_a_checkpoint_of_other_dims_is_refused_in_one_line(two_checkpoints, capsys, tmp_path):
    corpus, _ = two_checkpoints
    before = _tree(corpus)
    wider = _config(tmp_path, "wider", intermediate_size=256, quantization_config=BLOCK_FP8)
    code, out, err = _run(capsys, corpus, "acme/Tiny-Qwen3-Wide-FP8", "--config", str(wider),
                          "--like", "acme/Tiny-Qwen3", "--checkpoint")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not acme/Tiny-Qwen3's architecture" in lines[0] and "intermediate_size: 128 -> 256" in lines[0]
    assert _tree(corpus) == before


def test_a_spec_whose_checkpoint_config_differs_fails_validation_in_one_line(two_checkpoints, tmp_path):
    """The guard in validate: a checkpoint snapshot edited to another layer count is no longer the
    spec's architecture."""
    from engine.language.corpus import load_corpus
    from engine.verify.validate import validate
    corpus, _ = two_checkpoints
    copy = tmp_path / "corpus"
    shutil.copytree(corpus, copy)
    snap = copy / "snapshots" / "acme--Tiny-Qwen3-FP8.yaml"
    snap.write_text(snap.read_text().replace("num_hidden_layers: 2", "num_hidden_layers: 3"))
    loaded = load_corpus(copy)
    report = validate(loaded, loaded.models["acme/Tiny-Qwen3"])
    errors = [f.one_line() for f in report.errors]
    assert len(errors) == 1 and "[checkpoint fp8]" in errors[0] and "num_hidden_layers: 2 -> 3" in errors[0], errors


@pytest.mark.parametrize("entry,expected", [
    ("  - {model: acme/X-FP8, format: FP8, quant_context: {default: fp8_block128}}", "is not a weight-format name"),
    ("  - {model: acme/X-FP8, format: checkpoint, quant_context: {default: fp8_block128}}", "is not a weight-format name"),
    ("  - {model: acme/X-FP8, format: fp8, quant_context: {default: int3}}", "unknown quant scheme 'int3'"),
])
def test_a_bad_checkpoints_entry_is_one_line_naming_its_field(entry, expected, tmp_path):
    from engine.language.corpus import load_corpus
    from engine.language.errors import SpecError
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus, ignore=shutil.ignore_patterns("models"))
    (corpus / "models").mkdir()
    shutil.copy(REPO / "corpus" / "models" / "Qwen--Qwen3-8B.yaml", corpus / "models")
    spec = corpus / "models" / "Qwen--Qwen3-8B.yaml"
    spec.write_text(spec.read_text() + "checkpoints:\n" + entry + "\n")
    with pytest.raises(SpecError) as err:
        load_corpus(corpus, missing_snapshots_ok=True)
    line = err.value.one_line()
    assert expected in line and "Qwen--Qwen3-8B.yaml" in line and "checkpoints.0" in line and "\n" not in line


def _corpus_checkpoints() -> list[tuple[str, str]]:
    import yaml
    out = []
    for path in sorted((REPO / "corpus" / "models").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        out += [(data["model"], c["model"]) for c in data.get("checkpoints") or []]
    return out


@pytest.mark.parametrize("base,checkpoint", _corpus_checkpoints())
def test_each_corpus_checkpoint_snapshot_equals_its_published_config(base, checkpoint):
    """Each checkpoint's recorded fields are its own published config.json's (the file whose
    sha256 corpus/snapshots/README.md pins; tests/test_published_configs.py checks the hash), and
    its manifest was recorded from that config with its quantization."""
    import yaml
    from tests.test_published_configs import _agrees
    name = checkpoint.replace("/", "--")
    snapshots = REPO / "corpus" / "snapshots"
    config = json.loads((snapshots / f"{name}.config.json").read_text())
    snapshot = yaml.safe_load((snapshots / f"{name}.yaml").read_text())
    assert snapshot["source"] == f"hf:{checkpoint} config.json"
    wrong = {k: v for k, v in snapshot["fields"].items()
             if not _agrees(v, config.get(k, "<absent>"), {**config.get("text_config", {}), **config})}
    assert not wrong, wrong
    manifest = yaml.safe_load((snapshots / f"{name}.tensors.yaml").read_text())
    assert manifest["source"] == f"hf:{checkpoint}" and manifest["provenance"]["quantization"] != "none"


def test_show_and_deploy_take_a_published_checkpoint_by_format_or_id(capsys):
    """``--weight-format fp8`` (or the checkpoint's id) prices Qwen3-32B as Qwen/Qwen3-32B-FP8 is
    stored: its bytes are the total of that checkpoint's tensor manifest (recorded from transformers'
    model with its FP8 quantizer, corpus/snapshots/Qwen--Qwen3-32B-FP8.tensors.yaml)."""
    import yaml
    manifest = yaml.safe_load((REPO / "corpus" / "snapshots" / "Qwen--Qwen3-32B-FP8.tensors.yaml").read_text())
    for name in ("fp8", "Qwen/Qwen3-32B-FP8"):
        assert cli.main(["show", "Qwen/Qwen3-32B", "--weight-format", name, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["model_id"] == "Qwen/Qwen3-32B-FP8"
        assert shown["checkpoint_bytes"]["value"] == manifest["total_bytes"]
        assert {f["format"]: f["bytes"] for f in shown["weight_formats"]}["fp8"] == manifest["total_bytes"]
    assert cli.main(["deploy", "Qwen/Qwen3-32B", "--gpu", "H100", "--weight-format", "fp8", "--input", "1024",
                     "--output", "128", "--batch", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["deployment"]
    assert row["weight_format"] == "fp8"
    # main stack only (no extra stacks in Qwen3-32B); every weight on the one GPU
    assert row["weight_bytes_per_gpu"] == manifest["total_bytes"]
    code = cli.main(["deploy", "Qwen/Qwen3-32B", "--gpu", "H100", "--weight-format", "fp4", "--input", "1024",
                     "--output", "128", "--batch", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "unknown weight format 'fp4'" in err[0] and "checkpoint, fp8, fp8-static" in err[0]


def test_a_checkpoints_evidence_is_part_of_its_models_build_hash(two_checkpoints, tmp_path):
    """A re-recorded checkpoint manifest rebuilds (and re-validates) the model it belongs to."""
    from engine.batch.hashing import model_hash
    from engine.language.corpus import load_corpus
    SHARED_HASH = "0" * 64       # any fixed shared-inputs hash: only the checkpoint's evidence changes
    corpus, _ = two_checkpoints
    copy = tmp_path / "corpus"
    shutil.copytree(corpus, copy)
    before = model_hash(load_corpus(copy), "acme/Tiny-Qwen3", SHARED_HASH)
    manifest = copy / "snapshots" / "acme--Tiny-Qwen3-FP8.tensors.yaml"
    manifest.write_text(manifest.read_text() + "# re-recorded\n")
    assert model_hash(load_corpus(copy), "acme/Tiny-Qwen3", SHARED_HASH) != before


def test_glm5_fp8_checkpoint_layout_by_hand():
    """zai-org/GLM-5-FP8 as a weight format of GLM-5, from its published quantization_config
    (quant_method fp8, weight_block_size [128, 128], modules_to_not_convert; corpus/snapshots/
    zai-org--GLM-5-FP8.config.json): the MLA projections F8_E4M3 with F32 inverse scales per
    128 x 128 block; the router BF16 with its F32 correction bias (DeepSeek's storage); the
    indexer's weights_proj BF16 (transformers keeps it: _keep_in_fp32_modules, no FP8); embedding
    and head BF16. Shapes from the published config: hidden 6144, q_lora_rank 2048."""
    from engine.language import checkpoints, storage
    from engine.language.api import evaluate_spec
    from engine.language.corpus import load_corpus
    corpus = load_corpus(REPO / "corpus")
    base = corpus.models["zai-org/GLM-5"]
    model = checkpoints.variant(base, checkpoints.find(base, "zai-org/GLM-5-FP8"))
    config = json.loads((REPO / "corpus" / "snapshots" / "zai-org--GLM-5-FP8.config.json").read_text())
    assert (config["hidden_size"], config["q_lora_rank"]) == (6144, 2048)
    assert config["quantization_config"]["weight_block_size"] == [128, 128]
    ev = evaluate_spec(corpus, model)
    by_key = {t.key: t for t in storage.checkpoint_tensors(ev.numeric, model, corpus)}
    q_a = "model.layers.{layer}.self_attn.q_a_proj.weight"
    assert (by_key[q_a].dtype, by_key[q_a].shape) == ("F8_E4M3", (2048, 6144))
    assert (by_key[q_a + "_scale_inv"].dtype, by_key[q_a + "_scale_inv"].shape) == ("F32", (16, 48))
    assert by_key["model.layers.{layer}.mlp.gate.weight"].dtype == "BF16"
    assert by_key["model.layers.{layer}.mlp.gate.e_score_correction_bias"].dtype == "F32"
    assert by_key["model.layers.{layer}.self_attn.indexer.weights_proj.weight"].dtype == "BF16"
    assert by_key["model.embed_tokens.weight"].dtype == by_key["lm_head.weight"].dtype == "BF16"
