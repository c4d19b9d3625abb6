"""Norms, activations, rotary embedding and elementwise arithmetic: ops that keep their input's
shape (or broadcast two inputs) and cost a fixed number of FLOPs per element.

Layer: engine.language (on :mod:`engine.language.ops.base`). The per-element costs are
:data:`ACTIVATION_FLOPS` and the constants in each op's doc line.
"""
from __future__ import annotations

import sympy

from engine.language.shapes import AxisMap, Carried, Tensor, carried_all
from engine.language.ops.base import Leaf, Op, _last_is, _preserve


#: FLOPs per element of elementwise functions.
ACTIVATION_FLOPS = {"silu": 4, "gelu": 8, "gelu_tanh": 8, "relu": 1, "sigmoid": 3, "swiglu_oai": 8,
                    "softplus": 3, "scale": 1, "relu2": 2,   # relu2: max(x, 0) squared (Nemotron-H)
                    "softcap": 5}   # softcap: c * tanh(x / c) (Gemma's logits)


def _norm_shape(call):
    _last_is(call, "dim", "norm input")
    return _preserve(call)


def _rope_flops(call, out):
    x = call.inputs[0]
    rotary = call.dims.get("rotary", x.axes[-1].size)
    return 3 * x.computed * rotary / x.axes[-1].size


def _known_fn(call, attr: str) -> None:
    if call.attrs[attr] not in ACTIVATION_FLOPS:
        raise call.fail(f"unknown activation {call.attrs[attr]!r}", "use one of: " + ", ".join(ACTIVATION_FLOPS))


def _scale_leaves(call):
    """The stored factor: ``size`` elements (default: the input's last axis), a parameter or a buffer."""
    if not call.attrs["leaf"]:
        return ()
    axis = call.axis("size") if "size" in call.dims else call.inputs[0].axes[-1]
    return (Leaf(call.attrs["leaf"], (axis,), kind="buffer" if call.attrs["buffer"] else "param"),)


def _activation_shape(call):
    _known_fn(call, "fn")
    return _preserve(call)


def _glu_shape(call):
    _known_fn(call, "act")
    gate, up = call.inputs
    if gate.rank != up.rank:
        raise call.fail(f"gate {gate} and up {up} differ in rank")
    for a, b in zip(gate.axes, up.axes):
        call.require_equal(a.size, b.size, f"gate/up axis {a.name}")
    return gate, AxisMap(carried_all(gate))


def _is_one(size: sympy.Expr) -> bool:
    return size.is_number and size == 1


def _binary_shape(call):
    """Elementwise over two operands of equal rank. An axis of size 1 in one operand broadcasts
    against the other's (a per-token gate [.., 1] times [.., hidden]); any other mismatch is an
    error. Each output axis is carried from the operand that has it at full size (the first when
    both do), so placement follows that operand and never splits a broadcast axis."""
    a, b = call.inputs
    if a.rank != b.rank:
        raise call.fail(f"operands {a} and {b} differ in rank",
                        "both inputs must have the same axes (a broadcast axis has size 1)")
    axes, sources = [], []
    for j, (x, y) in enumerate(zip(a.axes, b.axes)):
        if _is_one(x.size) and not _is_one(y.size):
            axes.append(y)
            sources.append(Carried(1, j))
            continue
        if not _is_one(y.size):
            call.require_equal(x.size, y.size, f"operand axis {x.name}",
                               "operands must agree on every axis, or have size 1 where they broadcast")
        axes.append(x)
        sources.append(Carried(0, j))
    if all(s.source == 0 for s in sources):
        return a, AxisMap(tuple(sources))
    if all(s.source == 1 for s in sources):
        return b, AxisMap(tuple(sources))
    return Tensor(tuple(axes)), AxisMap(tuple(sources))


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
    "rmsnorm": Op(
        "rmsnorm", "RMS normalisation over the last axis with a learned scale (4 FLOPs/element).",
        "preserve", (1, 1), _norm_shape, lambda c, out: 4 * c.inputs[0].computed,
        lambda c: (Leaf("weight", (c.axis("dim"),)),) if c.attrs["weight"] else (),
        dims=("dim",), attrs={"weight": True}, placement="norm"),
    "layernorm": Op(
        "layernorm", "Layer normalisation over the last axis with scale and bias (7 FLOPs/element).",
        "preserve", (1, 1), _norm_shape, lambda c, out: 7 * c.inputs[0].computed,
        lambda c: (Leaf("weight", (c.axis("dim"),)), Leaf("bias", (c.axis("dim"),))),
        dims=("dim",), placement="norm"),
    "rope": Op(
        "rope", "Rotary position embedding on the first `rotary` features of the last axis "
        "(3 FLOPs per rotated element); `theta` (base) and `scaling` (context-extension factor) "
        "bind the config's RoPE settings so the structural guard can check them.",
        "preserve", (1, 1), _preserve, _rope_flops, optional_dims=("rotary", "theta", "scaling")),
    "activation": Op(
        "activation", "Elementwise activation `fn` (FLOPs per element from ACTIVATION_FLOPS).",
        "preserve", (1, 1), _activation_shape,
        lambda c, out: ACTIVATION_FLOPS[c.attrs["fn"]] * c.inputs[0].computed,
        attrs={"fn": "silu"}),
    "glu": Op(
        "glu", "Gated product act(gate) * up of two equal-shape inputs (act FLOPs + 1 per element).",
        "broadcast", (2, 2), _glu_shape,
        lambda c, out: (ACTIVATION_FLOPS[c.attrs["act"]] + 1) * out.computed,
        attrs={"act": "silu"}),
    "scale": Op(
        "scale", "Multiply by a stored factor (1 FLOP/element): leaf `leaf` of `size` elements "
        "(default: the last axis; 1 for a scalar), a parameter or, with `buffer`, a checkpoint "
        "buffer (Gemma 4's router scales and layer scalar).",
        "preserve", (1, 1), _preserve, lambda c, out: c.inputs[0].computed, _scale_leaves,
        optional_dims=("size",), attrs={"leaf": "", "buffer": False}),
    "add": Op("add", "Elementwise sum of two inputs; a size-1 axis broadcasts (1 FLOP per output element).",
              "broadcast", (2, 2), _binary_shape, lambda c, out: out.computed),
    "mul": Op("mul", "Elementwise product of two inputs; a size-1 axis broadcasts (1 FLOP per output element).",
              "broadcast", (2, 2), _binary_shape, lambda c, out: out.computed),
}
