"""Compact JSON texts read in pieces: a results file's top-level entries and list items cut from its
text as they stand, so the site copies what the build encoded instead of decoding it and encoding it
again (docs/scaling-2.md, "Site render, eleventh pass").

Layer: site_builder (reads results texts; no engine evaluation). Invariant: every function here gives
the text ``compact_json`` (engine.batch.jsontext) would write for the value it stands for, or says
None where the text is not in that form (its caller then decodes it whole).
"""
from __future__ import annotations

import json
import re
from json.decoder import scanstring
from json.scanner import make_scanner
from typing import Any

from engine.batch import collector
from engine.batch.jsontext import compact_json


# Parsing the results' JSON (model documents, playground picks, formula files: megabytes) allocates
# millions of containers; the collector would walk the growing heap again and again while they are
# made, and the parsed trees hold no cycles for it to find: two thirds of the site's JSON reading.
gc_paused = collector.paused


class RowTexts(list):
    """A formula document's ``programs`` as its steps' JSON texts: per program, each step row's
    compact JSON text, in order (what :func:`split_formulas` reads; a decoded document's programs
    are turned into this by :func:`row_texts`)."""


def row_texts(programs: list) -> RowTexts:
    """Decoded ``programs`` (lists of step rows) as :class:`RowTexts`: each row's compact JSON text,
    the text the build's writer gave it (engine.batch.deploy_export.document_json)."""
    return RowTexts([[compact_json(row) for row in steps] for steps in programs])


def json_without(text: str, drop: str) -> str:
    """The compact JSON text of the object ``text`` less its top-level key ``drop``:
    ``compact_json`` of the decoded object without it, for ``text`` as :func:`compact_json` writes
    it (every results JSON file: engine.batch.jsontext), whose entries' texts are what encoding them
    again gives; so the other entries are copied as they stand, not decoded and encoded again. Any
    other text (white space: :func:`top_level` says None) is decoded and encoded."""
    with gc_paused():
        entries = top_level(text)
        if entries is None:
            return compact_json({k: v for k, v in json.loads(text).items() if k != drop})
    return "{" + ",".join([text[key:end] for name, key, _, end, _ in entries if name != drop]) + "}"


_SCAN = make_scanner(json.JSONDecoder())      # (what json.loads decodes a value with)


class Items(list):
    """A JSON list decoded element by element, beside each element's text as it stands in the file
    (``texts``): what :func:`top_level` gives for its ``items`` key."""
    texts: list[str]


def _items(text: str, i: int) -> tuple[Items, int]:
    """The JSON list starting at ``text[i]`` as :class:`Items`, and where it ends (each element
    decoded by the C scanner, as json.loads would; ValueError where no list of values is there)."""
    if text[i:i + 1] != "[":
        raise ValueError("not a list")
    out = Items()
    out.texts = []
    if text[i + 1:i + 2] == "]":
        return out, i + 2
    while True:                  # at '[' or ',', an element next
        value, end = _SCAN(text, i + 1)
        out.append(value)
        out.texts.append(text[i + 1:end])
        i = end
        if text[i:i + 1] == "]":
            return out, i + 1
        if text[i:i + 1] != ",":
            raise ValueError("not a list")


def top_level(text: str, cut: str | None = None, items: str | None = None) -> list[tuple[str, int, int, int, Any]] | None:
    """The top-level entries of the compact JSON object ``text``, in order, each ``(key, where its
    key's quote is, where its value starts, where it ends, the value decoded)``, so that
    ``text[key:end]`` is an entry's text as it stands (``"key":value``) and ``"{" + ",".join(...) +
    "}"`` of all of them is ``text`` again. The value of ``cut`` is not decoded (None) but cut at the
    next key's opening quote (or the object's end): exact only for a value holding no string, which
    its reader checks (:func:`read_formulas`). The value of ``items`` (a list) comes as :class:`Items`,
    each element's text beside it. None where ``text`` is not a compact JSON object (white
    space, a key given twice, a value that is not JSON there): then json.loads tells what it is."""
    if not text.startswith('{"'):
        return None
    entries, seen, i, last = [], set(), 0, len(text) - 1
    try:
        while text[i + 1:i + 2] == '"':          # at '{' or ',', a key next (compact: no white space)
            key_at = i + 1
            name, start = scanstring(text, key_at + 1)
            if text[start:start + 1] != ":" or name in seen:   # (json.loads keeps a repeated key's last value)
                return None
            seen.add(name)
            if name == cut:
                end = text.find('"', start)
                i, value = (last if end == -1 else end - 1), None
            else:
                value, i = (_items if name == items else _SCAN)(text, start + 1)
            entries.append((name, key_at, start + 1, i, value))
            if text[i:i + 1] == "}":
                return entries if i == last else None
            if text[i:i + 1] != ",":
                return None
    except (ValueError, StopIteration):          # (not JSON where a value was looked for)
        return None
    return None


#: A step row with no string: a list of numbers holding one list (``parts``), as the build writes it.
_ROW = r'\[[^\[\]"]*\[[^\[\]"]*\][^\[\]"]*\]'
_ROWS = re.compile(_ROW)
#: A program: a list of such rows (possibly none).
_PROGRAM = re.compile(r'\[((?:%s(?:,%s)*)?)\]' % (_ROW, _ROW))


def cut_rows(raw: str) -> RowTexts | None:
    """The programs' text ``raw`` (a list of lists of step rows) as :class:`RowTexts`, or None where
    it is not exactly a list of programs of string-free rows of the writer's shape (then it is not
    cut here). Exact: the programs found must join back to ``raw`` character for character, and a
    JSON list ends at its own closing bracket, so a text that joins back is the whole value."""
    if len(raw) < 2 or raw[0] != "[" or raw[-1] != "]":
        return None
    programs = _PROGRAM.findall(raw, 1, len(raw) - 1)
    if "[" + ",".join(["[" + p + "]" for p in programs]) + "]" != raw:
        return None
    return RowTexts([_ROWS.findall(p) for p in programs])


def lookup_refs(trees: str) -> set[int]:
    """The table refs of the ``lookup`` nodes (``["lookup", ref, ...]``, engine.language.formula_tree)
    in the compact JSON text ``trees``. A match is always such a node: its bracket cannot be inside a
    string, for the quote after it would close that string and no JSON text goes on with a letter
    after a closing quote; so it opens a list whose first element is the string ``lookup``, and the
    ref is the integer after it (what the walk over the decoded trees found)."""
    return {int(r) for r in _LOOKUP_REF.findall(trees)}


_LOOKUP_REF = re.compile(r'\["lookup",(-?\d+)(?=[,\]])')
