"""How many worker processes a build or a site render starts when the user does not say.

Layer: engine.batch (imports nothing of the engine; :mod:`engine.batch.tasks`,
:mod:`engine.batch.executor` and ``site_builder.render`` ask it). An explicit count (``--jobs N``,
``local-cluster:N``, ``ARCHLEDGER_RENDER_JOBS``) is the user's and is used as given.

Invariant: the default is at least 1 and at most the smallest of

* the CPUs this process may run on (its affinity, not the host's count: a container pinned to two
  cores of a 64-core host gets 2),
* the memory available to this process (the cgroup's limit when it sets one, else the host's
  available memory) divided by :data:`WORKER_BYTES` (a worker evaluating a large model peaks at
  about 1.1 GB),
* :data:`MAX_DEFAULT_WORKERS`: a build container reporting many CPUs and much memory must not
  start dozens of processes nobody asked for (docs/scaling.md measures the speed-up: it is small
  beyond a few workers; ``--jobs`` or a Dask cluster go further on purpose).
"""
from __future__ import annotations

import os
from pathlib import Path

#: Peak resident memory budgeted per worker process (a large model's evaluation is ~1.1 GB).
WORKER_BYTES = 1_200_000_000
#: The most worker processes a default starts, however large the machine.
MAX_DEFAULT_WORKERS = 4

#: cgroup v2 files: the memory limit ("max" when none) and the current usage.
CGROUP = Path("/sys/fs/cgroup")


def cpu_count() -> int:
    """The CPUs this process may run on (affinity where the platform has it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory this process can still use: the cgroup's headroom when it sets a limit,
    else the host's available memory; None when neither can be read."""
    found = []
    try:
        limit = (CGROUP / "memory.max").read_text().strip()
        if limit.isdigit():
            found.append(int(limit) - int((CGROUP / "memory.current").read_text().strip()))
    except (OSError, ValueError):
        pass
    try:
        found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        pass
    return min(found) if found else None


def default_workers() -> int:
    """The worker processes to start when no count is given (the module's invariant)."""
    memory = available_memory()
    by_memory = max(1, memory // WORKER_BYTES) if memory is not None else MAX_DEFAULT_WORKERS
    return max(1, min(cpu_count(), by_memory, MAX_DEFAULT_WORKERS))


#: Threads of polars' pool in a --jobs worker (a value the user set in the environment wins). A
#: worker's polars work is its partitions' sort and zstd writes, short and between long stretches
#: of single-threaded Python; with one worker per core, a pool per worker sized to every core only
#: makes the workers' threads contend (docs/scaling.md, eighth pass, grid side: -3 to -7% of a
#: grid-heavy build's CPU in two --jobs 1 pairs; within the noise in --jobs 2 pairs on a loaded host,
#: where only the system time fell, about 1 s).
WORKER_POLARS_THREADS = "1"


def start_worker(*args) -> None:
    """A --jobs worker's initializer (:func:`engine.batch.tasks.worker_init`'s arguments): sets
    polars' pool size, which polars reads when it is imported, so this module imports nothing that
    imports polars and the worker's engine is imported after."""
    os.environ.setdefault("POLARS_MAX_THREADS", WORKER_POLARS_THREADS)
    from engine.batch.tasks import worker_init
    worker_init(*args)
