"""KV cache accounting from the walk's cache declarations and their growth laws.

Layer: engine.language. A cache entry stores ``per_token`` elements per layer instance for each token it
keeps; how many tokens it keeps at context length L is its growth law:

* ``every_token``: L;   * ``window``: min(L, window);   * ``compressed``: floor(L / every);
* ``state``: 1 (a fixed recurrent state per request: ``per_token`` is then the state's elements).

An entry with its own ``dtype`` (a recurrent state kept in float32; the DSA indexer's keys in FP8
with an f32 scale per 128, ``scale:``) is stored in that dtype whatever the deployment's KV dtype;
the others take the KV dtype.

Nothing here is stored: every number is derived from the Analysis when asked.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import sympy   # annotations; imported where used (a stored deploy never loads sympy)
    from engine.language.evaluate import Analysis, CacheRow
from engine.language import symbols
from engine.language.memo import remembered

#: Bytes per cached element by KV dtype.
KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}


def element_bytes(kv_dtype: str) -> int:
    if kv_dtype not in KV_DTYPE_BYTES:
        raise ValueError(f"unknown KV dtype {kv_dtype!r}; use one of {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[kv_dtype]


def cache_element_bytes(cache: CacheRow, kv_dtype: str = "bf16") -> sympy.Expr | int:
    """Bytes per element of one cache entry: its own dtype (with its block scales: 33/32 for FP8
    with an f32 per 128), else the deployment's KV dtype."""
    return cache.own_bytes if cache.dtype else element_bytes(kv_dtype)


_WINDOWS: dict[tuple, sympy.Expr] = {}     # (length, window) -> sympy.Min(length, window)


def tokens_kept(cache: CacheRow, length: sympy.Expr) -> sympy.Expr:
    """Tokens (or entries) the cache holds at context ``length``, by its growth law."""
    if cache.growth == "state":
        import sympy
        return sympy.Integer(1)
    return kept_length(cache.growth, length, cache.window, cache.every)


def kept_length(growth: str, length, window=None, every=None) -> sympy.Expr:
    """Tokens (or entries) a growing cache holds at context ``length``: the one rule of the module
    doc's growth laws ``every_token``, ``window`` and ``compressed`` (a window still filling has no
    compressed entry yet: floor), read by the memory figures above and by the ``kv_cache`` op's
    output shape (engine.language.ops.attention), which the placed reads take. Any other growth is
    the whole history, ``length``: a state is one entry in :func:`tokens_kept`, but a ``kv_cache``
    node declared ``growth: state`` keeps its growing shape, which is how the axiom guard
    (engine/verify/guards/axiom.py) tells a history mislabelled as a state."""
    if growth == "window":
        # once per (length, window): Min compares its arguments symbolically (milliseconds), and
        # every config's memory figures and every request-size function of a model ask it
        return remembered(_WINDOWS, (length, window), lambda: _window_min(length, window), 4096)
    if growth == "compressed":
        import sympy
        return sympy.floor(length / every)
    return length


def _window_min(length: sympy.Expr, window) -> sympy.Expr:
    """``sympy.Min(length, window)``. For a positive integer symbol (the context length) and a whole
    window of at least 2, Min cannot decide which is smaller (the length may be 1 or past the
    window) and keeps both arguments, in its canonical order: the same object is built without its
    symbolic comparison (4-5 ms each; tests/test_estimate_speed.py holds the two equal, srepr and
    all). Anything else goes through Min."""
    import sympy
    w = sympy.Integer(window) if isinstance(window, int) else window
    if isinstance(length, sympy.Symbol) and length.is_integer and length.is_positive \
            and isinstance(w, sympy.Integer) and w >= 2:
        return sympy.Min(length, w, evaluate=False)
    return sympy.Min(length, window)


def caches(analysis: Analysis, stack: str = "main") -> list[CacheRow]:
    return [c for c in analysis.caches if c.stack == stack]


def per_context_token(cache: CacheRow) -> sympy.Expr:
    """Elements a cache adds per token of context while it grows (a compressed cache adds one
    entry every ``every`` tokens, so its share per token is per_token / every)."""
    if cache.growth == "compressed":
        return cache.per_token * cache.repeat / cache.every
    return cache.per_token * cache.repeat


def bytes_per_token(analysis: Analysis, kv_dtype: str = "bf16", stack: str = "main") -> dict[str, sympy.Expr]:
    """Per cache kind: bytes added per token of context while the cache grows (all layers)."""
    import sympy
    out: dict[str, sympy.Expr] = defaultdict(lambda: sympy.Integer(0))
    for cache in caches(analysis, stack):
        if cache.growth != "state":
            key = cache.kind if cache.growth == "every_token" else f"{cache.kind} ({cache.growth})"
            out[key] += per_context_token(cache) * cache_element_bytes(cache, kv_dtype)
    return dict(out)


def growing_bytes_per_token(analysis: Analysis, kv_dtype: str = "bf16", stack: str = "main") -> sympy.Expr:
    """Bytes per token of context of the caches that grow without bound (every token, compressed)."""
    import sympy
    return sum((per_context_token(c) * cache_element_bytes(c, kv_dtype)
                for c in caches(analysis, stack) if c.growth in ("every_token", "compressed")), sympy.Integer(0))


def fixed_bytes_per_request(analysis: Analysis, kv_dtype: str = "bf16", stack: str = "main") -> sympy.Expr:
    """Per request, window-capped caches at their full window and recurrent states."""
    import sympy
    total = sympy.Integer(0)
    for c in caches(analysis, stack):
        if c.growth == "window":
            total += c.window * c.per_token * c.repeat * cache_element_bytes(c, kv_dtype)
        elif c.growth == "state":
            total += c.per_token * c.repeat * cache_element_bytes(c, kv_dtype)
    return total


#: The two parts of a request's cache: ``state`` (``growth: state`` entries, flat in context) and
#: ``growing`` (every other entry: it grows with context; a window-capped one stops at its window).
PARTS = ("state", "growing")


def dtype_label(cache: CacheRow) -> str:
    """How an entry is stored, for pages: ``kv`` (the deployment's KV dtype), its own dtype, or that
    dtype with its block scale (``fp8 + f32 scale per 128``)."""
    if not cache.dtype:
        return "kv"
    return cache.dtype + (f" + {cache.scale[0]} scale per {cache.scale[1]}" if cache.scale else "")


def is_recurrent(cache: CacheRow, analysis: Analysis) -> bool:
    """Whether an entry is a recurrent mixer's state (Gated DeltaNet, Mamba2, a short conv): a
    ``growth: state`` entry on a recurrent op. A compressor's rolling window buffer (DeepSeek-V4)
    is state too, but its layer still attends a growing cache: it makes no linear-attention layer."""
    if cache.growth != "state":
        return False
    from engine.language.ops import OPS
    op = OPS[analysis.rows[cache.node_uid].op]
    return op.state is not None and not op.rolling_state


def part_of(cache: CacheRow) -> str:
    """Which part of a request's cache an entry belongs to (:data:`PARTS`)."""
    return "state" if cache.growth == "state" else "growing"


def entry_bytes_per_request(cache: CacheRow, length: sympy.Expr | int, kv_dtype: str = "bf16") -> sympy.Expr:
    """Bytes one cache entry holds for one request at context ``length``, all its layers."""
    import sympy
    length = sympy.Integer(length) if isinstance(length, int) else length
    return tokens_kept(cache, length) * cache.per_token * cache.repeat * cache_element_bytes(cache, kv_dtype)


def bytes_per_request(analysis: Analysis, length: sympy.Expr | int | None = None,
                      kv_dtype: str = "bf16", stack: str = "main", part: str | None = None) -> sympy.Expr:
    """KV bytes one request holds at context ``length`` (a symbol ``length`` when omitted); with
    ``part`` (:data:`PARTS`) only that part: the parts sum to the whole."""
    import sympy
    length = symbols.dim(symbols.LENGTH) if length is None else sympy.Integer(length) \
        if isinstance(length, int) else length
    return sum((entry_bytes_per_request(c, length, kv_dtype) for c in caches(analysis, stack)
                if part is None or part_of(c) == part), sympy.Integer(0))


_COMPILED: dict[tuple, tuple] = {}


def elements_per_request_fn(analysis: Analysis, stack: str = "main", part: str | None = None):
    """Cache elements in the KV dtype one request holds, as a numpy function of the context length
    (cached); times the KV element size plus :func:`own_dtype_bytes_per_request_fn` it is
    :func:`bytes_per_request` (``part``: only that part, :data:`PARTS`)."""
    return _compiled(analysis, stack, "kv", part)


def own_dtype_bytes_per_request_fn(analysis: Analysis, stack: str = "main", part: str | None = None):
    """Bytes one request holds in the entries with their own dtype (recurrent states), as a numpy
    function of the context length (cached)."""
    return _compiled(analysis, stack, "own", part)


def request_bytes_fn(analysis: Analysis, stack: str = "main", part: str | None = None):
    """``f(length, kv_bytes)``: every cache byte one request holds at ``length`` when a KV element
    takes ``kv_bytes`` (entries with their own dtype keep it); with ``part`` (:data:`PARTS`) only
    the state or only the growing part (the two sum to the whole)."""
    return request_bytes_of(elements_per_request_fn(analysis, stack, part),
                            own_dtype_bytes_per_request_fn(analysis, stack, part))


def request_bytes_of(kv_elements, own):
    """``f(length, kv_bytes)`` = elements x kv_bytes + own bytes (:func:`request_bytes_fn`'s one
    composition; engine.deploy.stored makes the two from the build's trees)."""
    return lambda length, kv_bytes: kv_elements(length) * kv_bytes + own(length)


def of_length(raw):
    """A function of the context length shaped like its argument even when ``raw`` is constant
    (what :func:`elements_per_request_fn` hands out; ``raw`` a lambdified term or a stored tree's)."""
    return lambda x: raw(x) + np.zeros_like(np.asarray(x, dtype=float))


def request_terms(analysis: Analysis, stack: str = "main", part: str | None = None) -> tuple[sympy.Expr, sympy.Expr]:
    """(cache elements in the KV dtype, bytes of the entries with their own dtype) one request holds,
    as expressions of the symbol ``length``: the request's bytes are ``elements x kv_bytes + own``
    (the one expression :func:`request_bytes_fn` evaluates and the deploy page's formula trees carry)."""
    import sympy
    length = symbols.dim(symbols.LENGTH)
    mine = [c for c in caches(analysis, stack) if part is None or part_of(c) == part]
    elements = sum((tokens_kept(c, length) * c.per_token * c.repeat for c in mine if not c.dtype), sympy.Integer(0))
    own = sum((tokens_kept(c, length) * c.per_token * c.repeat * c.own_bytes for c in mine if c.dtype),
              sympy.Integer(0))
    return elements, own


_BY_EXPRESSION: dict = {}     # expression -> its function (of_length of its lambdify)


def _compiled(analysis: Analysis, stack: str, dtype: str, part: str | None = None):
    key = (id(analysis), stack, dtype, part)
    if key not in _COMPILED:   # the analysis is kept alive beside its function so ids stay unique
        length = symbols.dim(symbols.LENGTH)
        total = request_terms(analysis, stack, part)[0 if dtype == "kv" else 1]
        # once per expression: most models' own-dtype bytes and one of their two parts are 0, and
        # a family's twins repeat the rest (lambdify is about a millisecond per call)
        fn = remembered(_BY_EXPRESSION, total, lambda: of_length(
            symbols.checked_lambdify(length, total, modules=list(symbols.NUMPY_MODULES))), 4096)
        _COMPILED[key] = (analysis, fn)
    return _COMPILED[key][1]
