"""Rule tests for the `scale` op and the `softcap` activation (Gemma 4's router scales, layer
scalar, scaled embeddings and soft-capped logits): exact shapes, axis maps, formulas and leaves."""
from __future__ import annotations

from engine.language import symbols
from engine.language.ops import OPS
from engine.language.shapes import Carried
from tests.test_ops import B, HID, S, run, tensor

E, K = symbols.dim("n_experts"), symbols.dim("top_k")


def test_scale_without_a_leaf_costs_one_flop_per_element():
    c, out, amap = run("scale", [tensor(B, S, HID)])
    assert out.sizes == (B, S, HID) and amap.outputs == (Carried(0, 0), Carried(0, 1), Carried(0, 2))
    assert OPS["scale"].flops(c, out) == B * S * HID
    assert OPS["scale"].leaves(c) == () and OPS["scale"].params(c) == 0


def test_scale_leaf_defaults_to_the_last_axis_and_may_be_sized():
    c, out, _ = run("scale", [tensor(B, S, HID)], attrs={"leaf": "scale"})
    (leaf,) = OPS["scale"].leaves(c)
    assert leaf.name == "scale" and leaf.axes[0].size == HID and leaf.kind == "param"
    assert OPS["scale"].params(c) == HID
    # per-expert scale on routing weights [b, s, k]: a leaf of n_experts elements
    c, out, _ = run("scale", [tensor(B, S, K)], {"size": E}, {"leaf": "per_expert_scale"})
    assert out.sizes == (B, S, K) and OPS["scale"].params(c) == E and OPS["scale"].flops(c, out) == B * S * K


def test_scale_buffer_is_stored_not_counted():
    c, _, _ = run("scale", [tensor(B, S, HID)], {"size": 1}, {"leaf": "layer_scalar", "buffer": True})
    (leaf,) = OPS["scale"].leaves(c)
    assert leaf.kind == "buffer" and leaf.axes[0].size == 1
    assert OPS["scale"].params(c) == 0


def test_softcap_activation():
    c, out, _ = run("activation", [tensor(B, S, HID)], attrs={"fn": "softcap"})
    assert OPS["activation"].flops(c, out) == 5 * B * S * HID   # x / c, tanh (3, as sigmoid), * c
