"""The fast paths of a one-model command (issue 42): the corpus index, the parse cache, and the two
sympy/numpy imports a deploy no longer pays for. No timings: each test checks that a fast path
answers what the slow one answers, that a stale or broken input is never answered from it, or which
modules a process imports.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sympy

from engine.cli import main
from engine.language import api, parse_cache, symbols
from engine.language.walk_records import _simplify, is_monomial
from engine.language.model_index import model_index
from engine.language.yamlio import LineDict, LineList, load_yaml
from tests.conftest import REPO

MODEL = "Qwen3-0.6B"
SPEC = "Qwen--Qwen3-0.6B.yaml"
DEPLOY = ["deploy", MODEL, "--gpu", "H100", "--json", "--input", "2048", "--output", "256"]


def _checkout(tmp_path, name: str, built: bool = True):
    """A checkout of its own (corpus/ and gpus/ copied); ``built``: as a build leaves it
    (``build/results/`` exists), so the parse cache is on."""
    root = tmp_path / name
    shutil.copytree(REPO / "corpus", root / "corpus")
    shutil.copytree(REPO / "gpus", root / "gpus")
    if built:
        (root / "build" / "results").mkdir(parents=True)
    return root


def _deploy(capsys, monkeypatch, root) -> tuple[int, str, str]:
    """``archledger deploy`` run in ``root``, as a fresh process would read the corpus: the
    in-process memos of the specs are emptied first, so each run reads the files (or the cache)."""
    monkeypatch.chdir(root)
    api._model_corpus.cache_clear()
    api._shared.cache_clear()
    code = main(DEPLOY)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- consistency: the fast paths give the cold path's JSON ------------------------------------------

def test_consistency_index_and_parse_cache_give_the_cold_json(tmp_path, capsys, monkeypatch):
    """Three runs of one deploy: (1) on a built checkout, the index and a parse cache being
    filled, (2) the same again, every file read back from that cache, (3) the cold path: a checkout
    with no build and whose index cannot be used (another spec writes its id as a folded scalar,
    the same value), so the whole corpus loads and nothing is cached. Byte for byte the same JSON."""
    built = _checkout(tmp_path, "built")
    fast = [_deploy(capsys, monkeypatch, built) for _ in range(2)]
    kept = sorted((built / "build" / "cache" / "yaml").glob("*.json"))
    assert kept, "a built checkout keeps its parses"

    cold_root = _checkout(tmp_path, "cold", built=False)
    other = cold_root / "corpus" / "models" / "meta-llama--Meta-Llama-3.1-8B.yaml"
    text = other.read_text()
    assert text.startswith("model: meta-llama/Meta-Llama-3.1-8B\n")
    other.write_text(text.replace("model: meta-llama/Meta-Llama-3.1-8B\n",
                                  "model: >-\n  meta-llama/Meta-Llama-3.1-8B\n", 1))
    assert model_index(cold_root / "corpus") is None      # so this run loads every spec
    cold = _deploy(capsys, monkeypatch, cold_root)
    assert not (cold_root / "build").exists()              # and writes nothing

    assert fast[0][0] == fast[1][0] == cold[0] == 0
    assert fast[0][1] == fast[1][1] == cold[1]
    assert json.loads(cold[1])["deployment"]["model_id"] == "Qwen/Qwen3-0.6B"


def test_consistency_cached_parse_is_the_parse(tmp_path):
    """Values, kinds and every line of three files (a model spec, a component, a measured table)
    read back from the cache equal a plain parse's."""
    files = [REPO / "corpus" / "models" / SPEC, REPO / "corpus" / "components" / "library" / "gqa_attention.yaml",
             REPO / "gpus" / "measured" / "h100" / "vllm-0.24.0" / "gemm-bf16.yaml"]
    files = [f for f in files if f.exists()]
    assert len(files) >= 2
    plain = [load_yaml(f) for f in files]
    parse_cache.use(tmp_path / "cache")
    try:
        first = [load_yaml(f) for f in files]          # parsed and kept
        assert len(list((tmp_path / "cache").glob("*.json"))) == len(files)
        again = [load_yaml(f) for f in files]          # read back
    finally:
        parse_cache.use(None)
    for a, b, c in zip(plain, first, again):
        assert _shape(a) == _shape(b) == _shape(c)


def _shape(value):
    """A value with its kinds and lines spelled out (== alone ignores the lines and 1 vs 1.0 vs True)."""
    if isinstance(value, LineDict):
        return ("d", value.line, [(k, value.line_of(k), _shape(v)) for k, v in value.items()])
    if isinstance(value, LineList):
        return ("l", value.line, value.item_lines, [_shape(v) for v in value])
    return (type(value).__name__, value)


# -- a stale cache is never read ---------------------------------------------------------------------

def test_an_edited_file_is_parsed_again_not_read_from_the_cache(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("dims:\n  n_layers: 28\n")
    parse_cache.use(tmp_path / "cache")
    try:
        assert load_yaml(spec)["dims"]["n_layers"] == 28
        spec.write_text("dims:\n  n_layers: 14\n")     # same name, same size: only the text differs
        assert load_yaml(spec)["dims"]["n_layers"] == 14
        spec.write_text("dims:\n  n_layers: [\n")      # a broken edit: the parse error, not a kept value
        with pytest.raises(Exception, match="invalid YAML"):
            load_yaml(spec)
    finally:
        parse_cache.use(None)


def test_a_deploy_after_a_spec_edit_answers_for_the_edit(tmp_path, capsys, monkeypatch):
    """Edit the model's snapshot on a built checkout after a cached run: the next run's numbers
    follow the edit. Hand expectation: Qwen3-0.6B ties its embeddings; its stored weights are the
    embedding plus 28 equal layers (and a final norm), so halving ``num_hidden_layers`` removes
    half of the layers' bytes: the weights shrink, by less than half; the KV cache (one entry per
    layer) halves exactly."""
    root = _checkout(tmp_path, "c")
    before = json.loads(_deploy(capsys, monkeypatch, root)[1])["deployment"]
    snap = root / "corpus" / "snapshots" / "Qwen--Qwen3-0.6B.yaml"
    text = snap.read_text()
    assert re.search(r"\bnum_hidden_layers: 28\b", text)
    snap.write_text(re.sub(r"\bnum_hidden_layers: 28\b", "num_hidden_layers: 14", text))
    after = json.loads(_deploy(capsys, monkeypatch, root)[1])["deployment"]
    w0, w1 = before["weight_bytes_per_gpu"], after["weight_bytes_per_gpu"]
    assert w0 / 2 < w1 < w0
    assert after["kv_bytes_per_request"] * 2 == before["kv_bytes_per_request"]


# -- the index never hides a broken named spec or a duplicate id --------------------------------------

def test_a_broken_named_spec_is_one_line(tmp_path, capsys, monkeypatch):
    root = _checkout(tmp_path, "c")
    spec = root / "corpus" / "models" / SPEC
    spec.write_text(spec.read_text() + "bogus_field: 1\n")
    code, out, err = _deploy(capsys, monkeypatch, root)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"models/{SPEC}" in lines[0] and "bogus_field" in lines[0]


def test_a_second_file_declaring_the_named_id_is_one_line(tmp_path, capsys, monkeypatch):
    """Another file saying ``model: Qwen/Qwen3-0.6B`` is reported (as the whole corpus's load
    reports it: its name differs from its id), not passed over by the index."""
    root = _checkout(tmp_path, "c")
    models = root / "corpus" / "models"
    shutil.copy(models / SPEC, models / "Qwen--Qwen3-0.6B-copy.yaml")
    code, out, err = _deploy(capsys, monkeypatch, root)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Qwen--Qwen3-0.6B-copy.yaml" in lines[0] and "Qwen/Qwen3-0.6B" in lines[0]


# -- the two imports a deploy no longer pays for -------------------------------------------------------

@pytest.mark.parametrize("text", ["d_head*n_kv_heads", "32*d_head", "2*a**3*b", "a*b*c"])
def test_monomials_are_their_own_simplification(text):
    """sympy's own simplify (the outside answer) leaves each of these unchanged, so skipping it is exact."""
    e = sympy.sympify(text, locals={n: symbols.dim(n) for n in ("a", "b", "c", "d_head", "n_kv_heads")})
    assert is_monomial(e)
    assert sympy.srepr(sympy.simplify(e)) == sympy.srepr(_simplify(e)) == sympy.srepr(e)


@pytest.mark.parametrize("text", ["a + b", "(c - 1)*a", "a/2", "-2*a", "a**(-1)*b"])
def test_other_expressions_still_go_through_simplify(text):
    e = sympy.sympify(text, locals={n: symbols.dim(n) for n in "abc"})
    assert not is_monomial(e)


def test_numpy_module_object_compiles_what_the_numpy_name_compiles():
    """lambdify with ``symbols.NUMPY_MODULES`` (numpy given as the module) writes the source that
    ``modules=[..., "numpy"]`` writes and returns the same floats."""
    import inspect
    a, b = symbols.dim("a"), symbols.dim("b")
    named = [{"Min": np.minimum, "Max": np.maximum}, "numpy"]
    x = np.array([1.0, 7.0, 4096.0])
    for e in (sympy.Min(a, 2048) * b / 3, sympy.ceiling(a / 128) * 128 + sympy.floor(b / 7), sympy.Max(a, b) ** 2):
        ours = sympy.lambdify((a, b), e, modules=list(symbols.NUMPY_MODULES))
        theirs = sympy.lambdify((a, b), e, modules=named)
        assert inspect.getsource(ours) == inspect.getsource(theirs)
        assert np.array_equal(ours(x, x + 3), theirs(x, x + 3))


def test_a_deploy_imports_neither_f2py_nor_sympy_units(tmp_path):
    """A fresh ``archledger deploy`` process (a model with a product-shaped cache) imports neither
    ``numpy.f2py``/``numpy.testing`` (lambdify's ``from numpy import *``) nor
    ``sympy.physics.units`` (simplify's first call on a product); it does import sympy and numpy,
    so the reading of ``-X importtime`` sees imports."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    root = _checkout(tmp_path, "c", built=False)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "site_builder.cli", *DEPLOY], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    names = {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|(.+)$", done.stderr, re.M)}
    assert {"sympy", "numpy", "engine.language.model_index"} <= names
    assert not {n for n in names if n.startswith(("numpy.f2py", "numpy.testing", "sympy.physics"))}


# -- plan's reads of deploy's summary share one structure per fusion regime --------------------------

def test_consistency_point_reader_shares_plans_and_answers_as_deploy(evaluation):
    """retime.PointReader builds one plan per (config, fusion token regime) and reuses it for every
    batch of that regime; each summary it gives equals the one a fresh ``plan`` (deploy's own path)
    gives at that batch, and at least two batches did share a plan (else nothing was checked).
    At TP 2 on an H100 vLLM fuses the all-reduce with the residual add and RMSNorm up to 32 tokens
    per device (corpus/fusion/vllm.yaml), so decode at batch 1-32 and at 64-256 are two regimes of
    different programs: a reader that shared plans across them would answer wrongly."""
    from engine.deploy import Options, Scenario, plan
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.deploy.measured import load_measured
    from engine.deploy.parallel import ParallelConfig
    from engine.serving.retime import PointReader
    from engine.deploy.plan import summarize_plan

    ev = evaluation("Qwen/Qwen3-0.6B")
    gpu = find_gpu(load_gpus(REPO / "gpus"), "H100")
    fusion = load_tables(REPO / "corpus" / "fusion")["vllm"]
    tables = load_measured(REPO / "gpus" / "measured", gpu=gpu.key, framework="vllm")
    options, config = Options(framework="vllm"), ParallelConfig(tp=2)
    reader = PointReader(ev, gpu, options, fusion, 1024, 128, tables)
    batches = (1, 8, 32, 64, 256)
    for b in batches:
        fresh = summarize_plan(plan(ev, gpu, config, options, fusion, Scenario(b, 1024, 128)), b, 1024, 128, tables)
        fresh = {k: (np.asarray(v).reshape(-1)[0].item() if isinstance(v, np.ndarray) else v)
                 for k, v in fresh.items() if k != "phases"}
        assert reader(config, b) == fresh, b
    assert len(reader._plans) < len(batches)


@pytest.mark.parametrize("search_cache", [False, True], ids=["own-plans", "search-cache"])
def test_consistency_point_reader_reads_a_config_at_once_as_deploy(evaluation, search_cache):
    """``PointReader.read_all`` (what plan's answers on the bound and the expected time read)
    evaluates a config's batches in one vectorized summary per plan; with ``search_cache`` its plans are
    the search's structures (a StructureCache's live key), as ``archledger plan`` passes them. Each
    point's summary equals the one deploy's own fresh plan gives at that batch alone, float for
    float, across the two fusion regimes of the test above (decode at batch 1-32 and 64-256 at TP 2
    on an H100): one summary call per plan, not per batch."""
    from engine.deploy import Options, Scenario, plan
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.deploy.measured import load_measured
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.plan import summarize_plan
    from engine.deploy.structure_cache import StructureCache
    from engine.serving.retime import PointReader

    ev = evaluation("Qwen/Qwen3-0.6B")
    gpu = find_gpu(load_gpus(REPO / "gpus"), "H100")
    fusion = load_tables(REPO / "corpus" / "fusion")["vllm"]
    tables = load_measured(REPO / "gpus" / "measured", gpu=gpu.key, framework="vllm")
    options, config = Options(framework="vllm"), ParallelConfig(tp=2)
    cache = StructureCache(ev, {"vllm": fusion}) if search_cache else None
    reader = PointReader(ev, gpu, options, fusion, 1024, 128, tables, cache)
    batches = (1, 8, 32, 64, 256)
    reader.read_all(config, batches)
    calls = reader.calls
    assert 2 <= calls == len(reader._plans) < len(batches)     # one call per plan; two regimes at least
    for b in batches:
        fresh = summarize_plan(plan(ev, gpu, config, options, fusion, Scenario(b, 1024, 128)), b, 1024, 128, tables)
        fresh = {k: (np.asarray(v).reshape(-1)[0].item() if isinstance(v, np.ndarray) else v)
                 for k, v in fresh.items() if k != "phases"}
        assert reader(config, b) == fresh, b
    assert reader.calls == calls      # (every point above was read already)
