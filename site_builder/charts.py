"""Vega-Lite chart specs (written with Altair at build time) for the deployment page.

Layer: site_builder. Specs name their data (``alt.Data(name=...)``) instead of embedding it: the page
feeds the rows of the current selection (read from the build's Parquet-derived JSON) into the
named dataset, so one spec serves every GPU/config the reader picks. Charts are interactive
(tooltips on every mark, a legend you can click to highlight a line).
"""
from __future__ import annotations

import altair as alt


def _spec(chart: alt.TopLevelMixin) -> dict:
    return chart.to_dict(validate=True)


def deployment_specs() -> dict[str, dict]:
    highlight = alt.selection_point(fields=["input_len"], bind="legend")
    batch = alt.Chart(alt.Data(name="rows")).mark_line(point=alt.OverlayMarkDef(filled=False, size=50)).encode(
        x=alt.X("batch:Q", scale=alt.Scale(type="log", base=2), title="batch (requests per replica)"),
        y=alt.Y("tokens_per_s_per_gpu:Q", title="decode tokens/s per GPU"),
        color=alt.Color("input_len:O", title="prompt tokens"),
        strokeDash=alt.StrokeDash("extrapolated:N", title="past max context"),
        opacity=alt.condition(highlight, alt.value(1.0), alt.value(0.2)),
        tooltip=["batch:Q", "input_len:Q", "tokens_per_s_per_gpu:Q", "tpot_s:Q", "fits:N", "extrapolated:N"],
    ).add_params(highlight).properties(width="container", height=260)
    gpus = alt.Chart(alt.Data(name="best")).mark_bar().encode(
        x=alt.X("best_tokens_per_s_per_gpu:Q", title="best decode tokens/s per GPU"),
        y=alt.Y("label:N", sort="-x", title=None),
        color=alt.Color("gpu:N", legend=None),
        tooltip=["gpu:N", "n_gpus:Q", "config:N", "best_tokens_per_s_per_gpu:Q", "at_batch:Q"],
    ).properties(width="container", height=alt.Step(16), autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    ep = alt.Chart(alt.Data(name="configs")).mark_bar().encode(
        x=alt.X("best_tokens_per_s_per_gpu:Q", title="best decode tokens/s per GPU"),
        y=alt.Y("config:N", sort="-x", title="parallel config"),
        tooltip=["config:N", "best_tokens_per_s_per_gpu:Q", "at_batch:Q"],
    ).properties(width="container", height=alt.Step(22), autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    base = alt.Chart(alt.Data(name="kv"))
    line = base.mark_line(point=True).encode(
        x=alt.X("context:Q", scale=alt.Scale(type="log", base=2), title="context (tokens)"),
        y=alt.Y("bytes_bf16:Q", title="KV bytes per request"),
        shape=alt.Shape("extrapolated:N", title="past max context"),
        tooltip=["context:Q", "bytes_bf16:Q", "extrapolated:N"])
    rule = alt.Chart(alt.Data(name="limit")).mark_rule(strokeDash=[4, 3]).encode(
        x="max_context:Q", tooltip=["max_context:Q"])
    label = alt.Chart(alt.Data(name="limit")).mark_text(align="left", dx=4, dy=-6).encode(
        x="max_context:Q", text=alt.value("max context"))
    kv = alt.layer(line, rule, label).properties(width="container", height=240)
    return {"batch": _spec(batch), "gpus": _spec(gpus), "ep": _spec(ep), "kv": _spec(kv)}


def contract_specs(contract: dict) -> dict[str, dict]:
    """KV (and recurrent state) per request, prefill time and decode step vs context for every
    variant of a contract, data embedded as built. Log-log: flat recurrent states (MB) and caches
    growing to GB, microsecond and minute steps share one plot; ticks at the contract's lengths,
    labelled in binary units (1K, 1M); the legend below the plot (it names a dozen variants)."""
    rows = []
    for v in contract["variants"]:
        for length, kv, prefill, decode in zip(contract["lengths"], v["kv_bytes_per_request"], v["prefill_s"],
                                               v["decode_s"]):
            rows.append({"variant": v["name"], "context": length, "kv_bytes": kv, "prefill_s": prefill,
                         "decode_s": decode})
    data = alt.Data(values=rows)
    pick = alt.selection_point(fields=["variant"], bind="legend")
    ticks = alt.Axis(values=contract["lengths"], labelExpr="datum.value >= 1048576 ? "
                     "(datum.value / 1048576) + 'M' : (datum.value / 1024) + 'K'")
    legend = alt.Legend(orient="bottom", columns=1, labelLimit=400, symbolStrokeWidth=2)

    def line(field: str, title: str) -> dict:
        return _spec(alt.Chart(data).mark_line(point=True).encode(
            x=alt.X("context:Q", scale=alt.Scale(type="log", base=2), axis=ticks, title="context (tokens)"),
            y=alt.Y(f"{field}:Q", title=title, scale=alt.Scale(type="log")),
            color=alt.Color("variant:N", title="variant", sort=None, scale=alt.Scale(scheme="tableau20"),
                            legend=legend),
            strokeDash=alt.StrokeDash("variant:N", title="variant", sort=None, legend=legend),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.2)),
            tooltip=["variant:N", "context:Q", f"{field}:Q"]).add_params(pick)
            .properties(width="container", height=260))
    return {"kv": line("kv_bytes", "KV + state bytes per request (one layer)"),
            "prefill": line("prefill_s", "prefill time, SOL (s)"),
            "decode": line("decode_s", "decode step at this context, SOL (s)")}
