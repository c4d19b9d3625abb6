"""The cyclic garbage collector's thresholds in archledger's processes, and sympy's cache size (issue 19).

Layer: engine.batch; the standard library only, so :mod:`site_builder.cli` can set them before it
imports anything else, in the command's process and in each worker the build spawns (a spawned
worker imports that module first).

A build makes containers by the hundred thousand (the imports, the corpus's YAML, sympy's trees, a
model's grid rows, the results' JSON) and keeps most of them to its end, so at Python's thresholds,
(700, 10, 10), full collections walk the growing heap again and again: a sixth of the V3 grid half's
CPU and a fifth of a worker's start. :data:`THRESHOLDS` collect the young generation every 50,000
allocations and the whole heap after about ten million at the latest. A model leaves a few thousand
objects in cycles (measured: Qwen3-8B to gpt-oss-20b), so memory does not grow by waiting; the
collector changes when memory is freed, never a result.
"""
from __future__ import annotations

import contextlib
import gc
import os

THRESHOLDS = (50_000, 20, 10)

#: Entries of each of sympy's per-function caches (sympy's default: 1,000). A model's placement and
#: compiling build the same products and sums under every config; with the larger cache a
#: four-model build (DeepSeek-V3, Qwen3-235B-A22B, DeepSeek-V4-Pro, gpt-oss-120b) took 5% less CPU
#: at the same peak memory (1.3 GB). Read by sympy once, when it is first imported.
SYMPY_CACHE_SIZE = "20000"


def tune() -> None:
    """This process collects at :data:`THRESHOLDS`; sympy, if not imported yet, caches
    :data:`SYMPY_CACHE_SIZE` entries per function (a value the caller set in the environment wins)."""
    gc.set_threshold(*THRESHOLDS)
    os.environ.setdefault("SYMPY_CACHE_SIZE", SYMPY_CACHE_SIZE)


@contextlib.contextmanager
def model_heap():
    """While one model is evaluated (:func:`engine.batch.model_build.build_model`): what the process
    already holds is frozen (the corpus and the caches outlive the model: never traced again) and
    collections run at :data:`THRESHOLDS`, whatever the caller set (a library caller, a test); both
    are undone after. Only when collections run changes, not what is collected."""
    before = gc.get_threshold()
    gc.freeze()
    tune()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
