"""The MTP modules of Nemotron 3 Ultra and 3.5 Lightning (issue 40), by hand from config.json.

Both configs declare one MTP module (num_nextn_predict_layers 1) of the blocks
mtp_layers_block_type lists (attention, then MoE). SGLang's NemotronHForCausalLMMTP
(sglang/srt/models/nemotron_h_mtp.py) builds it: enorm and hnorm (hidden each) and eh_proj [2h ->
h] on the first block, final_layernorm on the last, each block a NemotronH block (its norm and
mixer) as in the main stack, the embedding and lm_head read from the main model. transformers'
NemotronH class does not build it, so the main stack's verification is unchanged and the count
below is the only check: an attention block is its norm, q/k/v/o (no bias, no rotary); an MoE
block its norm, the router [experts, h] (the correction bias is a buffer), the routed experts' up
and down (squared ReLU, no gate) in the latent width, fc1/fc2_latent_proj when moe_latent_size is
set, and the shared expert's up and down at full width.
"""
from __future__ import annotations

import json

import pytest

from site_builder import cli
from tests.conftest import SNAPSHOTS


def _hand_mtp(config: dict) -> int:
    c = config.get("text_config", config)
    h, heads, kv, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    experts, ff, shared = c["n_routed_experts"], c["moe_intermediate_size"], c["moe_shared_expert_intermediate_size"]
    latent = c.get("moe_latent_size")
    width = latent or h
    blocks = {"attention": h + 2 * h * heads * d + 2 * h * kv * d,
              "moe": h + h * experts + experts * 2 * width * ff + (2 * h * latent if latent else 0) + 2 * h * shared}
    per_module = 2 * h + 2 * h * h + sum(blocks[b] for b in c["mtp_layers_block_type"]) + h
    return c["num_nextn_predict_layers"] * per_module


@pytest.mark.parametrize("model_id,expected", [
    ("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 11_215_609_856),
    ("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", 1_335_325_824),
])
def test_nemotron_mtp_module_equals_a_hand_count(model_id, expected, capsys):
    config = json.loads((SNAPSHOTS / f"{model_id.replace('/', '--')}.config.json").read_text())
    assert config.get("text_config", config)["mtp_layers_block_type"] == ["attention", "moe"]
    assert cli.main(["show", model_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params_mtp"]["value"] == _hand_mtp(config) == expected
