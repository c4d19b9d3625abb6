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
