"""A compiled program's columns: each step's totals at a point set, spread from one table of the
program's distinct constants and functions (a mixin of :class:`engine.deploy.cost.CompiledProgram`).

Layer: engine.deploy. Column 0 is the FLOPs, 1 the HBM bytes, 2 the link bytes, 3 the weight bytes,
4 the collective calls, of every step. Every layer repeats its ops, so a program holds far fewer
distinct functions than steps: their values fill one table (:mod:`engine.deploy.point_values`)
and one gather spreads it to the steps. Invariant: a gather is a pure copy, so a column holds the
very floats of evaluating each step's function at the points; the tables kept among a point
set's values are read-only, and every column returned is the caller's own array.
"""
from __future__ import annotations

from itertools import chain

import numpy as np

from engine.deploy.point_values import _LAYOUTS, _filled, _ids, _layout, _matrix, _trim_values, _values


class _Tables:
    """The columns of a :class:`~engine.deploy.cost.CompiledProgram` (``_columns``, ``_calls``,
    ``_layouts`` are the program's)."""

    def column(self, index: int, args, shape, values: dict | None = None, at=None) -> np.ndarray:
        """Column ``index`` (0 flops, 1 bytes, 2 comm bytes, 3 weight bytes; 4 collective calls) of
        every step, stacked: an array of shape (steps, *shape), or (steps, len(at)) when ``at``
        picks points of the 1-d ``args`` (a gather: the floats of evaluating there). See
        :meth:`columns`."""
        return self.columns((index,), args, shape, values, at)[0]

    def columns(self, indices: tuple, args, shape, values: dict | None = None, at=None) -> np.ndarray:
        """The columns ``indices`` (see :meth:`column`) of every step at once: a new array of
        shape (len(indices), steps, *shape) (``at``: (len(indices), steps, len(at))), each
        ``[i]`` a C-ordered block of its own.

        The distinct constants and functions of those columns fill one table (:meth:`_table`),
        spread to the steps by one gather (a pure copy, the same floats): every layer repeats its
        ops, so a program holds far fewer distinct functions than steps."""
        if at is not None:           # the picked points first: the table has fewer rows than the steps
            rows, table = self._picked_table(tuple(indices), args, tuple(shape), values, np.asarray(at, dtype=np.intp))
        else:
            rows, table = self._table(tuple(indices), args, tuple(shape), values)
        # take() keeps the (steps, points) blocks C-ordered: the sums over axis 0 add row after row
        return table.take(rows, axis=0)

    def _picked_table(self, indices: tuple, args, shape: tuple, values: dict | None, at: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_table` at the points ``at`` picks of the 1-d ``args``: each function's value over
        every point of ``args`` (:func:`_values`, as :meth:`_table` gets it) gathered at the picks
        into a table of this call's own, not kept: the very copies ``_table(...)[1].take(at,
        axis=1)`` holds, without a table over every point. :func:`engine.deploy.sol.phases_many`
        picks each program's points out of one point set of all the programs' points (far more
        points than any one program's: a table over them would cost more than its picks)."""
        rows, constants, functions, token = self._table_layout(indices)
        if values is None:
            values = _values(args)
        # one gather of every function's row at the picks (point_values._Matrix: the values of all
        # the point set's functions, each function's floats copied there once)
        matrix = _matrix(values, shape[0])
        # each (function, pick)'s place in the flat matrix (first: finding the rows may grow it)
        places = (matrix.rows(functions, token, values, args) * shape[0])[:, None] + at
        table = np.empty((len(constants) + len(functions), len(at)))
        table[:len(constants)] = constants.reshape(-1, 1)
        matrix.data.reshape(-1).take(places, out=table[len(constants):])
        _trim_values()
        return rows, table

    def _table(self, indices: tuple, args, shape: tuple, values: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(each step's row per column, the table of :meth:`_table_layout`'s rows at these points).

        Each step function's value at these points comes from :func:`_values` (computed once per
        function and point set, shared with every program holding the same expression; a caller
        asking several columns at one point set passes its ``values``). The table itself is kept
        among the point set's values too, under its layout's token and shape: sibling programs
        (other fusion regimes, structures of other domains) and the sizing search's repeated
        questions ask for the very same functions at the very same points about every other
        time, and the table is a function of those alone (read-only; :meth:`columns` gathers
        from it into new arrays)."""
        rows, constants, functions, token = self._table_layout(indices)
        if values is None:
            values = _values(args)
        key = (token, shape)
        table = values.get(key)
        if table is None:
            table = _filled(constants, functions, values, args, shape)
            table.flags.writeable = False
            values.hold(key, table)
            _trim_values()
        return rows, table

    def _table_layout(self, indices: tuple) -> tuple[np.ndarray, np.ndarray, list, int]:
        """The table of columns ``indices``: each step's row per column (shape (len(indices),
        steps)), the distinct constants (rows first, told apart by their exact float: -0.0 is not
        0.0), the distinct functions (the rows after them) and the layout's token
        (:data:`_LAYOUT_TOKENS`). Once per program and tuple of columns, and made once per
        distinct list of entries (:data:`_LAYOUTS`, read-only arrays shared by the programs)."""
        found = self._layouts.get(indices)
        if found is None:
            columns = [self._columns[i] if i < 4 else self._calls for i in indices]
            entries = tuple(chain.from_iterable(columns))
            key = (len(columns), _ids(entries))
            shared = _LAYOUTS.get(key)
            if shared is None:
                if len(_LAYOUTS) > 5_000:        # the programs of a model or two: keep it bounded
                    _LAYOUTS.clear()
                # the entries themselves are held with the layout: while it is stored, no other object
                # can take one of their ids
                shared = _LAYOUTS[key] = (entries, _layout(entries, len(columns)))
            found = self._layouts[indices] = shared[1]
        return found
