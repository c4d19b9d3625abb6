"""Speculative decoding with MTP on the deploy page, against ``archledger deploy --mtp K --acceptance A``.

The deploy page of a model with an ``mtp`` stack has two more controls, "MTP draft tokens k" and
"acceptance rate a". The page adds the exported draft steps of the ``--mtp 1`` structure
(engine/batch/deploy_export.py) k times to the main program run at seq = k + 1 (the rule of
engine.deploy.planner.with_drafts), takes weights and KV with the MTP stack on the last stage, and
TPOT = decode step / E with E = Sum(a**i, (i, 0, k)) (sol.summarize). Every number it shows must
equal the CLI's own path (``archledger deploy ... --mtp K --acceptance A --json``: its argument parser
and :func:`engine.cli.deploy.deployment_from_args`) within 1e-9 relative; k = 0 must be the page
without MTP, which is ``archledger deploy`` without ``--mtp``.

Model: Qwen3.5-27B (hybrid Gated DeltaNet + full attention, one MTP module: config.json
``mtp_num_hidden_layers`` = 1), over a tiny grid whose prompt lengths (1024, 4096), output (256) and
batches (1, 8, 64) none of the points below are. Cost: one small build (~6 s) and a few page loads.
"""
from __future__ import annotations

import json

import pytest

from tests.browser_waits import hovered_tip
from tests.deploy_helpers import assert_close, deploy_json
from tests.site_helpers import DEPLOY_FIELDS, OP_FIELDS, build_small_site, deploy_page, served
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its small site twice.
pytestmark = pytest.mark.xdist_group("site_mtp")

GRID = {
    "doc": "Tiny grid for tests/test_site_mtp.py.",
    "gpus": ["H100"], "gpu_counts": [1, 2], "beyond_fit": 2,
    "parallel": {"max_pp": 2, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 1},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16", "fp8"],
    "scenarios": {"input_lengths": [1024, 4096], "beyond_max_context": 1, "output_lengths": [256],
                  "batches": [1, 8, 64]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 4096, "output": 256}]},
}
MODEL = "Qwen/Qwen3.5-27B"
SLUG = MODEL.replace("/", "--")
# (config label, CLI degrees, KV dtype, prompt, output, batch, k, a)
POINTS = [
    ("1x tp1", dict(), "bf16", 3000, 500, 7, 1, 0.7),
    ("2x tp1-pp2", dict(pp=2), "fp8", 8000, 700, 37, 1, 0.0),    # a = 0: the whole MTP step per token
    # 20 requests: 20 decode tokens per GPU without MTP, 40 with k = 1 (vLLM's fusion limit of 32
    # lies between): the drafting structure's decode regime is not the one without MTP
    ("2x tp2", dict(tp=2), "bf16", 5000, 300, 20, 1, 0.85),
]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return build_small_site(tmp_path_factory.mktemp("site-mtp"), GRID, ["Qwen3.5-27B"])


@pytest.fixture(scope="module")
def base(out):
    yield from served(out / "site")


@pytest.fixture(scope="module")
def tab(browser, base):  # noqa: F811
    # (after ``base``: pytest tears fixtures down in reverse, so the tab closes before the
    # server stops and no late request of the last test meets a closed socket)
    t = _open(browser)
    yield t
    t.context.close()


def _cli(degrees, kv, prompt, output, batch, k=None, a=None) -> dict:
    """``archledger deploy Qwen3.5-27B --gpu H100 --framework vllm ... [--mtp k --acceptance a] --json``
    (k = 0 or None: without ``--mtp``; the CLI refuses --acceptance without drafts)."""
    extra = ("--mtp", str(k), "--acceptance", str(a)) if k else ()
    return deploy_json(MODEL, "H100", degrees, "vllm", kv, prompt, output, batch, extra)


_close = assert_close


def _page(tab, base, cfg, kv, prompt, output, batch, k=None, a=None) -> dict:
    query = f"gpu=H100&cfg={cfg.replace(' ', '+')}&fw=vllm&kv={kv}&input={prompt}&output={output}&batch={batch}"
    if k is not None:
        query += f"&mtp={k}&acc={a}"
    return deploy_page(tab, base, MODEL, query)


def _cards(tab) -> dict[str, str]:
    cards = tab.page.locator("#summary dl.cards > div")
    return {cards.nth(i).locator("dt").inner_text(): cards.nth(i).locator("dd").inner_text()
            for i in range(cards.count())}


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p[0].replace(' ', '')}-{p[2]}-b{p[5]}-k{p[6]}-a{p[7]}")
def test_page_equals_archledger_deploy_mtp(tab, base, point):
    cfg, degrees, kv, prompt, output, batch, k, a = point
    page = _page(tab, base, cfg, kv, prompt, output, batch, k, a)
    want = _cli(degrees, kv, prompt, output, batch, k, a)
    got, summary = page["summary"], want["deployment"]
    for name in DEPLOY_FIELDS:
        _close(got[name], summary[name], name)
    _close(got["tokens_per_s_per_user"], 1 / summary["tpot_s"], "tokens_per_s_per_user")
    for phase in ("prefill", "decode"):
        for name in ("step_time_s", "flops", "bytes", "weight_bytes", "comm_bytes"):
            _close(page["phases"][phase][name], want["phases"][phase][name], (phase, name))
    assert got["bound"] == want["phases"]["decode"]["bound"] and got["prefill_bound"] == want["phases"]["prefill"]["bound"]
    if k:
        for name in ("decode_step_time_s", "tokens_per_step"):
            _close(got[name], summary[name], name)
        assert got["mtp_tokens"] == summary["mtp_tokens"] == k
        # E by hand: 1 + a + ... + a^k
        _close(summary["tokens_per_step"], sum(a ** i for i in range(k + 1)), "E")
    else:
        assert "mtp_tokens" not in summary and got["mtp_tokens"] == 0 and got["tokens_per_step"] == 1
    # the per-op table of this very point, both phases: the draft ops (mtp/...) after the main stack's
    for phase in ("prefill", "decode"):
        rows = [r for r in page["ops"] if r["phase"] == phase]
        cli = want["ops"][phase]
        assert [r["op_uid"] for r in rows] == [r["op_uid"] for r in cli], phase
        assert any(r["op_uid"].startswith("mtp/") for r in rows) == bool(k), phase
        for r, c in zip(rows, cli):
            for name in OP_FIELDS:
                _close(r[name], c[name], (phase, r["op_uid"], name))
            assert r["bound"] == c["bound"] and r["kind"] == c["kind"], (phase, r["op_uid"])
            assert r["flops_formula"] == c["flops_formula"] and r["bytes_formula"] == c["bytes_formula"]
    # what the reader sees: the controls keep k and a, the cards show these numbers
    form = tab.page.evaluate("() => ({mtp: document.querySelector('#pick [name=mtp]').value,"
                             " acc: document.querySelector('#pick [name=acc]').value,"
                             " labels: [...document.querySelectorAll('#pick label.mtp')].map(l => l.firstChild.textContent.trim())})")
    assert form == {"mtp": str(k), "acc": str(a), "labels": ["MTP draft tokens k", "acceptance rate a"]}
    assert tab.page.locator("#pick [name=mtp]").is_visible() and tab.page.locator("#pick [name=acc]").is_visible()
    assert f"&mtp={k}&acc={a}" in tab.page.url
    shown = _cards(tab)
    assert shown["Max concurrent requests, worst case"] == str(summary["max_concurrent_requests"])
    assert ("Decode step" in shown) == bool(k) and "Tokens/s per user, last token" in shown and "Tokens/s per user, steady state" in shown
    assert not tab.errors, tab.errors


def test_k0_is_the_page_without_mtp(tab, base):
    """k = 0 (any a) gives exactly the numbers of the page opened without the MTP parameters, and
    those are ``archledger deploy`` without ``--mtp``."""
    point = ("2x tp1-pp2", "bf16", 8000, 700, 37)
    off = _page(tab, base, *point, 0, 0.9)
    plain = _page(tab, base, *point)
    want = _cli({"pp": 2}, *point[1:])["deployment"]
    assert plain["summary"]["mtp_tokens"] == 0
    for name in DEPLOY_FIELDS:
        assert off["summary"][name] == plain["summary"][name], name
        _close(plain["summary"][name], want[name], name)
    assert [r["t_sol_s"] for r in off["ops"]] == [r["t_sol_s"] for r in plain["ops"]]
    assert not tab.errors, tab.errors


def test_tpot_tooltip_shows_E(tab, base):
    """The TPOT card's tooltip is TPOT's rule with MTP: decode step / E, E's formula as the engine
    prints it (``tokens_per_step_formula`` of --json) and the values it takes: k = 1, a = 0.7 gives
    E = 1 + 0.7 = 1.7. The weights card's formula names the MTP layers (config.json's
    mtp_num_hidden_layers, the spec's n_mtp_layers)."""
    want = _cli({}, "bf16", 3000, 500, 7, 1, 0.7)["deployment"]
    _page(tab, base, "1x tp1", "bf16", 3000, 500, 7, 1, 0.7)
    tip = tab.page.locator("#tip")
    text = hovered_tip(tab.page, tab.page.locator("#summary dl.cards > div:has(dt:text-is('TPOT, last token')) .num"))
    assert "decode_step / E" in text and want["tokens_per_step_formula"] in text, text
    assert "Sum(mtp_acceptance**i, (i, 0, mtp_tokens))" in text, text
    assert "E = 1.70000" in text and "mtp_acceptance = 0.7" in text and "mtp_tokens = 1" in text, text
    tab.page.mouse.move(1, 1)
    tip.wait_for(state="hidden", timeout=5_000)
    # the weights card's formula is the drafting one: the MTP layers' weights on the last stage
    assert "n_mtp_layers" in hovered_tip(tab.page, tab.page.locator("#summary dl.cards > div:has(dt:text-is('Weights per GPU')) .num"))
    tab.page.mouse.move(1, 1)
    tip.wait_for(state="hidden", timeout=5_000)


def test_controls_change_the_numbers(tab, base):
    """Choosing k and a in the form (not the URL) recomputes: a = 0 makes TPOT the whole MTP step,
    slower than without drafts (the CLI's figure); a = 1 halves it (E = 2 with one module)."""
    _page(tab, base, "1x tp1", "bf16", 3000, 500, 7)
    tpot = {}
    for k, a in ((0, "0.5"), (1, "0"), (1, "1")):
        tab.page.fill("#pick [name=acc]", a)
        tab.page.select_option("#pick [name=mtp]", str(k))
        tab.page.dispatch_event("#pick [name=acc]", "change")
        tab.page.wait_for_function(f"() => (document.getElementById('summary').getAttribute('data-ready') || '')"
                                   f".includes('\"mtp\":\"{k}\",\"acc\":\"{a}\"')")
        tpot[(k, a)] = tab.page.evaluate("() => window.archDeploy.current.summary.tpot_s")
    _close(tpot[(1, "0")], _cli({}, "bf16", 3000, 500, 7, 1, 0.0)["deployment"]["tpot_s"], "a = 0")
    assert tpot[(1, "0")] > tpot[(0, "0.5")]
    _close(tpot[(1, "1")], tpot[(1, "0")] / 2, "E = 2")


def test_mtp_modules_bound_k():
    """k runs from 0 to the model's MTP modules (the export's ``mtp_modules``, the select's options):
    one for Qwen3.5-27B (config.json text_config.mtp_num_hidden_layers), none for Llama-3.1-8B, whose
    page gets no controls."""
    from engine.deploy.legality import mtp_modules
    from engine.language.api import evaluate
    assert mtp_modules(evaluate(MODEL)) == 1          # config.json text_config.mtp_num_hidden_layers
    assert mtp_modules(evaluate("meta-llama/Meta-Llama-3.1-8B")) == 0


def test_export_is_small(out):
    """The drafts add only their own steps: the config files stay a few KB compressed."""
    folder = out / "site" / "data" / "deploy" / SLUG
    sizes = {p.name: p.stat().st_size for p in folder.glob("*.json.gz")}
    assert sizes and max(sizes.values()) < 20_000, sizes
