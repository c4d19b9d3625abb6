"""A sympy printer mixin that prints each distinct sub-expression once per printer.

Layer: engine.language (sympy only), shared by the formula texts of engine.deploy.sol, the step
functions engine.deploy.cost compiles and the model document of engine.batch.export.

Formulas share most of their terms (the same ``batch*seq*...`` products under every config,
fusion, phase and component), so a printer that remembers what it printed writes only what is new
in a formula. Invariant: the text is the one the base printer writes. Only sub-expressions below
the top are remembered, where a node's text is a function of the node alone: a Float (the one
node that looks at the depth, ``full_prec="auto"``) strips its zeros at every depth below the top;
keys carry the type, and in sympy equal expressions are the same tree (a Float never equals an
Integer). A call with keyword arguments (a variant of a node's text, e.g. Pow's ``rational=``)
is never remembered.
"""
from __future__ import annotations

from sympy.printing.str import StrPrinter

#: Texts one printer keeps at most (the sub-expressions of many models) before it starts afresh.
MEMO_LIMIT = 500_000


class MemoPrinting:
    """Put first in a sympy printer's bases: its ``_print`` remembers texts below the top level."""

    def __init__(self, settings=None):
        super().__init__(settings)
        self._memo: dict = {}

    def _print(self, expr, **kwargs) -> str:
        if kwargs or self._print_level < 1:
            return super()._print(expr, **kwargs)
        try:
            key = (type(expr), expr)
            text = self._memo.get(key)
        except TypeError:                       # unhashable: print it each time
            return super()._print(expr)
        if text is None:
            if len(self._memo) > MEMO_LIMIT:
                self._memo.clear()
            text = self._memo[key] = super()._print(expr)
        return text


class MemoStrPrinter(MemoPrinting, StrPrinter):
    """sympy's StrPrinter (``str(expr)`` with the same settings), remembering sub-expressions."""
