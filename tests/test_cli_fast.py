"""``archledger --help`` answers without the evaluation's libraries (issue 42: <= 0.15 s wall).

A fact, not a timing: the modules a fresh interpreter imports to print the help, read from
``python -X importtime`` (one line per module the process imported, on stderr). sympy alone cost
about 0.3 s of the 0.56 s the help took; polars, numpy and altair are as heavy. The commands import
them where they run (engine/cli/*.py); the parser and its help need none of them.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

#: Top-level packages the help must not import (the evaluation, the tables, the charts, kernelbench's torch).
HEAVY = {"sympy", "mpmath", "polars", "numpy", "altair", "pyarrow", "yaml", "jinja2", "torch"}


def _imported(*argv: str) -> tuple[str, set[str]]:
    """The help text and every module name ``python -m site_builder.cli ARGV`` imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "site_builder.cli", *argv], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    names = {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|(.+)$", done.stderr, re.M)}
    return done.stdout, names


@pytest.mark.parametrize("argv", [("--help",), ("deploy", "--help"), ("edit", "--help"), ("show", "--help"),
                                  ("kernelbench", "--help")])
def test_help_imports_no_evaluation_library(argv):
    text, names = _imported(*argv)
    assert text.startswith("usage: archledger")
    # the whole parser was built: every command module is imported (so the check covers their tops)
    assert {"engine.cli.show", "engine.cli.edit", "engine.cli.deploy", "engine.cli.plan", "engine.cli.kernelbench"} <= names
    assert {n.split(".")[0] for n in names} & HEAVY == set()
    # nor the spec language or the build (the help never evaluates or publishes)
    assert not {n for n in names if n.startswith(("engine.language.corpus", "engine.language.model_load",
                                                   "engine.language.graph_load", "engine.language.expr",
                                                   "engine.batch.results", "engine.batch.model_build", "engine.batch.tasks",
                                                   "engine.batch.publish"))}


def test_the_check_sees_an_import_when_there_is_one():
    """The same reading of ``-X importtime`` finds sympy where a command does import it: ``show``
    evaluates a model (so the help's empty answer above is not an artefact of the parsing)."""
    _, names = _imported("show", "Qwen3-8B", "--json")
    assert "sympy" in names and "engine.language.corpus" in names


# -- `list` on a built checkout: the build's models.parquet, no spec language ---------------------

#: Two models of the corpus, their parameter counts as Hugging Face publishes them (the model cards:
#: Qwen3-8B 8.19B, Llama-3.1-8B 8.03B), as `list` prints them (3 significant digits).
BUILT = {"Qwen/Qwen3-8B": "8.19 G", "meta-llama/Meta-Llama-3.1-8B": "8.03 G"}
#: ... and a spec declared unverified (never published: its row is the manifest's): MiMo-7B-Base,
#: 7.83B on its model card less its 211M MTP layer (params_total leaves MTP modules out, as for every
#: model): 7.62B
LISTED = {**BUILT, "XiaomiMiMo/MiMo-7B-Base": "7.62 G"}
TINY = REPO / "tests" / "data" / "grid_tiny.yaml"


#: The tests that read :func:`two_model_checkout` share one pytest-xdist worker (``--dist loadgroup``):
#: spread one by one over two workers, each worker built the two models again (3.5-5.8 s of setup
#: under load in a whole run); the subprocess checks above stay spread.
CHECKOUT = pytest.mark.xdist_group("cli_fast_checkout")


@pytest.fixture(scope="module")
def two_model_checkout(tmp_path_factory):
    """A corpus copy holding only LISTED's specs (the what-if variants dropped: their bases are gone),
    built over the tiny grid without the site, as `archledger build` leaves it."""
    import shutil
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    root = tmp_path_factory.mktemp("listed")
    shutil.copytree(REPO / "corpus", root / "corpus")
    keep = {"Qwen--Qwen3-8B.yaml", "meta-llama--Meta-Llama-3.1-8B.yaml", "XiaomiMiMo--MiMo-7B-Base.yaml"}
    for spec in (root / "corpus" / "models").glob("*.yaml"):
        if spec.name not in keep:
            spec.unlink()
    for variant in (root / "corpus" / "variants").glob("*.yaml"):
        variant.unlink()
    report = build(load_corpus(root / "corpus"), root / "out", grid_path=TINY, jobs=1)
    assert sorted(report.recomputed) == sorted(BUILT)
    return root


def _listing(text: str) -> dict[str, str]:
    lines = text.splitlines()
    assert lines[0].split() == ["MODEL", "PARAMS", "TYPE", "FAMILY"]
    return {line.split()[0]: " ".join(line.split()[1:3]) for line in lines[1:]}


@CHECKOUT
def test_list_on_a_fresh_build_imports_no_sympy(two_model_checkout):
    """Nor polars (issue 42): the rows come from models.json, models.parquet's JSON twin."""
    root = two_model_checkout
    text, names = _imported("list", "--corpus", str(root / "corpus"), "--out", str(root / "out"))
    assert _listing(text) == LISTED
    assert [line for line in text.splitlines() if "(unverified: " in line][0].startswith("XiaomiMiMo/MiMo-7B-Base")
    assert not {n.split(".")[0] for n in names} & {"sympy", "mpmath", "polars", "pyarrow", "numpy"}
    assert not {n for n in names if n.startswith(("engine.language.corpus", "engine.language.model_load",
                                                   "engine.language.graph_load", "engine.language.expr",
                                                   "engine.language.evaluate"))}


@CHECKOUT
def test_list_from_the_build_equals_the_evaluation_consistency(two_model_checkout, tmp_path):
    """Consistency: the rows read from models.parquet print byte for byte what evaluating every spec
    prints (an --out with no build: nothing to read, every model evaluated)."""
    root = two_model_checkout
    from_build, _ = _imported("list", "--corpus", str(root / "corpus"), "--out", str(root / "out"))
    evaluated, names = _imported("list", "--corpus", str(root / "corpus"), "--out", str(tmp_path / "nothing"))
    assert "sympy" in names          # (it did evaluate)
    assert from_build == evaluated


@CHECKOUT
def test_list_evaluates_a_model_whose_inputs_changed(two_model_checkout, tmp_path):
    """An edited spec is not the build's input any more: `list` loads the corpus and evaluates (it
    imports the spec language), and still prints the same numbers for an edit that changes none."""
    import shutil
    root = tmp_path / "copy"
    shutil.copytree(two_model_checkout, root)
    spec = root / "corpus" / "models" / "Qwen--Qwen3-8B.yaml"
    spec.write_text(spec.read_text() + "\n# edited\n")
    text, names = _imported("list", "--corpus", str(root / "corpus"), "--out", str(root / "out"))
    assert "sympy" in names and "engine.language.corpus" in names
    assert _listing(text) == LISTED


@CHECKOUT
def test_models_json_is_models_parquet_row_for_row_consistency(two_model_checkout):
    """Consistency: the JSON twin the commands read holds models.parquet's rows exactly (same
    columns, same order, every value equal: integers, strings and lists survive JSON unchanged)."""
    import json
    import polars as pl
    results = two_model_checkout / "out" / "results"
    assert json.loads((results / "models.json").read_text()) == pl.read_parquet(results / "models.parquet").to_dicts()


@CHECKOUT
def test_list_reads_the_parquet_where_the_json_twin_is_damaged(two_model_checkout, tmp_path):
    """A models.json that does not match its manifest record is not trusted: the rows come from
    models.parquet (through polars), the same listing."""
    import shutil
    root = tmp_path / "copy"
    shutil.copytree(two_model_checkout, root)
    twin = root / "out" / "results" / "models.json"
    twin.write_text(twin.read_text().replace("8", "9"))
    text, names = _imported("list", "--corpus", str(root / "corpus"), "--out", str(root / "out"))
    assert _listing(text) == LISTED
    assert "polars" in names and "sympy" not in names


def test_plan_imports_no_polars():
    """`plan` evaluates (sympy, numpy) but reads no table: the sentence of the fronts' rule it prints
    (engine.serving.steady.FRONT_BASIS) comes without polars (issue 42: about 0.2 s of a cold plan)."""
    text, names = _imported("plan", "Qwen3-0.6B", "--input", "128", "--output", "16", "--ttft", "1", "--tpot", "0.1",
                            "--gpu", "H100", "--max-gpus", "1", "--no-disagg", "--json")
    assert '"front_basis": "Fronts use the schedule estimate' in text
    tops = {n.split(".")[0] for n in names}
    assert "sympy" in tops and not tops & {"polars", "pyarrow"}
