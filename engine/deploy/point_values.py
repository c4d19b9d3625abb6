"""The values of step functions at point sets, and the table layouts that spread them to the steps.

Layer: engine.deploy. A point set (the arrays a program is evaluated at) keeps each step function's
value there (:func:`_values`, :func:`_value`), shared by every program holding the function; a
table layout (:func:`_layout`) names each step's row among a program's distinct constants and
functions, and :func:`_filled` fills those rows at a point set. Invariants: a stored value is the
float a new call would give (values are functions of their inputs alone) and read-only; at most
:data:`VALUES_ELEMENTS` numbers are held (least recently used point sets go first, the newest
stays); a layout's token names one (functions, constants) list for the whole process.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np


#: Recent point sets -> {step function: its value there}. One function serves every program that
#: holds its expression (:func:`_compiled`), and a build evaluates sibling programs (the other
#: fusion regimes and frameworks of a config, the prefill working set's columns, the per-op
#: tables) at the very same points again and again: about three function calls in four were
#: repeats. A value is a function of its inputs alone, so a stored one is the same float a new call
#: would give. Bounded: past :data:`VALUES_ELEMENTS` stored numbers the least recently used point
#: sets go first.
_VALUES: OrderedDict[tuple, "_PointSet"] = OrderedDict()
_VALUES_SIZE = [0]              # numbers held in _VALUES (a list: updated in place)
VALUES_ELEMENTS = 1 << 22       # 32 MB of float64


class _PointSet(dict):
    """One point set's stored values (function -> value, and :meth:`CompiledProgram._table`'s
    tables), with the count of numbers they hold: dropping the set subtracts it at once instead
    of sizing every value again."""

    __slots__ = ("size",)

    def __init__(self):
        super().__init__()
        self.size = 0

    def hold(self, key, value):
        """Store ``value`` (:func:`_stored`'s array or a float) under ``key``, counted."""
        self[key] = value
        n = np.size(value)
        self.size += n
        _VALUES_SIZE[0] += n
        return value


def _values(args) -> _PointSet:
    """The stored values at the point set ``args`` (arrays: keyed by dtype, shape and bytes),
    marked most recently used; an empty set to fill when it is new."""
    key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in args)
    found = _VALUES.get(key)
    if found is None:
        found = _VALUES[key] = _PointSet()
    else:
        _VALUES.move_to_end(key)
    return found


def _stored(value, args):
    """``value`` as :data:`_VALUES` keeps it: an array of its own that nobody may write to (a
    function such as ``batch`` returns its input, which the caller owns)."""
    if isinstance(value, np.ndarray):
        if value.base is not None or any(value is a for a in args):
            value = value.copy()
        value.flags.writeable = False
    return value


def _trim_values() -> None:
    """Drop the least recently used point sets while more than VALUES_ELEMENTS numbers are held
    (the newest set stays, whatever its size)."""
    while _VALUES_SIZE[0] > VALUES_ELEMENTS and len(_VALUES) > 1:
        _, dropped = _VALUES.popitem(last=False)
        _VALUES_SIZE[0] -= dropped.size


#: (the functions, the constants' exact floats) of a table layout -> a small number naming it: the
#: key of that table among a point set's stored values (programs of sibling structures hold the
#: same functions, often in the same order). Functions live in _FUNCTIONS for the whole process,
#: so an id never names two layouts.
_LAYOUT_TOKENS: dict[tuple, int] = {}
#: (number of columns, ids of a layout's entries as bytes: its columns' functions and constants, column
#: after column) -> (the entries, :func:`_layout` of them): programs of sibling structures (other regimes, frameworks,
#: domains) hold other step objects but mostly the very same functions and constants (a
#: DeepSeek-V3 build asks 1,582 layouts of 889 distinct entry lists).
_LAYOUTS: dict[tuple, tuple] = {}


def _layout(entries: tuple, n_columns: int) -> tuple[np.ndarray, np.ndarray, list, int]:
    """:meth:`CompiledProgram._table_layout` of ``n_columns`` columns of equal length whose
    entries, column after column, are ``entries``: rows (shape (n_columns, steps)), distinct
    constants in first-seen order (told apart by their exact float text: -0.0 is not 0.0), distinct
    functions in first-seen order (their rows after the constants') and the token. (A plain loop:
    measured faster than sorting the entries out with C-level maps and numpy at a few hundred.)"""
    constants: dict[str, int] = {}        # exact float text -> row
    functions: dict = {}                   # function -> position among the functions
    marks = []                             # per entry: a constant's row, or ~(its function's position)
    for f in entries:
        if callable(f):
            j = functions.get(f)
            if j is None:
                j = functions[f] = len(functions)
            marks.append(~j)
        else:
            text = float(f).hex()
            j = constants.get(text)
            if j is None:
                j = constants[text] = len(constants)
            marks.append(j)
    marks = np.array(marks, dtype=np.intp).reshape(n_columns, -1)
    rows = np.where(marks < 0, len(constants) + ~marks, marks)
    rows.flags.writeable = False           # shared by every program with these entries
    fns = list(functions)
    table = np.array([float.fromhex(k) for k in constants], dtype=float)
    table.flags.writeable = False
    token = _LAYOUT_TOKENS.setdefault((tuple(fns), tuple(constants)), len(_LAYOUT_TOKENS))
    return rows, table, fns, token


def _value(values, f, args):
    """Step function ``f``'s value at the points ``args``: from the point set's ``values``
    (:func:`_values`), else computed and held there (once per function and point set)."""
    value = values.get(f)
    if value is None:
        value = values.hold(f, _stored(f(*args), args))
    return value


class _Matrix:
    """Every step function's value over one 1-d point set of ``width`` points as a row of one
    array (:meth:`CompiledProgram._picked_table` gathers a program's functions at its picks out of
    it at once: one gather per program instead of one pick per function). Append-only: a
    function's row never moves, so a layout's rows (:meth:`rows`, by its token) stay valid. No
    value is held twice: a function's own array in the point set is replaced by a read-only view
    of its row (the same floats), re-pointed when the array grows; the point set counts the
    array's every row, used or not (:data:`VALUES_ELEMENTS` bounds what is held)."""

    __slots__ = ("data", "used", "row", "viewed", "layouts")

    def __init__(self, width: int):
        self.data = np.empty((0, width))
        self.used = 0
        self.row: dict = {}               # function -> its row
        self.viewed: list = []            # the functions whose point-set value is a view of their row
        self.layouts: dict[int, np.ndarray] = {}      # a layout's token -> its functions' rows

    def rows(self, functions: list, token: int, values: "_PointSet", args) -> np.ndarray:
        """The rows of ``functions`` (a layout's, named by ``token``), each function's value
        (:func:`_value`) written into its row the first time (broadcast where it is a number:
        the very floats of picking the broadcast value)."""
        found = self.layouts.get(token)
        if found is None:
            for f in functions:
                if f not in self.row:
                    self._add(f, _value(values, f, args), values)
            found = np.fromiter((self.row[f] for f in functions), dtype=np.intp, count=len(functions))
            found.flags.writeable = False
            self.layouts[token] = found
        return found

    def _add(self, f, value, values: "_PointSet") -> None:
        if self.used == len(self.data):
            self._grow(values)
        r = self.row[f] = self.used
        self.used += 1
        self.data[r] = value
        width = self.data.shape[1]
        # the point set counts the matrix's whole capacity (_grow): a row that replaces its
        # function's own array takes that array's count back
        if type(value) is np.ndarray and value.shape == (width,) and values.get(f) is value:
            view = self.data[r]
            view.flags.writeable = False
            values[f] = view
            self.viewed.append(f)
            values.size -= width
            _VALUES_SIZE[0] -= width

    def _grow(self, values: "_PointSet") -> None:
        rows, width = self.data.shape
        data = np.empty((max(64, rows + rows // 2), width))      # (by half: less room unused)
        values.size += (len(data) - rows) * width
        _VALUES_SIZE[0] += (len(data) - rows) * width
        data[:self.used] = self.data[:self.used]
        self.data = data
        for f in self.viewed:             # the point set's views onto the new array: the old one goes
            view = data[self.row[f]]
            view.flags.writeable = False
            values[f] = view


def _matrix(values: "_PointSet", width: int) -> _Matrix:
    """The point set's :class:`_Matrix` (made on first use)."""
    key = (_Matrix, width)
    found = values.get(key)
    if found is None:
        found = values[key] = _Matrix(width)
    return found


def _filled(constants: np.ndarray, functions: list, values, args, shape: tuple) -> np.ndarray:
    """A layout's table at the points ``args``: the constants' rows (weight reads, fixed
    collectives, zeros) in one assignment, then each function's row (:func:`_value`)."""
    table = np.empty((len(constants) + len(functions),) + shape)
    table[:len(constants)] = constants.reshape((-1,) + (1,) * len(shape))
    for j, f in enumerate(functions, len(constants)):
        table[j] = _value(values, f, args)
    return table


def _ids(entries) -> bytes:
    """The ids of ``entries``, in order, as bytes (a key naming those objects while they live)."""
    entries = tuple(entries)
    return np.fromiter(map(id, entries), dtype=np.uintp, count=len(entries)).tobytes()
