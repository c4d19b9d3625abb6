"""The model page's "Weights and cost per block": every block that does work moves bytes, in every
stack (issue 20: the MTP stack's rows showed 0 B beside non-zero FLOPs, because only the served
``main`` stack was placed when the reference bytes were measured)."""
from __future__ import annotations

import pytest

from engine.batch.export import model_document

MTP_MODELS = ["deepseek-ai/DeepSeek-V3", "Qwen/Qwen3.5-27B"]
#: The MTP stack's parameters: DeepSeek-V3's by hand from config.json (tests/test_cli.py
#: test_show_json_carries_numbers_and_formulas writes the sum out), Qwen3.5-27B's as vLLM's
#: Qwen3_5MultiTokenPredictor counts them (tests/test_mtp_decoding.py MTP_PARAMS).
MTP_PARAMS = {"deepseek-ai/DeepSeek-V3": 13_463_426_048, "Qwen/Qwen3.5-27B": 424_699_392}


@pytest.mark.parametrize("model_id", MTP_MODELS)
def test_every_block_with_flops_has_bytes(evaluation, model_id):
    doc = model_document(evaluation(model_id))
    stacks = {c["stack"] for c in doc["components"]}
    assert "mtp" in stacks
    for c in doc["components"]:
        for phase in ("prefill", "decode"):
            if c[f"flops_{phase}"]["value"] > 0:
                assert c[f"bytes_{phase}"] > 0, (c["uid"], phase)
    mtp = next(c for c in doc["components"] if c["uid"] == "mtp")
    assert mtp["params"]["value"] == MTP_PARAMS[model_id]


def test_mtp_norm_bytes_by_hand(evaluation):
    """DeepSeek-V3's MTP ``hnorm`` (RMSNorm over hidden 7168, config.json) at the decode reference
    point (one request, one token): it reads 7168 BF16 values and 7168 BF16 weights and writes 7168
    BF16 values: 3 x 7168 x 2 = 43,008 bytes."""
    doc = model_document(evaluation("deepseek-ai/DeepSeek-V3"))
    op = next(o for o in doc["ops"] if o["uid"] == "mtp/layers[mtp]/hnorm")
    assert op["bytes_decode"] == 3 * 7168 * 2 == 43_008
