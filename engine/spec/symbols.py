"""Every sympy symbol the engine creates is made here, with its assumptions.

Layer: engine.spec. Dims are positive integers (sizes and counts); the scenario dims below are the
only ones a deployment (not the spec) binds. Creating symbols anywhere else would let two
``Symbol('hidden')`` with different assumptions coexist and silently never cancel.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

#: Requests processed together in one step.
BATCH = "batch"
#: New tokens per request in this step (the prompt in prefill, 1 in decode).
SEQ = "seq"
#: Tokens visible to attention at the end of the step (history + new).
CTX = "ctx"
#: A context length L at which a per-request quantity (KV bytes) is asked for.
LENGTH = "length"

SCENARIO_DIMS = (BATCH, SEQ, CTX)


@lru_cache(maxsize=None)
def dim(name: str) -> sympy.Symbol:
    """The one symbol for a dim name: integer and positive."""
    return sympy.Symbol(name, integer=True, positive=True)


@lru_cache(maxsize=None)
def index(name: str) -> sympy.Symbol:
    """A count that may be zero (a summation index, a number of draft tokens): integer, >= 0."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


@lru_cache(maxsize=None)
def rate(name: str) -> sympy.Symbol:
    """A probability or share (a speculative draft's acceptance rate): real, >= 0."""
    return sympy.Symbol(name, nonnegative=True)


def free_dims(expr) -> set[str]:
    """Names of the dim symbols an expression depends on."""
    return {s.name for s in getattr(expr, "free_symbols", ())}
