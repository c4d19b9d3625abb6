"""Matmul ops: embedding (a table lookup), linear, per-head and grouped linears.

Layer: engine.language (on :mod:`engine.language.ops.base`). A multiply-add is 2 FLOPs.
"""
from __future__ import annotations

from engine.language.shapes import Axis, AxisMap, New, Tensor, carried_all
from engine.language.ops.base import ZERO, Leaf, Op, _last_is, _rows


def _embedding_shape(call):
    ids = call.inputs[0]
    out = Tensor(ids.axes + (call.axis("dim"),))
    return out, AxisMap(carried_all(ids) + (New(),))


def _linear_shape(call):
    x = call.inputs[0]
    _last_is(call, "in", "linear input")
    out = Tensor(x.axes[:-1] + (call.axis("out"),))
    return out, AxisMap(carried_all(out)[:-1] + (New(),), ((0, x.rank - 1),))


#: How a linear's weight matrix is laid out in the checkpoint: ``out_in`` ([out, in], nn.Linear)
#: or ``in_out`` ([in, out]: stored transposed, e.g. Llama 4's stacked experts used with bmm).
LAYOUTS = ("out_in", "in_out")


def _linear_leaves(call):
    if call.attrs["layout"] not in LAYOUTS:
        raise call.fail(f"unknown layout {call.attrs['layout']!r}", "use one of: " + ", ".join(LAYOUTS))
    axes = (call.axis("out"), call.axis("in"))
    if call.attrs["layout"] == "in_out":
        axes = axes[::-1]
    leaves = [Leaf("weight", axes, matrix=True)]
    if call.attrs["bias"]:
        leaves.append(Leaf("bias", (call.axis("out"),)))
    return tuple(leaves)


def _linear_flops(call, out):
    rows = _rows(call.inputs[0])
    flops = 2 * rows * call.dims["in"] * call.dims["out"]
    return flops + (rows * call.dims["out"] if call.attrs["bias"] else ZERO)


def _head_linear_shape(call):
    x = call.inputs[0]
    call.require_rank(0, (3, 4), "head_linear input")
    call.require_equal(x.axes[-2].size, call.dims["heads"], "head_linear heads")
    call.require_equal(x.axes[-1].size, call.dims["in"], "head_linear input width")
    out = Tensor(x.axes[:-1] + (call.axis("out"),))
    return out, AxisMap(carried_all(out)[:-1] + (New(),), ((0, x.rank - 1),))


def _grouped_linear_shape(call):
    x = call.inputs[0]
    call.require_equal(x.axes[-2].size, call.dims["groups"], "grouped_linear groups")
    call.require_equal(x.axes[-1].size, call.dims["in"], "grouped_linear input width")
    out = Tensor(x.axes[:-1] + (call.axis("out"),))
    return out, AxisMap(carried_all(x)[:-1] + (New(),), ((0, x.rank - 1),))


def _source_ids(call):
    raise call.fail("internal: source shapes come from the stack inputs")


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
    "embedding": Op(
        "embedding", "Table lookup: token ids -> rows of a [vocab, dim] matrix.",
        "source", (1, 1), _embedding_shape, dims=("vocab", "dim"),
        leaves=lambda c: (Leaf("weight", (c.axis("vocab"), c.axis("dim")), matrix=True),), placement="rows"),
    "linear": Op(
        "linear", "y = x W^T (+ b): contracts the last axis `in`, produces a new axis `out`; "
        "`layout: in_out` stores W as [in, out] (transposed) in the checkpoint.",
        "contract", (1, 1), _linear_shape, _linear_flops, _linear_leaves,
        dims=("in", "out"), attrs={"bias": False, "layout": "out_in"}, placement="matmul"),
    "head_linear": Op(
        "head_linear", "Per-head matmul [.., heads, in] -> [.., heads, out] (MLA weight absorption).",
        "contract", (1, 1), _head_linear_shape,
        lambda c, out: 2 * _rows(c.inputs[0]) * c.dims["in"] * c.dims["out"],
        lambda c: (Leaf("weight", (c.axis("heads"), c.axis("out"), c.axis("in")), matrix=True),),
        dims=("heads", "in", "out"), placement="matmul"),
    "grouped_linear": Op(
        "grouped_linear", "One matmul per group: [.., groups, in] -> [.., groups, out] with the "
        "groups' weights stacked as one [groups*out, in] matrix (DeepSeek-V4's wo_a).",
        "contract", (1, 1), _grouped_linear_shape,
        lambda c, out: 2 * Tensor(c.inputs[0].axes[:-1]).numel * c.dims["in"] * c.dims["out"],
        lambda c: (Leaf("weight", (Axis("grouped_out", c.dims["groups"] * c.dims["out"]), c.axis("in")),
                        matrix=True),), dims=("groups", "in", "out"), placement="matmul"),
}
