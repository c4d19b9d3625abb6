"""Parameter counts equal the Hugging Face modeling code's, exactly, for every corpus model.

transformers builds each model on the ``meta`` device from the published config.json (no weights,
no network); the count it reports is an independent external fact. MTP stacks are outside the HF
classes and are checked separately in test_models.py.
"""
from __future__ import annotations

import pytest

from engine import quantities
from tests.conftest import MODEL_IDS, hf_config_path

hf_oracle = pytest.importorskip("tests.hf_oracle", reason="install the oracle extra: pip install -e '.[oracle]'")


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_total_params_equal_hf_modeling_code(model_id, evaluation):
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    assert int(quantities.params_total(evaluation(model_id).numeric)) == report.total_params


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_buffers_are_not_parameters(model_id, evaluation):
    """Checkpoint buffers (DeepSeek's routing bias) are stored but not counted, as in HF."""
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    analysis = evaluation(model_id).numeric
    ours = sum(int(leaf.numel * row.repeat * row.instances)
               for row in analysis.rows.values() if row.stack == "main" and "prefill" in row.phases
               for leaf in row.leaves if leaf.kind == "buffer")
    theirs = sum(int(__import__("math").prod(shape)) for shape in report.buffers.values())
    assert ours == theirs


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_non_layer_parameters_match(model_id, evaluation):
    """Embedding, final norm and head shapes agree with the HF module tree (matched by node: a
    checkpoint may name them differently from transformers' modules, e.g. DeepSeek-V4's head)."""
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    rows = evaluation(model_id).numeric.rows
    for uid, name in (("main/embed_tokens", "model.embed_tokens.weight"), ("main/norm", "model.norm.weight"),
                      ("main/lm_head", "lm_head.weight")):
        (leaf,) = rows[uid].leaves
        assert tuple(int(a.size) for a in leaf.axes) == report.params[name]


def _layer_leaves(analysis, layer: int) -> dict[str, tuple[int, ...]]:
    """Our weight leaves of one layer, keyed like HF's named_parameters."""
    out = {}
    for row in analysis.rows.values():
        if row.stack != "main" or "prefill" not in row.phases or row.shares:
            continue
        template = next((c for u, c in analysis.components.items()
                         if c.template and row.uid.startswith(u + "/")), None)
        if template is None or layer not in template.layers:
            continue
        for leaf in row.leaves:
            if leaf.kind == "param":
                out[leaf.key.format(layer=layer)] = tuple(int(a.size) for a in leaf.axes)
    return out


# Dense models: HF's module tree and the checkpoint share names, so every name and shape of a
# layer must agree both ways (MoE experts are fused into 3-D tensors by transformers 5, unlike
# the per-expert checkpoints, and are covered by the totals above).
DENSE = [m for m in MODEL_IDS if "Llama" in m or m in ("Qwen/Qwen3-8B", "Qwen/Qwen3-32B")]


@pytest.mark.parametrize("model_id", DENSE)
def test_dense_layer_names_and_shapes_match_hf(model_id, evaluation):
    report = hf_oracle.hf_meta_report(hf_config_path(model_id))
    theirs = {k: v for k, v in report.params.items() if k.startswith("model.layers.0.")}
    assert _layer_leaves(evaluation(model_id).numeric, 0) == theirs
