"""The SSM / KDA recurrent ops (mamba2_ssd, kda) against enumerations of their algorithms.

As in tests/test_recurrent_ops.py: each algorithm is written out with scalar loops and every
arithmetic operation it performs is counted as it happens (a multiply-add 2, exp / sqrt / any other
elementwise operation 1); the op's FLOPs formula must equal the count, in both forms, on small dims
(prompts that are and are not a multiple of the chunk). The loops are checked numerically against
each other (chunked = recurrent) and against transformers' torch functions, so the count is of the
right algorithm:

- ``mamba2_ssd``: ``mamba2_chunk_scan`` / ``mamba2_selective_state_update`` in
  ``models/mamba2/modeling_mamba2.py`` (the torch fallbacks of mamba_ssm's
  ``mamba_chunk_scan_combined`` / ``selective_state_update``; Dao & Gu, "Transformers are SSMs",
  2024). Recurrent update per token and head: dA = exp(dt A), S = S dA + (dt B) x^T,
  y = S C + D x. The chunked loop forms the chunk-to-chunk states by a scan (mamba_ssm's state
  passing), which the fallback forms as one (n+1)^2 einsum; the numeric check shows they agree.
- ``kda``: ``chunk_kimi_delta_attention`` / ``recurrent_kimi_delta_attention`` in
  ``models/kimi_linear/modeling_kimi_linear.py`` (the torch fallbacks of flash-linear-attention's
  ``chunk_kda`` / ``fused_recurrent_kda``; Kimi Team, "Kimi Linear: An Expressive, Efficient
  Attention Architecture", 2025). Recurrent update per token and head, the gate per key channel:
  S = diag(exp(g_t)) S;  S = S + k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

from engine.language.errors import SpecError
from engine.language.ops import OPS
from tests.test_recurrent_ops import (DELTA_DIMS, Count, check_delta_rule_flops, delta_inputs, engine_call,
                                      random_heads, run_delta, t)


# -- Mamba2 SSD, per (request, head) ------------------------------------------------------------------

def recurrent_ssd(cnt, x, dt, a, bm, cm, d, state):
    """x [s, P], dt [s], A scalar, B, C [s, N], D scalar, state [P, N]."""
    s, p = x.shape
    nst = bm.shape[1]
    out = np.zeros((s, p))
    for i in range(s):
        da = cnt.exp(cnt.op(dt[i] * a))
        db = cnt.elementwise(lambda e: dt[i] * e, bm[i])
        dbx = cnt.elementwise(lambda u, w: u * w, x[i][:, None], db[None, :])
        state = np.array([[cnt.mac(dbx[r, c], state[r, c], da) for c in range(nst)] for r in range(p)])
        for r in range(p):
            acc = 0.0
            for c in range(nst):
                acc = cnt.mac(acc, state[r, c], cm[i, c])
            out[i, r] = cnt.mac(acc, x[i, r], d)
    return out, state


def chunked_ssd(cnt, x, dt, a, bm, cm, d, state, chunk):
    s, p = x.shape
    pad = (chunk - s % chunk) % chunk
    xdt = cnt.elementwise(lambda u, w: u * w, x, dt[:, None])
    adt = cnt.elementwise(lambda u: u * a, dt)
    padded = lambda z: np.concatenate([z, np.zeros((pad,) + z.shape[1:])])
    x, xdt, adt, bm, cm = (padded(z) for z in (x, xdt, adt, bm, cm))
    n = (s + pad) // chunk
    out = np.zeros((n * chunk, p))
    for ci in range(n):
        sl = slice(ci * chunk, (ci + 1) * chunk)
        ac = adt[sl]
        cum = np.zeros(chunk)
        cum[0] = ac[0]
        for i in range(1, chunk):
            cum[i] = cnt.op(cum[i - 1] + ac[i])
        # segment_sum: a cumsum down the rows of the masked [C, C] matrix (row i holds a_i, kept
        # where i > j), then -inf above the diagonal; L = exp of it
        seg = np.zeros((chunk, chunk))
        for j in range(chunk):
            acc = ac[0] if 0 > j else 0.0
            seg[0, j] = acc
            for i in range(1, chunk):
                acc = cnt.op(acc + (ac[i] if i > j else 0.0))
                seg[i, j] = acc
        lmat = np.array([[cnt.exp(seg[i, j] if j <= i else -math.inf) for j in range(chunk)]
                         for i in range(chunk)])
        g = cnt.matmul(cm[sl], bm[sl].T)
        m = cnt.elementwise(lambda u, w: u * w, g, lmat)
        y_diag = cnt.matmul(m, xdt[sl])
        decay_states = cnt.elementwise(math.exp, cnt.elementwise(lambda u: cum[-1] - u, cum))
        b_decay = cnt.elementwise(lambda u, w: u * w, bm[sl], decay_states[:, None])
        chunk_state = cnt.matmul(xdt[sl].T, b_decay)                 # [P, N]
        state_decay_out = cnt.elementwise(math.exp, cum)
        c_states = cnt.matmul(cm[sl], state.T)                       # start state of the chunk
        y_off = cnt.elementwise(lambda u, w: u * w, c_states, state_decay_out[:, None])
        y = cnt.elementwise(lambda u, w: u + w, y_diag, y_off)
        last = cnt.exp(cum[-1])
        state = cnt.elementwise(lambda u, w: u + w, cnt.elementwise(lambda u: u * last, state), chunk_state)
        d_res = cnt.elementwise(lambda u: u * d, x[sl])
        out[sl] = cnt.elementwise(lambda u, w: u + w, y, d_res)
    return out[:s], state


def ssd_data(rng, b, s, h, g, p, nst):
    x = rng.normal(size=(b, s, h, p))
    dt = rng.uniform(0.05, 0.6, size=(b, s, h))
    a_log = rng.normal(size=h) * 0.5
    bm = rng.normal(size=(b, s, g, nst))
    cm = rng.normal(size=(b, s, g, nst))
    d = rng.normal(size=h)
    return x, dt, a_log, bm, cm, d


def run_ssd(form, x, dt, a_log, bm, cm, d, chunk=None):
    b, s, h, p = x.shape
    g, nst = bm.shape[2:]
    cnt = Count()
    a = cnt.elementwise(lambda e: -e, cnt.elementwise(math.exp, a_log))     # A = -exp(A_log), once
    out = np.zeros(x.shape)
    states = np.zeros((b, h, p, nst))
    for r in range(b):
        for hh in range(h):
            gi = hh // (h // g)
            args = (x[r, :, hh], dt[r, :, hh], a[hh], bm[r, :, gi], cm[r, :, gi], d[hh], np.zeros((p, nst)))
            if form == "recurrent":
                out[r, :, hh], states[r, hh] = recurrent_ssd(cnt, *args)
            else:
                out[r, :, hh], states[r, hh] = chunked_ssd(cnt, *args, chunk)
    return out, states, cnt.flops


def ssd_inputs(b, s, h, g, p, nst):
    return [t(("batch", b), ("seq", s), ("heads", h), ("head_dim", p)), t(("batch", b), ("seq", s), ("heads", h)),
            t(("batch", b), ("seq", s), ("groups", g), ("d_state", nst)),
            t(("batch", b), ("seq", s), ("groups", g), ("d_state", nst))]


@pytest.mark.parametrize("b, s, h, g, p, nst, chunk", [
    (1, 1, 1, 1, 2, 3, 4), (1, 7, 2, 1, 3, 2, 4), (2, 8, 2, 2, 2, 3, 4), (1, 9, 4, 2, 2, 4, 3), (1, 5, 1, 1, 3, 3, 8)])
def test_mamba2_ssd_flops_match_enumeration(b, s, h, g, p, nst, chunk):
    rng = np.random.default_rng(s * 100 + p * 10 + nst)
    data = ssd_data(rng, b, s, h, g, p, nst)
    out_c, state_c, counted_c = run_ssd("chunked", *data, chunk=chunk)
    out_r, state_r, counted_r = run_ssd("recurrent", *data)
    np.testing.assert_allclose(out_c, out_r, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(state_c, state_r, rtol=1e-9, atol=1e-9)
    inputs = ssd_inputs(b, s, h, g, p, nst)
    call, out, amap, flops = engine_call("mamba2_ssd", inputs, {"chunk": chunk}, {}, b, s)
    assert flops == counted_c
    _, _, _, flops_r = engine_call("mamba2_ssd", inputs, {}, {"form": "recurrent"}, b, s)
    assert flops_r == counted_r
    assert out.sizes == (b, s, h, p)
    assert set(amap.contracted) == {(2, 3), (3, 3)}
    state = OPS["mamba2_ssd"].state(call)
    assert state.sizes == (h, p, nst) == state_c.shape[1:]
    leaves = OPS["mamba2_ssd"].leaves(call)
    assert [leaf.name for leaf in leaves] == ["A_log", "D"] and OPS["mamba2_ssd"].params(call) == 2 * h


def test_mamba2_ssd_decode_per_token_and_prefill_per_chunk():
    inputs = lambda s: ssd_inputs(2, s, 8, 2, 16, 32)
    one = engine_call("mamba2_ssd", inputs(1), {}, {"form": "recurrent"}, 2, 1)[3]
    five = engine_call("mamba2_ssd", inputs(5), {}, {"form": "recurrent"}, 2, 5)[3]
    per_call = 2 * 8
    assert five - per_call == 5 * (one - per_call)
    c = lambda s: engine_call("mamba2_ssd", inputs(s), {"chunk": 64}, {}, 2, s)[3] - per_call
    # per chunk the same cost plus a per-token part: linear in whole chunks, a partial chunk pays
    # the chunk's quadratic part
    assert c(192) - c(128) == c(128) - c(64)
    assert c(64) < c(65) < c(128)


def test_mamba2_ssd_checks():
    with pytest.raises(SpecError, match="not a multiple of groups"):
        engine_call("mamba2_ssd", ssd_inputs(1, 4, 3, 2, 2, 2), {"chunk": 4}, {}, 1, 4)
    with pytest.raises(SpecError, match="needs dims: {chunk"):
        engine_call("mamba2_ssd", ssd_inputs(1, 4, 2, 1, 2, 2), {}, {}, 1, 4)
    with pytest.raises(SpecError, match="unknown form"):
        engine_call("mamba2_ssd", ssd_inputs(1, 4, 2, 1, 2, 2), {}, {"form": "scan"}, 1, 4)
    bad = ssd_inputs(1, 4, 2, 1, 2, 2)
    bad[3] = t(("batch", 1), ("seq", 4), ("groups", 1), ("d_state", 3))
    with pytest.raises(SpecError, match="B/C state size"):
        engine_call("mamba2_ssd", bad, {"chunk": 4}, {}, 1, 4)


def test_ssd_enumeration_matches_transformers_torch_reference():
    torch = pytest.importorskip("torch")
    mod = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
    rng = np.random.default_rng(1)
    b, s, h, g, p, nst, chunk = 2, 9, 4, 2, 3, 4, 4
    x, dt, a_log, bm, cm, d = ssd_data(rng, b, s, h, g, p, nst)
    out_c, state_c, _ = run_ssd("chunked", x, dt, a_log, bm, cm, d, chunk=chunk)
    tt = lambda z: torch.tensor(z, dtype=torch.float64)   # the chunked fallback computes in float32
    a = -torch.exp(tt(a_log))
    ref, ref_state = mod.mamba2_chunk_scan(tt(x), tt(dt), a, tt(bm), tt(cm), chunk_size=chunk, D=tt(d),
                                           return_final_states=True)
    np.testing.assert_allclose(out_c, ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state_c, ref_state.numpy(), rtol=1e-5, atol=1e-5)
    # decode: the selective state update, one token at a time (A, dt, D broadcast over head_dim
    # and d_state as the mixer does)
    out_r, state_r, _ = run_ssd("recurrent", x, dt, a_log, bm, cm, d)
    state = torch.zeros(b, h, p, nst, dtype=torch.float64)
    a_full = a[:, None, None].expand(-1, p, nst)
    d_full = tt(d)[:, None].expand(-1, p)
    for i in range(s):
        y = mod.mamba2_selective_state_update(state, tt(x[:, i]), tt(dt[:, i])[..., None].expand(-1, -1, p),
                                              a_full, tt(bm[:, i]), tt(cm[:, i]), d_full)
        np.testing.assert_allclose(out_r[:, i], y.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state_r, state.numpy(), rtol=1e-5, atol=1e-5)


# -- KDA, per (request, value head) -------------------------------------------------------------------

def l2norm_div(cnt, row):
    """x / sqrt(sum(x * x) + eps) (kimi_linear's l2norm)."""
    acc = 0.0
    for e in row:
        acc = cnt.mac(acc, e, e)
    norm = cnt.op(math.sqrt(cnt.op(acc + 1e-6)))
    return cnt.elementwise(lambda e: e / norm, row)


def recurrent_kda(cnt, q, k, v, g, beta, state, l2=True):
    """q, k [s, dk], v [s, dv], g [s, dk], beta [s]."""
    if l2:
        q = np.stack([l2norm_div(cnt, row) for row in q])
        k = np.stack([l2norm_div(cnt, row) for row in k])
    s, dk = k.shape
    dv = v.shape[1]
    q = cnt.elementwise(lambda e: e * dk ** -0.5, q)
    out = np.zeros((s, dv))
    for i in range(s):
        decay = cnt.elementwise(math.exp, g[i])                       # per key channel
        state = cnt.elementwise(lambda u, w: u * w, state, decay[:, None])
        kv_mem = np.array([sum_mac(cnt, state[:, j], k[i]) for j in range(dv)])
        delta = cnt.elementwise(lambda u, w: (u - w), v[i], kv_mem)
        delta = cnt.elementwise(lambda u: u * beta[i], delta)
        state = np.array([[cnt.mac(state[a, j], k[i, a], delta[j]) for j in range(dv)] for a in range(dk)])
        out[i] = [sum_mac(cnt, state[:, j], q[i]) for j in range(dv)]
    return out, state


def sum_mac(cnt, a, b):
    acc = 0.0
    for u, w in zip(a, b):
        acc = cnt.mac(acc, u, w)
    return acc


def decayed_products(cnt, a, b, decay):
    """[C, C]: sum over channels of a_i * b_j * decay_ij (one product, then a multiply-add)."""
    c = a.shape[0]
    out = np.zeros((c, c))
    for i in range(c):
        for j in range(c):
            acc = 0.0
            for ch in range(a.shape[1]):
                acc = cnt.mac(acc, cnt.op(a[i, ch] * b[j, ch]), decay[i, j, ch])
            out[i, j] = acc
    return out


def chunked_kda(cnt, q, k, v, g, beta, state, chunk, l2=True):
    if l2:
        q = np.stack([l2norm_div(cnt, row) for row in q])
        k = np.stack([l2norm_div(cnt, row) for row in k])
    s, dk = k.shape
    dv = v.shape[1]
    pad = (chunk - s % chunk) % chunk
    q, k, v, g = (np.concatenate([z, np.zeros((pad, z.shape[1]))]) for z in (q, k, v, g))
    beta = np.concatenate([beta, np.zeros(pad)])
    q = cnt.elementwise(lambda e: e * dk ** -0.5, q)                  # scaled after padding
    n = (s + pad) // chunk
    v_beta = cnt.elementwise(lambda u, w: u * w, v, beta[:, None])
    k_beta = cnt.elementwise(lambda u, w: u * w, k, beta[:, None])
    out = np.zeros((n * chunk, dv))
    chunks = []
    for c in range(n):
        sl = slice(c * chunk, (c + 1) * chunk)
        cum = np.zeros((chunk, dk))
        cum[0] = g[sl][0]
        for i in range(1, chunk):
            cum[i] = [cnt.op(cum[i - 1, ch] + g[sl][i, ch]) for ch in range(dk)]
        diff = cnt.elementwise(lambda u, w: u - w, cum[:, None, :], cum[None, :, :])
        decay = np.zeros((chunk, chunk, dk))
        for i in range(chunk):
            for j in range(chunk):
                for ch in range(dk):
                    decay[i, j, ch] = cnt.exp(diff[i, j, ch] if j <= i else -math.inf)
        ut = decayed_products(cnt, k_beta[sl], k[sl], decay)
        new_values = cnt.solve_unit_lower(ut, v_beta[sl])
        decayed_kb = cnt.elementwise(lambda u, w: u * w, k_beta[sl], cnt.elementwise(math.exp, cum))
        k_cumdecay = cnt.solve_unit_lower(ut, decayed_kb)
        qd = cnt.elementwise(lambda u, w: u * w, q[sl], cnt.elementwise(math.exp, cum))
        intra = decayed_products(cnt, q[sl], k[sl], decay)
        rest = cnt.elementwise(math.exp, cnt.elementwise(lambda u, w: u - w, cum[-1][None, :], cum))
        kd = cnt.elementwise(lambda u, w: u * w, k[sl], rest)
        chunk_decay = cnt.elementwise(math.exp, cum[-1])
        chunks.append((new_values, k_cumdecay, qd, kd, intra, chunk_decay))
    for c, (new_values, k_cumdecay, qd, kd, intra, chunk_decay) in enumerate(chunks):
        v_new = cnt.elementwise(lambda u, w: u - w, new_values, cnt.matmul(k_cumdecay, state))
        inter = cnt.matmul(qd, state)
        intra_masked = np.tril(intra)
        out[c * chunk:(c + 1) * chunk] = cnt.elementwise(lambda u, w: u + w, inter, cnt.matmul(intra_masked, v_new))
        state = cnt.elementwise(lambda u, w: u + w, cnt.elementwise(lambda u, w: u * w, state, chunk_decay[:, None]),
                                cnt.matmul(kd.T, v_new))
    return out[:s], state


def kda_data(rng, b, s, hk, hv, dk, dv):
    return random_heads(rng, b, s, hk, hv, dk, dv, per_channel_gate=True)


def run_kda(form, q, k, v, g, beta, chunk=None, l2=True):
    return run_delta(form, q, k, v, g, beta, chunk, l2, recurrent=recurrent_kda, chunked=chunked_kda)


def kda_inputs(b, s, hk, hv, dk, dv):
    return delta_inputs(b, s, hk, hv, dk, dv, per_channel_gate=True)


@pytest.mark.parametrize("dims", DELTA_DIMS)
@pytest.mark.parametrize("l2", [True, False])
def test_kda_flops_match_enumeration(dims, l2):
    call, _, state = check_delta_rule_flops("kda", dims, l2, recurrent_kda, chunked_kda, per_channel_gate=True)
    assert OPS["kda"].state(call).sizes == state.shape[1:]


def test_kda_checks_and_scaling():
    with pytest.raises(SpecError, match="decay channels"):
        bad = kda_inputs(1, 4, 1, 1, 2, 2)
        bad[3] = t(("batch", 1), ("seq", 4), ("hv", 1), ("dk", 3))
        engine_call("kda", bad, {"chunk": 4}, {}, 1, 4)
    with pytest.raises(SpecError, match="must have rank 4"):
        bad = kda_inputs(1, 4, 1, 1, 2, 2)
        bad[3] = t(("batch", 1), ("seq", 4), ("hv", 1))              # a per-head gate is GDN's
        engine_call("kda", bad, {"chunk": 4}, {}, 1, 4)
    with pytest.raises(SpecError, match="needs dims: {chunk"):
        engine_call("kda", kda_inputs(1, 4, 1, 1, 2, 2), {}, {}, 1, 4)
    inputs = lambda s: kda_inputs(2, s, 4, 4, 16, 16)
    one = engine_call("kda", inputs(1), {}, {"form": "recurrent"}, 2, 1)[3]
    assert engine_call("kda", inputs(6), {}, {"form": "recurrent"}, 2, 6)[3] == 6 * one
    c = lambda s: engine_call("kda", inputs(s), {"chunk": 64}, {}, 2, s)[3]
    assert c(128) == 2 * c(64) and c(64) < c(65) < c(128)
    # the per-channel gate costs more than GDN's scalar gate at the same dims
    gdn = [t(("batch", 2), ("seq", 64), ("hk", 4), ("dk", 16))] * 2 + [
        t(("batch", 2), ("seq", 64), ("hv", 4), ("dv", 16)), t(("batch", 2), ("seq", 64), ("hv", 4)),
        t(("batch", 2), ("seq", 64), ("hv", 4))]
    assert engine_call("gated_delta_rule", gdn, {"chunk": 64}, {}, 2, 64)[3] < c(64)


def test_kda_enumeration_matches_transformers_torch_reference():
    torch = pytest.importorskip("torch")
    mod = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    rng = np.random.default_rng(2)
    q, k, v, g, beta = kda_data(rng, 2, 9, 2, 2, 3, 4)
    out_c, state_c, _ = run_kda("chunked", q, k, v, g, beta, chunk=4)
    tt = lambda z: torch.tensor(z, dtype=torch.float32)
    ref, ref_state = mod.chunk_kimi_delta_attention(tt(q), tt(k), tt(v), tt(g), tt(beta), chunk_size=4,
                                                    output_final_state=True, use_qk_l2norm_in_kernel=True)
    np.testing.assert_allclose(out_c, ref.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state_c, ref_state.numpy(), rtol=1e-4, atol=1e-5)
    out_r, state_r, _ = run_kda("recurrent", q, k, v, g, beta)
    ref_r, ref_state_r = mod.recurrent_kimi_delta_attention(tt(q), tt(k), tt(v), tt(g), tt(beta), None, True,
                                                            use_qk_l2norm_in_kernel=True)
    np.testing.assert_allclose(out_r, ref_r.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state_r, ref_state_r.numpy(), rtol=1e-4, atol=1e-5)


# -- the mamba2_mixer component against transformers' mixers on the meta device -----------------------

MIXER_SPEC = """\
model: contract/mamba2-test
model_type: contract
family: test
name: Mamba2 mixer
snapshot: contract
notes: one mixer layer
dims: {{hidden: {hidden}, ssm_heads: {heads}, ssm_head_dim: {head_dim}, ssm_groups: {groups}, ssm_state: {state}, conv_kernel: {kernel}}}
max_context: 4096
stacks:
  main:
    inputs: {{x: [batch, seq, hidden]}}
    graph:
      mixer: {{slot: attention, in: x}}
slots:
  attention: mamba2_mixer
"""


@pytest.mark.parametrize("hidden, heads, head_dim, groups, state, kernel", [
    (64, 8, 16, 2, 12, 4), (48, 6, 8, 3, 5, 3)])
def test_mamba2_mixer_params_and_states_match_transformers(tmp_path, hidden, heads, head_dim, groups, state, kernel):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
    from engine.language import kv, quantities
    from engine.language.api import evaluate_spec
    from engine.language.corpus import load_corpus
    from engine.language.model_load import load_model
    corpus = load_corpus()
    path = tmp_path / "mamba2.yaml"
    path.write_text(MIXER_SPEC.format(hidden=hidden, heads=heads, head_dim=head_dim, groups=groups, state=state,
                                      kernel=kernel))
    ev = evaluate_spec(corpus, load_model(path, corpus.root, corpus.roles, corpus.schemes))
    assert heads * head_dim % hidden == 0   # Mamba2Config sets the width as expand x hidden
    m2 = transformers.Mamba2Config(hidden_size=hidden, num_heads=heads, head_dim=head_dim, n_groups=groups,
                                   state_size=state, conv_kernel=kernel, expand=heads * head_dim // hidden,
                                   num_hidden_layers=1)
    nh = transformers.NemotronHConfig(hidden_size=hidden, mamba_num_heads=heads, mamba_head_dim=head_dim,
                                      n_groups=groups, ssm_state_size=state, conv_kernel=kernel,
                                      num_hidden_layers=2, hybrid_override_pattern="M*")
    with torch.device("meta"):
        mixers = [Mamba2Mixer(m2, 0), NemotronHMamba2Mixer(nh, 0)]
    for mixer in mixers:
        assert quantities.params_total(ev.numeric) == sum(p.numel() for p in mixer.parameters())
        caches = {c.name: c for c in kv.caches(ev.numeric)}
        # the states the modeling code keeps per request: conv [conv_dim, kernel - 1], ssm [heads, head_dim, N]
        assert caches["conv_state"].per_token == mixer.conv1d.weight.shape[0] * (kernel - 1)
        assert caches["ssm_state"].per_token == mixer.num_heads * mixer.head_dim * mixer.ssm_state_size
        assert caches["ssm_state"].dtype == "f32" and caches["ssm_state"].growth == "state"
