"""The spec features Llama 4 needed (issue 16), each tested on its own.

1. ``mask: chunked``: each query sees the keys of its own chunk up to itself (transformers'
   ``chunked_overlay`` and-ed with the causal mask); the pair count is checked against an
   enumeration of that mask, and a chunked layer's cache keeps at most one chunk.
2. ``layout: in_out``: a linear's weight stored transposed ([in, out], or [E, in, out] stacked);
   storage and the shape guard honour it, and the guard's hint names it when the dims are swapped.
3. Boolean options from config (``qk_norm: config.use_qk_norm``), refused when not a boolean.
4. ``config_defaults:`` a config field's default as the modeling code supplies it, with ``src``.
5. Guards read the settings a multimodal checkpoint nests under ``text_config``.
"""
from __future__ import annotations

import pytest
import sympy

from engine.language import symbols
from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from engine.language.ops import OPS
from engine.api import evaluate_spec
from engine.language import kv as kv_mod
from tests.test_guards import findings, mutate
from tests.test_ops import call, run, tensor

SCOUT = "models/meta-llama--Llama-4-Scout-17B-16E-Instruct.yaml"
MAVERICK = "models/meta-llama--Llama-4-Maverick-17B-128E-Instruct.yaml"
SCOUT_ID = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MAVERICK_ID = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"


# -- 1. chunked attention ------------------------------------------------------------------------

def _chunked_visible(q: int, k: int, chunk: int) -> bool:
    """transformers masking_utils: chunked_overlay (same chunk) and causal_mask_function (k <= q),
    0-based positions, no padding."""
    return k // chunk == q // chunk and k <= q


def _brute_chunked(seq: int, ctx: int, chunk: int) -> int:
    """Pairs seen by the `seq` new queries ending at position `ctx` (1-based), by enumeration."""
    return sum(_chunked_visible(q, k, chunk) for q in range(ctx - seq, ctx) for k in range(ctx))


def _pairs(seq: int, ctx: int, chunk: int, mask: str = "chunked") -> int:
    I = sympy.Integer
    q = tensor(I(1), I(seq), I(4), I(8))
    k = tensor(I(1), I(ctx), I(2), I(8))
    c, out, _ = run("attention_score", [q, k], {"window": sympy.Integer(chunk)}, {"mask": mask},
                    scenario={symbols.SEQ: sympy.Integer(seq), symbols.CTX: sympy.Integer(ctx),
                              symbols.BATCH: sympy.Integer(1)})
    return int(out.computed) // 4   # per head


@pytest.mark.parametrize("chunk", [1, 3, 4, 8])
@pytest.mark.parametrize("s", [1, 2, 5, 8, 12, 13, 31])
def test_chunked_prefill_pairs_equal_the_enumerated_mask(s, chunk):
    # a whole prompt of S tokens: sum over its chunks of c(c+1)/2
    brute = _brute_chunked(s, s, chunk)
    sizes = [chunk] * (s // chunk) + ([s % chunk] if s % chunk else [])
    assert brute == sum(c * (c + 1) // 2 for c in sizes)
    assert _pairs(s, s, chunk) == brute


@pytest.mark.parametrize("chunk", [3, 8])
@pytest.mark.parametrize("seq,ctx", [(1, 1), (1, 8), (1, 9), (1, 17), (3, 10), (5, 13), (7, 24)])
def test_chunked_steps_equal_the_enumerated_mask(seq, ctx, chunk):
    # decode (seq 1) and a continued prefill: the query at 0-based p sees (p mod C) + 1 keys
    assert _pairs(seq, ctx, chunk) == _brute_chunked(seq, ctx, chunk)
    if seq == 1:
        assert _pairs(1, ctx, chunk) == (ctx - 1) % chunk + 1


def test_chunked_is_not_sliding():
    # a sliding window of C sees up to C keys at every position; a chunk restarts at each boundary
    assert _pairs(16, 16, 8) == 2 * 36 and _pairs(16, 16, 8, "sliding") == 36 + 8 * 8
    # at long context a chunk sees about half the pairs of a window of the same length:
    # 16 chunks x 8192 x 8193 / 2 against 8192 x 8193 / 2 + (131072 - 8192) x 8192
    chunked, sliding = _pairs(131072, 131072, 8192), _pairs(131072, 131072, 8192, "sliding")
    assert chunked == 16 * 8192 * 8193 // 2 and sliding == 8192 * 8193 // 2 + (131072 - 8192) * 8192
    assert 1.9 < sliding / chunked < 2


def test_chunked_layer_cache_keeps_at_most_one_chunk(evaluation):
    """transformers keeps a chunked layer in a DynamicSlidingWindowLayer of attention_chunk_size
    (cache_utils: "sliding and chunked are the same in how they should behave, only the mask
    differs"); vLLM's ChunkedLocalAttentionSpec holds one chunk window per request. So the cache
    of a chunked layer holds min(L, C) tokens at context L, the NoPE layers' all L."""
    a = evaluation(SCOUT_ID).numeric
    caches = kv_mod.caches(a)
    chunked = [c for c in caches if "[chunked]" in c.node_uid]
    nope = [c for c in caches if "[nope]" in c.node_uid]
    assert {int(c.window) for c in chunked} == {8192} and all(c.growth == "window" for c in chunked)
    assert all(c.growth == "every_token" for c in nope)
    for length in (100, 8192, 131072):
        for c in chunked:
            assert int(kv_mod.tokens_kept(c, sympy.Integer(length))) == min(length, 8192)
    # decode at context L: the chunked score reads the chunk's keys, (L - 1) mod C + 1 pairs per head
    rows = evaluation(SCOUT_ID).numeric.rows
    score = next(r for u, r in rows.items() if u.endswith("[chunked]/self_attn/scores@decode")
                 or (u.endswith("[chunked]/self_attn/scores") and "decode" in r.phases))
    pairs = score.out.computed / (symbols.dim(symbols.BATCH) * 40)
    for ctx in (1, 8192, 8193, 20000):
        got = pairs.subs({symbols.dim(symbols.SEQ): 1, symbols.dim(symbols.CTX): ctx})
        assert int(got) == (ctx - 1) % 8192 + 1


# -- 2. weights stored transposed ------------------------------------------------------------------

def test_linear_layout_in_out_stores_the_matrix_transposed():
    HID, FF = sympy.Integer(6), sympy.Integer(10)
    B, S = sympy.Integer(2), sympy.Integer(3)
    plain = call("linear", [tensor(B, S, HID)], {"in": HID, "out": FF})
    flipped = call("linear", [tensor(B, S, HID)], {"in": HID, "out": FF}, {"layout": "in_out"})
    (w,) = OPS["linear"].leaves(plain)
    (t,) = OPS["linear"].leaves(flipped)
    assert [a.size for a in w.axes] == [10, 6] and [a.size for a in t.axes] == [6, 10]
    assert OPS["linear"].params(plain) == OPS["linear"].params(flipped) == 60
    with pytest.raises(SpecError, match="unknown layout 'rows'"):
        OPS["linear"].leaves(call("linear", [tensor(B, S, HID)], {"in": HID, "out": FF}, {"layout": "rows"}))


def test_stacked_experts_are_stored_e_in_out(evaluation, corpus):
    from engine.language.storage import checkpoint_tensors
    ev = evaluation(SCOUT_ID)
    shapes = {t.key: tuple(int(x) for x in t.shape) for t in checkpoint_tensors(ev.numeric, corpus.models[SCOUT_ID], corpus)}
    assert shapes[next(k for k in shapes if k.endswith("experts.gate_up_proj"))] == (16, 5120, 2 * 8192)
    assert shapes[next(k for k in shapes if k.endswith("experts.down_proj"))] == (16, 8192, 5120)


def test_shape_guard_names_the_layout_when_a_matrix_is_transposed(tmp_path):
    root = mutate(tmp_path, [(SCOUT, " expert_layout: in_out,", "")])
    found, report = findings(root, "Llama-4-Scout-17B-16E", "shape")
    assert {r.guard: r.status for r in report.results}["weight"] == "pass"   # same element counts
    assert found and all("layout: in_out" in f.hint and "transposed" in f.hint for f in found)
    assert any("experts.down_proj is [16, 8192, 5120] in the checkpoint, the spec gives [16, 5120, 8192]"
               in f.message for f in found)


# -- 3. boolean options from config -----------------------------------------------------------------

def test_boolean_option_reads_the_config(evaluation):
    scout = evaluation(SCOUT_ID).numeric.rows        # use_qk_norm: true
    maverick = evaluation(MAVERICK_ID).numeric.rows  # use_qk_norm: false
    assert any(u.endswith("[chunked]/self_attn/q_norm") for u in scout)
    assert not any(u.endswith("/q_norm") for u in maverick)
    # the L2 norm has no weight (Llama4TextL2Norm): no parameters
    assert all(r.params == 0 for u, r in scout.items() if u.endswith(("q_norm", "k_norm")))


@pytest.mark.parametrize("value,message", [
    ("config.head_dim", "config.head_dim is 128, not true or false"),
    ("maybe", "expected true or false, got 'maybe'"),
])
def test_boolean_option_from_a_non_boolean_is_refused(tmp_path, value, message):
    root = mutate(tmp_path, [(SCOUT, "qk_norm: config.use_qk_norm", f"qk_norm: {value}")])
    corpus = load_corpus(root)
    with pytest.raises(SpecError, match=message) as err:
        evaluate_spec(corpus, corpus.models[SCOUT_ID])
    assert "with.qk_norm" in str(err.value) and SCOUT.split("/")[1] in str(err.value)


# -- 4. config defaults with their source -----------------------------------------------------------

def test_config_default_fills_a_missing_field_with_its_source(corpus, evaluation):
    model = corpus.models[SCOUT_ID]
    d = model.config_defaults["no_rope_layer_interval"]
    assert d.applied and d.value == 4 and "configuration_llama4.py" in d.src
    assert model.snapshot.fields["no_rope_layer_interval"] == 4
    # every 4th layer is NoPE: layers 3, 7, ..., 47
    comps = evaluation(SCOUT_ID).numeric.components
    nope = next(c for u, c in comps.items() if u.endswith("[nope]"))
    assert list(nope.layers) == list(range(3, 48, 4))


def test_config_defaults_equal_the_modeling_code():
    """The declared defaults are the transformers config class's own (an external fact)."""
    pytest.importorskip("transformers")
    from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
    corpus = load_corpus()
    for model_id in (SCOUT_ID, MAVERICK_ID):
        for name, d in corpus.models[model_id].config_defaults.items():
            assert getattr(Llama4TextConfig(), name) == d.value, name


def test_a_published_value_wins_over_the_default(tmp_path):
    root = mutate(tmp_path, [(SCOUT, "  attn_temperature_tuning: {value: true,",
                              "  attention_chunk_size: {value: 16, src: \"x.py: attention_chunk_size = 16\"}\n"
                              "  attn_temperature_tuning: {value: true,")])
    model = load_corpus(root).models[SCOUT_ID]
    assert not model.config_defaults["attention_chunk_size"].applied
    assert model.snapshot.fields["attention_chunk_size"] == 8192


def test_config_default_needs_a_source(tmp_path):
    root = mutate(tmp_path, [(SCOUT, "no_rope_layer_interval: {value: 4, src:", "no_rope_layer_interval: {value: 4, xsrc:")])
    with pytest.raises(SpecError, match="unknown field 'xsrc'"):
        load_corpus(root)


def test_schedule_guard_sees_the_default(tmp_path):
    # the spec's schedule puts NoPE every 3rd layer while the (defaulted) interval says 4
    root = mutate(tmp_path, [(SCOUT, "(layer + 1) % config.no_rope_layer_interval == 0", "(layer + 1) % 3 == 0")])
    found, _ = findings(root, "Llama-4-Scout-17B-16E", "schedule")
    assert len(found) == 1 and "config.no_rope_layer_interval = 4 makes 36 of 48 layers sliding-window" in found[0].message


# -- 5. guards read text_config ----------------------------------------------------------------------

def test_guards_see_structural_fields_under_text_config(corpus):
    from engine.verify.validate import validate
    report = validate(corpus, corpus.models[SCOUT_ID])
    evidence = {r.guard: r.evidence for r in report.results}
    assert "attention_chunk_size" in evidence["structural"] and "rope_scaling.factor" in evidence["structural"]
    assert "interleave_moe_layer_step" in evidence["schedule"]


def test_structural_and_axiom_guards_catch_a_wrong_chunk_under_text_config(tmp_path):
    root = mutate(tmp_path, [(SCOUT, "window: config.attention_chunk_size", "window: config.attention_chunk_size // 2")])
    axiom, report = findings(root, "Llama-4-Scout-17B-16E", "axiom")
    assert axiom and all("keeps 4096 tokens, config.attention_chunk_size = 8192" in f.message for f in axiom)
    assert all("cap it at config.attention_chunk_size" in f.hint for f in axiom)
    structural = [f for f in report.errors if f.guard == "structural"]
    assert structural and "binds window = 4096, but config.attention_chunk_size = 8192" in structural[0].message


def test_structural_guard_catches_a_chunk_read_from_nowhere(tmp_path):
    root = mutate(tmp_path, [(SCOUT, "window: config.attention_chunk_size", "window: 8192")])
    found, _ = findings(root, "Llama-4-Scout-17B-16E", "structural")
    assert len(found) == 1 and "config.attention_chunk_size = 8192" in found[0].message


def test_config_default_value_must_be_a_scalar(tmp_path):
    root = mutate(tmp_path, [(SCOUT, "no_rope_layer_interval: {value: 4,", "no_rope_layer_interval: {value: [4],")])
    with pytest.raises(SpecError, match=r"config_defaults.no_rope_layer_interval.value: expected true or false, "
                                        r"a whole number or text, got a list") as err:
        load_corpus(root)
    assert "Llama-4-Scout" in str(err.value) and "src:" in str(err.value)


def test_axiom_guard_names_the_chunk_field_when_the_config_has_no_window(tmp_path):
    # chunk-capped caches with the (nested) attention_chunk_size gone: the hint points at the
    # fields that may declare a window, the attention chunk among them
    root = mutate(tmp_path, [("snapshots/meta-llama--Llama-4-Scout-17B-16E-Instruct.yaml",
                              "attention_chunk_size: 8192", "attention_chunk_size: null"),
                             (SCOUT, "window: config.attention_chunk_size", "window: 8192")])
    found, _ = findings(root, "Llama-4-Scout-17B-16E", "axiom")
    assert found and "declares no window (config.sliding_window or config.attention_chunk_size" in found[0].message
    assert "attention chunk" in found[0].hint
