"""The browser copies of the serving rules by hand (issue 36): static/js/formula.js, sizing.js and
deploy_eval.js loaded into a blank Chromium page and run on made-up inputs whose answers are worked
out here, at the points where a rule and its misreading part. The consistency tests (page equals
``archledger``) cannot see a rule that is wrong in Python and in JavaScript alike; these can.

* formula.js: ``mod`` is floor mod (sympy's Mod, the sign of the divisor), not JavaScript's ``%``;
* sizing.js: the KV between two GPU types crosses the slower NIC; pools filling exactly one
  scale-up domain stay on it; a split meeting the TTFT and TPOT bounds exactly is an answer;
* deploy_eval.js: DP-attention replicas hold whole requests (the fullest holds ceil(B / dp));
  the fronts leave out points that do not fit.

No site is built: the scripts run against stubs of what the page provides (``archJSON`` serving the
made-up data, ``ARCH_PAGE``), one page for the module (about a second).
"""
from __future__ import annotations

import json
import math

import pytest

from engine.deploy.rules import GRID_BATCHES
from engine.deploy.rules import exported as deploy_rules
from site_builder.sources import REPO
from engine.serving.rules import exported as serving_rules
from site_builder.sizing import encode_doubles, stairs
from tests.browser_waits import awaited
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its Chromium pages twice.
pytestmark = pytest.mark.xdist_group("hand_browser")

JS = REPO / "static" / "js"
STUBS = """
window.ARCH_PAGE = {slug: "m", model_id: "m"};
window.archFmt = {};
window.FIXTURES = {};
// site.js's archJSON: the made-up files by URL; anything else never answers (sizing.js's page load)
window.archJSON = function (url) {
  return Object.prototype.hasOwnProperty.call(window.FIXTURES, url) ? Promise.resolve(window.FIXTURES[url])
                                                                     : new Promise(function () {});
};
"""


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811
    tab = _open(browser, production=False)
    tab.page.set_content("<form id=\"sizing\"></form>")   # sizing.js reads its form at load
    tab.page.add_script_tag(content=STUBS)
    for name in ("formula.js", "deploy_eval.js", "sizing.js"):
        tab.page.add_script_tag(path=str(JS / name))
    # the pairing and join programs the sizing page's data carries (site_builder/sizing.py)
    tab.page.evaluate("r => window.archSizing.useRules(r)", serving_rules())
    yield tab
    assert not tab.errors, tab.errors
    tab.context.close()


# -- formula.js: Mod on negative operands ------------------------------------------------------------

def test_formula_js_mod_is_floor_mod(page):
    """-7 mod 3 = -7 - 3 x floor(-7 / 3) = 2 (JavaScript's -7 % 3 is -1); 7 mod -3 = -2; -7 mod -3 = -1;
    and inside a tree with a bound symbol."""
    cases = [(["mod", -7, 3], {}, 2), (["mod", 7, -3], {}, -2), (["mod", -7, -3], {}, -1),
             (["mod", "x", 4], {"x": -1}, 3), (["+", ["mod", "x", 8], 1], {"x": -17}, 8)]
    got = page.page.evaluate("c => c.map(([t, e]) => window.archFormula.evaluate(t, e))",
                             [[t, e] for t, e, _ in cases])
    assert got == [v for _, _, v in cases]


# -- sizing.js: the disaggregated joining rules --------------------------------------------------------

# the GPU files' figures as the build exports them per GPU type (alpha s, one-direction B/s):
# alpha = NCCL base 6.6 us + one hop (NVLink 0.6, network 2.7), gpus/collectives/nccl.yaml
H100 = {"price": None, "domain": 8, "up": [7.2e-6, 450e9], "out": [9.3e-6, 50e9]}    # gpus/h100-sxm.yaml
B300 = {"price": None, "domain": 8, "up": [7.2e-6, 900e9], "out": [9.3e-6, 100e9]}   # gpus/b300.yaml
KV_8B = 32 * 8 * 128 * 2 * 2 * 2048       # Llama-3.1-8B, a 2048-token prompt's K and V in BF16


def _join(page, pg, dg, same, pc, batch_p, ttft_p, dc, batch_d, tpot_d, output):
    return page.page.evaluate(
        """([pg, dg, same, pc, bp, tp, dc, bd, td, kv, out]) => {
             var S = window.archSizing, lk = S.links(pg, dg, same);
             return {links: lk, row: S.join(pg, dg, lk, pc, bp, tp, dc, bd, td, kv, out)};
           }""", [pg, dg, same, pc, batch_p, ttft_p, dc, batch_d, tpot_d, KV_8B, output])


def test_sizing_js_kv_between_gpu_types_takes_the_slower_nic(page):
    """H100 prefill -> B300 decode, TP 1 each: no shared scale-up domain (``links`` gives none), the
    scale-out path at the smaller bandwidth (H100's 50 GB/s, not B300's 100) and the larger alpha:
    9.3 us + 268,435,456 / 50e9 = 5.3780 ms on top of the prefill TTFT."""
    out = _join(page, H100, B300, False, ["tp1", 1, KV_8B], 1, 0.1, ["tp1", 1, KV_8B], 8, 0.01, 256)
    assert out["links"]["up"] is None and out["links"]["out"] == {"alpha": 9.3e-6, "bw": 50e9}
    row = out["row"]
    assert row["kv_link"] == "scale_out" and row["total_gpus"] == 2
    assert row["kv_transfer_s"] == pytest.approx(9.3e-6 + KV_8B / 50e9, rel=1e-15)
    assert row["ttft_s"] == pytest.approx(0.1 + 0.00537800912, rel=1e-12)


def test_sizing_js_pools_filling_exactly_one_domain_stay_on_nvlink(page):
    """H100 TP4 prefill (8 prompts in 50 ms: 160 requests/s) and H100 TP4 decode (1 request, 256
    tokens at 10 ms: 0.39 requests/s): one replica each, 4 + 4 = 8 GPUs = the NVLink domain, so the
    KV (a quarter per GPU: its 2 of 8 KV heads) moves over NVLink: 7.2 us + 67,108,864 / 450e9."""
    share = KV_8B // 4
    row = _join(page, H100, H100, True, ["tp4", 4, share], 8, 0.05, ["tp4", 4, share], 1, 0.01, 256)["row"]
    assert row["prefill_replicas"] == row["decode_replicas"] == 1 and row["total_gpus"] == 8
    assert row["kv_link"] == "scale_up"
    assert row["kv_transfer_s"] == pytest.approx(7.2e-6 + 67_108_864 / 450e9, rel=1e-15)


def _scenario(tpot: float) -> dict:
    """Two made-up GPU types "P" and "D" (no shared domain) with binary-exact figures: one prefill
    point (TP 1, 4 prompts in 0.5 s: 8 requests/s), one decode point (TP 1, 2 requests at ``tpot``),
    KV share 2**28 B per GPU; scale-out alpha max(0.25, 0.125) s, bandwidth min(2**30, 2**31) B/s:
    the transfer takes 0.25 + 2**28 / 2**30 = 0.5 s, so TTFT = 0.5 + 0.5 = 1.0 s exactly."""
    share = 2.0 ** 28
    gpu = {"price": None, "domain": 8, "up": [1e-6, 2.0 ** 32],
           "prefill": {"configs": [["tp1", 1, share]], "config": [0], "batch": [4], "ttft": [0.5],
                       "stairs": stairs([0], [4], [0.5], 1)},
           "decode": {"configs": [["tp1", 1, share]], "config": [0], "batch": [2], "tpot": encode_doubles([tpot])}}
    return {"kv_request": share, "gpus": {"P": {**gpu, "out": [0.25, 2.0 ** 30]},
                                          "D": {**json.loads(json.dumps(gpu)), "out": [0.125, 2.0 ** 31]}}}


@pytest.mark.parametrize("ttft_bound,tpot_bound,met", [
    (1.0, 2.0 ** -6, True),                                   # both bounds met exactly: an answer
    (math.nextafter(1.0, 0), 2.0 ** -6, False),               # TTFT 1 ulp over its bound
    (1.0, math.nextafter(2.0 ** -6, 0), False),               # TPOT 1 ulp over its bound
])
def test_sizing_js_a_split_meeting_the_bounds_exactly_is_an_answer(page, ttft_bound, tpot_bound, met):
    """P prefills, D decodes 64 tokens per request at TPOT 2**-6 s: D completes 2 / (64 x 2**-6) = 2
    requests/s, one P replica 8, so one of each (2 GPUs); TTFT 1.0 s, TPOT 2**-6 s (``_scenario``);
    requests/s min(8, 2) = 2, tokens/s/GPU 2 x 64 / 2 = 64. Bounds are ``<=``."""
    row = page.page.evaluate("([s, a, b]) => window.archSizing.pairAnswer(s, 'P', 'D', 64, a, b)",
                             [_scenario(2.0 ** -6), ttft_bound, tpot_bound])
    if not met:
        assert row is None
        return
    assert (row["prefill_replicas"], row["decode_replicas"], row["total_gpus"]) == (1, 1, 2)
    assert row["kv_link"] == "scale_out" and row["kv_transfer_s"] == 0.5
    assert row["ttft_s"] == 1.0 and row["tpot_s"] == 2.0 ** -6
    assert row["tokens_per_s_per_gpu"] == 64 and row["requests_per_s"] == 2



def test_sizing_js_pairs_only_what_the_build_allows(page):
    """The same split as above (an answer at TTFT <= 1 s, TPOT <= 2**-6 s) is none when the build
    wrote that P's prefill pool pairs only with P (``pairs_with``: plan's default rule, e.g. an NVIDIA
    prefill GPU and an AMD decode GPU), and is the answer again when it lists D."""
    scen = _scenario(2.0 ** -6)
    call = "([s, a, b]) => window.archSizing.pairAnswer(s, 'P', 'D', 64, a, b)"
    scen["gpus"]["P"]["pairs_with"] = ["P"]
    assert page.page.evaluate(call, [scen, 1.0, 2.0 ** -6]) is None
    scen["gpus"]["P"]["pairs_with"] = ["P", "D"]
    assert page.page.evaluate(call, [scen, 1.0, 2.0 ** -6])["total_gpus"] == 2

# -- deploy_eval.js: DP-attention per rank, fronts of points that fit ----------------------------------

GPU = {"peaks": [1e15], "hbm_bytes_per_s": 1e12, "hbm_bytes": 1e11, "scale_up": 1e11, "scale_out": 1e10,
       "alpha": [0, 0, 0, 0]}
# trees: 0, 1e9, batch x 1e9, 1e8, 1e6
TREES = [0, 1e9, ["*", "batch", 1e9], 1e8, 1e6]


def _step(flops, nbytes, weights):
    """[flops, bytes, comm, weights, calls, repeat, dtype, link, coll, kind, view, uid, f_flops, f_bytes, f_comm]"""
    return [flops, nbytes, 0, weights, 0, 1, 0, 0, -1, 0, 0, 0, 1, 1, 1]


def _option(cfg, n_gpus):
    return {"cfg": cfg, "gpu": "G", "kv_dtype": "bf16", "limits": [], "prefill": [0], "decode": [1], "reserve": 0,
            "admission": {"page_tokens": 1, "free_fraction": 0, "reserve_ratio": 0, "reserve_clip_tokens": 0},
            "file": cfg, "n_gpus": n_gpus, "config": cfg}


def _config(tp, dp_attn, weights):
    return {"tp": tp, "pp": 1, "cp": 1, "dp_attn": dp_attn, "weight_bytes_per_gpu": weights, "kv_dev": 4, "mtp": None}


#: "c": KV that grows with the context (1e6 B per token) next to 8.785e10 B of weights: room 0.9 x
#: 1e11 - 8.785e10 = 2.15e9 B (test_deploy_eval_js_front_serves_by_the_steady_state)
C_WEIGHTS = 0.9e11 - 2.15e9
MODEL = {"configs": {"dp8": _config(8, 8, 1e9), "a": _config(1, 1, 1e9), "b": _config(1, 1, 1e12),
                     "c": {**_config(1, 1, C_WEIGHTS), "kv_dev": ["*", "length", 1e6]}},
         "gpus": {"G": GPU}, "kv_bytes": {"bf16": 2}, "budget": 8192, "hbm_fraction": 0.9, "max_batch": 4096,
         "max_context": 1 << 30, "kv_request": {"all": 0, "state": 0}, "grid_batches": GRID_BATCHES,
         "rules": deploy_rules()}     # the rule programs index.json carries (site_builder/data.py)
FILES = {
    # decode: one step of batch x 1e9 FLOPs (the replica's program: the fullest rank's requests x dp_attn)
    "dp8": {"trees": TREES, "strings": ["step", "f"], "programs": [[_step(0, 1, 1)], [_step(2, 0, 0)]]},
    # "a" (fits: 1e9 B of weights) and "b" (does not: 1e12 B > 0.9 x 1e11): decode reads 1e9 / 1e8 B
    "a": {"trees": TREES, "strings": ["step", "f"], "programs": [[_step(0, 1, 1)], [_step(0, 1, 0)]]},
    "b": {"trees": TREES, "strings": ["step", "f"], "programs": [[_step(0, 1, 1)], [_step(0, 3, 0)]]},
    "c": {"trees": TREES, "strings": ["step", "f"], "programs": [[_step(0, 1, 1)], [_step(0, 1, 0)]]},
}


@pytest.fixture(scope="module")
def deploy_eval(page):
    fixtures = {"data/deploy/m/index.json.gz": {"model": MODEL, "options": []}}
    fixtures.update({f"data/deploy/m/{name}.json.gz": f for name, f in FILES.items()})
    # awaited: the stub archJSON never answers a file it was not given, so a page asking for another
    # file would otherwise hold the test forever
    awaited(page.page, "f => { Object.assign(window.FIXTURES, f); window.E = window.archDeployEval('', 'm');"
                       " return window.E.index().then(() => true); }", fixtures, what="deploy_eval.js's index")
    return page


@pytest.mark.parametrize("batch,per_rank", [(1, 1), (9, 2), (16, 2)])
def test_deploy_eval_js_dp_attention_holds_whole_requests(deploy_eval, batch, per_rank):
    """TP 8 with DP-attention 8: ``batch`` requests over 8 attention replicas, whole requests each,
    so the fullest holds ceil(batch / 8) (1, 2, 2) and the decode program runs at 8 x that: a step of
    batch x 1e9 FLOPs takes 8 x per_rank x 1e9 FLOPs (never 1e9 x batch spread evenly), 8e-6 s per
    request on the fullest rank at 1e15 FLOP/s. KV per GPU = per_rank x 4 B."""
    s = awaited(deploy_eval.page,
        "b => window.E.file({file: 'dp8'}).then(f => window.E.summarize("
        "{cfg: 'dp8', gpu: 'G', kv_dtype: 'bf16', limits: [], prefill: [0], decode: [1], reserve: 0, admission: {page_tokens: 1, free_fraction: 0, reserve_ratio: 0, reserve_clip_tokens: 0}}, f,"
        " {input: 1024, output: 64, batch: b}))", batch, what="config dp8's file and summary")
    assert s["per_rank"] == per_rank
    assert s["env"]["decode"]["batch"] == 8 * per_rank
    assert s["phases"]["decode"]["flops"] == 8 * per_rank * 1e9
    assert s["tpot_s"] == pytest.approx(8 * per_rank * 1e9 / 1e15, rel=1e-15)
    assert s["kv_bytes_per_gpu"] == per_rank * 4


def test_deploy_eval_js_front_leaves_out_points_that_do_not_fit(deploy_eval):
    """Two configs of GPU G at batches [1, 2]. "a" fits (room 0.9 x 1e11 - 1e9 B holds 2.225e10
    requests of 4 B): decode reads 1e9 B in 1 ms at any batch, so batch 2 gives 1000 tokens/s/user
    and 2000 tokens/s/GPU and dominates batch 1 (1000, 1000). "b" holds no request (1e12 B of
    weights on a 1e11 B GPU): its batch-1 point (1e8 B: 10,000 tokens/s/user and /GPU) would
    dominate every point of "a", but a point that does not fit is not served: the front is a's batch 2."""
    rows = awaited(deploy_eval.page, "([a, b]) => window.E.fronts([a, b], [1, 2], {input: 1024, output: 64})",
                   [_option("a", 1), _option("b", 1)], what="the front of configs a and b")
    # "a"'s KV is 4 B whatever the context: both capacities floor(8.9e10 / 4) = 2.225e10; one decode
    # time at every context, so the steady TPOT and the last token's are both 1 ms
    assert rows == [{"gpu": "G", "n_gpus": 1, "config": "a", "batch": 2, "ttft_s": 1e-3, "tpot_s": 1e-3,
                     "tpot_last_s": 1e-3, "tokens_per_s_per_gpu": 2000, "tokens_per_s_per_user": 1000,
                     "max_concurrent_requests": 22_250_000_000, "max_concurrent_requests_worst": 22_250_000_000}]


def test_deploy_eval_js_front_serves_by_the_steady_state(deploy_eval):
    """The page's front serves by the steady state of continuous batching (engine.serving.steady.
    FRONT_BASIS), as on_front does. Config "c": KV 1e6 B per token of context, room 2.15e9 B, prompt
    1024, output 64, token pages, no reservation or free pages. Worst case: every request at 1024 +
    64 = 1088 tokens, 1.088e9 B, floor(2.15e9 / 1.088e9) = 1 request. Steady state: the mean over j
    = 1..64 of 1024 + j - 1 = 1055.5 tokens, 1.0555e9 B, floor(2.15e9 / 1.0555e9) = 2 requests.
    Decode reads 1e9 B in 1 ms at any batch, so batch 2 (1000 tokens/s/user, 2000 tokens/s/GPU)
    dominates batch 1 (1000, 1000): the front is batch 2, past the worst-case capacity (under the
    worst case it would be batch 1). Planted bugs caught: the front served by ``fits``; the grid's
    batches cut at the worst-case capacity (the grid's batch rule, GRID_BATCHES)."""
    assert (2.15e9 // 1.088e9, 2.15e9 // 1.0555e9) == (1, 2)
    rows = awaited(deploy_eval.page, "c => window.E.fronts([c], [1, 2], {input: 1024, output: 64})", _option("c", 1),
                   what="the front of config c")
    assert [(r["config"], r["batch"], r["max_concurrent_requests_worst"], r["max_concurrent_requests"]) for r in rows] \
        == [("c", 2, 1, 2)]
    assert (rows[0]["tokens_per_s_per_gpu"], rows[0]["tokens_per_s_per_user"]) == (2000, 1000)


def test_deploy_eval_js_front_file_rows_are_the_stored_fields(deploy_eval):
    """A precomputed front file (site_builder.data.front_files: stored fields, one list per column)
    as the chart's rows, each row the file's values column by column, the rates as stored (the page
    computes nothing: engine.serving.steady.front_point is the one rule). By hand: two rows, the
    second's fields from the second entry of each column."""
    rows = deploy_eval.page.evaluate(
        "t => window.E.frontRows(t)",
        {"columns": ["gpu", "n_gpus", "config", "batch", "ttft_s", "tpot_s", "tpot_last_s", "tokens_per_s_per_gpu",
                     "tokens_per_s_per_user"],
         "values": [["B200", "H100"], [1, 2], ["tp1", "tp2"], [1, 8], [0.5, 0.5], [0.004, 0.02], [0.005, 0.025],
                    [250, 200], [250, 50]]})
    assert [(r["gpu"], r["batch"], r["tpot_last_s"]) for r in rows] == [("B200", 1, 0.005), ("H100", 8, 0.025)]
    assert [(r["tokens_per_s_per_gpu"], r["tokens_per_s_per_user"]) for r in rows] == [(250, 250), (200, 50)]
    assert deploy_eval.page.evaluate("() => window.E.frontRows({columns: ['gpu'], values: [[]]})") == []


def test_deploy_eval_js_config_file_reads_the_models_common_file(deploy_eval):
    """A config file naming the model's shared file (``"common": "common"``, site_builder.data.COMMON)
    is handed over with that file's trees, strings and tables in place, the same lists for every
    config (fetched once); a file carrying its own (a hand fixture, an older build) keeps them."""
    shared = {"trees": ["batch"], "strings": ["u"], "lookups": {"3": {"name": "t3"}}}
    got = awaited(deploy_eval.page,
        """sh => { Object.assign(window.FIXTURES, {'data/deploy/m/common.json.gz': sh,
                  'data/deploy/m/x1.json.gz': {programs: [], common: 'common'}, 'data/deploy/m/x2.json.gz': {programs: [], common: 'common'},
                  'data/deploy/m/x3.json.gz': {programs: [], trees: [1], strings: ['own'], lookups: {}}});
                return Promise.all(['x1', 'x2', 'x3'].map(f => window.E.file({file: f}))).then(fs =>
                  [[fs[0].trees, fs[0].strings, fs[0].lookups], fs[0].trees === fs[1].trees, [fs[2].trees, fs[2].strings]]); }""",
        shared, what="config files x1, x2, x3")
    assert got == [[["batch"], ["u"], {"3": {"name": "t3"}}], True, [[1], ["own"]]]


# -- sizing.js: the aggregated answer at bounds met exactly ------------------------------------------

SIZING_FORM = """
<form id="sizing">
  <select name="scenario"><option value="1024/64">1024/64</option></select>
  <select name="fw"><option>vllm</option></select> <select name="kv"><option>bf16</option></select>
  <input name="ttft" type="number" step="any" value="0.5"> <input name="tpot" type="number" step="any" value="20">
  <input type="checkbox" name="gpu" value="G" checked>
</form>
<p id="sizing-answer"></p>
<table id="sizing-table"><tbody></tbody></table>
<code id="sizing-cli"></code>
"""
# one GPU type, two sizing rows in rank order: 1 GPU meeting TTFT 0.5 s and TPOT 20 ms exactly, then 2 GPUs
# well within both (the page's answer is the first row in rank order within the bounds)
SIZING_DATA = {
    "columns": {"sizing": ["config", "n_gpus", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu",
                           "tokens_per_s_per_user"], "front": []},
    "sizing": {"vllm/bf16/1024/64/G": [["tp1", 1, 8, 0.5, 0.02, 400.0, 50.0], ["tp2", 2, 8, 0.1, 0.005, 800.0, 200.0]]},
    "front": {}, "disagg": {}, "scenarios": [{"input_len": 1024, "output_len": 64, "max_gpus": 8}],
}


@pytest.fixture(scope="module")
def sizing_page(browser):  # noqa: F811
    tab = _open(browser, production=False)
    tab.page.set_content(SIZING_FORM)
    # (about:blank has no URL for sync()'s history.replaceState to rewrite: a no-op stands in)
    tab.page.add_script_tag(content=STUBS + "window.archFmt = {time: String, si: String};"
                            " history.replaceState = function () {};")
    tab.page.evaluate("d => Object.assign(window.FIXTURES, {'data/sizing/m.json.gz': d,"
                      " 'data/deploy/page.json.gz': {specs: {front: {}}}})", SIZING_DATA)
    tab.page.add_script_tag(path=str(JS / "sizing.js"))
    tab.page.wait_for_function("() => document.getElementById('sizing-answer').hasAttribute('data-config')")
    yield tab
    assert not tab.errors, tab.errors
    tab.context.close()


@pytest.mark.parametrize("ttft,tpot_ms,config", [
    ("0.5", "20", "tp1"),                       # the 1-GPU row meets both bounds exactly: it is the answer
    ("0.49999999999999994", "20", "tp2"),       # 1 ulp under its TTFT: the next row in rank order
    ("0.5", "19.999999999999996", "tp2"),       # TPOT bound 1 ulp (of 20 ms) under its TPOT
])
def test_sizing_js_a_row_meeting_the_bounds_exactly_is_the_answer(sizing_page, ttft, tpot_ms, config):
    """The sizing page's aggregated answer is the first row in rank order with TTFT <= the bound and
    TPOT <= the bound (TPOT typed in ms: 20 / 1000 is the double 0.02 the row holds)."""
    page = sizing_page.page
    page.evaluate("([a, b]) => { var f = document.getElementById('sizing'); f.elements.ttft.value = a;"
                  " f.elements.tpot.value = b; f.dispatchEvent(new Event('input')); }", [ttft, tpot_ms])
    assert page.get_attribute("#sizing-answer", "data-config") == config
    assert page.get_attribute("#sizing-answer", "data-n-gpus") == {"tp1": "1", "tp2": "2"}[config]
