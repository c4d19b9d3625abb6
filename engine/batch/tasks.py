"""Where a build's model tasks run: in the build's process, in --jobs worker processes, or on a Dask cluster.

Layer: engine.batch. :func:`_evaluate` runs :func:`engine.batch.model_build.build_model` for each
model to evaluate (a family's models one after the other in one process, :mod:`engine.batch.families`;
a lone slow model as its two halves, :func:`_split`, its grid half in the build's own process:
:data:`HOME_PART`); :func:`_check_all` runs
:func:`engine.batch.model_build.check_model` the same way; :func:`_pool` starts the workers.

Invariants: the same files whichever way a model runs; workers are spawned, never forked (a forked
child inherits polars' thread pool mid-state), start with the build's loaded corpus, and die with the
build process (:func:`worker_init`), so a killed build leaves no orphan evaluating on; a failure
cancels the queued tasks instead of finishing them first.
"""
from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from engine.batch import collector, lifeline, publish, workers
from engine.batch.hashing import corpus_digest, engine_digest
from engine.batch.model_build import _CORPORA, PARTS, build_model, check_model, merge_parts
from engine.batch.previous import Previous
from engine.language.corpus import Corpus

#: A model worth two tasks: starting a worker process (imports, the corpus) costs one to two seconds,
#: so a model that evaluates in a few seconds finishes sooner in the build's own process.
SPLIT_SECONDS = 4.0
#: The half of a split model (:data:`PARTS`) the build's own process evaluates while its workers
#: take the other tasks: this process has imported the evaluation and read the corpus already, so
#: the longer half (the grid) starts at once instead of after a worker's start (its imports, about
#: a second), and the pool has one worker fewer (:func:`_pool`'s ``home``).
HOME_PART = "grid"


def _split(todo: list[str], previous: "Previous", jobs: int | None, family=None) -> set[str]:
    """The models of ``todo`` evaluated as two tasks (:data:`PARTS`): none unless there are fewer
    models than workers; then those whose lone evaluation the previous build timed at
    :data:`SPLIT_SECONDS` or more (:func:`_alone_seconds`; ``family(model)``: the spec's family,
    None: every model a family of its own)."""
    if len(todo) >= (jobs or workers.default_workers()):
        return set()
    return {m for m in todo if _alone_seconds(m, previous, family) >= SPLIT_SECONDS}


def _alone_seconds(model: str, previous: "Previous", family=None) -> float:
    """The previous build's seconds for ``model`` evaluated alone, as far as its manifest tells:
    the longest seconds recorded for a model of its family (``family``), its own included. Why not
    its own alone: a whole build runs a family's models one after the other in one process
    (:mod:`engine.batch.families`), and a follower is timed with the memos its family's first model
    filled, so it records a fraction of what it costs alone (DeepSeek-V3 after DeepSeek-R1: 3.2 s
    against R1's 18 s), while a one-spec edit evaluates it alone. The family's longest is its
    chain's first model's (each model alone pays the family's shared work) or more; it errs, if at
    all, towards splitting a small member, which costs a worker's start on an otherwise idle core.
    Only *where* a model runs follows from this, never what its files hold."""
    seconds = {m: e.get("seconds", 0.0) for m, e in previous.models.items()}
    if family is None:
        return seconds.get(model, 0.0)
    kin = _family_of(family, model)
    if kin is None:         # no family: the model's own seconds
        return seconds.get(model, 0.0)
    return max([seconds.get(model, 0.0)] + [s for m, s in seconds.items() if m != model and _family_of(family, m) == kin])


def _family_of(family, model: str):
    """``family(model)``, None for a model it does not know (a previous build's model since removed
    from the corpus)."""
    try:
        return family(model)
    except KeyError:
        return None


_IN_WORKER: int | None = None          # the parent's pid inside a --jobs worker, else None


def _check_all(corpus: Corpus, todo: list[str], hashes: dict, pool) -> list[dict]:
    """:func:`check_model` for each model, in ``todo``'s order (in the pool's workers if given)."""
    if pool is None:
        return [check_model(str(corpus.root), mid, hashes[mid], corpus) for mid in todo]
    futures = [pool.submit(check_model, str(corpus.root), mid, hashes[mid]) for mid in todo]
    try:
        return [future.result() for future in futures]
    except BaseException:
        for future in futures:          # a spec that does not evaluate stops the build at once
            future.cancel()
        raise


def _pool(stack: contextlib.ExitStack, jobs: int | None, tasks: int, corpus: Corpus | None = None,
          home: bool = False):
    """The --jobs worker processes (None when one is enough), closed with ``stack``; ``home``: this
    process evaluates one of the ``tasks`` itself (a split model's :data:`HOME_PART`), so the pool
    has one worker fewer and is made even with one. Spawned, not
    forked: a forked child inherits polars' thread pool mid-state and can hang. Workers die with
    this process (see worker_init), so a killed build leaves no orphan evaluating on. Each worker
    starts with the build's loaded ``corpus`` (unpickling it is ~40x faster than parsing the YAML),
    filed under the content digest :func:`cached_corpus` looks it up by. The pickle goes through a
    file, not the start-up pipe: a worker reads that pipe only after importing the engine, so half
    a megabyte in it held this process for as long at every worker start."""
    if home:
        jobs = max(1, min((jobs or workers.default_workers()) - 1, tasks - 1))
    else:
        jobs = max(1, min(jobs or workers.default_workers(), tasks or 1))
        if jobs == 1:
            return None
    seed = None
    if corpus is not None:
        root = Path(corpus.root).resolve()
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="archledger-corpus-")))
        from engine.deploy import measured
        # with the measured kernel tables this process parsed (inputs.check_all): a worker would
        # parse them again, about a second of its start (each keeps its file's bytes: measured.adopt_tables)
        (folder / "corpus.pickle").write_bytes(pickle.dumps((corpus, measured.parsed_tables()),
                                                            protocol=pickle.HIGHEST_PROTOCOL))
        seed = ((str(root), corpus_digest(root)), str(folder / "corpus.pickle"))
    return stack.enter_context(ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=workers.start_worker, initargs=(os.getpid(), seed)))


def _evaluate(corpus: Corpus, todo: list[str], grid_path: Path, gpu_root: Path, staging: Path, hashes: dict,
              checks: dict, jobs: int | None, progress, total: int, done: int, where=None, pool=None,
              submitted=None, split: set[str] = frozenset(), previous_seconds: dict | None = None) -> list[dict]:
    """Run :func:`build_model` for each model: in this process, in the ``pool`` of --jobs worker
    processes, or on a Dask cluster (``where``, an :class:`engine.batch.executor.Executor`); the
    same files either way. ``submitted()``: called once the models' tasks are in the pool's queue;
    ``split``: the models run as two tasks in the pool (:func:`_split`); ``previous_seconds``: each
    model's seconds in the previous build (the chains' order, :mod:`engine.batch.families`)."""
    from engine.batch import executor as executors, families
    previous_seconds = previous_seconds or {}
    args = [(str(corpus.root), mid, str(grid_path), str(gpu_root), str(staging), hashes[mid], checks[mid])
            for mid in todo]
    results: list[dict] = []
    if progress:
        progress(done, total, 0, "")
    # each model of `split` runs as its two halves (PARTS) in the pool, the others as one task
    parts = {m: PARTS if pool is not None and m in split else ("all",) for m in todo}
    halves: dict[str, list[dict]] = defaultdict(list)

    def finished(result: dict) -> None:
        halves[result["model_id"]].append(result)
        if len(halves[result["model_id"]]) < len(parts[result["model_id"]]):
            return
        result = merge_parts(halves.pop(result["model_id"]))
        results.append(result)
        publish.fault("evaluate")
        if progress:
            progress(done + len(results), total, sum(r["points"] for r in results), result["model_id"])

    if where is not None and where.kind != "local":
        if todo:
            bundle = executors.make_bundle(corpus.root, gpu_root, grid_path, engine_digest())
            executors.run_dask(where, jobs, bundle, build_model, [(mid, (hashes[mid], checks[mid])) for mid in todo],
                               staging, engine_digest, finished)
        return results
    # a family's models one after the other in one process: what it keeps from the first answers
    # for the next (engine.batch.families); a model run as halves is two tasks of its own
    by_id = {a[1]: a for a in args}
    chained = families.chains([m for m in todo if parts[m] == ("all",)], lambda m: corpus.models[m].family,
                              lambda m: previous_seconds.get(m, 0.0))
    if pool is None:
        for chain in chained:
            for mid in chain:
                finished(build_model(*by_id[mid], corpus=corpus))
        return results
    # the slowest split model's HOME_PART runs here, after every other task is queued (_pool's ``home``)
    home = next((m for m in todo if parts[m] != ("all",)), None)
    futures = ([pool.submit(_build_model_in_worker, *by_id[m], part=part) for m in todo if parts[m] != ("all",)
                for part in parts[m] if (m, part) != (home, HOME_PART)]
               + [pool.submit(_build_chain_in_worker, [by_id[m] for m in chain]) for chain in chained])
    if submitted is not None:
        submitted()
    try:
        if home is not None:
            finished(build_model(*by_id[home], corpus=corpus, part=HOME_PART))
        for future in as_completed(futures):
            done_now = future.result()        # a chain's results, or one half's
            for result in done_now if isinstance(done_now, list) else [done_now]:
                finished(result)
    except BaseException:
        for future in futures:          # a failure stops the build: do not finish the others first
            future.cancel()
        raise
    return results


def worker_init(parent: int, seed: tuple | None = None) -> None:
    """In each --jobs worker: die when the build process dies, however it dies
    (:func:`engine.batch.lifeline.die_with`); collect rarely; skip the interpreter's teardown."""
    global _IN_WORKER
    _IN_WORKER = parent
    if seed is not None:             # (key, the pickled corpus's file: _pool)
        from engine.deploy import measured
        _CORPORA[seed[0]], parsed = pickle.loads(Path(seed[1]).read_bytes())
        measured.adopt_tables(parsed)
    gc.freeze()                      # the modules and the corpus live as long as the worker (each model's
                                     # evaluation freezes the heap again: collector.model_heap)
    collector.tune()                 # (already so when spawned by the archledger command: site_builder.cli)
    lifeline.die_with(parent)
    # When the pool stops a worker its heap is garbage: skip the interpreter's teardown, which
    # frees every cached sympy object one by one (about 9 s per build worker after the whole
    # corpus, while the site renders beside it). multiprocessing's exit finalizers (queue
    # flushes) run first: this one has the lowest priority, so it runs last.
    import multiprocessing.util
    multiprocessing.util.Finalize(None, _end_worker, exitpriority=-1000)


def _end_worker() -> None:
    """A pool worker's last step (see :func:`worker_init`): flush what it printed, then exit 0
    without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _build_chain_in_worker(chain: list[tuple]) -> list[dict]:
    """:func:`build_model` of each model of a family chain (:func:`engine.batch.families.chains`),
    in order, in this worker."""
    return [_build_model_in_worker(*args) for args in chain]


def _build_model_in_worker(*args, part: str = "all") -> dict:
    if os.environ.get(publish.FAULT_ENV) == "worker" and _IN_WORKER == os.getppid():
        os.kill(_IN_WORKER, signal.SIGKILL)     # test hook: the build dies while this worker evaluates on
        time.sleep(60)
    return build_model(*args, part=part)
