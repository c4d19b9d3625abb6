"""The layer plan of each layer stack: which layer template runs at which layer index.

Layer: engine.batch -> build/results (the model document's ``layer_plan``; site_builder/graphs.py
draws the stack from it, the model page prints its text).

A ``repeat:`` node's layers are walked in groups, one per template (and per-layer key), each group's
component row holding the layer indices it covers (engine.language.evaluate ``_walk_layers``: the
stack-local index plus the stack's ``index_from``). This module lays the groups back out in layer
order and writes that sequence as segments a reader can take in at a glance:

- a run: one group at consecutive layers ("layers 0-2: dense");
- a repeated period: a few runs repeated ``times`` >= 2 times ("layers 0-63: 3 linear : 1 full, x16").

Of all the ways to cut the sequence into such segments it takes one with the fewest drawn boxes
(a run is one box, a period one box per run plus its repeat loop), so a regular interleave reads
as one period however many layers it spans, and an irregular one (Nemotron-H's pattern string)
still reads in order, segment by segment.

Invariants: the segments of a plan cover each of its layers exactly once, in increasing layer
order; expanding them (each period's runs, ``times`` times) gives back, layer by layer, the group
the walk assigned to that layer. Nothing here evaluates the schedule again: it reads the walk's rows.
"""
from __future__ import annotations

from typing import Any, Iterable

#: The longest period (in layers) tried: longer repeats read better as separate segments.
MAX_PERIOD = 16


def _name(group_uid: str) -> str:
    """A group's short name: its template (and tag), the part of the uid in brackets."""
    return group_uid[group_uid.rfind("[") + 1:-1] if group_uid.endswith("]") else group_uid


def _runs(seq: list[str]) -> list[list]:
    """Consecutive equal entries of ``seq`` as [entry, count] pairs."""
    out: list[list] = []
    for g in seq:
        if out and out[-1][0] == g:
            out[-1][1] += 1
        else:
            out.append([g, 1])
    return out


def _segments(seq: list[str], index: list[int]) -> list[tuple[int, int, int]]:
    """(start, period, times) of each segment of ``seq`` (positions): the fewest boxes drawn, and
    among those the fewest periods that do not open on their longest run (a period reads as its
    schedule is usually stated, "5 sliding : 1 full", not "1 full : 5 sliding")."""
    n = len(seq)
    best: list = [(0, 0)] + [None] * n       # cost of covering seq[:j], and its last segment
    last: list = [None] * (n + 1)
    for i in range(n):
        for p in range(1, min(MAX_PERIOD, n - i) + 1):
            if index[i + p - 1] - index[i] != p - 1:
                break                         # never across a gap in the layer indices
            t = i + p                         # seq[i:t] repeats with period p
            while t < n and seq[t] == seq[t - p] and index[t] - index[t - 1] == 1:
                t += 1
            runs = _runs(seq[i:i + p])
            if p > 1 and len(runs) == 1:
                continue                      # one group repeated: the run of period 1 covers it
            if p == 1:                        # a run: one segment of period j - i, once
                ends, cost = [(j, j - i, 1) for j in range(i + 1, t + 1)], (1, 0)
            else:                             # a box per run, one for the repeat loop
                ends = [(i + p * k, p, k) for k in range(2, (t - i) // p + 1)]
                cost = (len(runs) + 1, int(runs[0][1] < max(c for _, c in runs)))
            for j, period, k in ends:
                total = (best[i][0] + cost[0], best[i][1] + cost[1])
                if best[j] is None or total < best[j]:
                    best[j], last[j] = total, (i, period, k)
    out, j = [], n
    while j:
        out.append(last[j])
        j = last[j][0]
    return out[::-1]


def stack_plan(uid: str, groups: Iterable[tuple[str, Iterable[int]]]) -> dict[str, Any]:
    """The plan of the layer stack ``uid`` (the repeat node's uid) from its groups: (group uid,
    the layer indices the walk gave it)."""
    at = {}
    for group, layers in groups:
        for layer in layers:
            at[int(layer)] = group
    index = sorted(at)
    seq = [at[i] for i in index]
    segments = []
    for start, period, times in _segments(seq, index):
        first, last = index[start], index[start + period * times - 1]
        runs = [{"group": g, "name": _name(g), "count": c} for g, c in _runs(seq[start:start + period])]
        span = f"layer {first}" if first == last else f"layers {first}-{last}"
        if times == 1:
            text = f"{span}: {runs[0]['name']}"
        else:
            text = f"{span}: " + " : ".join(f"{r['count']} {r['name']}" for r in runs) + f", x{times}"
        segments.append({"first": first, "last": last, "times": times, "span": span, "runs": runs, "text": text})
    return {"uid": uid, "first": index[0], "last": index[-1], "count": len(index), "segments": segments,
            "text": "; ".join(s["text"] for s in segments)}


def layer_plans(components: Iterable[tuple[str, str, Iterable[int]]]) -> list[dict[str, Any]]:
    """Every layer stack's plan from the walk's component rows (uid, template, layers): a row with
    a template is a layer group, ``<repeat node uid>[<template>...]``. Stacks in first-row order."""
    stacks: dict[str, list] = {}
    for uid, template, layers in components:
        if template and uid.endswith("]") and "[" in uid:
            stacks.setdefault(uid[:uid.rfind("[")], []).append((uid, layers))
    return [stack_plan(uid, groups) for uid, groups in stacks.items()]
