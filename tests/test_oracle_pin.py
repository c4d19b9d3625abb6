"""The pinned oracle: modeling-code evidence names the transformers release and the hash of the
modeling source it was recorded from, the corpus pins one release, the source guard refuses
evidence of another, and one command re-records every model and says what changed.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from engine.cli import main
from engine.language.corpus import load_corpus
from engine.verify import evidence
from engine.verify.validate import validate
from engine.language.yamlio import load_yaml
from tests.conftest import REPO

SNAPSHOTS = REPO / "corpus" / "snapshots"
PIN = evidence.registry(REPO / "corpus").oracle
SOURCES = sorted(SNAPSHOTS.glob("*.source.yaml"))


def test_the_oracle_extra_pins_the_registry_release():
    """pyproject.toml's `oracle` extra installs exactly the release the corpus evidence is pinned to."""
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["oracle"]
    assert PIN == "5.25.0"
    assert [d for d in extra if d.startswith("transformers")] == [f"transformers=={PIN}"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name.removesuffix(".source.yaml"))
def test_evidence_names_the_pinned_release_and_the_source_hash(path):
    data = load_yaml(path, path.name)
    provenance = data["provenance"]
    if provenance.get("kind") != "modeling-code":
        pytest.skip("not from the transformers modeling code")
    assert provenance["transformers"] == PIN
    assert re.fullmatch(r"[0-9a-f]{64}", provenance["sha256"])
    manifest = load_yaml(path.with_name(path.name.replace(".source.", ".tensors.")), path.name)
    assert manifest["provenance"]["tool"] == f"transformers {PIN}"
    assert manifest["provenance"]["source_sha256"] == provenance["sha256"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name.removesuffix(".source.yaml"))
def test_recorded_source_is_the_pinned_release_file(path):
    """With the pinned release installed, each recorded hash is the installed file's and the
    recorded forward methods are its forward methods: the evidence can be reproduced."""
    transformers = pytest.importorskip("transformers", reason="pip install -e '.[oracle]'")
    if transformers.__version__ != PIN:
        pytest.skip(f"transformers {transformers.__version__} installed, the corpus pins {PIN}")
    data = load_yaml(path, path.name)
    if data["provenance"].get("kind") != "modeling-code":
        pytest.skip("not from the transformers modeling code")
    rel = data["provenance"]["file"].split(" ", 2)[2]          # "transformers 5.25.0 transformers/models/..."
    text = (Path(transformers.__file__).parent.parent / rel).read_text(encoding="utf-8")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == data["provenance"]["sha256"]
    fresh = evidence.forward_excerpts(text)
    assert {k: " ".join(v.split()) for k, v in fresh.items()} == \
        {k: " ".join(v.split()) for k, v in data["excerpts"].items()}


# -- the source guard against another release ------------------------------------------------------

def _copy(tmp_path: Path, keep: tuple[str, ...] = ()) -> Path:
    """The corpus (and pyproject.toml beside it); with ``keep``, only those models and no variants."""
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    shutil.copy(REPO / "pyproject.toml", root.parent / "pyproject.toml")
    if keep:
        for spec in (root / "models").glob("*.yaml"):
            if spec.stem not in keep:
                spec.unlink()
        shutil.rmtree(root / "variants")
        (root / "variants").mkdir()
    return root


def _source_errors(root: Path, model: str) -> list[str]:
    evidence.clear_registry()
    corpus = load_corpus(root)
    report = validate(corpus, corpus.find_model(model))
    evidence.clear_registry()
    return [f.message for f in report.errors if f.guard == "source"]


def test_source_guard_refuses_evidence_of_another_release(tmp_path):
    root = _copy(tmp_path)
    path = root / "verification.yaml"
    path.write_text(path.read_text().replace(f'oracle: {{transformers: "{PIN}"}}', 'oracle: {transformers: "9.9.9"}'))
    assert _source_errors(root, "Qwen3-8B") == [
        f"the source snapshot was recorded with transformers {PIN}; the corpus pins 9.9.9 (corpus/verification.yaml oracle)",
        f"the tensor manifest was recorded with transformers {PIN}; the corpus pins 9.9.9 (corpus/verification.yaml oracle)"]


def test_source_guard_refuses_a_source_without_hash_or_from_another_file(tmp_path):
    root = _copy(tmp_path)
    source = root / "snapshots" / "Qwen--Qwen3-8B.source.yaml"
    text = source.read_text()
    digest = re.search(r"sha256: ([0-9a-f]{64})", text)[1]
    source.write_text(text.replace(f"  sha256: {digest}\n", ""))
    assert _source_errors(root, "Qwen3-8B") == ["the source snapshot records no sha256 of the modeling file"]
    root = _copy(tmp_path / "second")   # a fresh copy: evidence files are memoized by path, size and mtime
    source = root / "snapshots" / "Qwen--Qwen3-8B.source.yaml"
    source.write_text(text.replace(digest, "f" * 64))
    assert _source_errors(root, "Qwen3-8B") == [
        f"the tensor manifest was built from another modeling source (sha256 {digest[:12]}) than the "
        f"recorded one ({'f' * 12})"]


# -- the bump: one command --------------------------------------------------------------------------

def test_snapshot_all_bumps_the_pin_and_shows_what_changed(tmp_path, capsys):
    """`snapshot --all --meta` with another release installed than the pin: refused without
    --force (nothing written); with --force every modeling-code model is re-recorded, the pin moves
    in corpus/verification.yaml and pyproject.toml, and a model whose evidence differs says how."""
    transformers = pytest.importorskip("transformers", reason="pip install -e '.[oracle]'")
    pytest.importorskip("torch", reason="pip install -e '.[oracle]'")
    installed = transformers.__version__
    root = _copy(tmp_path, keep=("Qwen--Qwen3-8B", "meta-llama--Meta-Llama-3.1-8B"))
    registry_file, project = root / "verification.yaml", tmp_path / "pyproject.toml"
    registry_file.write_text(registry_file.read_text().replace(f'"{PIN}"', '"0.0.1"'))
    project.write_text(project.read_text().replace(f"transformers=={PIN}", "transformers==0.0.1"))
    manifest = root / "snapshots" / "Qwen--Qwen3-8B.tensors.yaml"
    line = "- model.norm.weight BF16 [4096]"
    assert line in manifest.read_text()
    manifest.write_text(manifest.read_text().replace(line, "- model.norm.weight F32 [4096]"))
    before = {p: p.read_bytes() for p in (root / "snapshots").iterdir()}
    evidence.clear_registry()
    run = ["--corpus", str(root), "snapshot", "--all", "--meta"]
    capsys.readouterr()
    assert main(run) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pins transformers 0.0.1" in err and "--force" in err and "nothing was written" in err
    assert {p: p.read_bytes() for p in (root / "snapshots").iterdir()} == before
    assert main([*run, "--force"]) == 0
    out = capsys.readouterr().out
    evidence.clear_registry()
    assert f'oracle: {{transformers: "{installed}"}}' in registry_file.read_text()
    assert f'"transformers=={installed}"' in project.read_text()
    assert f"re-recorded 2 models with transformers {installed} (pin moved from 0.0.1" in out
    assert ("Qwen/Qwen3-8B: tensors changed: 1 (first model.norm.weight: F32 [4096] -> BF16 [4096])"
            in out)
    assert "meta-llama/Meta-Llama-3.1-8B: unchanged" in out
    assert "2 models: 2 verified, 0 with errors" in out
    assert line in manifest.read_text()
    for name in ("Qwen--Qwen3-8B", "meta-llama--Meta-Llama-3.1-8B"):   # the rest is as committed
        for suffix in (".tensors.yaml", ".source.yaml", ".yaml"):
            assert (root / "snapshots" / (name + suffix)).read_bytes() == (SNAPSHOTS / (name + suffix)).read_bytes()
