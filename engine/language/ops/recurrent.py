"""Recurrent-state mixers: the causal conv1d, bare learned vectors, the gated delta rule and
Kimi Delta Attention, and Mamba2's state-space duality; each keeps a state per request between
decode steps (``state``).

Layer: engine.language (on :mod:`engine.language.ops.base`).
"""
from __future__ import annotations

import sympy

from engine.language.shapes import Axis, AxisMap, Tensor, carried_all
from engine.language.ops.base import Leaf, Op, _last_is, _preserve


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


#: This family's ops, by name (the registry, engine.language.ops.OPS, orders them).
OPS: dict[str, Op] = {
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
}
