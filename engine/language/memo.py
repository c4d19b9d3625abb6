"""One bounded memo rule for the engine's value caches.

Layer: engine.language (no imports: the language's KV functions and the deploy layer's GEMM points,
calls' floats and coordinate trees use it). A memo maps a key that fully determines a value to that value;
it is emptied whole when it passes its limit, so a long build's memory stays bounded and a hit is
always the value :func:`remembered`'s ``make`` would return again (the caches hold pure functions of
their keys).
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")


def remembered(memo: dict, key: Hashable, make: Callable[[], T], limit: int) -> T:
    """``memo[key]``, made with ``make()`` on a miss; ``memo`` emptied first once it holds more than
    ``limit`` entries."""
    found = memo.get(key, memo)
    if found is memo:
        if len(memo) > limit:
            memo.clear()
        found = memo[key] = make()
    return found


def remembered_for(memo: dict, obj: Any, make: Callable[[], T], limit: int, key: Hashable | None = None) -> T:
    """``make()`` for the object ``obj``, kept under ``key`` (default ``id(obj)``) beside ``obj``
    itself: a hit needs the very object (``is``), never an equal one, so nothing is compared by value
    (the point: sympy expressions and steps compare term by term), and holding ``obj`` keeps its id
    from being reused while the entry lives. ``key`` names ``obj`` and whatever else ``make`` reads
    (e.g. ``(id(obj), tp, ep)``). Bounded as :func:`remembered`: emptied whole past ``limit``."""
    key = id(obj) if key is None else key
    found = memo.get(key)
    if found is not None and found[0] is obj:
        return found[1]
    value = make()
    if len(memo) > limit:
        memo.clear()
    memo[key] = (obj, value)
    return value
