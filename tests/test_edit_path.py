"""The one-spec edit's critical path (issue 19): what it relies on besides fewer page groups.

The site parses the results' JSON with the cyclic collector paused (site_builder.data.read_json),
and a --jobs worker runs with the corpus frozen out of the collector's sight and rarer collections
(engine/batch/collector.py). Neither may change a result: the first must give what
``json.loads`` gives and leave the collector as it found it; the second must be what a worker runs
with.
"""
from __future__ import annotations

import gc
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from engine.batch import collector, tasks
from site_builder.data import gc_paused, read_json


def test_read_json_is_json_loads_and_restores_the_collector(tmp_path):
    path = tmp_path / "doc.json"
    value = {"a": [1, 2.5, None, {"b": "\u2028"}], "c": True}
    path.write_text(json.dumps(value))
    assert gc.isenabled()
    assert read_json(path) == value
    assert gc.isenabled()
    gc.disable()
    try:
        assert read_json(path) == value
        assert not gc.isenabled()           # a caller's own pause is not ended by ours
    finally:
        gc.enable()
    path.write_text("{not json")
    with pytest.raises(ValueError):
        read_json(path)
    assert gc.isenabled()                   # not even when the parse fails


def test_gc_paused_pauses_inside_only():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def _collector_state() -> tuple:
    return gc.get_threshold(), gc.get_freeze_count() > 0


def test_a_build_worker_runs_with_the_thresholds_and_a_frozen_start():
    import os
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=tasks.worker_init,
                             initargs=(os.getpid(),)) as pool:
        thresholds, frozen = pool.submit(_collector_state).result(timeout=120)
    assert thresholds == collector.THRESHOLDS and frozen


def test_the_archledger_command_collects_at_the_thresholds():
    """Set when site_builder.cli is imported (before its other imports), so a spawned worker, which
    imports it first, starts with them too."""
    import subprocess
    import sys
    import os
    env = {k: v for k, v in os.environ.items() if k != "SYMPY_CACHE_SIZE"}
    out = subprocess.run([sys.executable, "-c", "import gc, site_builder.cli, sympy.core.cache as c; "
                          "print(gc.get_threshold(), c.SYMPY_CACHE_SIZE)"], env=env,
                         capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent).stdout
    # and sympy, imported after it, caches SYMPY_CACHE_SIZE entries per function (its default is 1,000)
    assert out.strip() == f"{collector.THRESHOLDS} {collector.SYMPY_CACHE_SIZE}"


def test_a_model_is_evaluated_with_collections_paused_and_the_caller_state_restored():
    """engine.batch.collector.model_heap: no collection inside (the heap before it frozen), and after
    it the caller's thresholds, enabled state and an unfrozen heap, whatever they were."""
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        with collector.model_heap():
            assert not gc.isenabled() and gc.get_freeze_count() > 0
            assert gc.get_threshold() == collector.THRESHOLDS
        assert gc.isenabled() and gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
        gc.disable()
        with pytest.raises(RuntimeError):
            with collector.model_heap():
                raise RuntimeError("a model that fails")
        assert not gc.isenabled()            # a caller's own pause is not ended by the model's
    finally:
        gc.enable()
        gc.set_threshold(*old)


def test_what_a_model_leaves_in_cycles_is_freed_by_the_bounded_full_collection():
    """The model's cycles skip the young collections (model_heap) but not the full collection after
    every FULL_EVERY models: an object in a cycle made inside the first heap is gone after the
    FULL_EVERY-th. In a fresh process (collector imports only the standard library): a full
    collection walks the whole heap, seconds in a test worker holding its fixtures."""
    import subprocess
    import sys
    code = (
        "import weakref\n"
        "from engine.batch import collector\n"
        "class Node: pass\n"
        "with collector.model_heap():\n"
        "    node = Node(); node.self = node; ref = weakref.ref(node); del node\n"
        "alive = ref() is not None\n"
        "for _ in range(collector.FULL_EVERY - 1):\n"
        "    with collector.model_heap(): pass\n"
        "print(alive, ref() is None, collector._since_full[0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.split()
    # alive after its own model (no collection inside, its objects untraced after), freed by the bound
    assert out == ["True", "True", "0"]
