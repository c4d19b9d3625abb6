"""Every size that multiplies work is bounded before the work starts, and no name reaches compiled code.

Issue 35, items 2 and 5. Hostile inputs a pull request can make, each refused in one line with exit
status 2, nothing written, fast and small: a layer count of 10^8 (from a snapshot or a ``repeat:``),
expert counts and layers x experts beyond the walk's bounds (engine.language.evaluate MAX_LAYERS,
MAX_INSTANCES, MAX_COPIES), a grid whose lists are each within bounds but multiply to tens of
millions of points (engine.batch.grid MAX_POINTS, MAX_OPS_POINTS for the per-op tables), a ``sizing:`` block or a ``plan`` over every GPU
type at thousands of GPUs (engine.serving.sizing MAX_SEARCH_PAIRS), a checkpoint manifest's range
standing for 10^9 tensors (engine.verify.manifest MAX_TENSORS). The hostile commands run in one
child process under RLIMIT_AS (2 GiB) with a SIGALRM per command, so a regression to looping fails
(the alarm, or the memory cap) instead of hanging the suite; their peak RSS is asserted too.

Names: every name that can become a sympy symbol (dims, layer templates, the layer groups made from
them) is an identifier, refused at load otherwise, and the compile step (lambdify writes symbol names
into the source it runs) refuses any other name before writing source.

Hand-derived expectations: the hostile counts are the edits' own numbers (10^8 layers; 4,096 x 16,384
= 67,108,864 copies), and the products are the factors the edits set (64 prompts x 64 outputs x
65 batches ...). The last tests hold the real corpus and the default grid under every bound.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sympy

from engine.language import symbols
from engine.language.model_load import MAX_TEMPLATES
from engine.language.evaluate import MAX_COPIES, MAX_INSTANCES, MAX_LAYERS
from engine.batch.grid import MAX_OPS_POINTS, MAX_POINTS, load_grid, points_bound
from engine.serving.sizing import MAX_SEARCH_PAIRS, legal_configs
from engine.verify.manifest import MAX_TENSORS
from tests.conftest import EVERY_MODEL, MODEL_IDS, REPO

LLAMA = "meta-llama--Meta-Llama-3.1-8B"
MIXTRAL = "mistralai--Mixtral-8x7B-v0.1"
#: Per hostile command: the alarm (s) and the child's address-space cap. A refused command takes
#: about a second and ~150 MB; the regressions took minutes and gigabytes.
ALARM_S = 20
MEMORY_CAP = 2 << 30
PEAK_RSS_KB = 1 << 20        # 1 GiB: the child's peak over every hostile command


def _edit(path: Path, old: str, new: str) -> None:
    """Replace the one ``old`` in ``path`` by ``new``."""
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def _line_of(path: Path, text: str) -> int:
    """The 1-based line of the first occurrence of ``text`` in ``path``."""
    whole = path.read_text()
    assert text in whole, (path, text)
    return whole.split(text)[0].count("\n") + 1


def _grid(path: Path, replace: dict[str, str]) -> Path:
    text = (REPO / "corpus" / "grid.yaml").read_text()
    for old, new in replace.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)
    return path


def _values(start: int, step: int, n: int = 64) -> str:
    return "[" + ", ".join(str(start + i * step) for i in range(n)) + "]"


_RUNNER = textwrap.dedent("""
    import contextlib, io, json, resource, signal, sys, time
    resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
    from engine.cli import main

    def alarm(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, alarm)
    answers = []
    for argv in json.loads(sys.stdin.read()):
        err, out = io.StringIO(), io.StringIO()
        started = time.monotonic()
        signal.alarm({alarm})
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    rc = main(argv)
                except SystemExit as exc:
                    rc = exc.code
        except TimeoutError:
            rc = "no answer within {alarm} s"
        except MemoryError:
            rc = "out of memory (cap {cap} bytes)"
        finally:
            signal.alarm(0)
        # VmHWM: this process's own peak since exec (ru_maxrss of a forked-then-exec'd child starts at
        # the parent's peak on Linux, so a large pytest worker would be charged to the child)
        with open("/proc/self/status") as status:
            hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        answers.append({{"rc": rc, "err": err.getvalue(), "out": out.getvalue(),
                         "seconds": time.monotonic() - started, "peak_kb": hwm}})
    print(json.dumps(answers))
""").format(cap=MEMORY_CAP, alarm=ALARM_S)


#: The tests reading :func:`hostile` run in one pytest-xdist worker (``--dist loadgroup``): spread one by
#: one, each worker they landed on ran every hostile command again.
HOSTILE = pytest.mark.xdist_group("bounds_hostile")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Every hostile command, run once in one capped child: name -> (answer, expected, out folder)."""
    base = tmp_path_factory.mktemp("bounds")
    cases: dict[str, tuple[list[str], dict, Path | None]] = {}

    def spec(name, edits, model, at, field, says, command="show"):
        """``command model`` on a corpus copy with ``edits`` (file, old, new), refused at the line of
        ``at`` (file, a text on that line) and ``field``, saying each of ``says``."""
        root = base / name / "corpus"
        shutil.copytree(REPO / "corpus", root)
        for file, old, new in edits:
            if old is None:          # a new file
                (root / file).write_text(new)
            else:
                _edit(root / file, old, new)
        where = f"corpus/{at[0]}:{_line_of(root / at[0], at[1])}"
        cases[name] = ([command, model, "--corpus", str(root)], {"where": where, "field": field, "says": says}, None)

    snapshot = f"snapshots/{LLAMA}.yaml"
    spec("layers-from-config", [(snapshot, "num_hidden_layers: 32", "num_hidden_layers: 100000000")],
         "Meta-Llama-3.1-8B", (f"models/{LLAMA}.yaml", "{repeat: n_layers,"), "stacks.main.graph.layers.repeat",
         ["100,000,000 layers", f"limit of {MAX_LAYERS:,}"])
    spec("repeat-literal", [(f"models/{LLAMA}.yaml", "{repeat: n_layers,", "{repeat: 123456789,")],
         "Meta-Llama-3.1-8B", (f"models/{LLAMA}.yaml", "{repeat: 123456789,"), "stacks.main.graph.layers.repeat",
         ["123,456,789 layers", f"limit of {MAX_LAYERS:,}"])
    carried = 'streams: {hidden: {carries: true, src: "hidden_states = decoder_layer("}'
    spec("stream-elements", [(f"models/{LLAMA}.yaml", carried + "}}",
                              carried + ', extra: {from: hidden, count: 100000000, src: "x"}}}')],
         "Meta-Llama-3.1-8B", (f"models/{LLAMA}.yaml", "extra: {from"), "stacks.main.graph.layers.streams.extra.count",
         ["100,000,000 elements", f"limit of {MAX_LAYERS:,}"])
    moe = f"snapshots/{MIXTRAL}.yaml"
    spec("experts", [(moe, "num_local_experts: 8,", "num_local_experts: 100000,")], "Mixtral-8x7B-v0.1",
         ("components/library/moe.yaml", "instances: n_experts"), "graph.experts.instances", ["100,000 instances", f"limit of {MAX_INSTANCES:,}"])
    # 4,096 layers and 16,384 experts are each within their bound; their product is not
    spec("layers-x-experts", [(moe, "num_local_experts: 8,", f"num_local_experts: {MAX_INSTANCES},"),
                              (moe, "num_hidden_layers: 32,", f"num_hidden_layers: {MAX_LAYERS},")],
         "Mixtral-8x7B-v0.1", ("components/library/moe.yaml", "instances: n_experts"), "graph.experts.instances",
         [f"{MAX_LAYERS * MAX_INSTANCES:,} copies (layers x instances)", f"limit of {MAX_COPIES:,}"])
    many = "".join(f"  t{i}: prenorm_block\n" for i in range(11))      # one more than MAX_TEMPLATES
    spec("templates", [(f"models/{LLAMA}.yaml", "templates:\n", "templates:\n" + many)], "Meta-Llama-3.1-8B",
         (f"models/{LLAMA}.yaml", "templates:"), "templates", [f"12 layer templates, more than the limit of {MAX_TEMPLATES}"])
    evil = "__import__('os').system('touch PWNED')"
    spec("dim-name", [("dims.yaml", "n_layers: {kind", f'"{evil}": {{kind: hidden, shard: none, doc: x}}\nn_layers: {{kind')],
         "Meta-Llama-3.1-8B", ("dims.yaml", evil), evil, ["dim name", "is not an identifier"])
    spec("template-name", [(f"models/{LLAMA}.yaml", "templates:\n  block:", 'templates:\n  "a(b)":')],
         "Meta-Llama-3.1-8B", (f"models/{LLAMA}.yaml", '"a(b)":'), "templates.a(b)",
         ["layer template name 'a(b)' is not an identifier"])    # a variant's swapped layers become the template `block_<component>`: a Hub-style component name
    # (letters, digits, '-', '_', '.') is a valid component, but that template's symbol is no identifier
    gdn = (REPO / "corpus/components/library/gated_deltanet.yaml").read_text()
    spec("variant-template", [("components/library/gated-deltanet.yaml", None,
                               gdn.replace("component: gated_deltanet", "component: gated-deltanet", 1)),
                              ("variants/Qwen3-32B-GDN.yaml", "component: gated_deltanet", "component: gated-deltanet")],
         "what-if/Qwen3-32B-GDN", ("variants/Qwen3-32B-GDN.yaml", "component: gated-deltanet"), "swaps[0].component",
         ["template 'block_gated-deltanet' is not an identifier"])

    # a checkpoint manifest's range standing for 10^9 tensors (the real ones: at most 142,773)
    spec("manifest-range", [(f"snapshots/{LLAMA}.tensors.yaml", "tensors:\n- lm_head",
                             "tensors:\n- model.layers.{0..999999999}.x.weight BF16 [1]\n- lm_head")],
         "Meta-Llama-3.1-8B", (f"snapshots/{LLAMA}.tensors.yaml", "{0..999999999}"), "tensors[0]",
         [f"more than {MAX_TENSORS:,} tensors"], command="validate")

    # three lists of 64 values, each within the grid's bounds: 64 prompts x 64 outputs x 65 batches
    grid = _grid(base / "points.yaml", {
        "input_lengths: [1024, 4096, 16384, 65536, 131072, 262144, 1048576]": f"input_lengths: {_values(1024, 1024)}",
        "output_lengths: [1024]": f"output_lengths: {_values(16, 16)}",
        "batches: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]": f"batches: {_values(1, 1)}"})
    out = base / "out-points"
    cases["grid-points"] = (["build", "--out", str(out), "--grid", str(grid), "--models", "Meta-Llama-3.1-8B",
                             "--jobs", "1", "--quiet", "--no-site"],
                            {"where": f"points.yaml:{_line_of(grid, 'scenarios:')}", "field": "scenarios",
                             "says": ["x 64 prompts x 64 outputs x 65 batches)", f"limit of {MAX_POINTS:,}"]}, out)
    # 64 per-op points at both KV dtypes: 66 cells x 2 frameworks x 2 x 64
    ops = "\n".join(f"    - {{batch: {b}, input: 4096, output: 1024}}" for b in range(1, 65))
    grid = _grid(base / "ops.yaml", {"ops:\n  kv_dtypes: [bf16]": "ops:\n  kv_dtypes: [bf16, fp8]",
                                     "  points:\n    - {batch: 1, input: 4096, output: 1024}\n"
                                     "    - {batch: 64, input: 4096, output: 1024}": "  points:\n" + ops})
    out = base / "out-ops"
    cases["grid-ops-points"] = (["build", "--out", str(out), "--grid", str(grid), "--models", "Meta-Llama-3.1-8B",
                                 "--jobs", "1", "--quiet", "--no-site"],
                                {"where": f"ops.yaml:{_line_of(grid, 'ops:')}", "field": "ops",
                                 "says": ["x 2 frameworks x 2 ops KV dtypes x 64 ops points)",
                                          f"limit of {MAX_OPS_POINTS:,}"]}, out)
    # a sizing block of every GPU type up to 4,096 GPUs
    grid = _grid(base / "sizing.yaml", {"gpus: [H100, H200, B200]\n  frameworks": "gpus: all\n  frameworks",
                                        "max_gpus: 8": "max_gpus: 4096"})
    out = base / "out-sizing"
    cases["sizing-pairs"] = (["build", "--out", str(out), "--grid", str(grid), "--models", "Meta-Llama-3.1-8B",
                              "--jobs", "1", "--quiet", "--no-site"],
                             {"where": f"sizing.yaml:{_line_of(grid, 'sizing:')}", "field": "sizing",
                              "says": ["configs up to 4096 GPUs)", f"limit of {MAX_SEARCH_PAIRS:,}"]}, out)
    cases["plan-max-gpus"] = (["plan", "Meta-Llama-3.1-8B", "--input", "8192", "--output", "1024", "--ttft", "2",
                               "--tpot", "0.05", "--max-gpus", "4096"],
                              {"where": "<command line>", "field": "--max-gpus",
                               "says": ["configs up to 4096 GPUs)", f"limit of {MAX_SEARCH_PAIRS:,}"]}, None)
    for _, _, out in cases.values():
        if out is not None:
            out.mkdir()
    child = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps([argv for argv, _, _ in cases.values()]),
                           capture_output=True, text=True, cwd=base, timeout=ALARM_S * len(cases) + 60,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    assert child.returncode == 0, child.stderr[-3000:]
    answers = json.loads(child.stdout)
    assert not (base / "PWNED").exists()
    return {name: (answer, expected, out) for (name, (_, expected, out)), answer in zip(cases.items(), answers)}


CASES = ["layers-from-config", "repeat-literal", "stream-elements", "experts", "layers-x-experts", "templates", "dim-name", "template-name", "variant-template",
         "manifest-range", "grid-points", "grid-ops-points", "sizing-pairs", "plan-max-gpus"]


@HOSTILE
@pytest.mark.parametrize("name", CASES)
def test_hostile_size_or_name_is_one_line_fast_and_writes_nothing(hostile, name):
    answer, expected, out = hostile[name]
    assert answer["rc"] == 2, answer
    assert answer["out"] == "", answer["out"][:300]
    err = answer["err"]
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert answer["seconds"] < ALARM_S
    assert re.match(rf"error: \S*?{re.escape(expected['where'])}: {re.escape(expected['field'])}: ", err), (expected, err)
    _, dash, fix = err.partition(" — ")
    for says in expected["says"]:
        assert says in err, (says, err)
    assert dash and fix.strip(), err
    if out is not None:
        assert sorted(p.name for p in out.iterdir()) == [], "a refused build wrote files"


@HOSTILE
def test_hostile_commands_stay_small(hostile):
    """The child's peak RSS over every hostile command (each under a 2 GiB address-space cap):
    the refusals happen before any work, so none comes near the regressions' gigabytes."""
    peak = max(answer["peak_kb"] for answer, _, _ in hostile.values())
    # the peak so far after each command (ru_maxrss only grows): the first to pass the limit is named
    assert peak < PEAK_RSS_KB, f"peak RSS {peak / 1024:.0f} MiB; after each command: " + ", ".join(
        f"{name} {answer['peak_kb'] // 1024} MiB" for name, (answer, _, _) in hostile.items())


@HOSTILE
def test_grid_points_name_the_product(hostile):
    """The product in the message is the factors' product (66 candidate cells of the 8B model on the
    default grid's GPUs and parallel rules, x 2 x 2 x 64 x 64 x 65)."""
    err = hostile["grid-points"][0]["err"]
    match = re.search(r"up to ([\d,]+) points \(([\d,]+) \(GPU, config\) cells x 2 frameworks x 2 KV dtypes x 64 "
                      r"prompts x 64 outputs x 65 batches\)", err)
    assert match, err
    cells = int(match[2].replace(",", ""))
    assert int(match[1].replace(",", "")) == cells * 2 * 2 * 64 * 64 * 65 > MAX_POINTS


# -- names that reach compiled code ------------------------------------------------------------------

EVIL_NAMES = ["__import__('pathlib').Path('PWNED').touch()", "a(b)", "a.b", "lambda", "x y", "1x", "ｘ", ""]


def test_unchecked_lambdify_runs_a_symbol_name(tmp_path, monkeypatch):
    """Why the compile step checks: sympy's lambdify copies a free symbol's name into the source it
    runs, so calling the function runs the name (a consistency check of the threat, in a temp dir)."""
    monkeypatch.chdir(tmp_path)
    x, evil = sympy.Symbol("x"), sympy.Symbol(EVIL_NAMES[0])
    fn = sympy.lambdify((x,), x + evil, modules="numpy")
    with pytest.raises(TypeError):
        fn(1)
    assert (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("name", EVIL_NAMES)
def test_compile_step_refuses_a_symbol_that_is_not_an_identifier(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, bad = sympy.Symbol("x"), sympy.Symbol(name)
    for args, expr in (((x,), x + bad), ((x, bad), x * bad), ((x,), sympy.Function(name or "f")(x) if name else x + bad)):
        with pytest.raises(symbols.UnsafeSymbolName, match="not a plain Python identifier"):
            symbols.checked_lambdify(args, expr, modules="numpy")
    with pytest.raises(symbols.UnsafeSymbolName):
        symbols.checked_lambdify(("x, " + name,), x, modules="numpy")      # a parameter list given as text
    with pytest.raises(symbols.UnsafeSymbolName):
        symbols.dim(name)
    assert list(tmp_path.iterdir()) == []


def test_compile_step_compiles_identifiers():
    """The check passes what the engine compiles: plain identifiers, a parameter list given as text."""
    n, seq = symbols.dim("n_kv_heads"), symbols.dim("seq")
    assert symbols.checked_lambdify((n, seq), 2 * n * seq, modules="numpy")(3, 4) == 24
    assert symbols.checked_lambdify(("n_kv_heads, seq",), 2 * n * seq, modules="numpy")(3, 5) == 30


def test_every_compile_goes_through_the_checked_lambdify():
    """No engine module calls sympy's lambdify, nor compiles or runs text, but the one checked call
    in engine/language/symbols.py (``re.compile`` of a pattern is no code)."""
    found = []
    for path in sorted((REPO / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "re":
                continue
            if name in ("lambdify", "exec", "eval", "compile", "ufuncify", "autowrap", "__import__"):
                found.append(f"{path.relative_to(REPO)} {name}")
    assert found == ["engine/language/symbols.py lambdify"], found


def test_the_identifier_rule(corpus):
    """Every dim and template name of the corpus follows it (so the load check refuses none of them)."""
    assert all(symbols.is_symbol_name(d) for d in corpus.dims)
    for spec in [*corpus.models.values(), *(v.spec for v in corpus.variants.values())]:
        assert all(symbols.is_symbol_name(t) for t in spec.templates), spec.model_id
    assert not any(symbols.is_symbol_name(n) for n in EVIL_NAMES)
    assert not symbols.is_symbol_name("x" * 97) and symbols.is_symbol_name("x" * 96)
    assert max(len(spec.templates) for spec in corpus.models.values()) <= MAX_TEMPLATES


# -- the real corpus and the default grid stay within every bound ---------------------------------------

@EVERY_MODEL
def test_corpus_is_within_the_walk_bounds(evaluation):
    layers = instances = copies = 0
    for model_id in MODEL_IDS:
        for row in evaluation(model_id).numeric.rows.values():
            layers, instances = max(layers, int(row.repeat)), max(instances, int(row.instances))
            copies = max(copies, int(row.repeat * row.instances))
    assert layers <= MAX_LAYERS and instances <= MAX_INSTANCES and copies <= MAX_COPIES, (layers, instances, copies)


def test_corpus_manifests_are_within_the_tensor_bound():
    from engine.verify.manifest import load
    counts = [len(load(path, REPO / "corpus").tensors) for path in sorted((REPO / "corpus" / "snapshots").glob("*.tensors.yaml"))]
    assert counts and max(counts) <= MAX_TENSORS, max(counts)


@EVERY_MODEL
def test_default_grid_and_plan_are_within_the_work_bounds(evaluation):
    from engine.serving.fronts import load_sizing, pairs_bound
    from engine.deploy.hardware import find_gpu, load_gpus
    import math
    grid, gpus, sizing = load_grid(), load_gpus(), load_sizing(None)
    block_gpus = [find_gpu(gpus, name) for name in sizing.gpus]
    most_points = most_ops = most_pairs = most_plan = 0
    for model_id in MODEL_IDS:
        ev = evaluation(model_id)
        stored = float(sum(t.total_bytes for t in ev.tensors() if t.stack == "main"))
        factors = points_bound(ev, grid, gpus, stored)
        most_points = max(most_points, math.prod(factors.values()))
        most_ops = max(most_ops, factors["(GPU, config) cells"] * factors["frameworks"] * len(grid.ops_kv_dtypes)
                       * len(grid.ops_points))
        most_pairs = max(most_pairs, math.prod(pairs_bound(ev, sizing, block_gpus).values()))
        most_plan = max(most_plan, len(gpus) * len(legal_configs(ev, 8)))     # plan's default search
    assert most_points <= MAX_POINTS and most_ops <= MAX_OPS_POINTS, (most_points, most_ops)
    assert most_pairs <= MAX_SEARCH_PAIRS and most_plan <= MAX_SEARCH_PAIRS, (most_pairs, most_plan)
