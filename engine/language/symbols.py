"""Every sympy symbol the engine creates is made here, with its assumptions.

Layer: engine.language. Dims are positive integers (sizes and counts); the scenario dims below are the
only ones a deployment (not the spec) binds. Creating symbols anywhere else would let two
``Symbol('hidden')`` with different assumptions coexist and silently never cancel.
"""
from __future__ import annotations

import keyword
import re
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import sympy

# sympy is imported where a symbol is made or compiled, not at the top: a command answered from a
# build's formula document (engine/cli/deploy_fast.py) imports this module and never makes a symbol

#: Requests processed together in one step.
BATCH = "batch"
#: New tokens per request in this step (the prompt in prefill, 1 in decode).
SEQ = "seq"
#: Tokens visible to attention at the end of the step (history + new).
CTX = "ctx"
#: A context length L at which a per-request quantity (KV bytes) is asked for.
LENGTH = "length"

SCENARIO_DIMS = (BATCH, SEQ, CTX)

# -- symbol names ----------------------------------------------------------------------------------
#
# sympy's lambdify writes each symbol's name into the Python source it compiles and runs: a symbol
# named ``__import__('os').system('x')`` would run that call whenever the compiled function is
# called. Names that can become symbols (the dims table's names, layer templates, the layer groups
# built from them) come from pull requests, so each is checked twice: at load, with a one-line
# SpecError (engine.language.corpus, engine.language.variants), and here, where every symbol is made and
# before every compile (:func:`checked_lambdify`), as an internal error a spec can never reach.

#: What a name that can become a symbol may be, as the hint of every error about one.
SYMBOL_RULE = ("ASCII letters, digits and '_', not starting with a digit, not a Python keyword, "
               "at most 96 characters (e.g. n_kv_heads)")
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL_LENGTH = 96


class UnsafeSymbolName(RuntimeError):
    """An internal error: a symbol whose name is not a plain Python identifier reached the engine
    (the loaders refuse every such name first, so this is a bug, never a spec's mistake)."""


def is_symbol_name(text: object, limit: int | None = _SYMBOL_LENGTH) -> bool:
    """A plain ASCII Python identifier that is not a keyword (and at most ``limit`` characters):
    the only text lambdify may copy into the source it compiles."""
    return (isinstance(text, str) and _SYMBOL.fullmatch(text) is not None and not keyword.iskeyword(text)
            and (limit is None or len(text) <= limit))


def _checked(name: str) -> str:
    # no length bound here: a layer group's symbol joins a stack's and a template's names
    if not is_symbol_name(name, limit=None):
        raise UnsafeSymbolName(f"internal error: {name!r} is not a plain Python identifier and cannot name a symbol")
    return name


@lru_cache(maxsize=None)
def dim(name: str) -> sympy.Symbol:
    """The one symbol for a dim name: integer and positive."""
    import sympy
    return sympy.Symbol(_checked(name), integer=True, positive=True)


@lru_cache(maxsize=None)
def index(name: str) -> sympy.Symbol:
    """A count that may be zero (a summation index, a number of draft tokens): integer, >= 0."""
    import sympy
    return sympy.Symbol(_checked(name), integer=True, nonnegative=True)


@lru_cache(maxsize=None)
def rate(name: str) -> sympy.Symbol:
    """A probability or share (a speculative draft's acceptance rate): real, >= 0."""
    import sympy
    return sympy.Symbol(_checked(name), nonnegative=True)


#: lambdify's ``modules`` for every compile of the engine: Min/Max as numpy's elementwise ones, then
#: numpy's namespace given as the module object (lambdify takes its ``__dict__`` and picks its NumPy
#: printer by the module's name, as for the text ``"numpy"``). The text would make lambdify run
#: ``from numpy import *; from numpy.linalg import *``, which imports numpy.f2py, numpy.testing and
#: the other lazy submodules (about 0.12 s of CPU, a tenth of a cold ``archledger deploy``). The
#: printed source is the same and its names (numpy's functions) are the same objects either way
#: (tests/test_cost_compile.py compares sources and values with ``modules="numpy"``).
NUMPY_MODULES = ({"Min": np.minimum, "Max": np.maximum}, np)


def checked_lambdify(args, expr, **options):
    """``sympy.lambdify(args, expr, **options)``, refused (:class:`UnsafeSymbolName`) before any
    source is written when a symbol of ``args`` or ``expr``, or an undefined function of ``expr``,
    has a name that is not a plain Python identifier (lambdify copies those names into the code it
    compiles). Every compile of the engine goes through here."""
    import sympy
    from sympy.core.function import AppliedUndef
    names = _arg_names(args) + [s.name for s in getattr(expr, "free_symbols", ())]
    if isinstance(expr, sympy.Basic):
        names += [f.func.__name__ for f in expr.atoms(AppliedUndef)]
    for name in names:
        _checked(name)
    return sympy.lambdify(args, expr, **options)


def _arg_names(args) -> list[str]:
    """The names lambdify writes for its arguments: a symbol's name, a text's comma-separated
    parts (a parameter list given as text), nested in lists and tuples."""
    import sympy
    if isinstance(args, sympy.Symbol):
        return [args.name]
    if isinstance(args, str):
        return [part.strip() for part in args.split(",")]
    if isinstance(args, (list, tuple)):
        return [name for arg in args for name in _arg_names(arg)]
    raise UnsafeSymbolName(f"internal error: lambdify argument {args!r} is not a symbol")


def free_dims(expr) -> set[str]:
    """Names of the dim symbols an expression depends on."""
    return {s.name for s in getattr(expr, "free_symbols", ())}
