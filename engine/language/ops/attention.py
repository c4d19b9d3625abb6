"""Attention: the KV cache and its growth laws, scores over unmasked pairs, softmax, the
probabilities times values, sparse selection (DSA's token top-k, block top-k) and the compressor.

Layer: engine.language (on :mod:`engine.language.ops.base`). Attention counts only unmasked (query, key)
pairs (:func:`_pairs`), per mask in :data:`MASKS`; a cache grows by one of :data:`GROWTHS`.
"""
from __future__ import annotations

import functools

import sympy

from engine.language.shapes import Axis, AxisMap, Carried, New, Tensor, carried_all
from engine.language import kv, symbols
from engine.language.ops.base import Leaf, Op, _preserve


MASKS = ("causal", "sliding", "chunked", "bidirectional", "topk")


GROWTHS = ("every_token", "window", "compressed", "state")


def _kv_cache_length(call) -> sympy.Expr:
    return kv.kept_length(call.attrs["growth"], call.scenario[symbols.CTX], call.dims.get("window"),
                          call.dims.get("every"))


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


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
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
    "compress_pool": Op(
        "compress_pool", "Gated pooling of a window of `every` tokens into one compressed entry "
        "(kv, gate) -> [.., dim]: softmax over the window of gate + learned position bias `ape`, "
        "per channel; overlapping windows project 2 x dim (DeepSeek-V4's compressor). Counted per "
        "token.", "contract", (2, 2), _compress_pool_shape, _compress_pool_flops,
        lambda c: (Leaf("ape", (c.axis("every"), c.inputs[0].axes[-1])),),
        dims=("every", "dim"), state=_compress_pool_state, rolling_state=True),
}
