"""Layout ops: split and merge heads, slice, concat, expand; views move no data.

Layer: engine.language (on :mod:`engine.language.ops.base`).
"""
from __future__ import annotations

from engine.language.shapes import Axis, AxisMap, Carried, Merged, New, Split, Tensor, carried_all
from engine.language.ops.base import ZERO, Op


def _split_heads_shape(call):
    x = call.inputs[0]
    call.require_equal(x.axes[-1].size, call.dims["heads"] * call.dims["head_dim"],
                       f"split_heads: last axis {x.axes[-1].name} is not heads x head_dim")
    last = x.rank - 1
    out = Tensor(x.axes[:-1] + (call.axis("heads"), call.axis("head_dim")))
    return out, AxisMap(carried_all(x)[:-1] + (Split(0, last, 0, 2), Split(0, last, 1, 2)))


def _merge_heads_shape(call):
    x = call.inputs[0]
    call.require_rank(0, (3, 4), "merge_heads input")
    name = call.attrs["name"] or f"{x.axes[-2].name}*{x.axes[-1].name}"
    out = Tensor(x.axes[:-2] + (Axis(name, x.axes[-2].size * x.axes[-1].size),))
    return out, AxisMap(carried_all(x)[:-2] + (Merged(0, (x.rank - 2, x.rank - 1)),))


def _slice_shape(call):
    x = call.inputs[0]
    if call.check and x.axes[-1].size.is_number and call.dims["size"].is_number \
            and call.dims["size"] > x.axes[-1].size:
        raise call.fail(f"slice of {call.dims['size']} from an axis of {x.axes[-1].size}")
    out = Tensor(x.axes[:-1] + (call.axis("size"),))
    return out, AxisMap(carried_all(x)[:-1] + (New(),))


def _concat_shape(call):
    first = call.inputs[0]
    for other in call.inputs[1:]:
        if other.rank != first.rank:
            raise call.fail(f"concat inputs {first} and {other} differ in rank",
                            "use an expand node to add the missing axis")
        for a, b in zip(first.axes[:-1], other.axes[:-1]):
            call.require_equal(a.size, b.size, f"concat axis {a.name}")
    size = sum((t.axes[-1].size for t in call.inputs), ZERO)
    name = call.attrs["name"] or "+".join(t.axes[-1].name for t in call.inputs)
    out = Tensor(first.axes[:-1] + (Axis(name, size),))
    return out, AxisMap(carried_all(first)[:-1] + (New(),))


def _expand_shape(call):
    x = call.inputs[0]
    at = call.attrs["at"] % (x.rank + 1)
    axes = list(x.axes)
    axes.insert(at, call.axis("size"))
    sources = [Carried(0, i) for i in range(x.rank)]
    sources.insert(at, New())
    return Tensor(tuple(axes)), AxisMap(tuple(sources))


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
    "split_heads": Op(
        "split_heads", "View [.., heads*head_dim] as [.., heads, head_dim].",
        "axis_replace", (1, 1), _split_heads_shape, dims=("heads", "head_dim"), view=True),
    "merge_heads": Op(
        "merge_heads", "View [.., heads, head_dim] as [.., heads*head_dim].",
        "axis_replace", (1, 1), _merge_heads_shape, attrs={"name": ""}, view=True),
    "slice": Op(
        "slice", "Take `size` features of the last axis (e.g. the rope part of a head).",
        "axis_select", (1, 1), _slice_shape, dims=("size",), view=True, partial=True),
    "concat": Op(
        "concat", "Concatenate inputs along the last axis; other axes must agree.",
        "axis_concat", (2, 8), _concat_shape, attrs={"name": ""}),
    "expand": Op(
        "expand", "Broadcast-view with a new axis of `size` at position `at` (no copy, no FLOPs).",
        "explicit", (1, 1), _expand_shape, dims=("size",), attrs={"at": -2}, view=True),
}
