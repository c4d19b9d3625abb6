"""source guard: every ``src:`` anchor occurs in the model's forward-source snapshot.

An anchor ties a node (and, with streams, a cross-layer dataflow) to the line of the modeling
code that does it; if the code says something else the anchor is stale or invented. Matching is
whitespace-insensitive and searches the forward methods recorded in ``<model>.source.yaml``.
"""
from __future__ import annotations

from engine.verify.guards import Context, Finding

NAME = "source"
EVIDENCE = "forward-source snapshot"


def anchors(ctx: Context) -> dict[str, str]:
    """Anchor text -> the first node uid that declares it (templates repeat the same anchors)."""
    out: dict[str, str] = {}
    for uid, row in ctx.numeric.rows.items():
        if row.src and row.src not in out:
            out[row.src] = uid
    for stream in ctx.numeric.streams:   # every stream names the forward line that carries it
        out.setdefault(stream.src, stream.uid)
    return out


def evidence(ctx: Context) -> str:
    s = ctx.evidence.source
    n = len(anchors(ctx))
    if s is None:
        return f"no source snapshot ({n} anchors)"
    return f"{s.source} ({len(s.excerpts)} forward methods, {n} anchors)"


def check(ctx: Context) -> list[Finding]:
    found = anchors(ctx)
    s = ctx.evidence.source
    if not found:
        return [Finding(NAME, "info", "", "the spec declares no src: anchors", "")]
    if s is None:
        return [Finding(NAME, "error", next(iter(found.values())), "src: anchors but no forward-source snapshot",
                        "record it: archledger snapshot MODEL")]
    out = []
    for text, uid in found.items():
        if s.contains(text) is None:
            out.append(Finding(NAME, "error", uid, f"src: {text!r} does not occur in the forward source "
                               f"({s.source})", "quote a line of the model's forward code exactly"))
    return out
