"""The one number formatter: every count, FLOP total, byte size and time the CLI and the site print.

Layer: engine.cli (imports nothing of the engine). The rule is data, :data:`FORMAT`; the functions
below are its Python interpreter. ``site_builder/templating.py`` uses them as its template filters and
ships :data:`FORMAT` to every page (the ``data-fmt`` attribute of the site.js tag), where
``window.archFmt`` (static/js/site.js) is the rule's one JavaScript interpreter; the charts' ``human``
Vega expression is generated from :data:`FORMAT` by ``site_builder/charts.py``. A browser test
(tests/test_site_format.py) checks the three give the same strings.

The convention (docs/results.md, "How numbers are printed"):

- Counts and FLOPs take SI prefixes k, M, G, T, P (10^3 steps): 671 G parameters, 37.6 G FLOPs.
  Never "B" for billion: B is the byte.
- Bytes are decimal (kB, MB, GB, TB: 10^3 steps) — checkpoint files, HBM datasheets and KV sizes
  are decimal at their source — and every byte figure prints so, usable memory and the KV budget
  included (a runtime that logs GiB is read in GB here: one unit on a line and in a table, so a
  reader never compares 244 GB with 242 GiB).
- Times pick fs, ps, ns, µs, ms or s so the mantissa is in [1, 1000) (at or above 1000 s: whole
  seconds with thousands separators).
- Three significant digits, trailing zeros dropped ("2 G", not "2.00 G"); zero prints "0"
  ("0 B", "0 s"); no exponent notation in the ranges above.

Invariant: the value is rounded to three significant digits *before* the prefix is chosen, so
999.7e9 prints "1 T", never "1e+03 G". The rounding is of the float's exact value, a tie (1005,
1.125) going away from zero: ECMAScript's ``toPrecision`` and ``toExponential`` (which archFmt and
the charts' d3 format use) round so, and so does :func:`round_sig` (Python's own ``format`` would go
to even: 1005 B printed "1 kB" here and "1.01 kB" on a page).
"""
from __future__ import annotations

import decimal

#: The rule, as data every interpreter reads (JSON: the site ships it as is).
#: digits: significant digits; none: what a missing value prints; si: (prefix, scale) from the
#: largest, the first the rounded value reaches; time: the same for seconds, ``slack`` the relative
#: tolerance of its comparisons, ``whole_from`` where whole seconds with separators take over;
#: tokens: (suffix, scale) of binary token counts, taken only for a whole multiple.
FORMAT = {
    "digits": 3,
    "none": "\u2014",   # an em dash: no value
    "si": [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]],
    "bytes": "B",
    "time": {"unit": "s", "whole_from": 1000, "slack": 1e-12,
             "scales": [["s", 1.0], ["ms", 1e-3], ["\u00b5s", 1e-6], ["ns", 1e-9], ["ps", 1e-12], ["fs", 1e-15]]},
    "tokens": [["M", 1 << 20], ["K", 1 << 10]],
}
SI = tuple((p, s) for p, s in FORMAT["si"])
TIME = tuple((p, s) for p, s in FORMAT["time"]["scales"])
NONE = FORMAT["none"]
_DIGITS = FORMAT["digits"]


def round_sig(value: float, digits: int = _DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits (0 stays 0), ties away from zero."""
    if not value:
        return 0.0
    if f"{value:.{digits}e}"[digits + (value < 0) + 1] != "5":   # no tie possible: the fast, same, answer
        return float(f"{value:.{digits}g}")
    exact = decimal.Decimal(value)            # the float's exact value, no second rounding
    step = decimal.Decimal(1).scaleb(exact.adjusted() - digits + 1)
    return float(exact.quantize(step, rounding=decimal.ROUND_HALF_UP))


def _mantissa(value: float) -> str:
    return f"{value:.{_DIGITS}g}"


def _scaled(value, scales, bare: str) -> str:
    """``value`` with the largest prefix of ``scales`` it reaches after rounding, else ``bare``."""
    if value is None:
        return NONE
    r = round_sig(float(value))
    for suffix, scale in scales:
        if abs(r) >= scale:
            return f"{_mantissa(r / scale)} {suffix}"
    return f"{_mantissa(r)} {bare}".rstrip()


def si(value, unit: str = "") -> str:
    """Counts and FLOPs (``unit`` appended, e.g. "B" for bytes): 671e9 -> '671 G'; 0 -> '0'."""
    return _scaled(value, tuple((p + unit, s) for p, s in SI), unit)


def decimal_bytes(value) -> str:
    """Bytes in decimal units: 1.342e12 -> '1.34 TB'; 512 -> '512 B'."""
    return si(value, FORMAT["bytes"])


def seconds(value) -> str:
    """A time: 5.82e-13 -> '582 fs'; 8.7e-11 -> '87 ps'; 5.168e-3 -> '5.17 ms'; 0 -> '0 s'; 4321 -> '4,320 s'."""
    if value is None:
        return NONE
    rule = FORMAT["time"]
    r = round_sig(float(value))
    if abs(r) >= rule["whole_from"]:
        return f"{r:,.0f} {rule['unit']}"
    if r == 0:
        return f"0 {rule['unit']}"
    for suffix, scale in TIME:
        if abs(r) >= scale * (1 - rule["slack"]):
            return f"{_mantissa(r / scale)} {suffix}"
    suffix, scale = TIME[-1]
    return f"{_mantissa(r / scale)} {suffix}"


def tokens(value) -> str:
    """Token counts in binary units as model cards write them: 4096 -> '4K', 1048576 -> '1M';
    a count that is no whole K prints in full (131000 -> '131,000')."""
    value = int(value)
    for suffix, scale in FORMAT["tokens"]:
        if value >= scale and value % scale == 0:
            return f"{value // scale}{suffix}"
    return f"{value:,}"
