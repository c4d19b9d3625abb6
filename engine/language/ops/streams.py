"""Residual streams beyond one: a layer reading a stream's history, the depth-weighted sum over
it (DenseFormer) and hyper-connections (DeepSeek-V4's n carried streams).

Layer: engine.language (on :mod:`engine.language.ops.base`).
"""
from __future__ import annotations

import sympy

from engine.language.shapes import Axis, AxisMap, Carried, New, Tensor, carried_all
from engine.language.ops.base import Leaf, Op


def _stream_read_shape(call):
    x = call.inputs[0]
    take = call.attrs["take"]
    if take in ("value", "each"):
        return x, AxisMap(carried_all(x))
    n = call.dims.get("count")
    if n is None:
        raise call.fail(f"`take: {take}` needs the visible history length", "internal: the walk sets dims.count")
    if take == "all":
        out = Tensor(x.axes[:-1] + (Axis("history", n), x.axes[-1]))
        return out, AxisMap(carried_all(x)[:-1] + (New(), Carried(0, x.rank - 1)))
    out = Tensor(x.axes[:-1] + (Axis(f"{x.axes[-1].name}_history", n * x.axes[-1].size),))
    return out, AxisMap(carried_all(x)[:-1] + (New(),))


def _depth_sum_shape(call):
    x = call.inputs[0]
    if x.rank < 3 or x.axes[-2].name != "history":
        raise call.fail(f"depth_weighted_sum reads a history [.., history, dim], got {x}",
                        "feed it a `reads: <append stream>, take: all` node")
    out = Tensor(x.axes[:-2] + x.axes[-1:])
    return out, AxisMap(carried_all(x)[:-2] + (Carried(0, x.rank - 1),), ((0, x.rank - 2),))


def _hc_width(call) -> sympy.Expr:
    return (2 + call.dims["streams"]) * call.dims["streams"]


def _hc_weights_shape(call):
    x = call.inputs[0]
    call.require_rank(0, 4, "hyper-connection streams [batch, seq, streams, dim]")
    call.require_equal(x.axes[2].size, call.dims["streams"], "hyper-connection stream count")
    out = Tensor(x.axes[:2] + (Axis("hc_mix", _hc_width(call)),))
    return out, AxisMap((Carried(0, 0), Carried(0, 1), New()), ((0, 2), (0, 3)))


def _hc_weights_flops(call, out):
    """Unweighted RMS norm of the flattened streams, the (2+n)n-output projection, the sigmoid /
    softmax gates and the Sinkhorn passes (2 row + 2 column ops per element per pass)."""
    tokens = Tensor(call.inputs[0].axes[:2]).numel
    n, d = call.dims["streams"], call.dims["dim"]
    return tokens * (4 * n * d + 2 * n * d * _hc_width(call) + 5 * _hc_width(call)
                     + 4 * call.attrs["sinkhorn_iters"] * n * n)


def _hc_leaves(call):
    prefix, n, d = call.attrs["name"], call.axis("streams"), call.axis("dim")
    width = Axis("hc_mix", _hc_width(call))
    return (Leaf(f"{prefix}_fn", (width, Axis("hc_flat", n.size * d.size))),
            Leaf(f"{prefix}_base", (width,)), Leaf(f"{prefix}_scale", (Axis("hc_gates", sympy.Integer(3)),)))


def _hc_collapse_shape(call):
    x, _ = call.inputs
    call.require_rank(0, 4, "hyper-connection streams [batch, seq, streams, dim]")
    return Tensor(x.axes[:2] + x.axes[3:]), AxisMap((Carried(0, 0), Carried(0, 1), Carried(0, 3)), ((0, 2),))


def _hc_expand_shape(call):
    f, x, _ = call.inputs
    call.require_rank(1, 4, "hyper-connection streams [batch, seq, streams, dim]")
    call.require_equal(f.axes[-1].size, x.axes[-1].size, "sublayer output width")
    return x, AxisMap(tuple(Carried(1, i) for i in range(4)))


def _hc_expand_flops(call, out):
    """out[k] = post[k] f + sum_j comb[j, k] res[j]: n^2 multiply-adds and n products per feature."""
    x = call.inputs[1]
    n = x.axes[2].size
    return Tensor(x.axes[:2]).numel * x.axes[3].size * (2 * n * n + 2 * n)


def _hc_head_shape(call):
    x = call.inputs[0]
    call.require_rank(0, 4, "hyper-connection streams [batch, seq, streams, dim]")
    return Tensor(x.axes[:2] + x.axes[3:]), AxisMap((Carried(0, 0), Carried(0, 1), Carried(0, 3)), ((0, 2),))


def _hc_head_leaves(call):
    x = call.inputs[0]
    n, d = x.axes[2], x.axes[3]
    return (Leaf("hc_fn", (n, Axis("hc_flat", n.size * d.size))), Leaf("hc_base", (n,)),
            Leaf("hc_scale", (Axis("hc_gates", sympy.Integer(1)),)))


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
    "stream_read": Op(
        "stream_read", "A layer reads a stream (engine.language.streams): an internal stream's value, one "
        "archived element (`each`), the visible history as a new axis (`all`) or joined along the "
        "last axis (`concat`). A view: its consumers read the producer's storage.",
        "explicit", (1, 1), _stream_read_shape, optional_dims=("count",), attrs={"take": "value"}, view=True),
    "depth_weighted_sum": Op(
        "depth_weighted_sum", "Learned weighted sum over a layer history [.., history, dim] -> "
        "[.., dim], one scalar weight per visible element (DenseFormer's depth-weighted average; "
        "2 FLOPs per history element).",
        "contract", (1, 1), _depth_sum_shape, lambda c, out: 2 * c.inputs[0].numel,
        lambda c: (Leaf("weight", (c.inputs[0].axes[-2],)),)),
    "hc_weights": Op(
        "hc_weights", "Hyper-connection mixing weights from the n carried streams [b, s, n, dim]: "
        "unweighted RMS norm of the flattened streams, a (2+n)n-output projection (leaves "
        "<name>_fn, _base, _scale), sigmoid pre/post gates and a Sinkhorn-normalised n x n "
        "residual mix (DeepSeek-V4).", "contract", (1, 1), _hc_weights_shape, _hc_weights_flops,
        _hc_leaves, dims=("streams", "dim"), attrs={"name": "hc", "sinkhorn_iters": 20}),
    "hc_collapse": Op(
        "hc_collapse", "Pre map: the n streams weighted into one sublayer input [b, s, n, dim] -> "
        "[b, s, dim] (2n FLOPs per feature).", "contract", (2, 2), _hc_collapse_shape,
        lambda c, out: 2 * c.inputs[0].numel),
    "hc_expand": Op(
        "hc_expand", "Post map and residual mix: the sublayer output spread over the n streams "
        "plus the Sinkhorn mix of the old streams (sublayer out, streams, weights) -> streams.",
        "explicit", (3, 3), _hc_expand_shape, _hc_expand_flops),
    "hc_head": Op(
        "hc_head", "Collapse the n streams before the final norm with sigmoid weights from the "
        "flattened streams (leaves hc_fn, hc_base, hc_scale).", "contract", (1, 1), _hc_head_shape,
        lambda c, out: Tensor(c.inputs[0].axes[:2]).numel * c.inputs[0].axes[2].size
        * c.inputs[0].axes[3].size * (4 + 2 * c.inputs[0].axes[2].size + 2), _hc_head_leaves),
}
