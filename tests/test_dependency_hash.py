"""The models' input hash covers the versions of the libraries that compute the results
(engine/batch/dependencies.py): after a sympy/numpy/polars/pyyaml release every model is
re-evaluated, never a mix of restored results from the old version and new ones from the new.

The version lookup is monkeypatched (importlib.metadata is what reports an installed version).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.batch import dependencies, hashing, results
from engine.language.corpus import load_corpus
from tests.conftest import REPO

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"


def _with_version(monkeypatch, name: str, version: str) -> None:
    real = dependencies.metadata.version
    monkeypatch.setattr(dependencies.metadata, "version", lambda dist: version if dist == name else real(dist))
    monkeypatch.setattr(hashing, "_ENGINE_DIGEST", [])         # engine_digest() is cached per process


@pytest.mark.parametrize("library", ["sympy", "mpmath", "numpy", "polars", "pyyaml"])
def test_a_numeric_library_version_changes_every_input_hash(monkeypatch, library):
    corpus = load_corpus()
    grid, gpus = REPO / "corpus" / "grid.yaml", REPO / "gpus"
    before = results.shared_hash(corpus, grid, gpus), hashing.engine_digest()
    _with_version(monkeypatch, library, "999.0.0")
    after = results.shared_hash(corpus, grid, gpus), hashing.engine_digest()
    assert after[0] != before[0] and after[1] != before[1]
    model = "Qwen/Qwen3-8B"
    assert results.model_hash(corpus, model, after[0]) != results.model_hash(corpus, model, before[0])


def test_an_unrelated_library_does_not_change_the_hash(monkeypatch):
    """Consistency: only the listed libraries count (a new pytest does not rebuild the corpus)."""
    corpus = load_corpus()
    grid, gpus = REPO / "corpus" / "grid.yaml", REPO / "gpus"
    before = results.shared_hash(corpus, grid, gpus)
    _with_version(monkeypatch, "pytest", "999.0.0")
    assert results.shared_hash(corpus, grid, gpus) == before


def test_fingerprint_names_each_version_and_absent_libraries():
    assert dependencies.installed_version("no-such-distribution-archledger") == "absent"
    text = dependencies.fingerprint(("sympy", "no-such-distribution-archledger")).decode()
    from importlib.metadata import version
    assert text == f"sympy=={version('sympy')}\nno-such-distribution-archledger==absent\n"


def test_site_render_key_covers_the_rendering_libraries(monkeypatch):
    from site_builder import incremental
    before = incremental._code_hash("static")
    _with_version(monkeypatch, "jinja2", "999.0.0")
    assert incremental._code_hash("static") != before


def test_an_upgrade_re_evaluates_the_models_a_build_would_carry(tmp_path, monkeypatch):
    """A build after a polars upgrade recomputes the model the previous build published (without
    the upgrade the same build reuses it: the control)."""
    corpus_dir = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", corpus_dir)
    out = tmp_path / "out"
    first = results.build(load_corpus(corpus_dir), out, ["Qwen3-8B"], TINY, jobs=1)
    assert first.recomputed == ["Qwen/Qwen3-8B"]
    again = results.build(load_corpus(corpus_dir), out, ["Qwen3-8B"], TINY, jobs=1)
    assert again.reused == ["Qwen/Qwen3-8B"] and again.recomputed == []
    _with_version(monkeypatch, "polars", "999.0.0")
    upgraded = results.build(load_corpus(corpus_dir), out, ["Qwen3-8B"], TINY, jobs=1)
    assert upgraded.recomputed == ["Qwen/Qwen3-8B"] and upgraded.reused == []
