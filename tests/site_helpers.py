"""Helpers shared by the tests that build a small site: one build over a tiny grid, and its tables."""
from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Iterator

import polars as pl
import yaml

from tests.browser_waits import awaited


def build_small_site(root: Path, grid: dict, models: list[str]) -> Path:
    """Build ``models`` over ``grid`` (a grid.yaml mapping) into ``root``: results and site, the way
    ``archledger build`` publishes them (staged, then moved into place)."""
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_staged

    path = root / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    build(load_corpus(), root, models, path, jobs=1, site=render_staged)
    return root


_SHARED: dict[tuple, Path] = {}


def shared_small_site(tmp_path_factory, grid: dict, models: list[str]) -> Path:
    """:func:`build_small_site` once per test process for each (grid, models): test modules that
    read the same small site (the playground's) share one build."""
    key = (yaml.safe_dump(grid, sort_keys=True), tuple(models))
    if key not in _SHARED:
        _SHARED[key] = build_small_site(tmp_path_factory.mktemp("shared-site"), grid, models)
    return _SHARED[key]


#: The small site of tests/test_site_numbers.py and tests/test_site_polish.py (one build per process,
#: :func:`shared_small_site`; the two modules share an xdist group): one H100 and two, vLLM, BF16 KV,
#: prompts of 1K and 4K tokens, batches 1 and 8, one per-op point; Llama-3.1-8B (the hand-checked
#: rows) and Qwen3.5-27B (a hybrid stack beside it).
H100_PAIR_GRID = {
    "doc": "Tiny grid for tests/test_site_numbers.py and tests/test_site_polish.py.",
    "gpus": ["H100"], "gpu_counts": [1, 2], "beyond_fit": 2,
    "parallel": {"max_pp": 1, "cp": [1], "ep": [1], "dp_attn": [1], "tp_in_domain": True, "pp_after_tp": 8},
    "frameworks": ["vllm"], "kv_dtypes": ["bf16"],
    "scenarios": {"input_lengths": [1024, 4096], "beyond_max_context": 1, "output_lengths": [256],
                  "batches": [1, 8]},
    "ops": {"kv_dtypes": ["bf16"], "points": [{"batch": 8, "input": 4096, "output": 256}]},
}
H100_PAIR_MODELS = ["Llama-3.1-8B", "Qwen3.5-27B"]


#: The deploy page's summary fields the browser tests hold equal to ``archledger deploy --json``'s,
#: and the per-op fields.
DEPLOY_FIELDS = ("ttft_s", "tpot_s", "ttft_bound_s", "tpot_bound_s", "tpot_mean_bound_s", "tokens_per_s_per_gpu", "prefill_tokens_per_s_per_gpu", "max_concurrent_requests",
                 "max_prefill_batch", "prefill_steps", "micro_batches", "weight_bytes_per_gpu", "usable_bytes_per_gpu",
                 "reserve_bytes_per_gpu", "kv_bytes_per_request", "kv_state_bytes_per_request",
                 "kv_bytes_per_request_per_gpu", "kv_budget_bytes_per_gpu", "kv_bytes_per_gpu",
                 "activation_bytes_per_gpu", "free_bytes_per_gpu", "shortfall_bytes", "fits", "extrapolated",
                 "kv_steady_tokens_per_request", "kv_bytes_per_request_steady_per_gpu", "max_concurrent_requests_steady",
                 "fits_steady", "tpot_mean_s", "tokens_per_s_per_gpu_steady",
                 # from measured kernels: the formula trees' lookup nodes (engine.deploy.measured.expected_tree)
                 "ttft_expected_s", "tpot_expected_s", "tpot_mean_expected_s")
OP_FIELDS = ("flops", "bytes", "weight_bytes", "comm_bytes", "t_compute_s", "t_memory_s", "t_comm_s", "t_sol_s",
             "t_expected_s", "measured")


def deploy_page(tab, base: str, model: str, query: str) -> dict:
    """Open ``model``'s deploy page with the URL parameters ``query`` and read what it computed once
    ready: the summary (without its bulky internals), both phases' totals and the per-op rows."""
    tab.goto(f"{base}models/{model.replace('/', '--')}/deploy/?{query}")
    tab.page.wait_for_function("() => document.getElementById('summary').hasAttribute('data-ready')"
                               " && document.querySelectorAll('#ops tbody tr').length > 0")
    return tab.page.evaluate("() => { const c = window.archDeploy.current;"
                             " return {summary: Object.assign({}, c.summary, {phases: null, env: null, programs: null,"
                             " steps: null}), phases: c.summary.phases, ops: c.ops}; }")


def result_tables(out: Path) -> dict[str, pl.DataFrame]:
    """models.parquet and the hive-partitioned deployments, ops, fronts and sizing tables of a build;
    the deployments with the worst case's ``tokens_per_s_per_gpu`` as an analyst adds it (the
    documented division of the stored columns, engine.serving.steady.worst_rate: not stored)."""
    from engine.serving.steady import worst_rate
    results = out / "results"

    def scan(table: str) -> pl.DataFrame:
        frame = pl.scan_parquet(str(results / table / "**" / "*.parquet"), hive_partitioning=True)
        return (frame.with_columns(tokens_per_s_per_gpu=worst_rate()) if table == "deployments" else frame).collect()

    return {"models": pl.read_parquet(results / "models.parquet"),
            **{t: scan(t) for t in ("deployments", "ops", "fronts", "sizing") if (results / t).is_dir()}}


def served(site: Path) -> Iterator[str]:
    """A local server over ``site`` for the length of a fixture, sending netlify.toml's headers as
    production does (the browser tests' tabs check the Content-Security-Policy): yields its base URL."""
    from site_builder.serve import load_headers, start

    server, url = start(site, rules=load_headers(Path(__file__).resolve().parent.parent / "netlify.toml"))
    yield url
    server.shutdown()
    server.server_close()


def expected_layers(doc: dict, stack: str) -> list[str]:
    """The layer group the walk put at each layer of the layer stack ``stack`` (a repeat node's
    uid), in layer order: read from the model document's component rows (``template``, ``layers``),
    not from its ``layer_plan``."""
    at = {layer: c["uid"] for c in doc["components"]
          if c["template"] and c["uid"].startswith(stack + "[") for layer in c["layers"]}
    return [at[i] for i in sorted(at)]


def drawn_layers(nodes: dict[str, dict], edges: list[dict], start: str, end: str) -> list[str]:
    """The layer groups a stack drawing shows between ``start`` and ``end``, one entry per layer:
    the forward path from ``start`` to ``end`` (edges other than streams and repeat loops), each
    group box counted as its badge says ("x3", else once), each repeat loop's span as often as its
    label says ("x16, layers 0-63"). ``nodes``: id -> {"badge": text}; ``edges``: {"src", "dst",
    "kind", "label"}. Raises AssertionError when ``end`` cannot be reached from ``start``."""
    forward: dict[str, list[str]] = {}
    for e in edges:
        if e["kind"] not in ("stream", "repeat"):
            forward.setdefault(e["src"], []).append(e["dst"])
    path, stack, seen = None, [(start, [start])], set()
    while stack:
        node, trail = stack.pop()
        if node == end:
            path = trail
            break
        if node in seen:
            continue
        seen.add(node)
        stack.extend((nxt, trail + [nxt]) for nxt in forward.get(node, []))
    assert path is not None, f"no path from {start} to {end} in the drawing"
    loops = {e["dst"]: (e["src"], int(e["label"].split(",")[0].lstrip("x"))) for e in edges if e["kind"] == "repeat"}

    out, k = [], 0
    while k < len(path):
        node = path[k]
        if node in loops and loops[node][0] in path[k:]:     # a period: its boxes, times its count
            j = path.index(loops[node][0], k)
            out += _counted(path[k:j + 1], nodes) * loops[node][1]
            k = j + 1
        else:
            out += _counted([node], nodes)
            k += 1
    return out


def _counted(part: list[str], nodes: dict[str, dict]) -> list[str]:
    """Group boxes of ``part`` (ids ``<group>`` or ``<group>#<n>``), each repeated as its badge says;
    other nodes (the stack's own ops) left out."""
    out = []
    for node in part:
        if "[" not in node.split("/")[-1]:
            continue
        badge = nodes[node].get("badge", "")
        out += [node.split("#")[0]] * (int(badge[1:]) if badge.startswith("x") and badge[1:].isdigit() else 1)
    return out


def axe_source() -> str:
    """axe.min.js as the PyPI package ``axe-playwright-python`` ships it (installed by the test extra)."""
    try:
        return (importlib.resources.files("axe_playwright_python") / "axe.min.js").read_text()
    except ModuleNotFoundError:
        import pytest
        pytest.fail("the Python package `axe-playwright-python` is not installed: pip install -e '.[test]'", pytrace=False)


def axe_serious(page) -> list[str]:
    """axe-core's serious and critical violations on ``page`` as it is now, one line each: rule, impact,
    the first targets. axe is evaluated through the DevTools protocol, which the page's CSP does not govern.

    A table's body rows past its fifth are left out: one loop writes all of a table's rows, so the
    first five have every row's markup, and the colour-contrast rule over a thousand rows of numbers
    (a large model's per-op table) costs about ten seconds a page."""
    page.evaluate(axe_source())
    found = awaited(page, """() => axe.run({include: [document], exclude: [['table tbody tr:nth-child(n+6)']]},
                                           {resultTypes: ['violations']}).then(r => r.violations
        .filter(v => v.impact === 'serious' || v.impact === 'critical')
        .map(v => v.id + ' (' + v.impact + ', ' + v.nodes.length + '): ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | ')))""", what="axe-core's run",
                    timeout_ms=60_000)     # a long page's run takes seconds on a busy host
    return found
