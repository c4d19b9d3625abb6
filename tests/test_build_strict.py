"""`archledger build --strict` (what CI and the deploy run): a spec that fails its verification
guards fails the build, one line naming each such spec, exit 2 and nothing published; without
--strict the spec is skipped (the local default) and the build exits 0.

The broken spec is made the way a merge breaks one: its recorded config says an MLP width the
checkpoint's tensors do not have (Llama-3.1-8B's published intermediate_size is 14336; 14000 is
not), so the weight guard finds every MLP tensor's shape wrong.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.cli import main
from tests.conftest import REPO

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
LLAMA, QWEN = "meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-8B"


@pytest.fixture
def corpus_dir(tmp_path) -> Path:
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    return root


def _build(corpus_dir: Path, out: Path, *extra: str) -> int:
    return main(["--corpus", str(corpus_dir), "build", "--out", str(out), "--grid", str(TINY), "--no-site",
                 "--quiet", "--jobs", "1", "--models", "Qwen3-8B", "Llama-3.1-8B", *extra])


def _break_llama(corpus_dir: Path) -> None:
    snap = corpus_dir / "snapshots" / "meta-llama--Meta-Llama-3.1-8B.yaml"
    text = snap.read_text()
    assert "intermediate_size: 14336" in text
    snap.write_text(text.replace("intermediate_size: 14336", "intermediate_size: 14000"))


def test_strict_build_fails_on_a_spec_that_fails_its_guards(corpus_dir, tmp_path, capsys):
    _break_llama(corpus_dir)
    out = tmp_path / "out"
    assert _build(corpus_dir, out, "--strict") == 2
    err = capsys.readouterr().err.strip().splitlines()
    # one line for the failing spec (naming it and its first guard error), then the error line
    unverified = [line for line in err if line.startswith("unverified ")]
    assert len(unverified) == 1 and unverified[0].startswith(f"unverified {LLAMA}: ")
    # the first guard error: gate_proj's spec size is hidden x the broken width, 4096 x 14000
    assert "[weight]" in unverified[0] and "mlp/gate_proj" in unverified[0] and "57,344,000 elements" in unverified[0]
    assert err[-1].startswith("error: --strict: 1 spec(s) failed their guards") and LLAMA in err[-1]
    assert QWEN not in err[-1]                                 # the healthy spec is not blamed
    assert not any(line.startswith("skip ") for line in err)   # not "skipped": refused
    assert not (out / "results").exists()                      # nothing published

    # the local default: the spec is skipped with one line, the healthy model is published
    assert _build(corpus_dir, out) == 0
    err = capsys.readouterr().err
    assert f"skip {LLAMA}: not verified" in err
    import polars as pl
    assert pl.read_parquet(out / "results" / "models.parquet")["model_id"].to_list() == [QWEN]

    # a later strict subset build that does not name the broken spec still refuses: the skipped
    # verdict the results carry would still leave the model out of the deploy
    assert main(["--corpus", str(corpus_dir), "build", "--out", str(out), "--grid", str(TINY), "--no-site",
                 "--quiet", "--jobs", "1", "--models", "Qwen3-8B", "--strict"]) == 2
    assert LLAMA in capsys.readouterr().err.strip().splitlines()[-1]


def test_strict_build_of_a_healthy_corpus_exits_0(corpus_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert _build(corpus_dir, out, "--strict") == 0
    captured = capsys.readouterr()
    assert "unverified" not in captured.err and "error" not in captured.err
    import polars as pl
    assert sorted(pl.read_parquet(out / "results" / "models.parquet")["model_id"]) == sorted([LLAMA, QWEN])
