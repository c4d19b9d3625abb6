"""Vega-Lite chart specs (written with Altair at build time) for the deployment page.

Layer: site_builder. Specs name their data (``alt.Data(name=...)``) instead of embedding it: the page
feeds the rows of the current selection (read from the build's Parquet-derived JSON) into the
named dataset, so one spec serves every GPU/config the reader picks. Charts are interactive
(tooltips on every mark, a legend you can click to highlight a line).
"""
from __future__ import annotations

import copy
import functools
import json

from engine.cli import units


class _Altair:
    """Altair, imported when a chart is first built (then this name is the module itself).

    Importing it costs about 0.25 CPU-s (its schema classes, jsonschema); every renderer module
    imports this one, and a build's own process imports the renderer at its start, alone on its
    core. A one-spec edit's build process renders no chart (the model's group and the deploy pages'
    shared group go to the build's worker, which imports Altair while it waits:
    :func:`site_builder.render.prepare_worker`), so it never pays for it."""

    def __getattr__(self, name: str):
        global alt
        import altair
        alt = altair
        return getattr(altair, name)


alt = _Altair()

#: Whether Altair checks the specs against the Vega-Lite schema as they are built (each object at
#: creation, the whole spec in :func:`_spec`). Off in the render: the checks only raise, never change
#: a spec; every spec's structure is fixed by the code here (only embedded data rows vary), and
#: tests/test_site_charts.py builds each one with them on (a third of a model's chart time was them).
VALIDATE = False


def _built(build):
    """``build`` run with Altair's checks on creation on only if :data:`VALIDATE`."""
    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        from altair.utils import schemapi
        with schemapi.debug_mode(VALIDATE):
            return build(*args, **kwargs)
    return wrapper


def _spec(chart: alt.TopLevelMixin) -> dict:
    return chart.to_dict(validate=VALIDATE)


def human(expr: str, unit: str = "") -> str:
    """A Vega expression printing ``expr`` as engine/cli/units.py does, generated from its rule
    (:data:`engine.cli.units.FORMAT`: digits, SI prefixes, time scales), never a second rule:
    8e10 bytes -> '80 GB', 0.005168 s -> '5.17 ms', 0 -> '0 B', 4321 s -> '4,320 s'; ``unit`` "s"
    takes the time scales, any other the SI prefixes with ``unit`` after them. Chart axes and
    tooltips use it (no raw '80,000,000,000'). The magnitude is rounded first with d3's ``e`` format
    (toExponential: ties away from zero, as units.round_sig), then the first scale it reaches is taken."""
    rule = units.FORMAT
    digits = rule["digits"]
    r = f"toNumber(format(abs({expr}), '.{digits - 1}e'))"         # |expr| rounded to the rule's digits

    def mantissa(scale: float) -> str:
        return f"format({r} / {scale!r}, '.{digits}~g')"

    if unit == rule["time"]["unit"]:
        time = rule["time"]
        body = "".join(f"{r} >= {scale * (1 - time['slack'])!r} ? {mantissa(scale)} + ' {suffix}' : "
                       for suffix, scale in time["scales"])
        last_suffix, last = time["scales"][-1]
        body = (f"{r} >= {time['whole_from']!r} ? format({r}, ',.0f') + ' {unit}' : {r} == 0 ? '0 {unit}' : "
                f"{body}{mantissa(last)} + ' {last_suffix}'")
    else:
        body = "".join(f"{r} >= {scale!r} ? {mantissa(scale)} + ' {prefix}{unit}' : " for prefix, scale in rule["si"])
        body += f"trim({mantissa(1.0)} + ' {unit}')"
    return f"(isValid({expr}) ? ({expr} < 0 ? '-' : '') + ({body}) : '{rule['none']}')"


def _axis(unit: str, **kw) -> alt.Axis:
    return alt.Axis(labelExpr=human("datum.value", unit), **kw)


def _log_axis() -> alt.Axis:
    """A log axis labelled at 1, 2 and 5 times a power of ten (Vega ticks every 1..9 x 10^k, whose
    labels would run into each other), in :func:`human` units."""
    m = "datum.value / pow(10, floor(log(datum.value) / LN10 + 1e-9))"
    keep = " || ".join(f"abs({m} - {k}) < 1e-6" for k in (1, 2, 5))
    return alt.Axis(labelExpr=f"({keep}) ? {human('datum.value')} : ''")


def _shown(chart, **fields: str):
    """Tooltip fields in human units: ``name=(field, unit)`` adds a calculated field ``name``."""
    return chart.transform_calculate(**{name: human(f"datum[{field!r}]", unit) for name, (field, unit) in fields.items()})


#: The colours of GPU types (12 in the grid), in the order Vega meets them: twelve hues a reader tells
#: apart (no light/dark pairs of one hue, as tableau20 has); the deploy page's bars and every front
#: chart take them, each GPU the same colour where both show it all. tests/test_site_charts.py holds
#: every pair apart.
GPU_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
              "#bcbd22", "#17becf", "#1b1f24", "#000075"]

#: The colours of categorical series that are not GPUs (the batch chart's prompt lengths).
SERIES_COLORS = "tableau10"

#: Words for a point past the model's maximum context and one within it: legends and tooltips
#: never print a raw boolean.
PAST, WITHIN = "past max context (extrapolated)", "within max context"


#: A row's ``span`` field: :data:`PAST` or :data:`WITHIN` from its ``extrapolated``.
_SPAN = f"datum.extrapolated ? '{PAST}' : '{WITHIN}'"


def _context_words(chart):
    """``chart`` with ``span``: :data:`PAST` or :data:`WITHIN` from the row's ``extrapolated``, and
    ``fits_words`` from ``fits`` and ``fits_worst_words`` from ``fits_worst`` (where the row has them)."""
    return chart.transform_calculate(span=_SPAN,
                                     fits_words="datum.fits ? 'yes' : 'no'",
                                     fits_worst_words="datum.fits_worst ? 'yes' : 'no'")

#: Height per bar (px) of the deployment page's bar charts, and the bars' thickness in it.
BAR_STEP, BAR_SIZE = 20, 14


def deployment_specs(gpu_bars: int = 12, config_bars: int = 8) -> dict[str, dict]:
    """The deploy page's charts (data by name, filled in the browser); a copy the caller may change.
    Built once per process: the bar counts set the two bar charts' heights and nothing else (a
    view's name hashes its data, marks, encodings and transforms, never its size), so each page's
    specs are the first ones with those two heights set. tests/test_site_render_speed.py holds them
    to the specs Altair builds for the same counts."""
    specs = copy.deepcopy(_deployment_specs(1, 1))
    specs["gpus"]["height"] = _bar_height(gpu_bars)
    specs["ep"]["height"] = _bar_height(config_bars)
    return specs


def _bar_height(bars: int) -> int:
    return BAR_STEP * max(1, bars)


# Data-free specs depend only on their arguments: built once per process, not once per page.
@functools.lru_cache(maxsize=None)
@_built
def _deployment_specs(gpu_bars: int, config_bars: int) -> dict[str, dict]:
    """The deployment page's charts. The two bar charts get a fixed height for the most bars they can
    show on this model's page (``gpu_bars`` GPU types, ``config_bars`` parallel configs on one GPU
    type and count) and a fixed bar thickness: a discrete height (``alt.Step``) next to a
    container-wide width makes Vega-Lite drop "fit-y" with a console warning on every draw."""
    highlight = alt.selection_point(fields=["input_len"], bind="legend")
    # one colour per prompt length from a categorical scheme (an ordinal field's default is one
    # hue's shades); a dashed line past the maximum context, and hollow points there only
    # its legend: a line in each colour (the points' rings would read as "past max context", the
    # hollow mark), below the plot so the plot keeps the figure's width
    color = alt.Color("input_len:O", title="prompt tokens", scale=alt.Scale(scheme=SERIES_COLORS),
                      legend=alt.Legend(symbolType="stroke", symbolStrokeWidth=2.5, orient="bottom", direction="horizontal",
                                        columns=4))
    x = alt.X("batch:Q", scale=alt.Scale(type="log", base=2), title="batch (requests per replica)")
    y = alt.Y("tokens_per_s_per_gpu:Q", title="decode tokens/s per GPU", axis=_axis(""))
    opacity = alt.condition(highlight, alt.value(1.0), alt.value(0.2))
    line = alt.Chart(alt.Data(name="rows")).mark_line().encode(
        x=x, y=y, color=color, detail="span:N", opacity=opacity,
        strokeDash=alt.StrokeDash("span:N", title="context", scale=alt.Scale(domain=[WITHIN, PAST], range=[[1, 0], [5, 3]]),
                                  # above the plot: beside the prompt lengths' legend it would run past
                                  # the figure's width (a third of the page; Vega-Lite lays one orient's
                                  # legends side by side)
                                  legend=alt.Legend(orient="top", direction="horizontal")),
    ).add_params(highlight)
    # the ring in the line's colour; filled with it within the maximum context, white past it (the
    # fill's scale is the colour's: same scheme, same sorted prompt lengths)
    points = alt.Chart(alt.Data(name="rows")).mark_point(filled=False, size=50, strokeWidth=1.5).encode(
        x=x, y=y, color=color, opacity=opacity,
        fill=alt.condition("datum.extrapolated", alt.value("#ffffff"),
                           alt.Fill("input_len:O", legend=None, scale=alt.Scale(scheme=SERIES_COLORS))),
        tooltip=[alt.Tooltip("batch:Q", title="batch"), alt.Tooltip("input_len:Q", title="prompt tokens", format=","),
                 alt.Tooltip("rate:N", title="decode tokens/s per GPU (steady state)"),
                 alt.Tooltip("tpot:N", title="TPOT (steady state)"),
                 alt.Tooltip("tpot_last:N", title="TPOT at the last token (worst case)"),
                 alt.Tooltip("fits_words:N", title="served (steady state)"),
                 alt.Tooltip("fits_worst_words:N", title="fits with every request at its last token"),
                 alt.Tooltip("span:N", title="context")],
    )
    points = _shown(points, rate=("tokens_per_s_per_gpu", ""), tpot=("tpot_s", "s"), tpot_last=("tpot_last_s", "s"))
    batch = alt.layer(_context_words(line), _context_words(points)).properties(width="container", height=260)
    gpus = alt.Chart(alt.Data(name="best")).mark_bar(size=BAR_SIZE).encode(
        x=alt.X("best_tokens_per_s_per_gpu:Q", title="best decode tokens/s per GPU", axis=_axis("")),
        y=alt.Y("label:N", sort="-x", title=None),
        color=alt.Color("gpu:N", legend=None, scale=alt.Scale(range=GPU_COLORS)),
        tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("n_gpus:Q", title="GPUs"),
                 alt.Tooltip("config:N", title="parallel config"), alt.Tooltip("rate:N", title="best decode tokens/s per GPU"),
                 alt.Tooltip("at_batch:Q", title="at batch")],
    ).transform_calculate(rate=human("datum.best_tokens_per_s_per_gpu")).properties(
        width="container", height=_bar_height(gpu_bars), autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    ep = alt.Chart(alt.Data(name="configs")).mark_bar(size=BAR_SIZE).encode(
        x=alt.X("best_tokens_per_s_per_gpu:Q", title="best decode tokens/s per GPU", axis=_axis("")),
        y=alt.Y("config:N", sort="-x", title="parallel config"),
        tooltip=[alt.Tooltip("config:N", title="parallel config"), alt.Tooltip("rate:N", title="best decode tokens/s per GPU"),
                 alt.Tooltip("at_batch:Q", title="at batch")],
    ).transform_calculate(rate=human("datum.best_tokens_per_s_per_gpu")).properties(
        width="container", height=_bar_height(config_bars), autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    kv = kv_chart(alt.Data(name="kv"), alt.Data(name="limit"))
    return {"batch": _spec(batch), "gpus": _spec(gpus), "ep": _spec(ep), "kv": _spec(kv)}


#: The series of the KV-vs-context chart, in legend order (:func:`kv_rows` names them).
KV_PARTS = {"state": "state (flat)", "growing": "KV (grows with context)", "total": "total"}


def kv_rows(curve: dict, max_context: int) -> list[dict]:
    """The model document's ``kv_curve`` as chart rows (context, part, bytes): one series per part
    and the total. A part that holds nothing (no recurrent state) is left out: the axis is log."""
    rows = []
    for part, key in (("state", "state_bf16"), ("growing", "growing_bf16"), ("total", "bytes_bf16")):
        for context, value in zip(curve["context"], curve[key]):
            if value > 0:
                rows.append({"context": context, "part": KV_PARTS[part], "bytes": value,
                             "extrapolated": context > max_context})
    return rows


def kv_chart(data: alt.Data, limit: alt.Data) -> alt.LayerChart:
    """KV bytes per request vs context, one line per part (flat state, growing KV, total), with a
    rule at the model's maximum context. ``data`` rows are :func:`kv_rows`; ``limit`` one row with
    ``max_context``."""
    line = _kv_line(data)
    rule = alt.Chart(limit).mark_rule(strokeDash=[4, 3]).encode(
        x=alt.X("max_context:Q"), tooltip=[alt.Tooltip("max_context:Q", title="max context (tokens)", format=",")])
    label = alt.Chart(limit).mark_text(align="left", dx=4, dy=-6).encode(
        x=alt.X("max_context:Q"), text=alt.TextValue("max context"))
    # legends below the plot: the deployment page's chart shares a row with others
    return alt.layer(line, rule, label).properties(width="container", height=240).configure_legend(orient="bottom", direction="vertical")


def _kv_line(data: alt.Data) -> alt.Chart:
    """:func:`kv_chart`'s line chart (the one view a layered spec names: Altair hashes it, with its data)."""
    # channel objects where they print as Altair's own lookup would make them
    # (the view names hash that text), not shorthand strings or alt.value: Altair matches those
    # against its whole schema on every call, for the same spec
    pick = alt.selection_point(fields=["part"], bind="legend")
    ticks = alt.Axis(values=[4 ** k * 1024 for k in range(6)],     # 1K, 4K, ... 1M
                     labelExpr="datum.value >= 1048576 ? datum.value / 1048576 + 'M' : datum.value / 1024 + 'K'")
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("context:Q", scale=alt.Scale(type="log", base=2), axis=ticks, title="context (tokens)"),
        y=alt.Y("bytes:Q", scale=alt.Scale(type="log"), axis=_axis("B"), title="bytes per request (BF16 KV)"),
        # the parts the rows hold, in KV_PARTS's order: a legend entry for a part with no line (a model
        # without recurrent state listed "state (flat)") would name nothing drawn
        # (one legend, the colour's, drawn as lines: Vega-Lite merges a dash legend with it only over
        # a fixed domain, and a second legend beside it ran past the chart's width)
        color=alt.Color("part:N", title="part", sort=list(KV_PARTS.values()),
                        legend=alt.Legend(symbolType="stroke", symbolStrokeWidth=2.5)),
        strokeDash=alt.StrokeDash("part:N", title="part", sort=list(KV_PARTS.values()), legend=None),
        shape=alt.Shape("span:N", title="context", scale=alt.Scale(domain=[WITHIN, PAST])),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.2)),
        tooltip=[alt.Tooltip("part:N", title="part"), alt.Tooltip("context:Q", title="context (tokens)", format=","),
                 alt.Tooltip("shown:N", title="bytes per request"), alt.Tooltip("span:N", title="context")],
    ).transform_calculate(shown=human("datum.bytes", "B"), span=_SPAN).add_params(pick)


def model_specs(doc: dict) -> dict[str, dict]:
    """The model page's charts, data embedded: KV/state per request vs context.

    :func:`_model_specs` (Altair's build) for every model but built once per process: the specs of
    two models differ only in their data (the KV rows, the maximum context) and in the line's view
    name, which Altair derives from a hash of the line chart with its data. So each page's specs
    are :func:`_kv_template`'s with its own data put in place of the stand-ins and the name Altair
    gives its line (the line chart's hash, the one part of Altair still run per page; a tenth of the
    build). tests/test_site_render_speed.py holds them to Altair's build."""
    rows = kv_rows(doc["kv_curve"], doc["max_context"])
    line, spec = _kv_template()
    return _fill(spec, {"kv": rows, "limit": [{"max_context": doc["max_context"]}]},
                 (line._get_view_hash_name(), _view_name(line, rows)))


@_built
def _view_name(line: alt.Chart, rows: list[dict]) -> str:
    """The name Altair gives the view of ``line`` with ``rows`` for its data."""
    named = line.copy(deep=False)
    named.data = alt.Data(values=rows)
    return named._get_view_hash_name()


@_built
def _model_specs(doc: dict) -> dict[str, dict]:
    rows = kv_rows(doc["kv_curve"], doc["max_context"])
    return {"kv": _spec(kv_chart(alt.Data(values=rows), alt.Data(values=[{"max_context": doc["max_context"]}])))}


#: The key of a stand-in dataset's one row (no model's data has it): ``{STAND_IN: name}``.
STAND_IN = "\u0000stand-in"


@functools.lru_cache(maxsize=None)
@_built
def _kv_template() -> tuple[alt.Chart, dict]:
    """The model page's line chart and specs (:func:`_model_specs`) built from stand-in data: the
    line's rows ``[{STAND_IN: "kv"}]``, the maximum context's ``[{STAND_IN: "limit"}]``."""
    line = _kv_line(alt.Data(values=[{STAND_IN: "kv"}]))
    chart = kv_chart(alt.Data(values=[{STAND_IN: "kv"}]), alt.Data(values=[{STAND_IN: "limit"}]))
    return line, {"kv": _spec(chart)}


def _fill(node, data: dict[str, list], names: tuple[str, str]):
    """A copy of the JSON value ``node`` with each stand-in dataset (``{"values": [{STAND_IN: key}]}``)
    holding ``data[key]`` instead, and each string that starts with ``names[0]`` starting with ``names[1]``."""
    if isinstance(node, dict):
        values = node.get("values")
        if isinstance(values, list) and len(values) == 1 and isinstance(values[0], dict) and STAND_IN in values[0]:
            return {**node, "values": data[values[0][STAND_IN]]}
        return {k: _fill(v, data, names) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, data, names) for v in node]
    if isinstance(node, str) and node.startswith(names[0]):
        return names[1] + node[len(names[0]):]
    return node


#: The most variants one contract chart draws in colour (a legend a reader matches by eye); a contract
#: of more is drawn as small multiples (:func:`contract_panels`), the other variants grey behind.
PANEL_LINES = 5
#: The colours of one panel's variants (tableau10's first five: hues a reader tells apart), each with its
#: own dash; and the grey of the other variants drawn behind them for context.
PANEL_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2"]
CONTEXT_GREY = "#c9ced4"


#: The name of a contract's rows (variant, context, kv_bytes, prefill_s, decode_s) in its specs: given
#: once beside them (``contract_specs``'s "datasets"), every panel's spec reads them by this name.
CONTRACT_ROWS = "contract_rows"


def contract_panels(contract: dict) -> list[list[str]]:
    """The variants of ``contract`` split into the fewest panels of at most :data:`PANEL_LINES`,
    in the contract's order (its variants are listed family by family), the panels as even as
    that allows (13 variants: 5, 4, 4)."""
    names = [v["name"] for v in contract["variants"]]
    n = max(1, -(-len(names) // PANEL_LINES))
    size, extra = divmod(len(names), n)
    out, at = [], 0
    for i in range(n):
        k = size + (1 if i < extra else 0)
        out.append(names[at:at + k])
        at += k
    return out


@_built
def contract_specs(contract: dict) -> dict:
    """:func:`_contract_specs`, kept per process by the contract's JSON text (and :data:`VALIDATE`):
    Altair takes ~0.5 s over the corpus's contracts, a pure function of contracts.json, and a
    process that renders several sites (a test worker) drew the same ones each time. A fresh
    object every call (decoded from the kept text): a caller may change its copy."""
    return json.loads(_contract_specs_text(json.dumps(contract), VALIDATE))


@functools.lru_cache(maxsize=8)
def _contract_specs_text(contract: str, validate: bool) -> str:
    return json.dumps(_contract_specs(json.loads(contract)))


def _contract_specs(contract: dict) -> dict:
    """KV (and recurrent state) per request, prefill time and decode step vs context for every
    variant of a contract, its rows given once (``datasets``, named :data:`CONTRACT_ROWS`; the
    page adds them to each spec, static/js/charts.js): per chart, one spec per panel of
    :func:`contract_panels`, each drawing its variants (at most :data:`PANEL_LINES`) in colour and
    dash with a legend, and every other variant as a thin grey line behind (its tooltip still names
    it), on the same axes. Log-log: flat recurrent states (MB) and caches growing to GB,
    microsecond and minute steps share one plot; ticks at the contract's lengths, labelled in
    binary units (1K, 1M). The KV chart marks every crossing point the build solved
    (``crossings``) that involves one of the panel's variants with a diamond whose tooltip names
    the pair, the length and the bytes there."""
    rows = []
    for v in contract["variants"]:
        for length, kv, prefill, decode in zip(contract["lengths"], v["kv_bytes_per_request"], v["prefill_s"],
                                               v["decode_s"]):
            rows.append({"variant": v["name"], "context": length, "kv_bytes": kv, "prefill_s": prefill,
                         "decode_s": decode})
    data = alt.Data(name=CONTRACT_ROWS)     # the rows once per contract ("datasets"), not once per panel
    ticks = alt.Axis(values=contract["lengths"], labelExpr="datum.value >= 1048576 ? "
                     "(datum.value / 1048576) + 'M' : (datum.value / 1024) + 'K'")
    legend = alt.Legend(orient="bottom", columns=1, labelLimit=400, symbolStrokeWidth=2)
    x = alt.X("context:Q", scale=alt.Scale(type="log", base=2), axis=ticks, title="context (tokens)")

    def line(field: str, title: str, unit: str, panel: list[str]) -> alt.LayerChart:
        pick = alt.selection_point(fields=["variant"], bind="legend")
        y = alt.Y(f"{field}:Q", title=title, scale=alt.Scale(type="log"), axis=_axis(unit))
        tip = [alt.Tooltip("variant:N", title="variant"), alt.Tooltip("context:Q", title="context (tokens)", format=","),
               alt.Tooltip("shown:N", title=title)]
        shown = alt.Chart(data).transform_calculate(shown=human(f"datum.{field}", unit))
        inside = alt.FieldOneOfPredicate(field="variant", oneOf=panel)
        behind = (shown.transform_filter(alt.LogicalNotPredicate(**{"not": inside}))
                  .mark_line(color=CONTEXT_GREY, strokeWidth=1).encode(x=x, y=y, detail="variant:N", tooltip=tip))
        scale = alt.Scale(domain=panel, range=PANEL_COLORS[:len(panel)])
        front = (shown.transform_filter(inside).mark_line(point=True).encode(
            x=x, y=y, color=alt.Color("variant:N", title="variant", sort=None, scale=scale, legend=legend),
            strokeDash=alt.StrokeDash("variant:N", title="variant", sort=None, scale=alt.Scale(domain=panel), legend=legend),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.2)), tooltip=tip).add_params(pick))
        return alt.layer(behind, front) if len(panel) < len(contract["variants"]) else alt.layer(front)

    def marks(panel: list[str]) -> alt.Chart:
        # the crossing points (contracts.json "crossings", solved by the build) of the panel's variants:
        # one diamond each, its tooltip naming the pair, the length and the bytes there; no colour field
        cross = alt.Data(values=[{"pair": f"{c['a_name']} × {c['b_name']}", "context": c["length"], "kv_bytes": c["bytes"],
                                  "exact": c["length_exact"], "above": c["above_name"]}
                                 for c in contract.get("crossings", []) if c["a_name"] in panel or c["b_name"] in panel])
        return (alt.Chart(cross).transform_calculate(shown=human("datum.kv_bytes", "B"))
                .mark_point(shape="diamond", size=70, filled=True, color="#1b1f24", opacity=0.85)
                .encode(x="context:Q", y="kv_bytes:Q",
                        tooltip=[alt.Tooltip("pair:N", title="crossing"),
                                 alt.Tooltip("context:Q", title="at context (tokens)", format=",.1~f"),
                                 alt.Tooltip("exact:N", title="exactly (tokens)"), alt.Tooltip("shown:N", title="bytes there"),
                                 alt.Tooltip("above:N", title="holds more past it")]).properties(name="crossings"))
    size = {"width": "container", "height": 240}
    panels = contract_panels(contract)
    return {"datasets": {CONTRACT_ROWS: rows},
            "kv": [_spec(alt.layer(line("kv_bytes", "KV + state bytes per request (one layer)", "B", p), marks(p))
                         .properties(**size)) for p in panels],
            "prefill": [_spec(line("prefill_s", "prefill time, SOL", "s", p).properties(**size)) for p in panels],
            "decode": [_spec(line("decode_s", "decode step at this context, SOL", "s", p).properties(**size))
                       for p in panels]}


#: The roofline's slope runs from ridge / ROOF_LEFT to the ridge, its flat roof on to ridge x ROOF_RIGHT
#: (FLOP per byte): six decades around the ridge, where the ops of a decode or prefill step lie.
ROOF_LEFT, ROOF_RIGHT = 1e4, 1e2


#: The roofline's op shapes: where an op's expected time comes from (roofline.js fills ``expected``
#: with one of these from the op row's ``measured``).
EXPECTED_SOURCES = ("measured table", "bound / default efficiency")


def roofline_spec() -> dict:
    return copy.deepcopy(_roofline_spec())


@functools.lru_cache(maxsize=None)
@_built
def _roofline_spec() -> dict:
    """The deployment page's roofline: one point per op of the selected step (arithmetic intensity
    FLOP/byte on log x, attained FLOP/s = FLOPs / its SOL time on log y, coloured by what bounds it),
    under the GPU's roofs: per native dtype min(peak, HBM bandwidth x intensity), each ridge point
    (peak / bandwidth) marked and labelled.

    Each op's shape marks where its expected time comes from (:data:`EXPECTED_SOURCES`: a measured
    table at this point, or the bound / the default efficiency).

    Named datasets, filled by static/js/roofline.js: ``ops`` rows {op, kind, bound, intensity,
    attained, t_sol_s, t_expected_s, expected}; ``roofs`` one row per dtype {dtype, peak, ridge, bw} as the build wrote them
    (landscape.json ``gpus``). The roof polyline's points are placed by the spec (display only)."""
    roofs = alt.Data(name="roofs")
    # log axes labelled at powers of ten only (Vega ticks every 1..9 x 10^k)
    decade = "abs(log(datum.value) / LN10 - round(log(datum.value) / LN10)) < 1e-6"
    x = alt.X("x:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP per HBM byte)",
              axis=alt.Axis(labelExpr=f"{decade} ? {human('datum.value')} : ''"))
    y = alt.Y("y:Q", scale=alt.Scale(type="log"), title="attained FLOP/s (FLOPs / SOL time)",
              axis=alt.Axis(labelExpr=f"{decade} ? {human('datum.value', 'FLOP/s')} : ''"))
    dtype_dash = alt.StrokeDash("dtype:N", title="peak (dtype)")
    roof = (alt.Chart(roofs)
            .transform_calculate(x=f"[datum.ridge / {ROOF_LEFT:g}, datum.ridge, datum.ridge * {ROOF_RIGHT:g}]")
            .transform_flatten(["x"])
            .transform_calculate(y="min(datum.peak, datum.bw * datum.x)", peak_shown=human("datum.peak", "FLOP/s"),
                                 bw_shown=human("datum.bw", "B/s"))
            .mark_line(color="#57606a", clip=True)
            .encode(x=x, y=y, strokeDash=dtype_dash, detail="dtype:N",
                    tooltip=[alt.Tooltip("dtype:N", title="dtype"), alt.Tooltip("peak_shown:N", title="dense peak"),
                             alt.Tooltip("bw_shown:N", title="HBM bandwidth")]))
    ridge_fields = dict(x="datum.ridge", y="datum.peak", ridge_shown=human("datum.ridge", "FLOP/B"),
                        peak_shown=human("datum.peak", "FLOP/s"), bw_shown=human("datum.bw", "B/s"),
                        label="upper(datum.dtype) + ' ridge ' + " + human("datum.ridge", "FLOP/B"))
    ridge_tip = [alt.Tooltip("dtype:N", title="dtype"), alt.Tooltip("ridge_shown:N", title="ridge point (peak / bandwidth)"),
                 alt.Tooltip("peak_shown:N", title="dense peak"), alt.Tooltip("bw_shown:N", title="HBM bandwidth")]
    ridge = (alt.Chart(roofs).transform_calculate(**ridge_fields)
             .mark_point(shape="diamond", size=90, filled=True, color="#1b1f24")
             .encode(x=x, y=y, tooltip=ridge_tip).properties(name="ridges"))
    ridge_label = (alt.Chart(roofs).transform_calculate(**ridge_fields)
                   # above and left of its ridge: every roof shares the one bandwidth slope, so the
                   # higher dtypes' slopes run on up and right through a lower ridge, and left of a
                   # ridge every roof lies below it
                   .mark_text(align="right", baseline="bottom", dx=-6, dy=-4, fontSize=11)
                   .encode(x=x, y=y, text="label:N").properties(name="ridge_labels"))
    # each op's shape says where its expected time comes from: a measured table (gpus/measured/) at
    # this point, or the bound / the default efficiency (no table covers its kernel class)
    ops = (alt.Chart(alt.Data(name="ops"))
           .transform_filter("datum.intensity > 0 && datum.attained > 0")
           .transform_calculate(x="datum.intensity", y="datum.attained", x_shown="format(datum.intensity, '.3~s') + ' FLOP/B'",
                                y_shown=human("datum.attained", "FLOP/s"), t_shown=human("datum.t_sol_s", "s"),
                                e_shown=human("datum.t_expected_s", "s"))
           .mark_point(size=70, opacity=0.85, filled=True)
           .encode(x=x, y=y,
                   color=alt.Color("bound:N", title="bound", scale=alt.Scale(domain=["compute", "memory", "comm"],
                                                                            range=["#d62728", "#1f77b4", "#ff7f0e"])),
                   shape=alt.Shape("expected:N", title="expected time",
                                   scale=alt.Scale(domain=list(EXPECTED_SOURCES), range=["circle", "triangle-up"])),
                   tooltip=[alt.Tooltip("op:N", title="op"), alt.Tooltip("kind:N", title="kind"),
                            alt.Tooltip("bound:N", title="bound"), alt.Tooltip("x_shown:N", title="arithmetic intensity"),
                            alt.Tooltip("y_shown:N", title="attained"), alt.Tooltip("t_shown:N", title="SOL time"),
                            alt.Tooltip("e_shown:N", title="expected time"), alt.Tooltip("expected:N", title="expected from")])
           .properties(name="ops"))
    return _spec(alt.layer(roof, ridge, ridge_label, ops).properties(width="container", height=340)
                 .configure_legend(orient="bottom"))


def front_spec() -> dict:
    return copy.deepcopy(_front_spec())


@functools.lru_cache(maxsize=None)
@_built
def _front_spec() -> dict:
    """The throughput/interactivity chart of serving benchmarks (InferenceMAX style): decode
    tokens/s per GPU against tokens/s per user, one line per GPU type through its Pareto front
    (named dataset ``front``: the sizing page's rows of fronts.parquet; the deploy page's fronts of
    the grid's points, static/js/deploy_eval.js), the legend clickable to highlight a GPU."""
    pick = alt.selection_point(fields=["gpu"], bind="legend")
    line = alt.Chart(alt.Data(name="front")).mark_line(point=alt.OverlayMarkDef(filled=True, size=30)).encode(
        # log axes: one GPU an order of magnitude ahead (Rubin) no longer squashes the others
        # into the bottom band; ticks at 1, 2 and 5 per decade
        x=alt.X("tokens_per_s_per_user:Q", title="tokens/s per user (1 / TPOT)", scale=alt.Scale(type="log"),
                axis=_log_axis()),
        y=alt.Y("tokens_per_s_per_gpu:Q", title="decode tokens/s per GPU", scale=alt.Scale(type="log"),
                axis=_log_axis()),
        color=alt.Color("gpu:N", title="GPU", legend=alt.Legend(orient="top"), scale=alt.Scale(range=GPU_COLORS)),
        order=alt.Order("tokens_per_s_per_user:Q"),
        opacity=alt.condition(pick, alt.value(1.0), alt.value(0.2)),
        tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("replica:N", title="config"),
                 alt.Tooltip("batch:Q", title="batch"), alt.Tooltip("ttft:N", title="TTFT"),
                 alt.Tooltip("tpot:N", title="TPOT (steady state)"),
                 alt.Tooltip("tpot_last:N", title="TPOT at the last token (worst case)"),
                 alt.Tooltip("rate:N", title="decode tokens/s per GPU"),
                 alt.Tooltip("user:N", title="tokens/s per user")],
    ).transform_calculate(replica="datum.n_gpus + 'x ' + datum.config").add_params(pick)
    line = _shown(line, ttft=("ttft_s", "s"), tpot=("tpot_s", "s"), tpot_last=("tpot_last_s", "s"),
                  rate=("tokens_per_s_per_gpu", ""), user=("tokens_per_s_per_user", ""))
    return _spec(line.properties(width="container", height=320))
