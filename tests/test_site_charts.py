"""The chart specs are schema-valid Vega-Lite, and building them without Altair's checks (as the
render does, site_builder/charts.py ``VALIDATE``) gives the same specs: the checks only raise."""
import json

import pytest

from site_builder import charts

DOC = {"max_context": 131072,
       "kv_curve": {"context": [1024, 4096, 262144], "state_bf16": [0.0, 0.0, 0.0],
                    "growing_bf16": [1.0e6, 4.0e6, 2.6e8], "bytes_bf16": [1.0e6, 4.0e6, 2.6e8]}}
HYBRID = {"max_context": 4096,
          "kv_curve": {"context": [1024, 8192], "state_bf16": [5.0e5, 5.0e5],
                       "growing_bf16": [1.0e6, 8.0e6], "bytes_bf16": [1.5e6, 8.5e6]}}
CONTRACT = {"lengths": [1024, 4096],
            "variants": [{"name": "mha", "kv_bytes_per_request": [1.0e6, 4.0e6], "prefill_s": [0.01, 0.05],
                          "decode_s": [0.001, 0.002]},
                         {"name": "gdn", "kv_bytes_per_request": [2.0e6, 2.0e6], "prefill_s": [0.02, 0.04],
                          "decode_s": [0.001, 0.001]}],
            "crossings": [{"a_name": "mha", "b_name": "gdn", "length": 2048.0, "bytes": 2.0e6,
                           "length_exact": "2048", "above_name": "mha"}]}


def _all_specs() -> str:
    for cached in (charts._deployment_specs, charts._roofline_spec, charts._front_spec, charts._kv_template):
        cached.cache_clear()
    return json.dumps([charts.model_specs(DOC), charts.model_specs(HYBRID), charts.contract_specs(CONTRACT),
                       charts.deployment_specs(), charts.deployment_specs(3, 2), charts.roofline_spec(),
                       charts.front_spec()], sort_keys=False)


def test_specs_valid_and_the_same_without_checks(monkeypatch):
    fast = _all_specs()
    monkeypatch.setattr(charts, "VALIDATE", True)
    checked = _all_specs()          # raises on a spec Vega-Lite's schema refuses
    assert checked == fast


def test_checks_on_raise(monkeypatch):
    """VALIDATE really turns Altair's checks on (a wrong property is refused as it is built)."""
    monkeypatch.setattr(charts, "VALIDATE", True)
    import altair as alt

    @charts._built
    def bad():
        return alt.Chart(alt.Data(name="x")).mark_line().encode(x=alt.X("a:Q", scale=alt.Scale(type=17)))
    with pytest.raises(Exception):
        bad()


def _lab(color: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB hex colour, by the published sRGB and CIE formulas."""
    rgb = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    xyz = (sum(w * c for w, c in zip((0.4124, 0.3576, 0.1805), lin)) / 0.95047,
           sum(w * c for w, c in zip((0.2126, 0.7152, 0.0722), lin)),
           sum(w * c for w, c in zip((0.0193, 0.1192, 0.9505), lin)) / 1.08883)
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_gpu_colours_tell_twelve_gpus_apart():
    """The grid's twelve GPU types get twelve colours no two of which are near (CIE76 distance 25 at
    least; tableau20's light/dark pairs, which the front chart had, come to 16), and the front chart
    and the GPU bars both take them."""
    import itertools
    import math
    assert len(charts.GPU_COLORS) == 12 and len(set(charts.GPU_COLORS)) == 12
    for a, b in itertools.combinations(charts.GPU_COLORS, 2):
        assert math.dist(_lab(a), _lab(b)) >= 25, (a, b)
    front = charts.front_spec()["encoding"]["color"]["scale"]
    bars = charts.deployment_specs()["gpus"]["encoding"]["color"]["scale"]
    assert front == bars == {"range": charts.GPU_COLORS}


def _coloured_lines(spec: dict, rows: list[dict]) -> set[str]:
    """The variants a contract chart spec draws as coloured lines: for each of its layers with a
    colour field, the rows its filters keep (a field-oneOf predicate, or none), by the rule of
    Vega-Lite's filter transform, read off the spec rather than from the code that wrote it."""
    out: set[str] = set()
    if "layer" in spec:                  # a layer of layers (the KV chart: the lines, then the crossings)
        for layer in spec["layer"]:
            out |= _coloured_lines(layer, rows)
        return out
    for layer in [spec]:
        color = layer.get("encoding", {}).get("color", {})
        if "field" not in color:
            continue
        keep = [r[color["field"]] for r in rows]
        for t in layer.get("transform", []):
            f = t.get("filter")
            if isinstance(f, dict) and "oneOf" in f:
                keep = [v for v in keep if v in f["oneOf"]]
            elif isinstance(f, dict) and "not" in f:
                keep = [v for v in keep if v not in f["not"]["oneOf"]]
        out |= set(keep)
    return out


def test_components_charts_draw_at_most_five_lines_in_colour_and_every_variant_somewhere():
    """Issue 41 item 4: a contract of 14 variants drawn as 14 coloured lines cannot be read. Each
    chart the components page draws (KV, prefill, decode; every panel) colours at most 5 variants
    (a legend matched by eye), and each variant is coloured in exactly one panel of each chart
    (none lost, none twice); 14 variants take 3 panels (ceil(14 / 5)), even in size (5, 5, 4)."""
    names = [f"variant {i}" for i in range(14)]
    contract = {"lengths": [1024, 4096, 16384],
                "variants": [{"name": n, "kv_bytes_per_request": [1e6 * (i + 1)] * 3, "prefill_s": [0.01] * 3,
                              "decode_s": [0.001] * 3} for i, n in enumerate(names)],
                "crossings": []}
    specs = charts.contract_specs(contract)
    rows = specs["datasets"][charts.CONTRACT_ROWS]
    assert {r["variant"] for r in rows} == set(names)
    for kind in ("kv", "prefill", "decode"):
        panels = [_coloured_lines(s, rows) for s in specs[kind]]
        assert [len(p) for p in panels] == [5, 5, 4], (kind, panels)
        assert set().union(*panels) == set(names) and sum(len(p) for p in panels) == 14
    # a contract of five or fewer is one panel with no grey lines behind it
    assert [len(_coloured_lines(s, charts.contract_specs(CONTRACT)["datasets"][charts.CONTRACT_ROWS]))
            for s in charts.contract_specs(CONTRACT)["kv"]] == [2]
