"""Guards on hybrid stacks (Nemotron-H / Nemotron 3, Qwen3.5): real mutations of the corpus run
through the real guards.

* schedule: the spec's per-layer plan must agree with config.json's per-layer plan, layer by layer,
  whether the config gives it as a list (Qwen3.5 ``layer_types``) or as a string of one character
  per layer (Nemotron's ``hybrid_override_pattern``: M Mamba2, * attention, - MLP, E MoE);
* axiom: a recurrent op keeps a fixed-size state declared as a cache entry, and a history cache
  (attention keys) declared ``growth: state`` is caught because its size grows with the context.
"""
from __future__ import annotations

from tests.test_guards import findings, mutate

NANO_SPEC = "models/nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.yaml"
H56_SPEC = "models/nvidia--Nemotron-H-56B-Base-8K.yaml"
Q35 = "models/Qwen--Qwen3.5-27B.yaml"
MAMBA2 = "components/library/mamba2_mixer.yaml"
GQA = "components/library/gqa_attention.yaml"
NANO_MAP = 'map: {M: mamba, "*": attention, "-": mlp, E: moe}'


def test_schedule_guard_catches_a_swapped_pattern_map(tmp_path):
    # attention and MoE swapped: the 6 "*" layers route over experts, the 23 "E" layers attend
    root = mutate(tmp_path, [(NANO_SPEC, NANO_MAP, 'map: {M: mamba, "*": moe, "-": mlp, E: attention}')])
    found, _ = findings(root, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "schedule")
    messages = sorted(f.message for f in found)
    assert all(f.node == "main/layers" for f in found) and len(found) == 2, messages
    assert any("makes 6 of 52 layers attention (history-cache); the spec's schedule makes 23" in m for m in messages)
    assert any("makes 23 of 52 layers MoE; the spec's schedule makes 6" in m for m in messages)


def test_schedule_guard_checks_the_pattern_layer_by_layer(tmp_path):
    # the right counts (54 M, 10 *, 54 -) in the wrong places: blocks instead of the interleaving
    root = mutate(tmp_path, [(H56_SPEC, 'schedule: {by: config.hybrid_override_pattern, map: {M: mamba, "*": attention, "-": mlp}}',
                              'schedule: [{template: attention, when: "layer < 10"}, {template: mamba, when: "layer < 64"}, '
                              '{template: mlp}]')])
    found, _ = findings(root, "Nemotron-H-56B-Base-8K", "schedule")
    messages = sorted(f.message for f in found)
    assert len(found) == 2, messages
    assert any("makes 54 of 118 layers linear-attention (recurrent-state); the spec's schedule makes 54 (layers "
               in m for m in messages)
    assert any("makes 10 of 118 layers attention (history-cache); the spec's schedule makes 10 (layers 0, 1, 2, 3, 4"
               in m for m in messages)


def test_schedule_guard_catches_a_stack_shorter_than_the_pattern(tmp_path):
    root = mutate(tmp_path, [(NANO_SPEC, "        repeat: n_layers\n", "        repeat: 50\n")])
    found, _ = findings(root, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "schedule")
    assert any("config.hybrid_override_pattern has 52 entries but the spec's main stack has 50 layers" in f.message
               for f in found), [f.message for f in found]


def test_schedule_guard_catches_qwen35_full_attention_layers_without_a_history(tmp_path):
    # Qwen3.5's full-attention layers given a Gated DeltaNet: layer_types says 16 layers attend over
    # a KV history and 48 keep a state; the spec now has no attention layer and 64 recurrent ones
    root = mutate(tmp_path, [(Q35, "attention: {component: gated_attention, with: {rope_theta: rope_theta, rotary: rotary}}",
                              "attention: {component: gated_deltanet, module: linear_attn}")])
    found, _ = findings(root, "Qwen3.5-27B", "schedule")
    messages = sorted(f.message for f in found)
    assert any("config.layer_types" in m and "makes 16 of 64 layers attention (history-cache); the spec's schedule "
               "makes 0" in m for m in messages), messages
    assert any("makes 48 of 64 layers linear-attention (recurrent-state); the spec's schedule makes 64" in m
               for m in messages), messages


def test_axiom_guard_catches_a_mamba2_layer_without_its_ssm_state(tmp_path):
    root = mutate(tmp_path, [(MAMBA2, "  - {name: ssm_state, node: ssd, kind: ssm_state, growth: state, dtype: $state_dtype}\n", "")])
    found, _ = findings(root, "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "axiom")
    assert [f.node for f in found] == ["main/layers[mamba]/mixer/ssd", "main/layers[mamba]/mixer/ssd@decode"]
    assert all("recurrent op mamba2_ssd keeps a state between decode steps but no cache entry declares it"
               in f.message for f in found)


def test_axiom_guard_catches_a_mamba2_layer_without_its_conv_state(tmp_path):
    root = mutate(tmp_path, [(MAMBA2, "  - {name: conv_state, node: conv1d, kind: conv_state, growth: state, dtype: bf16}\n", "")])
    found, _ = findings(root, "Nemotron-H-56B-Base-8K", "axiom")
    assert [f.node for f in found] == ["main/layers[mamba]/mixer/conv1d"]
    assert "recurrent op conv1d keeps a state" in found[0].message


def test_axiom_guard_catches_an_attention_history_declared_as_a_state(tmp_path):
    # Nemotron's attention keys declared a fixed state: the KV that grows with the context would vanish
    root = mutate(tmp_path, [(GQA, "{name: key, node: k_cache, kind: kv, growth: every_token, window: $window}",
                              "{name: key, node: k_cache, kind: kv, growth: state}")])
    found, _ = findings(root, "NVIDIA-Nemotron-3-Super-120B-A12B-FP8", "axiom")
    assert [f.node for f in found] == ["main/layers[attention]/mixer/k_cache"]
    assert "declared growth: state, but its kv_cache node keeps a history that grows with the context" in found[0].message
