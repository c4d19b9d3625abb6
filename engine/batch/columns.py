"""Table columns gathered in chunks and joined once, as NumPy arrays where they hold numbers.

Layer: engine.batch. The grid evaluation produces a deployment table bucket by bucket: per bucket a
few vectorized arrays and many constants (the model, the framework, the config's degrees). Building
Python lists of millions of values (``.tolist()``, ``[value] * n``) and handing them to polars cost
more CPU than the evaluation of the same points did; here each chunk stays what it is (an array, or
a constant and a count) until :meth:`Columns.joined` concatenates every column once.

Invariant: ``joined()`` holds, per column, the values of its chunks in the order they were added,
with Python's own values (a float array for floats, an int array for ints, a bool array for flags);
a column of labels (text, lists) is a Python list.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np


class Columns:
    """Column name -> chunks (an array or list of values, or ``(value, count)`` for a constant)."""

    def __init__(self):
        self._chunks: dict[str, list] = defaultdict(list)

    def add(self, name: str, values) -> None:
        """Append ``values`` (a 1-d array, or a list) to column ``name``."""
        self._chunks[name].append(values)

    def repeat(self, name: str, value, count: int) -> None:
        """Append ``count`` copies of one ``value`` to column ``name``: one longer run when the
        column's last chunk is a run of the very same value (:func:`_same`; the grid repeats a
        model's labels bucket after bucket, phase after phase), so joining meets fewer chunks."""
        chunks = self._chunks[name]
        if chunks:
            last = chunks[-1]
            if type(last) is _Constant and _same(last.value, value):
                last.count += count
                return
        chunks.append(_Constant(value, count))

    def joined(self) -> dict[str, np.ndarray | list]:
        """Every column in one piece (module invariant); a column nothing was added to reads as
        empty (a model with no point that fits still writes its empty partitions)."""
        return defaultdict(list, {name: _join(chunks) for name, chunks in self._chunks.items()})


class _Constant:
    __slots__ = ("value", "count")

    def __init__(self, value, count: int):
        self.value, self.count = value, count


_NUMBERS = (bool, int, float, np.bool_, np.integer, np.floating)

#: Types whose equal values are the same value in every column (a float is not: 0.0 == -0.0).
_EXACT = frozenset({str, int, bool})


def _same(a, b) -> bool:
    """Whether two constants are one value for the joined column: the same object, or equal values
    of one type of :data:`_EXACT` (equal ints, texts or flags; floats only by identity)."""
    return a is b or (type(a) is type(b) and type(a) in _EXACT and a == b)


def _numeric(value) -> bool:
    return isinstance(value, _NUMBERS)


def _constants(run: list[_Constant]) -> np.ndarray:
    """The values of consecutive constants whose values share one Python type: what ``np.full``
    makes of each, concatenated (the same dtype: that of one such value), in one call."""
    if len(run) == 1:
        return np.full(run[0].count, run[0].value)
    return np.repeat(np.array([c.value for c in run]), [c.count for c in run])


def _join(chunks: list) -> np.ndarray | list:
    numeric = True
    for c in chunks:                        # a number column: every chunk a number array or a number
        p = c.value if type(c) is _Constant else c
        if isinstance(p, np.ndarray):
            if p.dtype.kind not in "biuf":
                numeric = False
                break
        elif not isinstance(p, _NUMBERS):
            numeric = False
            break
    if numeric:
        arrays: list[np.ndarray] = []
        run: list[_Constant] = []          # consecutive constants of one Python type: one np.repeat
        kind = None                         # the type of the run's values
        for c in chunks:
            if type(c) is _Constant:
                if run and type(c.value) is not kind:
                    arrays.append(_constants(run))
                    run = []
                kind = type(c.value)
                run.append(c)
            else:
                if run:
                    arrays.append(_constants(run))
                    run = []
                arrays.append(c)
        if run:
            arrays.append(_constants(run))
        return np.concatenate(arrays) if arrays else np.array([])
    out: list = []
    extend = out.extend
    for c in chunks:
        if type(c) is _Constant:
            extend([c.value] * c.count)
        else:
            extend(c.tolist() if isinstance(c, np.ndarray) else c)
    return out
