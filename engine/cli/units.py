"""The one number formatter: every count, FLOP total, byte size and time the CLI and the site print.

Layer: engine.cli (imports nothing of the engine). ``site_builder/render.py`` uses these as its
template filters and ``static/js/site.js`` (``window.archFmt``) mirrors them line for line; a
browser test (tests/test_site_format.py) checks the two give the same strings.

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
999.7e9 prints "1 T", never "1e+03 G".
"""
from __future__ import annotations

SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
TIME = (("s", 1.0), ("ms", 1e-3), ("\u00b5s", 1e-6), ("ns", 1e-9), ("ps", 1e-12), ("fs", 1e-15))
NONE = "\u2014"   # an em dash: no value


def _round3(value: float) -> float:
    """``value`` rounded to three significant digits (0 stays 0)."""
    return float(f"{value:.3g}") if value else 0.0


def _mantissa(value: float) -> str:
    return f"{value:.3g}"


def _scaled(value, scales, bare: str) -> str:
    """``value`` with the largest prefix of ``scales`` it reaches after rounding, else ``bare``."""
    if value is None:
        return NONE
    r = _round3(float(value))
    for suffix, scale in scales:
        if abs(r) >= scale:
            return f"{_mantissa(r / scale)} {suffix}"
    return f"{_mantissa(r)} {bare}".rstrip()


def si(value, unit: str = "") -> str:
    """Counts and FLOPs (``unit`` appended, e.g. "B" for bytes): 671e9 -> '671 G'; 0 -> '0'."""
    return _scaled(value, tuple((p + unit, s) for p, s in SI), unit)


def decimal_bytes(value) -> str:
    """Bytes in decimal units: 1.342e12 -> '1.34 TB'; 512 -> '512 B'."""
    return si(value, "B")


def seconds(value) -> str:
    """A time: 5.82e-13 -> '582 fs'; 8.7e-11 -> '87 ps'; 5.168e-3 -> '5.17 ms'; 0 -> '0 s'; 4321 -> '4,320 s'."""
    if value is None:
        return NONE
    r = _round3(float(value))
    if abs(r) >= 1000:
        return f"{r:,.0f} s"
    if r == 0:
        return "0 s"
    for suffix, scale in TIME:
        if abs(r) >= scale * (1 - 1e-12):
            return f"{_mantissa(r / scale)} {suffix}"
    return f"{_mantissa(r / 1e-15)} fs"


def tokens(value) -> str:
    """Token counts in binary units as model cards write them: 4096 -> '4K', 1048576 -> '1M';
    a count that is no whole K prints in full (131000 -> '131,000')."""
    value = int(value)
    if value % (1 << 20) == 0 and value >= 1 << 20:
        return f"{value >> 20}M"
    return f"{value // 1024}K" if value % 1024 == 0 and value >= 1024 else f"{value:,}"

