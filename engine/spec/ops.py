"""The primitive ops: each is a name, a doc line, and small pure rules (shape + axis map, FLOPs, weights).

Layer: engine.spec. ``OPS`` at the bottom is the whole registry (a dict literal; nothing registers
itself on import). Parameters are never declared separately: an op declares its weight
*leaves* (name, axes, parameter or buffer) and the parameter count is the sum of the parameter
leaves' element counts. Bytes moved are derived from shapes elsewhere, never declared.

FLOPs conventions (documented on the methodology page): a multiply-add is 2 FLOPs; elementwise
costs per element are the constants below; attention counts only unmasked (query, key) pairs.
"""
from __future__ import annotations

import functools

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy

from engine.spec.errors import SpecError, Where
from engine.spec.shapes import Axis, AxisMap, Carried, Merged, New, Split, Tensor, carried_all
from engine.spec import symbols

ZERO = sympy.Integer(0)

#: FLOPs per element of elementwise functions.
ACTIVATION_FLOPS = {"silu": 4, "gelu": 8, "gelu_tanh": 8, "relu": 1, "sigmoid": 3, "swiglu_oai": 8,
                    "softplus": 3, "scale": 1, "relu2": 2,   # relu2: max(x, 0) squared (Nemotron-H)
                    "softcap": 5}   # softcap: c * tanh(x / c) (Gemma's logits)
MASKS = ("causal", "sliding", "chunked", "bidirectional", "topk")
GROWTHS = ("every_token", "window", "compressed", "state")


@dataclass(frozen=True, slots=True)
class Leaf:
    """A weight tensor an op owns: ``name`` (checkpoint leaf, e.g. ``weight``), its axes, its kind.

    ``kind`` is ``param`` (counted as a model parameter) or ``buffer`` (stored in the checkpoint,
    not a parameter: DeepSeek's routing correction bias). ``matrix`` marks the leaves that quant
    schemes apply to (a linear's weight); vectors stay in the scheme's fallback dtype.
    """

    name: str
    axes: tuple[Axis, ...]
    kind: str = "param"
    matrix: bool = False

    @property
    def numel(self) -> sympy.Expr:
        return Tensor(self.axes).numel


@dataclass(frozen=True, slots=True)
class OpCall:
    """Everything a rule may read: the node's bound dims/attrs, input tensors, the scenario."""

    node: str
    where: Where
    dims: Mapping[str, sympy.Expr]
    dim_names: Mapping[str, str]
    attrs: Mapping[str, Any]
    inputs: tuple[Tensor, ...]
    scenario: Mapping[str, sympy.Expr]
    check: bool

    def axis(self, param: str) -> Axis:
        """An axis named after the dim expression bound to ``param`` (e.g. ``d_ff``)."""
        return Axis(self.dim_names[param], self.dims[param])

    def fail(self, problem: str, hint: str = "") -> SpecError:
        return SpecError(self.where, f"node {self.node!r}: {problem}", hint)

    def require_equal(self, a: sympy.Expr, b: sympy.Expr, what: str, hint: str = "") -> None:
        """Geometry check. Decided on the numeric binding; formulas are not compared."""
        if self.check and a.is_number and b.is_number and a != b:
            raise self.fail(f"{what}: {a} != {b}", hint)

    def require_rank(self, index: int, rank: int | tuple, what: str) -> None:
        ranks = (rank,) if isinstance(rank, int) else rank
        if self.inputs[index].rank not in ranks:
            raise self.fail(f"{what} must have rank {' or '.join(map(str, ranks))}, "
                            f"got {self.inputs[index]}",
                            "check the `in:` edge feeding this node")


Rule = Callable[[OpCall], Any]


@dataclass(frozen=True, slots=True)
class Op:
    """A primitive op. ``shape`` returns ``(Tensor, AxisMap)``; ``flops`` gets the call and output."""

    name: str
    doc: str
    shape_kind: str
    arity: tuple[int, int]
    shape: Rule
    flops: Callable[[OpCall, Tensor], sympy.Expr] = lambda call, out: ZERO
    leaves: Rule = lambda call: ()
    dims: tuple[str, ...] = ()
    optional_dims: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    #: How placements cross the op (see engine/deploy/placement.py): ``axis_map`` (follow the per-axis
    #: map), ``norm`` (axis_map, last axis must be whole), ``matmul``, ``rows`` (table lookup),
    #: ``cache``, ``attention``, ``dispatch``, ``combine``.
    placement: str = "axis_map"
    #: A view moves no data: it costs nothing and its consumers read its source's storage.
    view: bool = False
    #: A view of part of its source (a slice, gathered rows): consumers read only that part.
    partial: bool = False
    #: Bytes per output element when the output is not an activation (int32 token indices);
    #: None: the deployment's activation dtype.
    out_element_bytes: int | None = None
    #: The output is cache storage (the KV dtype): a cache, or rows gathered from one.
    cache_output: bool = False
    #: A recurrent op's state per request (``None``: stateless): the tensor a ``growth: state``
    #: cache entry naming this node keeps between decode steps.
    state: Callable[[OpCall], Tensor] | None = None
    #: The state is a rolling buffer of a window's rows, not a recurrence (DeepSeek-V4's compressor
    #: keeps the not-yet-pooled tokens of its window): a decode step writes one row and the whole
    #: buffer is read once per ``every`` steps to pool it, so a step moves 2 / every of it (a
    #: recurrent state is read and written whole every step); the layer is no linear mixer.
    rolling_state: bool = False

    def params(self, call: OpCall) -> sympy.Expr:
        """Parameter count: the parameter leaves' element counts (buffers excluded)."""
        return sum((leaf.numel for leaf in self.leaves(call) if leaf.kind == "param"), ZERO)


# -- helpers -------------------------------------------------------------------------------------

def _rows(tensor: Tensor) -> sympy.Expr:
    """Element count of all axes but the last (tokens x anything leading)."""
    return Tensor(tensor.axes[:-1]).numel


def _preserve(call: OpCall) -> tuple[Tensor, AxisMap]:
    x = call.inputs[0]
    return x, AxisMap(carried_all(x))


def _last_is(call: OpCall, param: str, what: str) -> None:
    x = call.inputs[0]
    call.require_equal(x.axes[-1].size, call.dims[param],
                       f"{what}: last axis {x.axes[-1].name} does not match {param}",
                       f"feed a tensor whose last axis is {call.dim_names[param]}")


# -- shape rules ---------------------------------------------------------------------------------

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


def _kv_cache_length(call) -> sympy.Expr:
    ctx = call.scenario[symbols.CTX]
    growth = call.attrs["growth"]
    if growth == "window":
        return sympy.Min(ctx, call.dims["window"])
    if growth == "compressed":
        return sympy.floor(ctx / call.dims["every"])
    return ctx


def _kv_cache_shape(call):
    x = call.inputs[0]
    if x.rank < 2 or x.axes[1].name != symbols.SEQ:
        raise call.fail(f"kv_cache input must be [batch, seq, ...], got {x}",
                        "cache a per-token tensor (before attention)")
    length = Axis("kv_len", _kv_cache_length(call))
    out = Tensor((x.axes[0], length) + x.axes[2:])
    return out, AxisMap((Carried(0, 0), New()) + tuple(Carried(0, i) for i in range(2, x.rank)))


def _pairs(call) -> sympy.Expr:
    """Unmasked (query, key) pairs per request and head for ``seq`` new tokens ending at ``ctx``.

    With F(n) the pairs seen by queries 1..n, the step sees F(ctx) - F(ctx - seq).
    """
    mask = call.attrs["mask"]
    every = call.dims["every"] if "every" in call.dims and mask != "bidirectional" else None
    # top-k: the selected tokens, or with `block` the selected blocks of `block` keys each (an
    # upper bound per query: its own block is partial)
    cap = call.inputs[2].axes[-1].size * call.dims.get("block", 1) if mask == "topk" else None
    window = call.dims["window"] if mask in ("chunked", "sliding") and every is None else None
    return _pair_count(mask, call.scenario[symbols.SEQ], call.scenario[symbols.CTX], every, cap, window)


@functools.lru_cache(maxsize=4096, typed=True)     # typed: a Python 1 and sympy's 1 give different types
def _pair_count(mask: str, seq, ctx, every, cap, window) -> sympy.Expr:
    """:func:`_pairs` from what it reads (the same masks recur in every layer and model: the
    Min/Max and expand below cost more than the rest of a walk's op). ``cap``: the top-k's
    selected count (mask ``topk``); ``every``, ``window``: the node's dims, when it has them."""
    if mask == "bidirectional":
        return seq * ctx
    if every is not None:
        # keys are compressed entries, one per `every` tokens: query i sees floor(i / every) of
        # them, or min(k, floor(i / every)) when a top-k selects among them
        def floor_sum(n):   # sum_{i=1..n} floor(i / every)
            q = sympy.floor(n / every)
            return every * q * (q - 1) / 2 + q * (n - every * q + 1)

        def total(n):
            if cap is None:
                return floor_sum(n)
            first = cap * every   # the first position that sees `cap` entries
            return floor_sum(sympy.Min(n, first - 1)) + cap * sympy.Max(0, n - first + 1)
        return sympy.expand(total(ctx) - total(ctx - seq))
    if mask == "chunked":
        # each query sees the keys of its own chunk of `window` tokens up to itself: the query at
        # 0-based position p sees (p mod C) + 1 keys, so n queries see q C(C+1)/2 + r(r+1)/2 with
        # q = floor(n / C) whole chunks and r = n - qC left over
        chunk = window

        def total(n):
            q = sympy.floor(n / chunk)
            r = n - chunk * q
            return q * chunk * (chunk + 1) / 2 + r * (r + 1) / 2
        return sympy.expand(total(ctx) - total(ctx - seq))
    if mask in ("sliding", "topk"):
        # top-k sparse attention: query i attends min(i, k) selected keys, the same count as a
        # sliding window of k (which keys differ, how many does not)
        window = cap if mask == "topk" else window

        def total(n):
            m = sympy.Min(n, window)
            return m * (m + 1) / 2 + (n - m) * window
    else:
        def total(n):
            return n * (n + 1) / 2
    return sympy.expand(total(ctx) - total(ctx - seq))


def _score_shape(call):
    call.require_rank(0, 4, "query [batch, seq, heads, head_dim]")
    call.require_rank(1, 4, "key [batch, kv_len, kv_heads, head_dim]")
    q, k = call.inputs[:2]
    call.require_equal(q.axes[-1].size, k.axes[-1].size, "Q/K head dim mismatch",
                       "queries and keys must have the same head dim")
    if call.check and q.axes[2].size.is_number and k.axes[2].size.is_number \
            and q.axes[2].size % k.axes[2].size != 0:
        raise call.fail(f"query heads {q.axes[2].size} not a multiple of key heads {k.axes[2].size}")
    if call.attrs["mask"] not in MASKS:
        raise call.fail(f"unknown mask {call.attrs['mask']!r}", "use one of " + ", ".join(MASKS))
    if call.attrs["mask"] in ("sliding", "chunked") and "window" not in call.dims:
        raise call.fail("a sliding or chunked mask needs dims: {window: ...}")
    if (call.attrs["mask"] == "topk") != (len(call.inputs) == 3):
        raise call.fail("a top-k mask takes the selected token indices as a third input",
                        "write `in: [q, k, topk]` with `attrs: {mask: topk}`")
    b, s, h = q.axes[0], q.axes[1], q.axes[2]
    t = k.axes[1]
    valid = b.size * h.size * _pairs(call)
    out = Tensor((b, h, s, t), valid)
    return out, AxisMap((Carried(0, 0), Carried(0, 2), Carried(0, 1), Carried(1, 1)),
                        ((0, 3), (1, 3)))


def _token_topk_shape(call):
    x = call.inputs[0]
    call.require_rank(0, 3, "index scores [batch, seq, kv_len]")
    out = Tensor(x.axes[:-1] + (call.axis("k"),))
    return out, AxisMap(carried_all(x)[:-1] + (New(),), ((0, x.rank - 1),))


def _token_gather_shape(call):
    cache, idx = call.inputs
    if cache.rank < 3 or cache.axes[1].name != "kv_len":
        raise call.fail(f"token_gather reads a cache [batch, kv_len, ...], got {cache}",
                        "gather from a kv_cache node's output")
    kept = Axis("kv_len", sympy.Min(cache.axes[1].size, idx.axes[-1].size))
    out = Tensor((cache.axes[0], kept) + cache.axes[2:])
    return out, AxisMap((Carried(0, 0), New()) + tuple(Carried(0, i) for i in range(2, cache.rank)))


def _head_sum_shape(call):
    call.require_rank(0, 4, "scores [batch, heads, seq, kv_len]")
    call.require_rank(1, 3, "head weights [batch, seq, heads]")
    scores, weights = call.inputs
    call.require_equal(scores.axes[1].size, weights.axes[2].size, "weighted_head_sum heads")
    b, h, s, t = scores.axes
    valid = scores.computed / h.size
    out = Tensor((b, s, t), valid)
    return out, AxisMap((Carried(0, 0), Carried(0, 2), Carried(0, 3)), ((0, 1), (1, 2)))


def _visible_blocks(seq, ctx, block) -> sympy.Expr:
    """Key blocks the ``seq`` queries ending at ``ctx`` see, per request and group: the query at
    0-based position p sees floor(p / B) + 1 blocks (its own partial block included), so n
    queries see sum_{i=1..n} ceil(i / B) = B q(q+1)/2 + r(q+1) with q = floor(n / B), r = n - qB."""
    def total(n):
        q = sympy.floor(n / block)
        r = n - block * q
        return block * q * (q + 1) / 2 + r * (q + 1)
    return sympy.expand(total(ctx) - total(ctx - seq))


def _block_topk_shape(call):
    call.require_rank(0, 4, "index scores [batch, groups, seq, kv_len]")
    x = call.inputs[0]
    b, g, s = x.axes[:3]
    # int32 block indices (the kernel's contract); the main attention reads k x block keys per
    # query from them (attention_score `mask: topk` with `dims: {block: ...}`)
    out = Tensor((b, g, s, call.axis("k")))
    return out, AxisMap((Carried(0, 0), Carried(0, 1), Carried(0, 2), New()), ((0, 3),))


def _block_topk_flops(call, out):
    """1 FLOP per unmasked score into its block's max (the pool) + 1 per visible block score (the
    top-k's comparisons); future blocks are -inf padding and not counted."""
    b, g = call.inputs[0].axes[:2]
    blocks = _visible_blocks(call.scenario[symbols.SEQ], call.scenario[symbols.CTX], call.dims["block"])
    return call.inputs[0].computed + b.size * g.size * blocks


def _score_flops(call, out):
    return 2 * out.computed * call.inputs[0].axes[-1].size


def _softmax_leaves(call):
    if call.attrs["sinks"]:
        return (Leaf(call.attrs["sink_name"], (call.inputs[0].axes[1],)),)
    return ()


def _apply_shape(call):
    call.require_rank(0, 4, "probabilities [batch, heads, seq, kv_len]")
    call.require_rank(1, 4, "value [batch, kv_len, kv_heads, v_dim]")
    p, v = call.inputs
    call.require_equal(p.axes[3].size, v.axes[1].size, "attention_apply kv length")
    b, h, s = p.axes[0], p.axes[1], p.axes[2]
    out = Tensor((b, s, h, v.axes[3]), None)
    return out, AxisMap((Carried(0, 0), Carried(0, 2), Carried(0, 1), Carried(1, 3)),
                        ((0, 3), (1, 1)))


def _apply_flops(call, out):
    return 2 * call.inputs[0].computed * call.inputs[1].axes[3].size


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


def _compress_pool_shape(call):
    kv, gate = call.inputs
    call.require_equal(kv.axes[-1].size, gate.axes[-1].size, "compressor kv and gate widths")
    c = kv.axes[-1].size
    if call.check and c.is_number and call.dims["dim"].is_number and c not in (call.dims["dim"], 2 * call.dims["dim"]):
        raise call.fail(f"compressor width {c} is neither dim nor 2 x dim ({call.dims['dim']})",
                        "overlapping windows project 2 x dim, plain windows dim")
    out = Tensor(kv.axes[:-1] + (call.axis("dim"),))
    return out, AxisMap(carried_all(kv)[:-1] + (New(),), ((0, kv.rank - 1), (1, kv.rank - 1)))


def _compress_pool_state(call):
    """Per request: the F32 ``kv_state`` and ``score_state`` buffers of the window being filled,
    each [windows x every, windows x dim] (DeepSeek-V4 inference/model.py Compressor:
    ``torch.zeros(max_batch_size, coff * compress_ratio, coff * head_dim)``, coff = 2 with
    overlapping windows)."""
    width = call.inputs[0].axes[-1]
    windows = width.size / call.dims["dim"]
    return Tensor((Axis("compressor_buffers", sympy.Integer(2)), Axis("compressor_rows", windows * call.dims["every"]),
                   width))


def _compress_pool_flops(call, out):
    """Per token and channel: gate + position bias, softmax over the window (5), weighted sum (2)."""
    return Tensor(call.inputs[0].axes[:-1]).numel * call.inputs[0].axes[-1].size * 8


def _grouped_linear_shape(call):
    x = call.inputs[0]
    call.require_equal(x.axes[-2].size, call.dims["groups"], "grouped_linear groups")
    call.require_equal(x.axes[-1].size, call.dims["in"], "grouped_linear input width")
    out = Tensor(x.axes[:-1] + (call.axis("out"),))
    return out, AxisMap(carried_all(x)[:-1] + (New(),), ((0, x.rank - 1),))


def _hash_route_shape(call):
    scores, tokens = call.inputs
    call.require_equal(scores.axes[-1].size, call.dims["experts"], "hash_route expert scores")
    out = Tensor(scores.axes[:-1] + (call.axis("k"),))
    return out, AxisMap(carried_all(scores)[:-1] + (New(),), ((0, scores.rank - 1),))


# -- recurrent-state mixers --------------------------------------------------------------------

def _conv1d_shape(call):
    x = call.inputs[0]
    call.require_rank(0, 3, "conv1d input [batch, seq, channels]")
    _last_is(call, "channels", "conv1d input")
    return x, AxisMap(carried_all(x))


def _conv1d_flops(call, out):
    """Causal depthwise convolution: each output element is a `kernel`-tap dot product (2 FLOPs per
    tap, the left zero padding included: ``self.conv1d(x)[..., :seq_len]``), plus the bias. The
    decode step (``causal_conv1d_update``) convolves the rolling state and the new column: the same
    `kernel` taps per output element."""
    per = 2 * call.dims["kernel"] + (1 if call.attrs["bias"] else 0)
    return per * call.inputs[0].numel


def _conv1d_leaves(call):
    leaves = [Leaf("weight", (call.axis("channels"), Axis("conv_in", sympy.Integer(1)), call.axis("kernel")))]
    if call.attrs["bias"]:
        leaves.append(Leaf("bias", (call.axis("channels"),)))
    return tuple(leaves)


def _conv1d_state(call):
    """The rolling window a decode step keeps: the last kernel - 1 input columns per channel."""
    return Tensor((call.axis("channels"), Axis("conv_state", call.dims["kernel"] - 1)))


#: ``parameter``: how the learned vector is applied to the input, and what is computed from the
#: vector first (once per call, not per token): FLOPs per parameter element.
PARAMETER_APPLY = ("add", "mul")
PARAMETER_FN = {"none": 0, "neg_exp": 2}


def _parameter_shape(call):
    """The vector spans one axis of the input (``axis``, counted from the end: -1 the last) and is
    broadcast over the others: KDA's per-head A_log scales a [.., heads, d_k] per-channel gate."""
    x, axis = call.inputs[0], call.attrs["axis"]
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.rank <= axis <= -1:
        raise call.fail(f"axis {axis!r} is not an axis of the {x.rank}-axis input counted from the end",
                        f"write attrs: {{axis: -1}} (the last axis) down to {{axis: {-x.rank}}}")
    call.require_equal(x.axes[axis].size, call.dims["dim"],
                       f"parameter input: axis {axis} ({x.axes[axis].name}) does not match dim",
                       f"feed a tensor whose axis {axis} is {call.dim_names['dim']}, or set attrs.axis")
    if call.attrs["apply"] not in PARAMETER_APPLY:
        raise call.fail(f"unknown apply {call.attrs['apply']!r}", "use one of: " + ", ".join(PARAMETER_APPLY))
    if call.attrs["fn"] not in PARAMETER_FN:
        raise call.fail(f"unknown fn {call.attrs['fn']!r}", "use one of: " + ", ".join(PARAMETER_FN))
    if not call.attrs["name"]:
        raise call.fail("a parameter node needs `attrs: {name: <checkpoint leaf name>}`")
    return _preserve(call)


def _parameter_flops(call, out):
    """1 FLOP per input element (x + p or x * p, the vector broadcast over the other axes) and,
    once per call, the function of the vector (``-A_log.exp()``: 2 FLOPs per parameter element)."""
    return call.inputs[0].computed + PARAMETER_FN[call.attrs["fn"]] * call.dims["dim"]


DELTA_FORMS = ("chunked", "recurrent")


def _delta_geometry(call, name: str, gate: str):
    """Shared by the delta-rule ops: q, k [b, s, hk, dk], v [b, s, hv, dv], the decay gate
    (``gate``: ``head`` [b, s, hv] or ``channel`` [b, s, hv, dk]) and beta [b, s, hv]."""
    for i, what in enumerate(("query", "key", "value")):
        call.require_rank(i, 4, f"{what} [batch, seq, heads, head_dim]")
    if gate == "head":
        call.require_rank(3, 3, "decay g [batch, seq, value heads]")
    else:
        call.require_rank(3, 4, "decay g [batch, seq, value heads, key head dim]")
    call.require_rank(4, 3, "beta [batch, seq, value heads]")
    q, k, v, g, beta = call.inputs
    call.require_equal(q.axes[2].size, k.axes[2].size, f"{name} query/key heads")
    call.require_equal(q.axes[3].size, k.axes[3].size, f"{name} query/key head dim")
    call.require_equal(g.axes[2].size, v.axes[2].size, f"{name} decay heads")
    if gate == "channel":
        call.require_equal(g.axes[3].size, k.axes[3].size, f"{name} decay channels (key head dim)")
    call.require_equal(beta.axes[2].size, v.axes[2].size, f"{name} beta heads")
    hk, hv = k.axes[2].size, v.axes[2].size
    if call.check and hk.is_number and hv.is_number and hv % hk != 0:
        raise call.fail(f"value heads {hv} not a multiple of key heads {hk}")
    _check_form(call)
    return v, AxisMap(carried_all(v, 2), ((0, 3), (1, 3)))


def _check_form(call) -> None:
    form = call.attrs["form"]
    if form not in DELTA_FORMS:
        raise call.fail(f"unknown form {form!r}", "use one of: " + ", ".join(DELTA_FORMS))
    if form == "chunked" and "chunk" not in call.dims:
        raise call.fail("the chunked form needs dims: {chunk: ...}",
                        "the decode variant uses attrs: {form: recurrent}")


def _delta_shape(call):
    return _delta_geometry(call, "gated_delta_rule", "head")


def _delta_flops(call, out):
    """Per (request, value head), counted on the algorithm as written in transformers'
    ``torch_chunk_gated_delta_rule`` / ``torch_recurrent_gated_delta_rule`` (query and key repeated
    to the value heads; a multiply-add is 2 FLOPs, exp, rsqrt and every other elementwise op 1).

    Both forms: L2 norm of q and k (``qk_l2norm``; 3 dk + 2 per vector) and the query scaling (dk),
    per real token. Recurrent, per token: decay (1 exp + dk dv), read k^T S (2 dk dv), delta
    (2 dv), rank-1 update (2 dk dv), output q^T S (2 dk dv). Chunked, per chunk of C (the prompt
    padded to n = ceil(s / C) chunks): beta on k and v, the in-chunk cumsum (C - 1), the C x C
    pairwise decays (subtract + exp), the two masked C x C x dk products, the two unit-lower
    triangular solves (C(C-1) per right-hand column), the decayed q, k and k_beta, the chunk decay,
    and the sequential scan (6 C dk dv + 2 C^2 dv + 2 C dv + 2 dk dv)."""
    q, k, v = call.inputs[:3]
    b, s, hv = v.axes[0].size, v.axes[1].size, v.axes[2].size
    dk, dv = k.axes[3].size, v.axes[3].size
    norm = (2 * (3 * dk + 2) if call.attrs["qk_l2norm"] else 0) + dk
    if call.attrs["form"] == "recurrent":
        per_token = 7 * dk * dv + 2 * dv + 1
        return b * hv * s * (per_token + norm)
    c = call.dims["chunk"]
    n = sympy.ceiling(s / c)
    per_chunk = (c * dv + c * dk                      # v_beta, k_beta
                 + (c - 1)                            # cumsum of the decay
                 + 2 * c * c                          # pairwise decays: subtract, exp
                 + 2 * (2 * c * c * dk + c * c)       # (k_beta k^T) * decay, (q k^T) * decay
                 + c * (c - 1) * (dv + dk)            # two unit-lower triangular solves
                 + (c + c * dk)                       # k_beta * exp(cum_decay)
                 + (c + c * dk)                       # q * exp(cum_decay)
                 + (2 * c + c * dk)                   # k * exp(last - cum_decay)
                 + 1                                  # chunk decay
                 + 6 * c * dk * dv + 2 * c * c * dv + 2 * c * dv + 2 * dk * dv)   # the scan
    return b * hv * (n * per_chunk + s * norm)


def _delta_state(call):
    """Per request: one [d_k, d_v] state per value head."""
    k, v = call.inputs[1], call.inputs[2]
    return Tensor((v.axes[2], k.axes[3], v.axes[3]))


def _kda_shape(call):
    return _delta_geometry(call, "kda", "channel")


def _kda_flops(call, out):
    """Kimi Delta Attention per (request, value head), counted on transformers'
    ``chunk_kimi_delta_attention`` / ``recurrent_kimi_delta_attention`` (models/kimi_linear; the
    torch fallbacks of flash-linear-attention's ``chunk_kda`` / ``fused_recurrent_kda``): the gated
    delta rule with the decay g over the dk key channels instead of one scalar per head.

    Both forms: L2 norm of q and k per real token (3 dk + 2 per vector). Query scaling (dk per
    token): the chunked form scales the padded prompt. Recurrent, per token: decay (dk exp + dk dv),
    read k^T S (2 dk dv), delta (2 dv), rank-1 update (2 dk dv), output q^T S (2 dk dv). Chunked, per
    chunk of C: beta on k and v, the per-channel cumsum ((C - 1) dk), the C x C x dk pairwise decays
    (subtract + exp), the two decayed C x C products sum_c a_c b_c decay_c (3 dk per pair), the two
    unit-lower triangular solves (as gated_delta_rule), the decayed k_beta, q and k (exp + mul;
    k's also the subtract), the chunk decay (dk exp) and the scan (6 C dk dv + 2 C^2 dv + 2 C dv +
    2 dk dv)."""
    q, k, v = call.inputs[:3]
    b, s, hv = v.axes[0].size, v.axes[1].size, v.axes[2].size
    dk, dv = k.axes[3].size, v.axes[3].size
    norm = 2 * (3 * dk + 2) if call.attrs["qk_l2norm"] else 0
    if call.attrs["form"] == "recurrent":
        per_token = 7 * dk * dv + 2 * dv + dk
        return b * hv * s * (per_token + norm + dk)
    c = call.dims["chunk"]
    n = sympy.ceiling(s / c)
    per_chunk = (c * dk                               # query scaling (padded)
                 + c * dv + c * dk                    # v_beta, k_beta
                 + (c - 1) * dk                       # cumsum of the decay, per channel
                 + 2 * c * c * dk                     # pairwise decays: subtract, exp
                 + 2 * 3 * c * c * dk                 # sum_c k_beta k decay, sum_c q k decay
                 + c * (c - 1) * (dv + dk)            # two unit-lower triangular solves
                 + 2 * c * dk                         # k_beta * exp(g)
                 + 2 * c * dk                         # q * exp(g)
                 + 3 * c * dk                         # k * exp(g_last - g)
                 + dk                                 # chunk decay exp(g_last)
                 + 6 * c * dk * dv + 2 * c * c * dv + 2 * c * dv + 2 * dk * dv)   # the scan
    return b * hv * (n * per_chunk + s * norm)


def _mamba2_shape(call):
    """(x [b, s, heads, head_dim], dt [b, s, heads], B, C [b, s, groups, d_state])."""
    call.require_rank(0, 4, "x [batch, seq, heads, head_dim]")
    call.require_rank(1, 3, "dt [batch, seq, heads]")
    call.require_rank(2, 4, "B [batch, seq, groups, d_state]")
    call.require_rank(3, 4, "C [batch, seq, groups, d_state]")
    x, dt, bmat, cmat = call.inputs
    call.require_equal(dt.axes[2].size, x.axes[2].size, "mamba2_ssd dt heads")
    call.require_equal(bmat.axes[2].size, cmat.axes[2].size, "mamba2_ssd B/C groups")
    call.require_equal(bmat.axes[3].size, cmat.axes[3].size, "mamba2_ssd B/C state size")
    h, g = x.axes[2].size, bmat.axes[2].size
    if call.check and h.is_number and g.is_number and h % g != 0:
        raise call.fail(f"heads {h} not a multiple of groups {g}")
    _check_form(call)
    return x, AxisMap(carried_all(x), ((2, 3), (3, 3)))


def _mamba2_flops(call, out):
    """Mamba2 SSD per (request, head), with B and C repeated from their groups to the heads and
    dt the discretisation step (dt_bias and softplus are the nodes before); A = -exp(A_log) once
    per call (2 FLOPs per head). Counted on transformers' ``mamba2_chunk_scan`` /
    ``mamba2_selective_state_update`` (models/mamba2; the torch fallbacks of mamba_ssm's
    ``mamba_chunk_scan_combined`` / ``selective_state_update``), a multiply-add 2, exp 1.

    Recurrent, per token: dA = exp(dt A) (2, once per head: the fallback broadcasts the same value
    over [head_dim, d_state]), dt B (N), dB x (P N), state dA + dB x (2 P N), y = state C (2 P N),
    + D x (2 P). Chunked, per real token: x dt (P) and A dt (1); per chunk of C (the prompt padded
    to n = ceil(s / C) chunks): the cumsum of A dt (C - 1), segment_sum (a cumsum over the masked
    C x C matrix, C (C - 1), and its exp, C^2), G = C B^T (2 C^2 N), M = G * L (C^2),
    Y_diag = M x (2 C^2 P), decay_states (subtract + exp, 2 C), B * decay (C N), the chunk state
    B^T x (2 C N P), the chunk-to-chunk recurrence state = exp(last) state + chunk state (1 + 2 P N;
    mamba_ssm's state passing: a scan; the torch fallback forms the same states as an (n+1)^2
    einsum), exp(A_cumsum) (C), C state (2 C N P), Y_off scaling (C P), Y_diag + Y_off (C P) and
    the D skip on the padded chunk (2 C P)."""
    x, dt, bmat = call.inputs[:3]
    b, s, h, p = (a.size for a in x.axes)
    nst = bmat.axes[3].size
    per_call = 2 * h
    if call.attrs["form"] == "recurrent":
        return per_call + b * h * s * (2 + nst + 5 * p * nst + 2 * p)
    c = call.dims["chunk"]
    n = sympy.ceiling(s / c)
    per_chunk = ((c - 1)                              # A_cumsum
                 + c * (c - 1) + c * c                # segment_sum and its exp
                 + 2 * c * c * nst + c * c            # G = C B^T, M = G * L
                 + 2 * c * c * p                      # Y_diag
                 + 2 * c + c * nst                    # decay_states, B * decay_states
                 + 2 * c * nst * p                    # chunk state
                 + 1 + 2 * p * nst                    # state passing
                 + c + 2 * c * nst * p + c * p        # exp(A_cumsum), C state, Y_off
                 + c * p                              # Y_diag + Y_off
                 + 2 * c * p)                         # D skip (padded)
    return per_call + b * h * (s * (p + 1) + n * per_chunk)


def _mamba2_leaves(call):
    heads = call.inputs[0].axes[2]
    return (Leaf(call.attrs["a_name"], (heads,)), Leaf(call.attrs["d_name"], (heads,)))


def _mamba2_state(call):
    """Per request: one [head_dim, d_state] state per head."""
    x, bmat = call.inputs[0], call.inputs[2]
    return Tensor((x.axes[2], x.axes[3], bmat.axes[3]))


def _source_ids(call):
    raise call.fail("internal: source shapes come from the stack inputs")


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
    "kv_cache": Op(
        "kv_cache", "Append this step's tokens to a cache and read the visible history; the "
        "component's `cache:` entry naming this node sets the growth law.",
        "axis_replace", (1, 1), _kv_cache_shape, optional_dims=("window", "every"),
        attrs={"growth": "every_token"}, placement="cache", cache_output=True),
    "attention_score": Op(
        "attention_score", "q k^T per head over unmasked pairs; mask causal, sliding (the last `window` "
        "keys), chunked (the keys of the query's own `window`-token chunk up to itself), bidirectional, or topk (a third input holds the k selected tokens per query: "
        "DSA; with `block`, k selected blocks of `block` keys: MiniMax-M3); with `every`, keys are compressed entries (one per `every` tokens); key heads may "
        "be fewer than query heads (GQA/MQA).",
        "contract", (2, 3), _score_shape, _score_flops, optional_dims=("window", "every", "block"),
        attrs={"mask": "causal"}, placement="attention"),
    "softmax": Op(
        "softmax", "Softmax over the last axis (5 FLOPs per computed element); optional learned "
        "per-head sink logit.",
        "preserve", (1, 1), _preserve, lambda c, out: 5 * c.inputs[0].computed, _softmax_leaves,
        attrs={"sinks": False, "sink_name": "sinks"}),
    "attention_apply": Op(
        "attention_apply", "Probabilities x values per head: [b, h, s, t] x [b, t, kv, dv] -> "
        "[b, s, h, dv].",
        "contract", (2, 2), _apply_shape, _apply_flops, placement="attention"),
    "topk": Op(
        "topk", "Expert scores (softmax or sigmoid) and top-k selection; optional routing "
        "correction bias (a checkpoint buffer, not a parameter).",
        "contract", (1, 1), _topk_shape, lambda c, out: 4 * c.inputs[0].computed, _topk_leaves,
        dims=("experts", "k"), attrs={"score": "softmax", "correction_bias": False,
                                      "bias_name": "e_score_correction_bias"}),
    "weighted_head_sum": Op(
        "weighted_head_sum", "Sum per-head scores with per-token head weights: [b, h, s, t] x "
        "[b, s, h] -> [b, s, t] (2 FLOPs per computed score; DSA's indexer).",
        "contract", (2, 2), _head_sum_shape, lambda c, out: 2 * c.inputs[0].computed),
    "token_topk": Op(
        "token_topk", "Select the k highest-scoring cached tokens per query: [b, s, kv_len] -> "
        "[b, s, k] int32 indices (1 FLOP per computed score).",
        "contract", (1, 1), _token_topk_shape, lambda c, out: c.inputs[0].computed, dims=("k",),
        out_element_bytes=4),
    "block_topk": Op(
        "block_topk", "Block-sparse key selection (MiniMax-M3's indexer): causal index scores [b, "
        "groups, s, kv_len] max-pooled per block of `block` keys, then the top `k` blocks per query "
        "and group -> [b, groups, s, k] int32 block indices (1 FLOP per unmasked score + 1 per "
        "visible block).",
        "contract", (1, 1), _block_topk_shape, _block_topk_flops, dims=("block", "k"),
        out_element_bytes=4),
    "token_gather": Op(
        "token_gather", "The cache rows a query selected: [b, kv_len, ...] with [b, s, k] indices -> "
        "[b, min(kv_len, k), ...]; a view whose consumers read only the selected rows.",
        "explicit", (2, 2), _token_gather_shape, view=True, partial=True, cache_output=True),
    "moe_dispatch": Op(
        "moe_dispatch", "Gather each token once per selected expert: [.., hidden] -> "
        "[routed = tokens x k, hidden].",
        "explicit", (2, 2), _dispatch_shape, placement="dispatch"),
    "stream_read": Op(
        "stream_read", "A layer reads a stream (engine.spec.streams): an internal stream's value, one "
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
    "compress_pool": Op(
        "compress_pool", "Gated pooling of a window of `every` tokens into one compressed entry "
        "(kv, gate) -> [.., dim]: softmax over the window of gate + learned position bias `ape`, "
        "per channel; overlapping windows project 2 x dim (DeepSeek-V4's compressor). Counted per "
        "token.", "contract", (2, 2), _compress_pool_shape, _compress_pool_flops,
        lambda c: (Leaf("ape", (c.axis("every"), c.inputs[0].axes[-1])),),
        dims=("every", "dim"), state=_compress_pool_state, rolling_state=True),
    "grouped_linear": Op(
        "grouped_linear", "One matmul per group: [.., groups, in] -> [.., groups, out] with the "
        "groups' weights stacked as one [groups*out, in] matrix (DeepSeek-V4's wo_a).",
        "contract", (1, 1), _grouped_linear_shape,
        lambda c, out: 2 * Tensor(c.inputs[0].axes[:-1]).numel * c.dims["in"] * c.dims["out"],
        lambda c: (Leaf("weight", (Axis("grouped_out", c.dims["groups"] * c.dims["out"]), c.axis("in")),
                        matrix=True),), dims=("groups", "in", "out"), placement="matmul"),
    "hash_route": Op(
        "hash_route", "Experts fixed by the token id (a [vocab, k] table, a checkpoint buffer) and "
        "weighted by the gate's scores: (scores [.., experts], token ids) -> [.., k].",
        "contract", (2, 2), _hash_route_shape, lambda c, out: 4 * c.inputs[0].computed,
        lambda c: (Leaf("tid2eid", (c.axis("vocab"), c.axis("k")), kind="buffer"),),
        dims=("experts", "k", "vocab")),
    "conv1d": Op(
        "conv1d", "Causal depthwise convolution over the sequence: [b, s, channels] -> same, one "
        "`kernel`-tap filter per channel (weight [channels, 1, kernel], attr `bias`); decode keeps "
        "the last kernel - 1 columns as a state (2 FLOPs per tap).",
        "preserve", (1, 1), _conv1d_shape, _conv1d_flops, _conv1d_leaves,
        dims=("channels", "kernel"), attrs={"bias": False}, state=_conv1d_state),
    "parameter": Op(
        "parameter", "A bare learned vector `name` over the axis `dim` (dt_bias, A_log, a "
        "norm-free gate; attr `axis`, default -1: the last), broadcast over the other axes and "
        "added to or multiplied into the input (`apply`), optionally transformed first (`fn: "
        "neg_exp` for -exp(A_log)); no matmul.",
        "preserve", (1, 1), _parameter_shape, _parameter_flops,
        lambda c: (Leaf(c.attrs["name"], (c.axis("dim"),)),),
        dims=("dim",), attrs={"name": "", "apply": "add", "fn": "none", "axis": -1}),
    "gated_delta_rule": Op(
        "gated_delta_rule", "Gated DeltaNet: (q, k [b, s, hk, dk], v [b, s, hv, dv], decay g and "
        "beta [b, s, hv]) -> [b, s, hv, dv] with one [dk, dv] state per value head; `form: "
        "chunked` (prefill, dim `chunk`) or `recurrent` (one state update per token, decode).",
        "contract", (5, 5), _delta_shape, _delta_flops, dims=(), optional_dims=("chunk",),
        attrs={"form": "chunked", "qk_l2norm": True}, state=_delta_state),
    "kda": Op(
        "kda", "Kimi Delta Attention: the gated delta rule with a per-key-channel decay: (q, k [b, "
        "s, hk, dk], v [b, s, hv, dv], decay g [b, s, hv, dk], beta [b, s, hv]) -> [b, s, hv, dv] "
        "with one [dk, dv] state per value head; `form: chunked` (prefill, dim `chunk`) or "
        "`recurrent` (decode).",
        "contract", (5, 5), _kda_shape, _kda_flops, dims=(), optional_dims=("chunk",),
        attrs={"form": "chunked", "qk_l2norm": True}, state=_delta_state),
    "mamba2_ssd": Op(
        "mamba2_ssd", "Mamba2 state-space duality: (x [b, s, heads, head_dim], dt [b, s, heads], "
        "B, C [b, s, groups, d_state]) -> [b, s, heads, head_dim] with one [head_dim, d_state] "
        "state per head; owns A_log and D (per head); `form: chunked` (prefill, dim `chunk`) or "
        "`recurrent` (decode, one state update per token).",
        "contract", (4, 4), _mamba2_shape, _mamba2_flops, _mamba2_leaves, dims=(),
        optional_dims=("chunk",), attrs={"form": "chunked", "a_name": "A_log", "d_name": "D"},
        state=_mamba2_state),
    "moe_combine": Op(
        "moe_combine", "Weighted sum of each token's k expert outputs: [routed, hidden] -> "
        "[.., hidden] (2 FLOPs per routed element).",
        "explicit", (2, 2), _combine_shape, lambda c, out: 2 * c.inputs[0].numel, placement="combine"),
}
