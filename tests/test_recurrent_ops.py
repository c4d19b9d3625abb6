"""The recurrent-state ops (conv1d, parameter, gated_delta_rule) against enumerations of their algorithms.

Each algorithm is written out here with scalar loops, following transformers' torch reference
(``torch_causal_conv1d_update`` / ``nn.Conv1d``, ``torch_chunk_gated_delta_rule``,
``torch_recurrent_gated_delta_rule`` in ``models/qwen3_5/modeling_qwen3_5.py``), and every
arithmetic operation it performs is counted as it happens (a multiply-add 2, exp / rsqrt / any
other elementwise operation 1). The op's FLOPs formula must equal the count on small dims; the
enumerations are also checked numerically against each other and, where transformers is installed,
against its torch functions, so the count is of the right algorithm.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

from engine.language import symbols
from engine.language.errors import SpecError, Where
from engine.language.ops import OPS, OpCall
from engine.language.shapes import Axis, Carried, Tensor


class Count:
    """Scalar arithmetic with a FLOP counter."""

    def __init__(self):
        self.flops = 0

    def op(self, value, n=1):
        self.flops += n
        return value

    def exp(self, x):
        return self.op(math.exp(x)) if x != -math.inf else self.op(0.0)

    def mac(self, acc, a, b):   # acc + a * b
        self.flops += 2
        return acc + a * b

    def matmul(self, a, b):
        m, n = a.shape
        n2, p = b.shape
        assert n == n2
        out = np.zeros((m, p))
        for i in range(m):
            for j in range(p):
                acc = 0.0
                for t in range(n):
                    acc = self.mac(acc, a[i, t], b[t, j])
                out[i, j] = acc
        return out

    def elementwise(self, fn, *arrays):
        shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
        arrays = [np.broadcast_to(a, shape) for a in arrays]
        out = np.zeros(shape)
        for idx in np.ndindex(shape):
            out[idx] = fn(*(a[idx] for a in arrays))
            self.flops += 1
        return out

    def l2norm(self, x):   # x * rsqrt(sum(x * x) + eps), over the last axis of a vector
        acc = 0.0
        for e in x:
            acc = self.mac(acc, e, e)
        inv = self.op(1.0 / math.sqrt(self.op(acc + 1e-6)))
        return self.elementwise(lambda e: e * inv, x)

    def solve_unit_lower(self, a, rhs):
        """Forward substitution with a unit lower-triangular matrix (its strict lower part)."""
        c = a.shape[0]
        x = np.array(rhs, dtype=float)
        for i in range(c):
            for j in range(i):
                for col in range(x.shape[1]):
                    x[i, col] = self.mac(x[i, col], -a[i, j], x[j, col])
        return x


# -- the algorithms, per (request, value head) ----------------------------------------------------

def normalise(cnt, q, k, l2):
    """L2 norm of q and k (in the kernel) and the query scaling, per token."""
    dk = q.shape[-1]
    if l2:
        q = np.stack([cnt.l2norm(row) for row in q])
        k = np.stack([cnt.l2norm(row) for row in k])
    q = cnt.elementwise(lambda e: e * dk ** -0.5, q)
    return q, k


def recurrent_delta(cnt, q, k, v, g, beta, state, l2=True):
    """torch_recurrent_gated_delta_rule for one head: q, k [s, dk], v [s, dv], g, beta [s]."""
    q, k = normalise(cnt, q, k, l2)
    s, dk = k.shape
    dv = v.shape[1]
    out = np.zeros((s, dv))
    for t in range(s):
        decay = cnt.exp(g[t])
        state = cnt.elementwise(lambda e: e * decay, state)
        kv_mem = np.zeros(dv)
        for j in range(dv):
            acc = 0.0
            for i in range(dk):
                acc = cnt.mac(acc, state[i, j], k[t, i])
            kv_mem[j] = acc
        delta = cnt.elementwise(lambda a, b: (a - b), v[t], kv_mem)
        delta = cnt.elementwise(lambda a: a * beta[t], delta)
        state = np.array([[cnt.mac(state[i, j], k[t, i], delta[j]) for j in range(dv)] for i in range(dk)])
        for j in range(dv):
            acc = 0.0
            for i in range(dk):
                acc = cnt.mac(acc, state[i, j], q[t, i])
            out[t, j] = acc
    return out, state


def chunked_delta(cnt, q, k, v, g, beta, state, chunk, l2=True):
    """torch_chunk_gated_delta_rule for one head, step by step."""
    q, k = normalise(cnt, q, k, l2)
    s, dk = k.shape
    dv = v.shape[1]
    pad = (chunk - s % chunk) % chunk
    q, k, v = (np.concatenate([x, np.zeros((pad, x.shape[1]))]) for x in (q, k, v))
    g, beta = (np.concatenate([x, np.zeros(pad)]) for x in (g, beta))
    n = (s + pad) // chunk
    v_beta = cnt.elementwise(lambda a, b: a * b, v, beta[:, None])
    k_beta = cnt.elementwise(lambda a, b: a * b, k, beta[:, None])
    out = np.zeros((n * chunk, dv))
    chunks = []
    for c in range(n):
        sl = slice(c * chunk, (c + 1) * chunk)
        cum = np.zeros(chunk)
        cum[0] = g[sl][0]
        for i in range(1, chunk):
            cum[i] = cnt.op(cum[i - 1] + g[sl][i])
        diff = cnt.elementwise(lambda a, b: a - b, cum[:, None], cum[None, :])
        pair = np.zeros((chunk, chunk))
        for i in range(chunk):
            for j in range(chunk):
                pair[i, j] = cnt.exp(diff[i, j] if j <= i else -math.inf)
        ut = cnt.elementwise(lambda a, b: a * b, cnt.matmul(k_beta[sl], k[sl].T), pair)
        intra = cnt.elementwise(lambda a, b: a * b, cnt.matmul(q[sl], k[sl].T), pair)
        decayed_kb = cnt.elementwise(lambda a, b: a * b, k_beta[sl], cnt.elementwise(math.exp, cum)[:, None])
        new_values = cnt.solve_unit_lower(ut, v_beta[sl])
        k_cumdecay = cnt.solve_unit_lower(ut, decayed_kb)
        qd = cnt.elementwise(lambda a, b: a * b, q[sl], cnt.elementwise(math.exp, cum)[:, None])
        rest = cnt.elementwise(math.exp, cnt.elementwise(lambda a: cum[-1] - a, cum))
        kd = cnt.elementwise(lambda a, b: a * b, k[sl], rest[:, None])
        chunk_decay = cnt.exp(cum[-1])
        chunks.append((new_values, k_cumdecay, qd, kd, intra, chunk_decay))
    for c, (new_values, k_cumdecay, qd, kd, intra, chunk_decay) in enumerate(chunks):
        v_new = cnt.elementwise(lambda a, b: a - b, new_values, cnt.matmul(k_cumdecay, state))
        inter = cnt.matmul(qd, state)
        out[c * chunk:(c + 1) * chunk] = cnt.elementwise(lambda a, b: a + b, inter, cnt.matmul(intra, v_new))
        state = cnt.elementwise(lambda a, b: a + b, cnt.elementwise(lambda a: a * chunk_decay, state),
                                cnt.matmul(kd.T, v_new))
    return out[:s], state


def conv1d(cnt, x, w, bias):
    """Causal depthwise convolution x [s, c], w [c, k]: zero left padding of k - 1."""
    s, c = x.shape
    k = w.shape[1]
    xp = np.concatenate([np.zeros((k - 1, c)), x])
    out = np.zeros((s, c))
    for t in range(s):
        for ch in range(c):
            acc = 0.0
            for j in range(k):
                acc = cnt.mac(acc, w[ch, j], xp[t + j, ch])
            out[t, ch] = cnt.op(acc + bias[ch]) if bias is not None else acc
    return out


def conv1d_update(cnt, state, x, w, bias):
    """One decode step: state [k - 1, c] (the last inputs) and the new column x [c]; the output is
    the one new column (the causal_conv1d kernel's update; transformers' torch fallback keeps k
    columns and convolves k + 1 of them, discarding all outputs but the last)."""
    window = np.concatenate([state, x[None, :]])
    k, c = w.shape[1], x.shape[0]
    out = np.zeros(c)
    for ch in range(c):
        acc = 0.0
        for j in range(k):
            acc = cnt.mac(acc, w[ch, j], window[j, ch])
        out[ch] = cnt.op(acc + bias[ch]) if bias is not None else acc
    return out, window[1:]


# -- engine calls -----------------------------------------------------------------------------------

def engine_call(op, inputs, dims, attrs, batch, seq):
    full = dict(OPS[op].attrs)
    full.update(attrs)
    dims = {k: sympy.Integer(v) for k, v in dims.items()}
    scen = {symbols.BATCH: sympy.Integer(batch), symbols.SEQ: sympy.Integer(seq), symbols.CTX: sympy.Integer(seq)}
    c = OpCall("n", Where("t.yaml", 1), dims, {k: k for k in dims}, full, tuple(inputs), scen, True)
    out, amap = OPS[op].shape(c)
    return c, out, amap, OPS[op].flops(c, out)


def t(*named):
    return Tensor(tuple(Axis(name, sympy.Integer(size)) for name, size in named))


def delta_inputs(b, s, hk, hv, dk, dv, per_channel_gate=False):
    """The op's input tensors: q, k, v, the decay gate (per value head, or per key channel: KDA), beta."""
    gate = (("dk", dk),) if per_channel_gate else ()
    return [t(("batch", b), ("seq", s), ("hk", hk), ("dk", dk)), t(("batch", b), ("seq", s), ("hk", hk), ("dk", dk)),
            t(("batch", b), ("seq", s), ("hv", hv), ("dv", dv)), t(("batch", b), ("seq", s), ("hv", hv), *gate),
            t(("batch", b), ("seq", s), ("hv", hv))]


def random_heads(rng, b, s, hk, hv, dk, dv, per_channel_gate=False):
    """q, k, v, decay g and beta; g has one value per value head, or per key channel (KDA)."""
    q = rng.normal(size=(b, s, hk, dk))
    k = rng.normal(size=(b, s, hk, dk))
    v = rng.normal(size=(b, s, hv, dv))
    g = -rng.uniform(0.01, 0.5, size=(b, s, hv, dk) if per_channel_gate else (b, s, hv))
    beta = rng.uniform(0.1, 0.9, size=(b, s, hv))
    return q, k, v, g, beta


def run_delta(form, q, k, v, g, beta, chunk=None, l2=True, recurrent=None, chunked=None):
    """The whole op: every request and value head (q, k repeated to the value heads).

    ``recurrent``/``chunked`` are the per-head enumerations (default: the gated delta rule's)."""
    recurrent, chunked = recurrent or recurrent_delta, chunked or chunked_delta
    b, s, hk, dk = q.shape
    hv, dv = v.shape[2:]
    cnt = Count()
    out = np.zeros(v.shape)
    states = np.zeros((b, hv, dk, dv))
    for r in range(b):
        for h in range(hv):
            kh = h // (hv // hk)
            args = (q[r, :, kh], k[r, :, kh], v[r, :, h], g[r, :, h], beta[r, :, h], np.zeros((dk, dv)))
            if form == "recurrent":
                out[r, :, h], states[r, h] = recurrent(cnt, *args, l2=l2)
            else:
                out[r, :, h], states[r, h] = chunked(cnt, *args, chunk, l2=l2)
    return out, states, cnt.flops


# -- tests ------------------------------------------------------------------------------------------

#: Small dims for the delta-rule enumerations: (batch, seq, key heads, value heads, d_k, d_v, chunk);
#: prompts of 1, 7, 9 and 5 tokens are not multiples of their chunk.
DELTA_DIMS = [(1, 1, 1, 1, 2, 3, 4), (1, 7, 1, 2, 3, 2, 4), (2, 8, 2, 2, 2, 3, 4), (1, 9, 1, 3, 4, 2, 3),
              (1, 5, 1, 1, 3, 3, 8)]


def check_delta_rule_flops(op, dims, l2, recurrent, chunked, per_channel_gate=False):
    """Both forms of a delta-rule op (gated_delta_rule, kda) against counted enumerations.

    The two enumerated forms are one algorithm (same outputs and final states); the engine's
    chunked and recurrent FLOPs equal their counts. Returns the engine call and the final state."""
    b, s, hk, hv, dk, dv, chunk = dims
    rng = np.random.default_rng(s * 100 + dk * 10 + dv)
    data = random_heads(rng, b, s, hk, hv, dk, dv, per_channel_gate)
    out_c, state_c, counted_c = run_delta("chunked", *data, chunk, l2, recurrent, chunked)
    out_r, state_r, counted_r = run_delta("recurrent", *data, None, l2, recurrent, chunked)
    np.testing.assert_allclose(out_c, out_r, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(state_c, state_r, rtol=1e-9, atol=1e-9)
    inputs = delta_inputs(b, s, hk, hv, dk, dv, per_channel_gate)
    call, out, amap, flops = engine_call(op, inputs, {"chunk": chunk}, {"qk_l2norm": l2}, b, s)
    assert flops == counted_c
    assert engine_call(op, inputs, {}, {"form": "recurrent", "qk_l2norm": l2}, b, s)[3] == counted_r
    assert out.sizes == (b, s, hv, dv)
    assert set(amap.contracted) == {(0, 3), (1, 3)}
    return call, amap, state_c


@pytest.mark.parametrize("dims", DELTA_DIMS)
@pytest.mark.parametrize("l2", [True, False])
def test_gated_delta_rule_flops_match_enumeration(dims, l2):
    _, amap, _ = check_delta_rule_flops("gated_delta_rule", dims, l2, recurrent_delta, chunked_delta)
    assert amap.outputs == tuple(Carried(2, i) for i in range(4))


def test_gated_delta_rule_decode_is_linear_in_tokens_and_prefill_in_chunks():
    """Decode: the same work per token, whatever the context; prefill: n chunks of equal cost."""
    inputs = lambda s: delta_inputs(2, s, 2, 4, 8, 8)
    one = engine_call("gated_delta_rule", inputs(1), {}, {"form": "recurrent"}, 2, 1)[3]
    assert engine_call("gated_delta_rule", inputs(5), {}, {"form": "recurrent"}, 2, 5)[3] == 5 * one
    c64 = engine_call("gated_delta_rule", inputs(64), {"chunk": 64}, {}, 2, 64)[3]
    c128 = engine_call("gated_delta_rule", inputs(128), {"chunk": 64}, {}, 2, 128)[3]
    c65 = engine_call("gated_delta_rule", inputs(65), {"chunk": 64}, {}, 2, 65)[3]
    assert c128 == 2 * c64 and c64 < c65 < c128   # a partial chunk costs a whole chunk's scan


def test_gated_delta_rule_state_and_checks():
    c, _, _, _ = engine_call("gated_delta_rule", delta_inputs(1, 4, 16, 48, 128, 128), {"chunk": 64}, {}, 1, 4)
    state = OPS["gated_delta_rule"].state(c)
    assert state.sizes == (48, 128, 128) and state.numel == 48 * 128 * 128
    with pytest.raises(SpecError, match="not a multiple of key heads"):
        engine_call("gated_delta_rule", delta_inputs(1, 4, 3, 4, 2, 2), {"chunk": 4}, {}, 1, 4)
    with pytest.raises(SpecError, match="needs dims: {chunk"):
        engine_call("gated_delta_rule", delta_inputs(1, 4, 1, 1, 2, 2), {}, {}, 1, 4)
    with pytest.raises(SpecError, match="unknown form"):
        engine_call("gated_delta_rule", delta_inputs(1, 4, 1, 1, 2, 2), {}, {"form": "scan"}, 1, 4)


def test_enumeration_matches_transformers_torch_reference():
    """The enumerated algorithms compute what transformers' torch fallbacks compute."""
    torch = pytest.importorskip("torch")
    mod = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    rng = np.random.default_rng(0)
    q, k, v, g, beta = random_heads(rng, 1, 9, 1, 2, 3, 2)
    out_c, state_c, _ = run_delta("chunked", q, k, v, g, beta, chunk=4)
    tt = lambda x: torch.tensor(x, dtype=torch.float64)
    ref, ref_state = mod.torch_chunk_gated_delta_rule(tt(q), tt(k), tt(v), tt(g), tt(beta), chunk_size=4,
                                                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    np.testing.assert_allclose(out_c, ref.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(state_c, ref_state.numpy(), rtol=1e-6, atol=1e-6)
    ref_r, _ = mod.torch_recurrent_gated_delta_rule(tt(q), tt(k), tt(v), tt(g), tt(beta),
                                                    use_qk_l2norm_in_kernel=True)
    np.testing.assert_allclose(out_c, ref_r.numpy(), rtol=1e-6, atol=1e-6)
    # the causal depthwise convolution: nn.Conv1d(groups=channels, padding=k-1)[..., :seq]
    x, w, bias = rng.normal(size=(6, 3)), rng.normal(size=(3, 4)), rng.normal(size=3)
    ours = conv1d(Count(), x, w, bias)
    conv = torch.nn.functional.conv1d(tt(x.T[None]), tt(w[:, None, :]), tt(bias), padding=3, groups=3)[0, :, :6]
    np.testing.assert_allclose(ours, conv.numpy().T, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("s, c, k, bias", [(5, 3, 4, False), (7, 2, 2, True), (1, 4, 4, True)])
def test_conv1d_flops_match_enumeration(s, c, k, bias):
    rng = np.random.default_rng(s + c + k)
    x, w = rng.normal(size=(s, c)), rng.normal(size=(c, k))
    bvec = rng.normal(size=c) if bias else None
    cnt = Count()
    full = conv1d(cnt, x, w, bvec)
    b = 2
    inp = [t(("batch", b), ("seq", s), ("channels", c))]
    call, out, amap, flops = engine_call("conv1d", inp, {"channels": c, "kernel": k}, {"bias": bias}, b, s)
    assert flops == b * cnt.flops
    assert out.sizes == (b, s, c) and amap.outputs == (Carried(0, 0), Carried(0, 1), Carried(0, 2))
    # decode: one step from the rolling state of the last k - 1 inputs gives the same column, same work
    state = np.concatenate([np.zeros((k - 1, c)), x])[-(k - 1):] if k > 1 else np.zeros((0, c))
    step = Count()
    col, new_state = conv1d_update(step, state[:k - 1], rng.normal(size=c), w, bvec)
    assert new_state.shape == (k - 1, c)
    _, _, _, flops1 = engine_call("conv1d", [t(("batch", b), ("seq", 1), ("channels", c))],
                                  {"channels": c, "kernel": k}, {"bias": bias}, b, 1)
    assert flops1 == b * step.flops
    assert OPS["conv1d"].state(call).numel == c * (k - 1)
    leaves = OPS["conv1d"].leaves(call)
    assert [leaf.name for leaf in leaves] == (["weight", "bias"] if bias else ["weight"])
    assert tuple(a.size for a in leaves[0].axes) == (c, 1, k)
    assert OPS["conv1d"].params(call) == c * k + (c if bias else 0)
    assert full.shape == (s, c)


def test_conv1d_decode_step_equals_full_convolution():
    rng = np.random.default_rng(3)
    x, w, bias = rng.normal(size=(6, 3)), rng.normal(size=(3, 4)), rng.normal(size=3)
    full = conv1d(Count(), x, w, bias)
    state = np.zeros((3, 3))
    for i in range(6):
        col, state = conv1d_update(Count(), state, x[i], w, bias)
        np.testing.assert_allclose(col, full[i])


def test_parameter_op_counts_and_leaf():
    b, s, h = 2, 3, 5
    cnt = Count()
    a, dt_bias, a_log = np.ones((b, s, h)), np.ones(h), np.zeros(h)
    y = cnt.elementwise(lambda x, p: x + p, a, dt_bias)                     # a + dt_bias
    call, out, amap, flops = engine_call("parameter", [t(("batch", b), ("seq", s), ("hv", h))],
                                         {"dim": h}, {"name": "dt_bias"}, b, s)
    assert flops == cnt.flops
    neg = Count()
    A = neg.elementwise(lambda p: -p, neg.elementwise(math.exp, a_log))      # -A_log.exp(), once
    neg.elementwise(lambda x, p: x * p, y, A)
    _, _, _, flops2 = engine_call("parameter", [t(("batch", b), ("seq", s), ("hv", h))],
                                  {"dim": h}, {"name": "A_log", "apply": "mul", "fn": "neg_exp"}, b, s)
    assert flops2 == neg.flops
    assert [leaf.name for leaf in OPS["parameter"].leaves(call)] == ["dt_bias"]
    assert OPS["parameter"].params(call) == h and out.sizes == (b, s, h)
    with pytest.raises(SpecError, match="needs `attrs: {name"):
        engine_call("parameter", [t(("batch", b), ("seq", s), ("hv", h))], {"dim": h}, {}, b, s)
    with pytest.raises(SpecError, match="does not match dim"):
        engine_call("parameter", [t(("batch", b), ("seq", s), ("hv", h))], {"dim": h + 1}, {"name": "x"}, b, s)


# -- cache entries of recurrent ops: one-line errors naming file, line and field -------------------

@pytest.mark.parametrize("old, new, message", [
    ("kind: delta_state, growth: state, dtype: f32", "kind: delta_state, growth: state, dtype: f64",
     "cache[1].dtype: unknown cache dtype 'f64'"),
    ("kind: delta_state, growth: state, dtype: f32", "kind: delta_state, growth: every_token, dtype: f32",
     "cache[1].growth: a recurrent op's state has growth: state, not 'every_token'"),
    ("{name: conv_state, node: conv1d,", "{name: conv_state, node: conv_act,",
     "cache[0].node: cache entry names 'conv_act', not a kv_cache node or a recurrent op"),
])
def test_bad_state_cache_entries_are_one_line_errors(tmp_path, old, new, message):
    from engine.language.api import evaluate_spec
    from engine.language.corpus import load_corpus
    from tests.test_guards import mutate
    root = mutate(tmp_path, [("components/library/gated_deltanet.yaml", old, new)])
    with pytest.raises(SpecError) as err:
        corpus = load_corpus(root)
        evaluate_spec(corpus, corpus.find_model("Qwen3.5-27B"))
    text = str(err.value)
    assert "\n" not in text and "gated_deltanet.yaml:" in text and message in text, text


@pytest.mark.parametrize("old, new, message", [
    ("growth: every_token, dtype: fp8,", "growth: every_token,",
     "cache[2].scale: a cache scale needs the entry's own `dtype:`"),
    ("scale: {dtype: f32, block: 128}", "scale: {dtype: f64, block: 128}",
     "cache[2].scale.dtype: unknown scale dtype 'f64'"),
    ("scale: {dtype: f32, block: 128}", "scale: {dtype: f32, block: 0}",
     "cache[2].scale.block: 0 is outside the plausible range (1 to 65,536) — write the real figure: the elements one scale covers"),
])
def test_bad_cache_scales_are_one_line_errors(tmp_path, old, new, message):
    """The DSA indexer key's `dtype: fp8, scale: {dtype: f32, block: 128}` spoiled three ways."""
    from engine.language.corpus import load_corpus
    from tests.test_guards import mutate
    root = mutate(tmp_path, [("components/library/dsa_attention.yaml", old, new)])
    with pytest.raises(SpecError) as err:
        load_corpus(root).find_model("DeepSeek-V3.2")
    text = str(err.value)
    assert "\n" not in text and "dsa_attention.yaml:" in text and message in text, text
