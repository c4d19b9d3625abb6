"""Consistency: a stored program's trees give the compile path's floats, bit for bit (issue 42).

The deploy fast path (docs/scaling.md, "The one-model fast path") would answer from the build's
stored formula trees instead of compiling the spec: the same numbers only if each tree evaluates
the very operations of the compiled function it stands for. engine.deploy.printed_tree writes
that tree (the printer's order of a sum's terms, a product's factors left to right, lambdify's
source parsed for the rest) and engine.language.formula_tree.positional evaluates it with numpy
alone. Here every distinct step function of real fused structures (a dense model, an MLA MoE
under expert parallelism and DP-attention, a hybrid Mamba MoE), its four totals and a
collective's calls, is compared with its tree at non-integer points, where another order of
operations rounds differently: the same bits, dtype and shape. Hand expressions cover the forms
the corpus may lack (every coefficient form, powers, ceilings, minimum). Planted bugs this catches:
a sum's terms added in sympy's stored order instead of the printer's, ``k*x*y`` as ``x*(k*y)``, a
rational as ``x/q``, a unary minus dropped.
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy

from engine.deploy import Options, plan
from engine.deploy import step_functions as cost
from engine.deploy.step_totals import step_totals
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.printed_tree import lambdified_tree, step_tree
from engine.deploy.structure import PHASES
from engine.language import formula_tree, symbols

NAMES = tuple(a.name for a in cost.ARGS)
B, S, C, K = cost.ARGS
R = sympy.Rational

RNG = np.random.default_rng(11)
POINTS = [
    (RNG.uniform(0.5, 3e3, (5, 1)), RNG.uniform(0.3, 9e3, (5, 1)), RNG.uniform(0.1, 2e5, (1, 4)), np.array(1.37)),
    tuple(np.float64(x) for x in (2.7, 11.3, 77.7, 1.9)),
    (RNG.uniform(1, 64, 9), RNG.uniform(1, 8192, 9), RNG.uniform(1, 131072, 9), RNG.uniform(0.5, 2, 9)),
]

#: forms beside the corpus's: the causal attention sum inside a product, a ceiling, a minimum, powers
HAND = [330880 * B * (C * S - S ** 2 / 2 + S / 2), 736 * B * (65 * S + 10600832 * sympy.ceiling(S / 128)) + 1472,
        B * K * sympy.Min(C, 2048), B * sympy.floor(S / 3), R(1, 3) * B ** 2 * S + 2, -B * S + C, -R(7, 3) * B + C * K,
        R(31, 32) ** (B * S) * 4 - K, 3 - 5 * B * S + 2 * B, S * sympy.log(B)]


def _same(expr, tree) -> None:
    """The tree's values equal the compiled function's at every point: bits, dtype, shape."""
    fn = cost._compiled(expr)
    mine = formula_tree.positional(tree, NAMES)
    if not callable(fn):
        assert not callable(mine) and np.float64(mine).tobytes() == np.float64(fn).tobytes(), expr
        return
    for args in POINTS:
        want, got = np.asarray(fn(*args)), np.asarray(mine(*args))
        assert got.dtype == want.dtype and got.shape == want.shape, expr
        assert got.tobytes() == want.tobytes(), (expr, tree)


@pytest.mark.parametrize("expr", HAND, ids=[str(e)[:40] for e in HAND])
def test_consistency_hand_expressions(expr):
    tree = step_tree(expr)
    assert tree is not None
    _same(expr, tree)


def test_consistency_sum_order_is_the_printers_not_sympys():
    """The tree's order is not to_tree's: for a sum sympy stores as (s/2, -s**2/2, c*s) the tree adds
    the printer's c*s - s**2/2 + s/2 (the order that changes the floats)."""
    expr = C * S - S ** 2 / 2 + S / 2
    assert formula_tree.to_tree(expr)[0] == "+" and step_tree(expr)[0] == "+"
    assert step_tree(expr)[1][0] == "-" and step_tree(expr)[1][1] == ["*", "ctx", "seq"]


def test_what_has_no_tree_is_none():
    """A Piecewise (numpy select) and a Mod have no tree: the caller keeps the compile path."""
    assert step_tree(sympy.Piecewise((B, S > 2), (C, True)) * K) is None
    assert step_tree(sympy.Mod(S, 4) * B + C) is None


@pytest.mark.parametrize("model,gpu,degrees", [
    ("meta-llama/Meta-Llama-3.1-70B", "H100", dict(tp=8)),
    ("deepseek-ai/DeepSeek-V3", "H200", dict(tp=8, ep=8, dp_attn=8)),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "H100", dict(tp=2))])
def test_consistency_corpus_step_functions(corpus, evaluation, model, gpu, degrees):
    """Every step function of a fused structure (four totals and the calls) and its KV bytes per
    request per GPU: the tree's floats are the compiled function's."""
    table = load_tables(corpus.root / "fusion")["vllm"]
    structure = plan(evaluation(model), load_gpus()[gpu], ParallelConfig(**degrees), Options(framework="vllm"),
                     table).structure
    exprs = {e for phase in PHASES for s in structure.programs[phase].steps
             for e in (*step_totals(s), s.repeat if s.collective else sympy.S.Zero)}
    assert sum(not e.is_number for e in exprs) > 20
    for expr in exprs:
        tree = step_tree(expr)
        assert tree is not None, expr
        _same(expr, tree)
    kv = structure.kv_device_per_request
    fn = symbols.checked_lambdify((symbols.dim(symbols.LENGTH), cost.KV_BYTES), kv, modules=list(symbols.NUMPY_MODULES))
    tree = lambdified_tree(fn)
    mine = formula_tree.positional(tree, (symbols.LENGTH, "kv_bytes"))
    for length, kv_bytes in ((np.array([4097.5, 131072.25]), np.array(1.37)), (np.float64(3.3), np.float64(2.0))):
        want = np.asarray(fn(length, kv_bytes), dtype=float)
        got = np.asarray(mine(length, kv_bytes) if callable(mine) else mine, dtype=float)
        assert np.broadcast_to(got, want.shape).tobytes() == want.tobytes()


# -- programs made from the build's document (engine.deploy.stored) ---------------------------------

#: one cell per model: the configs ``archledger deploy`` is asked at below (a dense model at TP 8, an
#: MLA MoE under EP 8 with DP-attention 8, a hybrid Mamba MoE at TP 2), two frameworks
CELLS = {"meta-llama/Meta-Llama-3.1-70B": ("H100", 8, dict(tp=8)),
         "deepseek-ai/DeepSeek-V3": ("H200", 8, dict(tp=8, ep=8, dp_attn=8)),
         "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("H100", 2, dict(tp=2))}


def _grid(gpu: str, count: int, degrees: dict) -> dict:
    ep = ["tp"] if degrees.get("ep") else [1]
    dp = ["tp"] if degrees.get("dp_attn") else [1]
    return {"doc": "tests/test_stored_consistency.py: one cell.", "gpus": [gpu], "gpu_counts": [count],
            "beyond_fit": 1,
            "parallel": {"max_pp": 1, "cp": [1], "ep": ep, "dp_attn": dp, "tp_in_domain": True, "pp_after_tp": 8},
            "frameworks": ["vllm", "sglang"], "kv_dtypes": ["bf16"],
            "scenarios": {"input_lengths": [4096], "beyond_max_context": 1, "output_lengths": [1024], "batches": [1]},
            "ops": {"kv_dtypes": [], "points": []}}


@pytest.fixture(scope="module")
def documents(tmp_path_factory, evaluation):
    import yaml
    from engine.batch.grid_eval import evaluate_model
    out = {}
    for model, (gpu, count, degrees) in CELLS.items():
        path = tmp_path_factory.mktemp("stored") / "grid.yaml"
        path.write_text(yaml.safe_dump(_grid(gpu, count, degrees), sort_keys=False))
        doc: dict = {}
        evaluate_model(evaluation(model), path, export=doc)
        out[model] = doc
    return out


@pytest.mark.parametrize("model", list(CELLS))
def test_consistency_stored_programs_are_the_compiled_ones(corpus, evaluation, documents, model):
    """At scenarios of every fusion regime (decode batches 1 to 2048, prompts 512 to 32k), the program
    the document gives for the deployment's option and regime evaluates to the floats of the
    program ``archledger deploy`` compiles from the spec: the phase sums (totals) and the per-step
    arrays (evaluate), every field to the bit; and its steps carry the op rows' labels."""
    from engine.deploy import Scenario
    from engine.deploy.op_rows import op_rows_columns
    from engine.deploy.stored import Document
    from engine.deploy.structure import tokens_per_device
    gpu_key, count, degrees = CELLS[model]
    doc = Document(documents[model])
    gpu = load_gpus()[gpu_key]
    config = ParallelConfig(**degrees)
    fusion = load_tables(corpus.root / "fusion")
    for framework in ("vllm", "sglang"):
        option = doc.option(gpu_key, f"{config.n_gpus}-{config.label()}-d{gpu.scale_up_domain}", framework)
        assert option is not None
        for batch, prompt in ((1, 512), (64, 4096), (2048, 32768)):
            scenario = Scenario(batch=batch, input_len=prompt, output_len=1024)
            built = plan(evaluation(model), gpu, config, Options(framework=framework), fusion[framework], scenario)
            tokens = tokens_per_device(config, scenario)
            for phase in PHASES:
                mine, theirs = doc.phase_program(option, phase, tokens[phase]), built.structure.compiled[phase]
                steps = built.structure.programs[phase].steps
                assert [s.uid for s in mine.program.steps] == [s.uid for s in steps]
                assert [(s.name, s.op, s.component, s.role, s.group, s.parts) for s in mine.program.steps] == \
                    [(s.name, s.op, s.component, s.role, s.group, tuple(s.parts)) for s in steps]
                seq, ctx = (prompt, prompt) if phase == "prefill" else (1, prompt + 1024)
                args = (np.array([1.0, float(batch), 3.5]), float(seq), float(ctx), 2.0)
                want, got = theirs.totals(gpu, *args), mine.totals(gpu, *args)
                assert want.keys() == got.keys()
                for k in want:
                    assert np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes(), (model, phase, k)
                want, got = theirs.evaluate(gpu, *args, weights=True), mine.evaluate(gpu, *args, weights=True)
                for k in want:
                    assert np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes(), (model, phase, k)
            labels = op_rows_columns(built, "decode", scenario)
            kept = [s for s in doc.phase_program(option, "decode", tokens["decode"]).program.steps if not s.view]
            assert [s.formulas for s in kept] == list(zip(labels["flops_formula"], labels["bytes_formula"],
                                                          labels["comm_bytes_formula"], labels["weight_bytes_formula"]))
