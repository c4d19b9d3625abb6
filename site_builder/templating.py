"""The templates' environment and its display filters: how a value prints on a page, never what it is.

Layer: site_builder. One number formatter for the CLI and the site (engine/cli/units.py); one
escaper for data inside a page's ``<script>`` (:func:`script_json`, also the templates' ``tojson``).

Invariants: autoescape is on and undefined names fail (StrictUndefined); a filter formats a number
it is given (each arrives with its formula from the results), it computes none; JSON reaching a page
is inert in a ``<script>`` block or attribute.
"""
from __future__ import annotations

import json
import re
from typing import Any

import jinja2
import markupsafe

from engine.cli import units
from engine.serving.steady import FRONT_BASIS
from site_builder.sources import TEMPLATES, static_assets


# -- display filters (formatting only) -------------------------------------------------------------

# one formatter for the CLI and the site (engine/cli/units.py; its FORMAT ships to every page, where
# static/js/site.js archFmt interprets it)
si, human_bytes, seconds, tokens = units.si, units.decimal_bytes, units.seconds, units.tokens


def crossing_length(value) -> str:
    """A context length that may be fractional (a crossing point): 14563.56 -> '14,563.6', 1042 -> '1,042'."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def landscape_fmt(value, unit: str) -> str:
    """A landscape cell by its column's unit (landscape.json ``unit``); None reads "never"."""
    if value is None:
        return "never"
    if unit == "bytes":
        return human_bytes(value)
    if unit == "bytes_per_s":
        return human_bytes(value) + "/s"
    if unit == "flops":
        return si(value)
    if unit == "ratio":
        return f"{float(value):.3g}"
    if unit == "count":
        return f"{value:,}" if isinstance(value, int) else si(value)
    return str(value)


def fmt(value, key: str) -> str:
    if "bytes" in key:
        return human_bytes(value)
    if key == "max_context":
        return tokens(value)
    if key.startswith("params"):
        return si(value)
    return f"{value:,}" if isinstance(value, int) else si(value)


def anchor(uid: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in uid)


#: Characters JSON may hold that must not reach HTML raw: ``<`` opens ``</script>`` and ``<!--``
#: (either ends or swallows the script block), ``>`` and ``&`` pair with them, ``'`` closes a
#: single-quoted attribute, U+2028/U+2029 end a line in JavaScript before ES2019. Each becomes its
#: ``\uXXXX`` escape, which is the same string to JSON.parse and to JavaScript.
_SCRIPT_UNSAFE = re.compile("[<>&'\u2028\u2029]")


def script_json(value: Any) -> str:
    """``value`` as JSON that is inert inside an HTML ``<script>`` block or attribute.

    The one way data reaches a page's inline script (the ``page-data`` block of base.html, and the
    templates' ``tojson`` filter, replaced by this): model ids, names, notes and docs come from spec
    files in pull requests, so any string may be hostile. NaN and infinity are refused (they are not
    JSON; engine/language/finite.py keeps them out of the results)."""
    text = json.dumps(value, allow_nan=False)
    return _SCRIPT_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def environment(assets: dict[str, str] | None = None) -> jinja2.Environment:
    """The templates' environment. ``asset('js/deploy.js')`` gives a static file's published path,
    ``static/js/deploy.<sha8>.js`` (``assets``: :func:`static_assets`' names, read from static/ if not given)."""
    names = static_assets()[0] if assets is None else assets
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(si=si, bytes=human_bytes, tokens=tokens, fmt=fmt, anchor=anchor, seconds=seconds,
                       landscape_fmt=landscape_fmt, crossing_length=crossing_length)
    # jinja's own tojson escapes < > & ' but not U+2028/U+2029: templates get the one escaper
    env.filters["tojson"] = lambda value, indent=None: markupsafe.Markup(script_json(value))
    env.globals["asset"] = lambda rel: "static/" + names[rel]
    env.globals["number_format"] = units.FORMAT   # base.html's data-fmt: the rule archFmt reads
    env.globals["front_basis"] = FRONT_BASIS    # the one sentence every front chart's caption states
    return env
