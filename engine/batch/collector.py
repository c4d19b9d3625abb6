"""The cyclic garbage collector's thresholds in archledger's processes, and sympy's cache size (issue 19).

Layer: engine.batch; the standard library only, so :mod:`site_builder.cli` can set them before it
imports anything else, in the command's process and in each worker the build spawns (a spawned
worker imports that module first).

A build makes containers by the hundred thousand (the imports, the corpus's YAML, sympy's trees, a
model's grid rows, the results' JSON) and keeps most of them to its end, so at Python's thresholds,
(700, 10, 10), full collections walk the growing heap again and again: a sixth of the V3 grid half's
CPU and a fifth of a worker's start. :data:`THRESHOLDS` collect the young generation every 50,000
allocations and the whole heap after about ten million at the latest, and none runs while a model is
evaluated (:func:`model_heap`). A model leaves up to a few ten thousand objects in cycles (measured:
Qwen3-8B to GLM-5.2), so memory does not grow by waiting; the collector changes when memory is
freed, never a result.
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
def paused():
    """No cyclic garbage collection inside the block; the collector is left enabled or disabled as
    it was found (a caller's own pause is not ended by this one). For work that makes containers by
    the million and keeps them, or frees them with no cycles among them: parsing the results' JSON
    (site_builder.json_cuts) and one model's evaluation (:func:`model_heap`)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


#: A full collection after every this many models a process evaluates (:func:`model_heap`): what
#: their cycles hold (about 8,000 objects a heavy model, 5 MB of RSS per eight of them) is freed at
#: least that often, so at most about 80 MB. A build's worker evaluates about 25 models and never
#: gets there; the test suite's workers evaluate hundreds of small ones, where a full collection
#: walks their whole heap (a second or more each): every 32 models cost the suite seconds.
FULL_EVERY = 128
_since_full = [0]        # models evaluated in this process since the last full collection


@contextlib.contextmanager
def model_heap():
    """While one model is evaluated (:func:`engine.batch.model_build.build_model`): what the process
    already holds is frozen (the corpus and the caches outlive the model: never traced again) and no
    collection runs. After it, what the model left (its caches' new entries, its few cycles) joins
    the oldest generation untraced, and the caller's thresholds and collector state are back.

    Why: the young collections that ran every 50,000 allocations found little (a model's cycles: 1,592
    objects for Qwen3-8B, 23,600 for DeepSeek-V4-Pro, about 8,000 a model over eight models) and
    traced every object the model keeps, 74 collections and 1.9 CPU-s over eight models (5% of
    their CPU). The cycles left untraced are freed by the full collection after every
    :data:`FULL_EVERY` models, so they stay under about 80 MB (measured: 65,888 objects, 5 MB of
    RSS, after eight heavy models). Only when memory is freed changes, never a result."""
    before = gc.get_threshold()
    gc.freeze()
    tune()
    try:
        with paused():
            try:
                yield
            finally:
                gc.freeze()     # before collections resume: the model's objects skip the young generation
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        _since_full[0] += 1
        if _since_full[0] >= FULL_EVERY:
            _since_full[0] = 0
            gc.collect()
