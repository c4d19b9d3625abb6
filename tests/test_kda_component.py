"""The kda_attention component on its own (Kimi Delta Attention: Kimi Linear, Kimi K3).

No Kimi model is in the corpus yet; the component is checked as one layer (the attention
contract's KDA variant, corpus/contracts/attention/kda.yaml, with its dims replaced) against two
external facts:

* parameters: transformers 5.24's ``KimiLinearDeltaAttention`` built on the meta device from a
  ``KimiLinearConfig`` at Kimi K3's published dims (``text_config``: hidden_size 7168,
  linear_attn_config num_heads 96, head_dim 128, short_conv_kernel_size 4; the config.json kept in
  corpus/snapshots) and at ``KimiLinearConfig``'s defaults (Kimi Linear: hidden 2304, 32 heads of
  128), weight by weight (transformers concatenates the checkpoint's q/k/v_conv1d into one conv1d
  and moves f_a_proj, f_b_proj, dt_bias and A_log under forget_gate when it loads them), and by a
  hand count;
* the per-request state by hand: per head one [d_k, d_v] float32 matrix (the modeling code keeps
  the recurrent state in float32) plus each of the three convolutions' last kernel - 1 inputs
  (BF16), fixed whatever the context.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import sympy
import yaml

from engine.language import kv, quantities, symbols
from engine.language.api import evaluate_spec
from engine.language.model_load import load_model
from engine.language.errors import SpecError, Where
from engine.language.ops import OPS, OpCall
from engine.language.shapes import Axis, Tensor
from tests.conftest import SNAPSHOTS

# tests/test_hf_oracle.py's skip reason: the transformers oracle is an optional extra
_WHY = "the transformers oracle is not installed: pip install -e '.[oracle]' (torch, transformers)"

VARIANT = Path(__file__).resolve().parents[1] / "corpus" / "contracts" / "attention" / "kda.yaml"
K3 = json.loads((SNAPSHOTS / "moonshotai--Kimi-K3.config.json").read_text())["text_config"]
K3_DIMS = {"hidden": K3["hidden_size"], "heads": K3["linear_attn_config"]["num_heads"],
           "head_dim": K3["linear_attn_config"]["head_dim"],
           "kernel": K3["linear_attn_config"]["short_conv_kernel_size"]}
# KimiLinearConfig's defaults (transformers 5.24, configuration_kimi_linear.py)
KIMI_LINEAR_DIMS = {"hidden": 2304, "heads": 32, "head_dim": 128, "kernel": 4}
F32, BF16 = 4, 2


def _one_layer(corpus, tmp_path, d: dict):
    """The contract's KDA variant with its dims replaced: one kda_attention layer."""
    spec = yaml.safe_load(VARIANT.read_text())
    spec["dims"] = {"hidden": d["hidden"], "kda_heads": d["heads"], "kda_head_dim": d["head_dim"],
                    "conv_kernel": d["kernel"]}
    path = tmp_path / "kda.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return evaluate_spec(corpus, load_model(path, corpus.root, corpus.roles, corpus.schemes)).numeric


def _hf_layer(d: dict) -> dict[str, tuple[int, ...]]:
    pytest.importorskip("torch", reason=_WHY)
    pytest.importorskip("transformers", reason=_WHY)
    import torch
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    config = KimiLinearConfig(hidden_size=d["hidden"], num_hidden_layers=1, linear_attn_config={
        "num_heads": d["heads"], "head_dim": d["head_dim"], "short_conv_kernel_size": d["kernel"]})
    with torch.device("meta"):
        module = KimiLinearDeltaAttention(config, layer_idx=0)
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


def _as_transformers(analysis) -> dict[str, tuple[int, ...]]:
    """Our leaves under transformers' names: the checkpoint-to-module renames of its
    conversion_mapping for kimi_linear (the three convolutions concatenated on axis 0)."""
    ours = {leaf.key.removeprefix("attn."): tuple(int(a.size) for a in leaf.axes)
            for row in analysis.rows.values() if "prefill" in row.phases for leaf in row.leaves}
    convs = [ours.pop(f"{x}_conv1d.weight") for x in "qkv"]
    ours["conv1d.weight"] = (sum(c[0] for c in convs),) + convs[0][1:]
    for name in ("f_a_proj.weight", "f_b_proj.weight", "dt_bias", "A_log"):
        ours[f"forget_gate.{name}"] = ours.pop(name)
    return ours


def _hand_params(d: dict) -> int:
    h, n, k = d["hidden"], d["heads"], d["kernel"]
    w = n * d["head_dim"]                              # q, k, v, decay and gate width
    return (3 * h * w                                  # q_proj, k_proj, v_proj
            + 3 * w * k                                # q/k/v_conv1d, depthwise, no bias
            + h * d["head_dim"] + d["head_dim"] * w    # f_a_proj, f_b_proj (rank head_dim)
            + w + n                                    # dt_bias (per channel), A_log (per head)
            + h * n                                    # b_proj (beta per head)
            + h * d["head_dim"] + d["head_dim"] * w    # g_a_proj, g_b_proj
            + d["head_dim"]                            # o_norm (one weight shared by the heads)
            + w * h)                                   # o_proj


@pytest.mark.parametrize("dims", [K3_DIMS, KIMI_LINEAR_DIMS], ids=["kimi-k3", "kimi-linear"])
def test_params_per_layer_equal_transformers(corpus, tmp_path, dims):
    theirs = _hf_layer(dims)
    analysis = _one_layer(corpus, tmp_path, dims)
    ours = _as_transformers(analysis)
    assert set(ours) == set(theirs)
    squeeze = lambda shape: tuple(s for s in shape if s != 1)  # noqa: E731  (A_log is [1, 1, heads, 1] there)
    assert {k: squeeze(v) for k, v in ours.items()} == {k: squeeze(v) for k, v in theirs.items()}
    total = int(quantities.params_total(analysis))
    assert total == sum(math.prod(s) for s in theirs.values()) == _hand_params(dims)


def test_params_per_layer_at_k3_by_hand(corpus, tmp_path):
    # hidden 7168, 96 heads of 128 (width 12288), kernel 4
    assert K3_DIMS == {"hidden": 7168, "heads": 96, "head_dim": 128, "kernel": 4}
    analysis = _one_layer(corpus, tmp_path, K3_DIMS)
    assert int(quantities.params_total(analysis)) == 358_150_368 == _hand_params(K3_DIMS)


@pytest.mark.parametrize("dims", [K3_DIMS, KIMI_LINEAR_DIMS], ids=["kimi-k3", "kimi-linear"])
def test_state_per_request_is_fixed_by_hand(corpus, tmp_path, dims):
    analysis = _one_layer(corpus, tmp_path, dims)
    n, dh = dims["heads"], dims["head_dim"]
    state = n * dh * dh * F32 + 3 * (n * dh) * (dims["kernel"] - 1) * BF16
    assert kv.growing_bytes_per_token(analysis) == 0
    assert kv.fixed_bytes_per_request(analysis) == state
    for length in (1024, 1 << 20):
        assert kv.bytes_per_request(analysis, length) == state
        # a state keeps its own dtype: an FP8 KV deployment does not shrink it
        assert kv.bytes_per_request(analysis, length, kv_dtype="fp8") == state
    if dims is K3_DIMS:
        assert state == 6_291_456 + 221_184


def test_decay_scales_per_head_over_the_channels(corpus, tmp_path):
    """``parameter`` with ``axis: -2``: A_log is one value per head ([heads] leaf) multiplied into
    the [.., heads, d_k] per-channel gate: 1 FLOP per gate element plus -exp(A_log) once (2 per
    head)."""
    analysis = _one_layer(corpus, tmp_path, K3_DIMS)
    row = analysis.rows["main/attn/decay"]
    (leaf,) = row.leaves
    assert (leaf.name, tuple(int(a.size) for a in leaf.axes)) == ("A_log", (96,))
    flops = row.flops.subs({symbols.dim(symbols.BATCH): 1, symbols.dim(symbols.SEQ): 10})
    assert int(flops) == 10 * 96 * 128 + 2 * 96


@pytest.mark.parametrize("axis, error", [(-1, "axis -1"), (-5, "not an axis"), (0, "not an axis"),
                                         ("heads", "not an axis")])
def test_parameter_axis_must_name_an_axis_of_the_right_size(axis, error):
    """[b, s, heads 96, d_k 128] with a per-head vector: axis -2 fits; -1 (d_k) is the wrong size;
    an index past the rank, a non-negative one or a name is refused."""
    x = Tensor(tuple(Axis(n, sympy.Integer(v)) for n, v in (("batch", 1), ("seq", 10), ("kda_heads", 96),
                                                              ("kda_head_dim", 128))))

    def call(a):
        attrs = {**OPS["parameter"].attrs, "name": "A_log", "apply": "mul", "fn": "neg_exp", "axis": a}
        return OpCall("decay", Where("t.yaml", 1), {"dim": sympy.Integer(96)}, {"dim": "kda_heads"}, attrs,
                      (x,), {}, True)

    out, _ = OPS["parameter"].shape(call(-2))
    assert out == x
    with pytest.raises(SpecError, match=error):
        OPS["parameter"].shape(call(axis))
