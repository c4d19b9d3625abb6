"""One bounded memo rule for the engine's value caches.

Layer: engine.language (no imports: the language's KV functions and the deploy layer's GEMM points,
calls' floats and coordinate trees use it). A memo maps a key that fully determines a value to that value;
it is emptied whole when it passes its limit, so a long build's memory stays bounded and a hit is
always the value :func:`remembered`'s ``make`` would return again (the caches hold pure functions of
their keys).
"""
from __future__ import annotations

from typing import Callable, Hashable, TypeVar

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
