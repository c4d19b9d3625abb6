"""Fusion tables: real rules per framework, applied after communication insertion, per phase.

A fused kernel's FLOPs are the sum of its parts; its bytes only its boundary tensors (derived here
by hand for QKV and flash attention); conditions (GPU arch, token limits, dims, opt-in) decide.
"""
from __future__ import annotations

import pytest

from engine.deploy import Scenario
from engine.language.errors import SpecError
from engine.deploy.fusion_table import load_table, load_tables

from tests.conftest import REPO
from tests.deploy_helpers import close, deploy, make_plan, op

H, HEADS, KV, D, L = 8192, 64, 8, 128, 80      # Llama-3.1-70B
BF16 = 2


def test_tables_load_with_real_sources():
    tables = load_tables()
    assert {"vllm", "sglang"} <= set(tables)
    for table in tables.values():
        names = {r.name for r in table.rules}
        assert {"qkv_proj", "gate_up_proj", "fused_add_rmsnorm", "flash_attention", "fused_moe",
                "qk_norm_rope"} <= names
        assert any(r.kind == "chain" and r.ops[0] == "all_reduce" for r in table.rules)
        for rule in table.rules:
            assert ":" in rule.src and rule.doc


@pytest.mark.parametrize("framework", ["vllm", "sglang"])
@pytest.mark.parametrize("model,config", [("Llama-3.1-70B", dict(tp=8)),
                                          ("DeepSeek-V3", dict(tp=8, dp_attn=8, ep=8)),
                                          ("gpt-oss-120b", dict(tp=4, ep=4)), ("Qwen3-30B-A3B", dict(tp=2))])
def test_consistency_fused_flops_are_the_sum_and_bytes_only_shrink(framework, model, config):
    """Consistency of the fused program with the unfused one (the invariants of fusion); the fused
    kernel's absolute FLOPs, bytes and time are hand-derived in tests/test_hand_attention.py."""
    d = deploy(model, "H200", Scenario(8, 2048, 64), framework=framework, **config)
    raw = d.plan.without_fusion().at(d.scenario)
    for phase in ("prefill", "decode"):
        fused, unfused = d.phases[phase], raw.phases[phase]
        assert close(fused["flops"], unfused["flops"], 1e-9)
        assert close(fused["comm_bytes"], unfused["comm_bytes"], 1e-9)
        assert close(fused["weight_bytes"], unfused["weight_bytes"], 1e-9)
        assert fused["bytes"] < unfused["bytes"]
        assert fused["step_time_s"] <= unfused["step_time_s"] * (1 + 1e-9)
        kinds = {r["kind"] for r in d.ops[phase]}
        assert "fused" in kinds and "fused" not in {r["kind"] for r in raw.ops[phase]}


def test_qkv_projection_reads_its_input_once():
    B, C = 4, 1024
    d = deploy("Llama-3.1-70B", "H100", Scenario(B, 1000, 24), framework="vllm", tp=8)
    row = op(d, "decode", "qkv_proj@main/layers[block]/self_attn/q_proj")
    q, kv = HEADS * D // 8, KV * D // 8                     # this GPU's output features
    weights = (q + 2 * kv) * H * BF16
    boundary = B * H * BF16 + B * (q + 2 * kv) * BF16       # x read once, q/k/v written
    assert close(row["bytes"], L * (boundary + weights))
    assert close(row["flops"], L * 2 * B * H * (q + 2 * kv))
    assert row["kind"] == "fused"


def test_flash_attention_never_materialises_scores():
    B, C = 4, 1024
    d = deploy("Llama-3.1-70B", "H100", Scenario(B, 1000, 24), framework="vllm", tp=8)
    row = op(d, "decode", "flash_attention@main/layers[block]/self_attn/scores")
    heads = HEADS // 8
    q, kv_read, out = B * heads * D * BF16, 2 * B * C * (KV // 8) * D * BF16, B * heads * D * BF16
    assert close(row["bytes"], L * (q + kv_read + out))
    scores = op(d.plan.without_fusion().at(d.scenario), "decode", "main/layers[block]/self_attn/scores")
    assert row["flops"] > scores["flops"]                     # scores + softmax + apply


def _rules_applied(d, phase):
    return {r["op"] for r in d.ops[phase] if r["kind"] == "fused"}


def test_allreduce_rmsnorm_fusion_follows_arch_and_token_limit():
    small = Scenario(8, 1024, 32)
    assert "allreduce_add_rmsnorm_hopper" in _rules_applied(deploy("Llama-3.1-70B", "H100", small, "vllm", tp=8), "decode")
    assert "allreduce_add_rmsnorm_blackwell" in _rules_applied(deploy("Llama-3.1-70B", "B200", small, "vllm", tp=8), "decode")
    assert not {r for r in _rules_applied(deploy("Llama-3.1-70B", "A100", small, "vllm", tp=8), "decode")
                if r.startswith("allreduce")}
    # 64 requests on TP8 is 64 tokens per GPU: over vLLM's Hopper limit (32) for hidden 8192
    big = deploy("Llama-3.1-70B", "H100", Scenario(64, 1024, 32), "vllm", tp=8)
    assert not {r for r in _rules_applied(big, "decode") if r.startswith("allreduce")}
    assert not {r for r in _rules_applied(big, "prefill") if r.startswith("allreduce")}
    assert {r["op"] for r in big.ops["decode"] if r["kind"] == "comm"} == {"all_reduce"}


def test_opt_in_rules_are_listed_but_not_applied():
    vllm = {r.name: r for r in load_tables()["vllm"].rules}
    assert not vllm["qk_norm_rope"].enabled
    d = deploy("Qwen3-8B", "H100", Scenario(1, 512, 8), "vllm", tp=1)
    assert "qk_norm_rope" not in _rules_applied(d, "decode")


def test_moe_kernels_fuse_experts_with_dispatch_and_combine():
    d = deploy("DeepSeek-V3", "H200", Scenario(16, 1024, 64), "vllm", tp=8, ep=8)
    row = op(d, "decode", "fused_moe@main/layers[moe]/mlp/dispatch")
    raw = d.plan.without_fusion().at(d.scenario)
    parts = [op(raw, "decode", f"main/layers[moe]/mlp/{n}") for n in
             ("dispatch", "experts/gate_proj", "experts/up_proj", "experts/act", "experts/down_proj", "combine")]
    assert close(row["flops"], sum(p["flops"] for p in parts))
    assert close(row["weight_bytes"], sum(p["weight_bytes"] for p in parts))
    assert row["bytes"] < sum(p["bytes"] for p in parts)
    # with DP-attention the all-to-alls stay collectives outside the kernel, the combine after them
    dp = deploy("DeepSeek-V3", "H200", Scenario(16, 1024, 64), "vllm", tp=8, dp_attn=8, ep=8)
    assert len([r for r in dp.ops["decode"] if r["op"] == "all_to_all"]) == 2
    assert op(dp, "decode", "main/layers[moe]/mlp/combine")["kind"] == "compute"


def test_unfused_program_is_kept():
    p = make_plan("Llama-3.1-8B", "H100", "sglang", Scenario(2, 256, 8), tp=1)
    assert len(p.unfused["decode"].steps) > len(p.programs["decode"].steps)
    assert all(s.kind != "fused" for s in p.unfused["decode"].steps)


@pytest.mark.parametrize("edit,needle", [
    (("chain: [add, rmsnorm]", "chain: [add, frobnicate]"), "unknown op 'frobnicate'"),
    (("chain: [add, rmsnorm]", "chain: [add, rmsnorm]\n    siblings: {op: linear}"), "needs exactly one pattern"),
    (("when: {arch: [sm_90], min_degree: {tp: 2}, max_tokens: 32}",
      "when: {arch: [sm_90], colour: blue}"), "when.colour: unknown field 'colour'"),
])
def test_bad_rules_fail_on_one_line(tmp_path, edit, needle):
    text = (REPO / "corpus" / "fusion" / "vllm.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "vllm.yaml"
    path.write_text(text.replace(*edit, 1))
    with pytest.raises(SpecError) as err:
        load_table(path)
    line = err.value.one_line()
    assert needle in line and "vllm.yaml:" in line and "\n" not in line
