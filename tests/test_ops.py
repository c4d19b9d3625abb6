"""Rule tests for primitive ops: exact shapes, axis maps and formulas (sympy), and geometry errors."""
from __future__ import annotations

import pytest
import sympy

from engine.language import symbols
from engine.language.errors import SpecError, Where
from engine.language.ops import OPS, OpCall
from engine.language.shapes import Axis, Carried, Merged, New, Split, Tensor

B, S, C = (symbols.dim(n) for n in (symbols.BATCH, symbols.SEQ, symbols.CTX))
H, KV, D, HID, FF, W = (symbols.dim(n) for n in ("n_heads", "n_kv_heads", "d_head", "hidden", "d_ff", "window"))


def call(op, inputs, dims=None, attrs=None, scenario=None, check=True):
    dims = dims or {}
    full_attrs = dict(OPS[op].attrs)
    full_attrs.update(attrs or {})
    scen = {symbols.BATCH: B, symbols.SEQ: S, symbols.CTX: C}
    scen.update(scenario or {})
    return OpCall("n", Where("t.yaml", 1), dims, {k: str(v) for k, v in dims.items()}, full_attrs,
                  tuple(inputs), scen, check)


def tensor(*axes):
    return Tensor(tuple(Axis(str(a), a) for a in axes))


def run(op, *args, **kw):
    c = call(op, *args, **kw)
    out, amap = OPS[op].shape(c)
    return c, out, amap


def test_linear_contracts_last_axis():
    c, out, amap = run("linear", [tensor(B, S, HID)], {"in": HID, "out": FF}, {"bias": True})
    assert out.sizes == (B, S, FF)
    assert amap.outputs == (Carried(0, 0), Carried(0, 1), New()) and amap.contracted == ((0, 2),)
    assert OPS["linear"].flops(c, out) == 2 * B * S * HID * FF + B * S * FF
    assert OPS["linear"].params(c) == HID * FF + FF
    assert [leaf.name for leaf in OPS["linear"].leaves(c)] == ["weight", "bias"]


def test_linear_rejects_wrong_width():
    with pytest.raises(SpecError, match="does not match in"):
        run("linear", [Tensor((Axis("hidden", sympy.Integer(4096)),))], {"in": sympy.Integer(5120), "out": FF})


def test_split_and_merge_heads_axis_maps():
    _, out, amap = run("split_heads", [tensor(B, S, H * D)], {"heads": H, "head_dim": D})
    assert out.sizes == (B, S, H, D)
    assert amap.outputs[2:] == (Split(0, 2, 0, 2), Split(0, 2, 1, 2))
    _, merged, mmap = run("merge_heads", [out])
    assert merged.sizes == (B, S, H * D) and mmap.outputs[2] == Merged(0, (2, 3))


def _brute_pairs(seq, ctx, window=None):
    """Count (query, key) pairs by enumeration: queries at positions ctx-seq+1..ctx."""
    total = 0
    for q in range(ctx - seq + 1, ctx + 1):
        for k in range(1, q + 1):
            if window is None or q - k < window:
                total += 1
    return total


@pytest.mark.parametrize("seq, ctx", [(7, 7), (1, 9), (3, 10), (16, 16)])
@pytest.mark.parametrize("window", [None, 4])
def test_attention_pairs_match_enumeration(seq, ctx, window):
    attrs = {"mask": "sliding" if window else "causal"}
    dims = {"window": sympy.Integer(window)} if window else {}
    q, k = tensor(B, S, H, D), tensor(B, C, KV, D)
    c, out, amap = run("attention_score", [q, k], dims, attrs,
                       scenario={symbols.SEQ: sympy.Integer(seq), symbols.CTX: sympy.Integer(ctx)})
    assert out.valid == B * H * _brute_pairs(seq, ctx, window)
    assert OPS["attention_score"].flops(c, out) == 2 * B * H * D * _brute_pairs(seq, ctx, window)
    assert amap.outputs == (Carried(0, 0), Carried(0, 2), Carried(0, 1), Carried(1, 1))


def test_causal_prefill_formula():
    c, out, _ = run("attention_score", [tensor(B, S, H, D), tensor(B, C, KV, D)])
    prefill = out.valid.subs(C, S)
    assert sympy.expand(prefill - B * H * S * (S + 1) / 2) == 0


def test_qk_head_dim_mismatch_is_an_error():
    q = Tensor((Axis("b", B), Axis("s", S), Axis("h", sympy.Integer(8)), Axis("d", sympy.Integer(128))))
    k = Tensor((Axis("b", B), Axis("t", C), Axis("h", sympy.Integer(8)), Axis("d", sympy.Integer(64))))
    with pytest.raises(SpecError, match="Q/K head dim mismatch"):
        run("attention_score", [q, k])


def test_kv_cache_window_caps_length():
    x = Tensor((Axis("batch", B), Axis("seq", S), Axis("kv", KV), Axis("d", D)))
    _, out, amap = run("kv_cache", [x], {"window": W}, {"growth": "window"})
    assert out.axes[1].size == sympy.Min(C, W)
    assert amap.outputs == (Carried(0, 0), New(), Carried(0, 2), Carried(0, 3))


def test_every_op_is_documented_and_has_a_shape_kind():
    kinds = {"preserve", "broadcast", "axis_replace", "axis_select", "axis_concat", "contract",
             "permute", "source", "explicit"}
    for name, op in OPS.items():
        assert op.name == name and op.doc.strip() and op.shape_kind in kinds


def _brute_sparse_pairs(seq, ctx, topk=None, every=1):
    """Keys a query at position q sees: floor(q / every) (compressed entries), capped at topk."""
    total = 0
    for q in range(ctx - seq + 1, ctx + 1):
        seen = q // every
        total += min(seen, topk) if topk is not None else seen
    return total


@pytest.mark.parametrize("seq, ctx", [(1, 1), (1, 9), (5, 23), (40, 40), (3, 57)])
@pytest.mark.parametrize("topk, every", [(4, 1), (3, 4), (None, 4), (None, 8), (2, 8)])
def test_sparse_and_compressed_pairs_match_enumeration(seq, ctx, topk, every):
    """DSA (top-k of every token), CSA (top-k of entries of `every` tokens) and HCA (all entries)."""
    q, k = tensor(B, S, H, D), tensor(B, C, KV, D)
    inputs = [q, k] + ([Tensor((Axis("b", B), Axis("s", S), Axis("k", sympy.Integer(topk))))] if topk else [])
    dims = {"every": sympy.Integer(every)} if every > 1 else {}
    c, out, _ = run("attention_score", inputs, dims, {"mask": "topk" if topk else "causal"},
                    scenario={symbols.SEQ: sympy.Integer(seq), symbols.CTX: sympy.Integer(ctx)})
    assert out.valid == B * H * _brute_sparse_pairs(seq, ctx, topk, every)


def test_topk_mask_needs_the_selected_indices():
    with pytest.raises(SpecError, match="third input"):
        run("attention_score", [tensor(B, S, H, D), tensor(B, C, KV, D)], {}, {"mask": "topk"})


def test_hyper_connection_ops_shapes_and_leaves():
    n, hid = sympy.Integer(4), HID
    x = Tensor((Axis("batch", B), Axis("seq", S), Axis("hc_mult", n), Axis("hidden", hid)))
    c, mix, _ = run("hc_weights", [x], {"streams": n, "dim": hid}, {"name": "hc_attn"})
    assert mix.sizes == (B, S, 24)
    assert {leaf.name: tuple(a.size for a in leaf.axes) for leaf in OPS["hc_weights"].leaves(c)} == \
        {"hc_attn_fn": (24, 4 * hid), "hc_attn_base": (24,), "hc_attn_scale": (3,)}
    _, collapsed, _ = run("hc_collapse", [x, mix])
    assert collapsed.sizes == (B, S, hid)
    c, out, _ = run("hc_expand", [collapsed, x, mix])
    assert out.sizes == x.sizes
    assert OPS["hc_expand"].flops(c, out) == B * S * hid * (2 * 16 + 2 * 4)   # n^2 mix + post per feature


def test_grouped_linear_stores_one_stacked_matrix():
    x = Tensor((Axis("batch", B), Axis("seq", S), Axis("o_groups", sympy.Integer(8)), Axis("g", sympy.Integer(4096))))
    c, out, _ = run("grouped_linear", [x], {"groups": sympy.Integer(8), "in": sympy.Integer(4096),
                                            "out": sympy.Integer(1024)})
    assert out.sizes == (B, S, 8, 1024)
    (leaf,) = OPS["grouped_linear"].leaves(c)
    assert tuple(a.size for a in leaf.axes) == (8192, 4096) and leaf.matrix
    assert OPS["grouped_linear"].flops(c, out) == 2 * B * S * 8 * 4096 * 1024


def test_token_gather_reads_at_most_k_rows():
    cache = Tensor((Axis("batch", B), Axis("kv_len", C), Axis("d", D)))
    idx = Tensor((Axis("batch", B), Axis("seq", S), Axis("k", sympy.Integer(2048))))
    _, out, _ = run("token_gather", [cache, idx])
    assert out.sizes == (B, sympy.Min(C, 2048), D)
    assert OPS["token_gather"].view and OPS["token_gather"].partial


# -- elementwise broadcast: a size-1 axis (a per-token gate [.., 1] times [.., hidden]) ---------

ONE = sympy.Integer(1)


@pytest.mark.parametrize("op", ["mul", "add"])
def test_binary_op_broadcasts_a_size_one_axis(op):
    gate = Tensor((Axis("batch", B), Axis("seq", S), Axis("1", ONE)))
    x = tensor(B, S, HID)
    for inputs, carried in (([x, gate], 0), ([gate, x], 1)):
        c, out, amap = run(op, inputs)
        assert out.sizes == (B, S, HID) and out.names() == ("batch", "seq", "hidden")
        # the hidden axis comes from the full operand, the token axes from the first
        assert amap.outputs == (Carried(0, 0), Carried(0, 1), Carried(carried, 2))
        assert OPS[op].flops(c, out) == B * S * HID            # one FLOP per output element


def test_binary_op_broadcasts_both_ways():
    row = Tensor((Axis("batch", B), Axis("1", ONE)))
    col = Tensor((Axis("1", ONE), Axis("hidden", HID)))
    c, out, amap = run("mul", [row, col])
    assert out.sizes == (B, HID) and amap.outputs == (Carried(0, 0), Carried(1, 1))
    assert OPS["mul"].flops(c, out) == B * HID


def test_binary_op_equal_shapes_unchanged():
    c, out, amap = run("mul", [tensor(B, S, HID), tensor(B, S, HID)])
    assert out.sizes == (B, S, HID) and amap.outputs == (Carried(0, 0), Carried(0, 1), Carried(0, 2))
    assert OPS["mul"].flops(c, out) == B * S * HID


@pytest.mark.parametrize("op", ["mul", "add"])
def test_binary_op_refuses_a_mismatch_that_is_not_one(op):
    a = Tensor((Axis("hidden", sympy.Integer(4096)),))
    b = Tensor((Axis("two", sympy.Integer(2)),))
    with pytest.raises(SpecError, match="operand axis hidden: 4096 != 2"):
        run(op, [a, b])
    with pytest.raises(SpecError, match="differ in rank"):
        run(op, [tensor(B, S, HID), tensor(B, HID)])
