"""The build's --jobs workers started first, while the build process imports and reads the corpus.

Layer: engine.batch (the standard library and :mod:`engine.batch.workers` at the top: the command
starts the pool before it imports the build). A spawned worker's start (its imports, about a second
of CPU) used to begin only once the build process had imported the build, loaded the corpus and
planned (one to two seconds on two cores); a one-spec edit waited for both in turn. Now the workers
import while the build process does, and then wait for the corpus the build process hands them
(:meth:`Prestart.seed`: the pickled corpus and measured tables, ``engine.batch.tasks``' seed file,
written whole under its final name by a rename).

Invariants: a worker adopts only a seed file the build wrote whole, or none (the folder removed by
:meth:`Prestart.close` or :meth:`Prestart.release`: it then starts as an unseeded worker and reads
what it needs itself); it dies with the build process while it waits (its parent gone); the pool is
shut down only after its folder is removed, so no worker waits on a seed that will never come.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from engine.batch import workers

#: The seed file's name in the pool's folder (engine.batch.tasks writes it).
SEED = "corpus.pickle"


class Prestart:
    """``jobs`` spawned worker processes, started now (each one importing the evaluation), that
    take their corpus from :meth:`seed`."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.seeded = False
        self.folder = Path(tempfile.mkdtemp(prefix="archledger-corpus-"))
        self.executor = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_start, initargs=(os.getpid(), str(self.folder)))
        for _ in range(jobs):                # a spawned pool starts one process per submitted task
            self.executor.submit(os.getpid)

    @property
    def seed_file(self) -> Path:
        return self.folder / SEED

    def seed(self, data: bytes) -> None:
        """Hand the workers their seed (written whole, then renamed into place)."""
        part = self.folder / f"{SEED}.part"
        part.write_bytes(data)
        os.replace(part, self.seed_file)
        self.seeded = True

    def release(self, stop: bool = False) -> None:
        """No seed will come: waiting workers start unseeded (the pool is closing). ``stop``: the
        build runs in its own process, so the workers are stopped now rather than left to import
        beside it on the same cores."""
        shutil.rmtree(self.folder, ignore_errors=True)
        if stop:
            for process in list(getattr(self.executor, "_processes", {}).values()):
                process.terminate()

    def close(self) -> None:
        """Shut the pool down; workers that never got a seed (the build stopped before its pool,
        or ran in one process) are stopped rather than waited for while they import."""
        self.release(stop=not self.seeded)
        self.executor.shutdown(wait=True, cancel_futures=True)


def start(jobs: int | None) -> Prestart | None:
    """The pool a local build with ``jobs`` workers (None: the default count) uses, started now;
    None where the build runs in one process."""
    count = jobs or workers.default_workers()
    return Prestart(count) if count > 1 else None


def _start(parent: int, folder: str) -> None:
    """A prestarted worker's initializer: import the evaluation, wait for the seed (or for its
    folder to go), then start as every --jobs worker does (``engine.batch.tasks.worker_init``)."""
    from engine.batch import tasks
    seed = Path(folder) / SEED
    while not seed.exists() and Path(folder).exists():
        if os.getppid() != parent:           # the build process died while we waited
            os._exit(1)
        time.sleep(0.005)
    tasks.worker_init(parent, str(seed) if seed.exists() else None)
