"""axiom guard: cache declarations agree with the config and with the evaluation.

* A sliding window or attention chunk in config.json (top level or under ``text_config``)
  demands window-capped caches of exactly that many tokens (structural fields with ``cache:
  window`` in ``corpus/verification.yaml``: a chunked layer keeps at most its current chunk), and
  a window-capped cache with no such field in the config is an error.
* Growth laws are consistent: a window is positive (and shorter than the context, else it caps
  nothing), a compressed cache keeps one entry per ``every >= 2`` tokens, entries are non-empty.
* Attention over a window-capped cache masks with the same window.
* A ``growth: state`` cache is a recurrent op's fixed-size state: its size per request does not
  depend on the context (a history cache declared as a state would hide its growth), and every
  recurrent op (``gated_delta_rule``, ``conv1d``: a linear-attention layer) keeps one, so its state
  is in the memory and traffic model.
"""
from __future__ import annotations

import sympy

from engine.language import symbols
from engine.language.ops import OPS
from engine.verify.guards import Context, Finding
from engine.verify.guards.structural import active, lookup

NAME = "axiom"
EVIDENCE = "cache declarations vs config"


def evidence(ctx: Context) -> str:
    kinds = sorted({c.growth for c in ctx.numeric.caches})
    return "cache growth laws: " + (", ".join(kinds) if kinds else "none")


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    a = ctx.numeric
    caches = [c for c in a.caches if c.stack == "main"]
    windows = [c for c in caches if c.growth == "window"]
    demands = [e for e in ctx.registry.structural if e.cache == "window" and active(ctx, e)]
    for entry in demands:
        value = int(lookup(ctx.evidence.config, entry.field))
        if not windows:
            out.append(Finding(NAME, "error", "", f"config.{entry.field} = {value} but no cache is window-capped",
                               f"declare the sliding layers' caches with window: <dim bound to config.{entry.field}>"))
        for c in windows:
            if int(c.window) != value:
                out.append(Finding(NAME, "error", c.node_uid, f"cache {c.name!r} keeps {c.window} tokens, "
                                   f"config.{entry.field} = {value}", f"cap it at config.{entry.field}"))
    if windows and not demands:
        fields = " or ".join(f"config.{e.field}" for e in ctx.registry.structural if e.cache == "window")
        out.append(Finding(NAME, "error", windows[0].node_uid, f"cache {windows[0].name!r} is capped at "
                           f"{windows[0].window} tokens but config.json declares no window ({fields}; a "
                           "multimodal checkpoint's under text_config count)",
                           "drop the window, or bind it from the config field that declares it "
                           "(the sliding window or the attention chunk)"))
    for c in caches:
        if c.per_token <= 0:
            out.append(Finding(NAME, "error", c.node_uid, f"cache {c.name!r} stores {c.per_token} elements "
                               "per token", "a cache entry must hold something"))
        if c.growth == "window":
            if c.window <= 0:
                out.append(Finding(NAME, "error", c.node_uid, f"window {c.window} is not positive", "bind a window > 0"))
            elif c.window >= a.max_context:
                out.append(Finding(NAME, "warning", c.node_uid, f"window {c.window} >= max context "
                                   f"{a.max_context}: the cap never applies", "check the window dim"))
        if c.growth == "compressed" and (c.every is None or c.every < 2):
            out.append(Finding(NAME, "error", c.node_uid, f"compressed cache keeps one entry per {c.every} tokens",
                               "a compressed cache needs every >= 2 (otherwise declare every_token)"))
    out += _state_checks(ctx, caches)
    by_node = {c.node_uid: c for c in windows}
    for uid, row in a.rows.items():
        if row.op != "attention_score":
            continue
        for src in row.inputs:
            cache = by_node.get(src)
            if cache is None:
                continue
            window = row.dim_values.get("window")
            if window is None or window != cache.window:
                out.append(Finding(NAME, "error", uid, f"attends over cache {cache.name!r} capped at "
                                   f"{cache.window} tokens with window {window}",
                                   "pass the cache's window to the attention_score node (mask: sliding)"))
    return out


#: Symbols a per-request state must not depend on: the scenario's lengths.
_LENGTHS = {symbols.dim(n) for n in (symbols.SEQ, symbols.CTX, symbols.LENGTH)}


def _state_checks(ctx: Context, caches) -> list[Finding]:
    out: list[Finding] = []
    a, sym = ctx.numeric, ctx.symbolic
    sym_caches = {c.uid: c for c in sym.caches} if sym is not None else {}
    for c in caches:
        if c.growth != "state":
            continue
        op = a.rows[c.node_uid].op
        formula = sym_caches.get(c.uid, c).per_token
        grows = OPS[op].state is None or bool(getattr(formula, "free_symbols", set()) & _LENGTHS)
        if grows:
            out.append(Finding(NAME, "error", c.node_uid, f"cache {c.name!r} is declared growth: state, but "
                               f"its {op} node keeps a history that grows with the context",
                               "a state cache names a recurrent op (gated_delta_rule, conv1d); declare a "
                               "history cache every_token, window or compressed"))
    kept = {c.node_uid.removesuffix("@decode") for c in a.caches if c.growth == "state"}
    for uid, row in a.rows.items():
        if OPS[row.op].state is not None and uid.removesuffix("@decode") not in kept:
            out.append(Finding(NAME, "error", uid, f"recurrent op {row.op} keeps a state between decode steps "
                               "but no cache entry declares it", f"add to the component's cache: {{name: ..., "
                               f"node: {row.name}, kind: ..., growth: state, dtype: ...}}"))
    return out
