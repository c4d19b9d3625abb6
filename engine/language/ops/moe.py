"""Mixture of experts: routing (top-k scores, hash routing) and the dispatch and combine of
each token to and from its experts.

Layer: engine.language (on :mod:`engine.language.ops.base`).
"""
from __future__ import annotations

from engine.language.shapes import Axis, AxisMap, Carried, New, Tensor, carried_all
from engine.language.ops.base import Leaf, Op, _last_is, _rows


def _topk_shape(call):
    x = call.inputs[0]
    _last_is(call, "experts", "topk input")
    out = Tensor(x.axes[:-1] + (call.axis("k"),))
    return out, AxisMap(carried_all(x)[:-1] + (New(),), ((0, x.rank - 1),))


def _topk_leaves(call):
    if call.attrs["correction_bias"]:
        return (Leaf(call.attrs["bias_name"], (call.axis("experts"),), kind="buffer"),)
    return ()


def _dispatch_shape(call):
    x, idx = call.inputs
    routed = Axis("routed", _rows(x) * idx.axes[-1].size)
    return Tensor((routed, x.axes[-1])), AxisMap((New(), Carried(0, x.rank - 1)))


def _combine_shape(call):
    y, idx = call.inputs
    out = Tensor(idx.axes[:-1] + (y.axes[-1],))
    return out, AxisMap(tuple(Carried(1, i) for i in range(idx.rank - 1)) + (Carried(0, 1),),
                        ((0, 0), (1, idx.rank - 1)))


def _hash_route_shape(call):
    scores, tokens = call.inputs
    call.require_equal(scores.axes[-1].size, call.dims["experts"], "hash_route expert scores")
    out = Tensor(scores.axes[:-1] + (call.axis("k"),))
    return out, AxisMap(carried_all(scores)[:-1] + (New(),), ((0, scores.rank - 1),))


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
    "topk": Op(
        "topk", "Expert scores (softmax or sigmoid) and top-k selection; optional routing "
        "correction bias (a checkpoint buffer, not a parameter).",
        "contract", (1, 1), _topk_shape, lambda c, out: 4 * c.inputs[0].computed, _topk_leaves,
        dims=("experts", "k"), attrs={"score": "softmax", "correction_bias": False,
                                      "bias_name": "e_score_correction_bias"}),
    "moe_dispatch": Op(
        "moe_dispatch", "Gather each token once per selected expert: [.., hidden] -> "
        "[routed = tokens x k, hidden].",
        "explicit", (2, 2), _dispatch_shape, placement="dispatch"),
    "hash_route": Op(
        "hash_route", "Experts fixed by the token id (a [vocab, k] table, a checkpoint buffer) and "
        "weighted by the gate's scores: (scores [.., experts], token ids) -> [.., k].",
        "contract", (2, 2), _hash_route_shape, lambda c, out: 4 * c.inputs[0].computed,
        lambda c: (Leaf("tid2eid", (c.axis("vocab"), c.axis("k")), kind="buffer"),),
        dims=("experts", "k", "vocab")),
    "moe_combine": Op(
        "moe_combine", "Weighted sum of each token's k expert outputs: [routed, hidden] -> "
        "[.., hidden] (2 FLOPs per routed element).",
        "explicit", (2, 2), _combine_shape, lambda c, out: 2 * c.inputs[0].numel, placement="combine"),
}
