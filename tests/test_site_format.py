"""The one number formatter: its rule (engine/cli/units.py ``FORMAT``, data) and its three readers,
units.py's functions, the page's interpreter (static/js/site.js ``archFmt``, reading the rule from the
site.js tag's ``data-fmt``) and the Vega expression the charts use (site_builder/charts.py ``human``,
generated from the rule): the same strings for the same values, from the smallest values the corpus
prints to the largest.

The values are derived here, not read from the engine:

- DeepSeek-V4-Pro's parameters: 1,572,997,179,491 (transformers' meta-device count,
  tests/test_deepseek_v4.py) -> "1.57 T" (SI: never "B" for billion next to "GB" bytes).
- DeepSeek-V3's parameters: 671 G as its model card writes "671B".
- Qwen3.5-27B's Gated DeltaNet conv state, one layer, one request, BF16: (conv kernel 4 - 1) x
  conv_dim (2 x 16 key heads x 128 + 48 value heads x 128 = 10,240) x 2 bytes = 61,440 B.
- A per-op decode time as small as the deploy page shows: an RMSNorm over hidden 5120 at batch 1
  reads and writes 5120 BF16 values and reads 5120 weights (30,720 B) at the H100's 3.35 TB/s:
  9.17 ns; and 5.82e-13 s (issue 20 saw it printed "5.82e-7 µs").
- An H100's 81,559 MiB (nvidia-smi) in decimal units, as every byte figure prints: 85.5 GB.
"""
from __future__ import annotations

import json

import pytest

from engine.cli import units
from site_builder import charts
from site_builder.sources import REPO
from site_builder.templating import environment, script_json
from tests.browser_waits import awaited
from tests.test_site_browser import _open

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its Chromium page twice.
pytestmark = pytest.mark.xdist_group("site_format")

V4_PRO = 1_572_997_179_491
CONV_STATE = (4 - 1) * (2 * 16 * 128 + 48 * 128) * 2
NORM_DECODE_S = (5120 * 2 * 2 + 5120 * 2) / 3.35e12

# (formatter, value, string): Python and JavaScript must both print ``string``
CASES = [
    ("si", V4_PRO, "1.57 T"),
    ("si", 671e9, "671 G"),
    ("si", 37.6e9, "37.6 G"),
    ("si", 999.7e9, "1 T"),              # rounded before the prefix: never "1e+03 G" or "1000 G"
    ("si", 2e9, "2 G"),                  # no trailing zeros
    ("si", 0, "0"),                      # "FLOPs 0.00" no more
    ("si", 61, "61"),
    ("si", 12_345, "12.3 k"),
    ("bytes", CONV_STATE, "61.4 kB"),
    ("bytes", 1_342_177_280_000, "1.34 TB"),
    ("bytes", 512, "512 B"),
    ("bytes", 0, "0 B"),
    ("bytes", 81559 * 2**20, "85.5 GB"),   # an H100's 81,559 MiB (nvidia-smi) = 85,520,809,984 B
    ("time", NORM_DECODE_S, "9.17 ns"),
    ("time", 5.82e-13, "582 fs"),
    ("time", 8.7e-11, "87 ps"),          # issue 20: "0.0000870 µs"
    ("time", 5.168e-3, "5.17 ms"),
    ("time", 1e-6, "1 µs"),
    ("time", 0.9996, "1 s"),
    ("time", 4321, "4,320 s"),
    ("time", 0, "0 s"),
    ("tokens", 131072, "128K"),
    ("tokens", 1 << 20, "1M"),
    ("tokens", 131000, "131,000"),
]
PY = {"si": units.si, "bytes": units.decimal_bytes, "time": units.seconds,
      "tokens": units.tokens}


def test_hand_values():
    assert CONV_STATE == 61_440
    assert f"{NORM_DECODE_S:.3g}" == "9.17e-09"


@pytest.mark.parametrize("kind,value,text", CASES)
def test_python_formatter(kind, value, text):
    assert PY[kind](value) == text


def test_none_prints_a_dash():
    assert units.si(None) == units.decimal_bytes(None) == units.seconds(None) == "\u2014"


def test_site_filters_are_the_formatter():
    from site_builder import templating
    env = templating.environment()
    assert env.filters["si"] is units.si and env.filters["bytes"] is units.decimal_bytes
    assert env.filters["seconds"] is units.seconds and env.filters["tokens"] is units.tokens
    assert "gib" not in env.filters          # one byte unit: decimal (a GiB filter invites mixed tables)


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811
    tab = _open(browser, production=False)
    # the rule as base.html ships it (an attribute of a script tag site.js finds by data-fmt)
    tab.page.set_content('<script type="application/json" id="page-data">{}</script><div id="tip" hidden></div>'
                         f"<script type='application/json' data-fmt='{script_json(units.FORMAT)}'></script>")
    tab.page.add_script_tag(path=str(REPO / "static" / "vendor" / "vega-embed.js"))
    tab.page.add_script_tag(path=str(REPO / "static" / "js" / "site.js"))
    yield tab
    tab.context.close()


def test_javascript_formatter_prints_the_same(page):
    shown = page.page.evaluate("cases => cases.map(c => window.archFmt[c[0]](c[1]))", [list(c[:2]) for c in CASES])
    assert shown == [c[2] for c in CASES]
    assert not page.errors, page.errors


# The chart expression, generated from the rule: the same strings
CHART_CASES = [(8e10, "B", "80 GB"), (CONV_STATE, "B", "61.4 kB"), (512, "B", "512 B"), (0, "B", "0 B"),
               (5.168e-3, "s", "5.17 ms"), (NORM_DECODE_S, "s", "9.17 ns"), (12_345, "", "12.3 k"),
               (V4_PRO, "", "1.57 T"), (37.5, "", "37.5"), (4321, "s", "4,320 s"), (5.82e-13, "s", "582 fs")]


def test_chart_expression_prints_human_units(page):
    assert _chart_strings(page, [c[:2] for c in CHART_CASES]) == [c[2] for c in CHART_CASES]
    assert not page.errors, page.errors


def _chart_strings(page, cases):
    """What the charts' ``human`` expression prints for each (value, unit) of ``cases``, in Vega."""
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "data": {"name": "rows", "values": [{"v": v, "i": i} for i, (v, _) in enumerate(cases)]},
            "transform": [{"calculate": f"[{', '.join(charts.human('datum.v', u) for _, u in cases)}][datum.i]",
                           "as": "shown"}],    # x on the index: a null value must stay a row (Vega-Lite drops invalid x)
            "mark": "point", "encoding": {"x": {"field": "i", "type": "quantitative"}}}
    return awaited(page.page, """async spec => {
        const el = document.createElement("div"); document.body.appendChild(el);
        const r = await window.vegaEmbed(el, spec, {actions: false, renderer: "svg"});
        return r.view.data("data_0").map(d => d.shown);
    }""", json.loads(json.dumps(spec)), what="vegaEmbed's chart of the edge values")


#: Edge values of the rule (a consistency test: the expected strings are units.py's own): rounding
#: ties (1005 and 1.125 are exact floats halfway between 3-digit values), the values that round up
#: into the next prefix (999.5, 999,500) and those that do not (999.4), negatives, the whole-seconds
#: switch, a time below the smallest scale, and no value.
EDGE = {"": [0, 1, -1, 0.5, 1e-4, 37.5, 999.4, 999.5, 1005, -1005, 1.125, 12_345, 99_950, 999_499, 999_500,
             1.2355e9, 2.5e12, 9.99e17, None],
        "B": [0, 512, 1005, 81559 * 2**20, 1_342_177_280_000, 61_440, None],
        "s": [0, 5.82e-13, 1e-15, 4.2e-16, 9.995e-10, 9.995e-7, 1e-6, 1.125e-3, 0.9996, 999.4, 999.5, 4321,
              1.23456e7, -0.5, None]}


def test_every_reader_of_the_rule_prints_what_units_py_prints(page):
    """A port drifting from the rule fails here: archFmt and the generated chart expression, given
    the rule units.py reads, print units.py's strings at its edge values."""
    cases = [(v, u) for u, values in EDGE.items() for v in values]
    python = [units.seconds(v) if u == "s" else units.si(v, u) for v, u in cases]
    assert python[:4] == ["0", "1", "-1", "0.5"] and "1.01 k" in python and "1.13" in python   # ties go away from zero
    shown = page.page.evaluate("cases => cases.map(c => c[1] === 's' ? window.archFmt.time(c[0]) : window.archFmt.si(c[0], c[1]))",
                               [list(c) for c in cases])
    assert list(zip(cases, shown)) == list(zip(cases, python))
    assert list(zip(cases, _chart_strings(page, cases))) == list(zip(cases, python))
    assert not page.errors, page.errors


def test_pages_ship_the_rule_on_the_site_js_tag():
    """base.html hands the rule to site.js as data (the one source archFmt reads), escaped to stay inert."""
    html = environment().get_template("base.html").render(title="t", root="", page_json="{}")
    attr = next(line for line in html.splitlines() if "data-fmt=" in line).split("data-fmt='", 1)[1].split("'", 1)[0]
    assert json.loads(attr) == units.FORMAT


def test_chart_specs_name_no_raw_fields_in_tooltips():
    """Every tooltip entry has a human title (no 'tpot_s' or 'best_tokens_per_s_per_gpu' shown)."""
    def tooltips(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "tooltip":
                    yield from (v if isinstance(v, list) else [v])
                else:
                    yield from tooltips(v)
        elif isinstance(node, list):
            for v in node:
                yield from tooltips(v)
    specs = charts.deployment_specs()
    entries = [t for spec in specs.values() for t in tooltips(spec)]
    assert entries
    for t in entries:
        assert isinstance(t, dict) and t.get("title") and "_" not in t["title"], t


def test_cli_prints_through_the_formatter(capsys):
    """``show`` and ``deploy`` print the site's strings: SI G for counts, no exponent notation, the
    decimal bytes on the memory line, usable memory and the KV budget included (one unit on a line:
    issue 41 found "weights 101 GB ... usable 118 GiB")."""
    import re

    from engine.cli import main
    assert main(["show", "DeepSeek-V3"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.split()[:1] == ["params_total"])
    assert line.split()[1:] == ["671,026,404,352", "671", "G"], line
    assert main(["deploy", "Llama-3.1-8B", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"\de[+-]\d", out), "exponent notation in `deploy` output"
    assert re.search(r"usable [0-9.]+ GB", out) and re.search(r"KV budget [0-9.]+ GB", out), out[:600]
    assert "iB" not in out, "a binary unit in `deploy` output"
