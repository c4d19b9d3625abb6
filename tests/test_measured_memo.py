"""The measured-kernel lookups' memos (engine.deploy.measured: ``_gemm_point`` by value, ``step_spec``
by step object and what it reads of the lookup; engine.batch.deploy_export: one tree per spec and
calls) never merge steps or lookups that differ in what the rule reads.

The hand values: Llama-3.1-8B's decode ``o_proj`` on 2 GPUs (TP2) is a row-parallel matmul of
hidden 4096 x d_attn 4096, 32 layers: per GPU m = the tokens (batch x seq), k = 4096 / 2 = 2048
(the partial-sum group splits its input), n = FLOPs per call / 2mk = 4096 (16,777,216 batch seq
FLOPs per call on one GPU = 2 x 4096 x 2048 per token)."""
from __future__ import annotations

import pytest
import sympy

from engine.deploy import measured
from engine.deploy.measured import Lookup, _gemm_point, expected_tree, load_measured, member_ops, spec_tree, step_spec
from engine.deploy.device_program import Layout, step_with
from engine.language import symbols
from tests.deploy_helpers import make_plan

BATCH, SEQ = symbols.dim(symbols.BATCH), symbols.dim(symbols.SEQ)


@pytest.fixture(scope="module")
def llama_tp2():
    p = make_plan("Llama-3.1-8B", "H100", "sglang", None, "bf16", tp=2)
    o_proj = next(st for st in p.structure.programs["decode"].steps if st.uid.endswith("self_attn/o_proj"))
    return p, o_proj


def _fresh(step) -> tuple:
    """The point computed without the memo (its value key's fields are all the rule reads)."""
    return measured._gemm_point_of(step)


def test_gemm_point_hand_values_and_copies_share_it(llama_tp2):
    _, o_proj = llama_tp2
    m, n, k = _gemm_point(o_proj)
    assert sympy.simplify(m - BATCH * SEQ) == 0
    assert float(n) == 4096.0 and float(k) == 2048.0
    copy = step_with(o_proj)                        # another object, the same fields
    assert copy is not o_proj and _gemm_point(copy) == (m, n, k)


def test_gemm_point_key_separates_what_the_rule_reads(llama_tp2):
    """Steps that differ in one field the rule reads get their own point (hand values), never the
    memo's entry of the other: no partial-sum group (k 4096, so n 2048), twice the FLOPs per call
    (n 8192), the logits' last token only (m = batch, seq gone)."""
    _, o_proj = llama_tp2
    _gemm_point(o_proj)                              # the memo holds the TP2 step's point
    whole = step_with(o_proj, layout=Layout(o_proj.layout.shards))
    assert [float(x) for x in _gemm_point(whole)[1:]] == [2048.0, 4096.0]
    double = step_with(o_proj, flops=o_proj.flops * 2)
    assert [float(x) for x in _gemm_point(double)[1:]] == [8192.0, 2048.0]
    last = step_with(o_proj, last_token=True)
    assert sympy.simplify(_gemm_point(last)[0] - BATCH) == 0
    for step in (whole, double, last):
        assert _gemm_point(step) == _fresh(step)


def test_step_spec_separates_dtypes(llama_tp2):
    """Two steps differing only in their operands' dtype read different tables and rooflines: bf16
    the ``gemm-bf16`` table at 2 bytes per element, fp8 the per-tensor ``gemm-fp8`` one at 1 byte
    (H100 computes FP8 natively), so their expected-time trees differ; the KV dtype of the lookup
    separates an attention step's tables the same way (``decode_attention-<kv>_d128``)."""
    p, o_proj = llama_tp2
    s = p.structure
    tables = load_measured(gpu="H100", framework="sglang")
    members = member_ops(s, "decode")
    lookup = Lookup(p.gpu, "sglang", "decode", tables, "bf16", s.config, s.ev.bound)
    bf16 = step_spec(o_proj, lookup, members)
    fp8 = step_spec(step_with(o_proj, compute_dtype="fp8"), lookup, members)
    assert [t.path.rsplit("/", 1)[-1] for t in bf16.tables] == ["gemm-bf16.yaml"]
    assert [t.path.rsplit("/", 1)[-1] for t in fp8.tables] == ["gemm-fp8.yaml"]
    assert (bf16.roof[0], bf16.roof[-1], fp8.roof[-1]) == ("gemm", 2.0, 1.0)
    ref = {}
    trees = [expected_tree(st, lookup, members, lambda e: ref.setdefault(e["path"], len(ref)))
             for st in (o_proj, step_with(o_proj, compute_dtype="fp8"))]
    assert trees[0] != trees[1]
    attention = next(st for st in s.programs["decode"].steps if st.op == "flash_attention")
    kv_files = {kv: [t.path.rsplit("/", 1)[-1] for t in step_spec(
        attention, Lookup(p.gpu, "sglang", "decode", tables, kv, s.config, s.ev.bound), members).tables]
        for kv in ("bf16", "fp8")}
    assert kv_files == {"bf16": ["decode_attention-bf16_d128.yaml"], "fp8": ["decode_attention-fp8_d128.yaml"]}


def test_spec_tree_is_the_steps_tree_consistency(llama_tp2):
    """Consistency: the tree the deploy export builds once per (spec, calls) is the tree
    expected_tree builds for each step, for every step of both phases (no-table steps included)."""
    p, _ = llama_tp2
    s = p.structure
    tables = load_measured(gpu="H100", framework="sglang")
    for phase in ("prefill", "decode"):
        lookup = Lookup(p.gpu, "sglang", phase, tables, "fp8", s.config, s.ev.bound)
        members = member_ops(s, phase)
        assert member_ops(s, phase) is members          # one dict per program: the memo's identity key
        for st in s.programs[phase].steps:
            spec = step_spec(st, lookup, members)
            repeat = float(st.repeat) if spec is not None else 0.0
            assert spec_tree(spec, repeat, id) == expected_tree(st, lookup, members, id)


def test_step_spec_separates_moe_routing():
    """An expert-parallel MoE step under TensorRT-LLM's uneven routing reads the tables measured at
    that routing (``moe-*_power_law_1.2``), under balanced routing the balanced ones: asked in either
    order, each lookup gets its own (DeepSeek-V3 on 8x H200, EP8: hidden 7168, 2048 per expert,
    top-8 of 256, moe_tp 1, moe_ep 8, a key both TensorRT-LLM tables hold)."""
    p = make_plan("DeepSeek-V3", "H200", "trtllm", None, "bf16", tp=8, ep=8, dp_attn=8)
    s = p.structure
    assert s.moe_routing == "power_law_1.2"
    tables = load_measured(gpu="H200", framework="trtllm")
    members = member_ops(s, "decode")
    moe = next(st for st in s.programs["decode"].steps if st.op == "fused_moe")
    files = {}
    for routing in ("balanced", "power_law_1.2", "balanced"):
        lookup = Lookup(p.gpu, "trtllm", "decode", tables, "bf16", s.config, s.ev.bound, routing)
        spec = step_spec(moe, lookup, members)
        assert spec.shape == " hidden=7168 inter=2048 topk=8 experts=256 moe_tp=1 moe_ep=8"
        files.setdefault(routing, set()).add(spec.tables[0].path.rsplit("/", 1)[-1])
    assert len(files["balanced"]) == 1 and len(files["power_law_1.2"]) == 1
    (balanced,), (routed,) = files["balanced"], files["power_law_1.2"]
    assert routed == balanced.replace(".yaml", "_power_law_1.2.yaml") and "power_law" not in balanced
