"""Every published number is finite and non-negative: the last check before results are written.

Layer: engine.language (a check of any table of a model's numbers, the build's and the serving
answers'), before build/results. The deployment and op tables and the inspector's document hold
counts, bytes, seconds, FLOPs and ratios of them; none of these can be negative, NaN or infinite
unless something upstream went wrong (an int64 overflow once published a negative KV size; a NaN
in a GPU file would make every time NaN). Inputs are bounded where they are read (gpus/*.yaml,
the grid, ParallelConfig, Scenario); this check is the backstop on what comes out, so a case the
bounds miss fails the build with one line naming the model, the column and the point, and nothing
is written, instead of a page that shows a negative memory size.

A column that may legitimately be negative must be named in :data:`SIGNED` (none today: the
shortfall and the free memory are clamped at zero and documented as such).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from engine.language.errors import SpecError, Where
from engine.language.ir import ModelSpec

#: Columns (or document keys) whose values may be negative. Everything else numeric must be >= 0.
SIGNED: frozenset[str] = frozenset()
#: Columns that name a deployment point in an error (those present in the table are shown).
POINT = ("gpu", "config", "framework", "kv_dtype", "phase", "batch", "input_len", "output_len", "op_uid")
HINT = ("a published count, byte, time or FLOP figure must be finite and not negative: check the GPU "
        "figures (gpus/*.yaml) and the grid, else report an engine bug (nothing was written)")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def first_bad(values: list, signed: bool = False) -> tuple[int, str] | None:
    """(row, what is wrong) of the first value that is not a finite number (>= 0 unless ``signed``),
    or None. Columns of labels, lists or flags are not numbers and pass; ``None`` (no value) passes.
    ``values``: a list, or a NumPy array (engine.batch.columns: checked without a Python loop)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "iuf":                  # flags, labels
            return None
        array, present, shown = values.astype(float, copy=False), None, lambda row: values[row].item()
    else:
        first = next((v for v in values if v is not None), None)
        if not _is_number(first):
            return None
        try:
            array = np.asarray(values, dtype=float)           # None becomes NaN: masked below
        except (TypeError, ValueError):
            row = next(i for i, v in enumerate(values) if v is not None and not _is_number(v))
            return row, f"{values[row]!r} is not a number"[:80]
        present = np.fromiter((v is not None for v in values), bool, len(values)) if None in values else None
        shown = values.__getitem__
    bad = ~np.isfinite(array)
    if not signed:
        bad |= array < 0
    if present is not None:
        bad &= present
    rows = np.flatnonzero(bad)
    if not rows.size:
        return None
    row = int(rows[0])
    return row, f"{shown(row)!r} is {'negative' if math.isfinite(array[row]) else 'not finite'}"


def check_tables(model: ModelSpec, tables: Mapping[str, Mapping[str, list]]) -> None:
    """Raise a one-line :class:`SpecError` at the first non-finite or negative number of any column
    of ``tables`` (table name -> column name -> values, as the build writes them)."""
    for table, columns in tables.items():
        for name, values in columns.items():
            found = first_bad(values, name in SIGNED)
            if found is None:
                continue
            row, problem = found
            point = ", ".join(f"{k}={columns[k][row]}" for k in POINT if k in columns and k != name)
            raise SpecError(Where(model.where.file, model.where.line, f"{table}.{name}"),
                            f"{problem} at {point}" if point else problem, HINT)


def check_document(model: ModelSpec, document: Any, path: str = "document") -> None:
    """The same rule over a JSON-like document (the inspector's model document): every number in
    it, at any depth, is finite and (unless its key is in :data:`SIGNED`) not negative."""
    stack = [(path, "", document)]
    while stack:
        where, key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", k, v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{where}[{i}]", key, v) for i, v in enumerate(value))
        elif _is_number(value) and (not math.isfinite(value) or (value < 0 and key not in SIGNED)):
            raise SpecError(Where(model.where.file, model.where.line, where),
                            f"{value!r} is {'negative' if math.isfinite(value) else 'not finite'}", HINT)
