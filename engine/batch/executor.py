"""Where the build's units of work run: this process, a local process pool, or a Dask cluster.

Layer: engine.batch (``engine.batch.tasks`` calls it; it imports nothing of the build, the
function it runs is passed in). ``archledger build --jobs N`` runs models in N local processes
(:mod:`engine.batch.tasks`); ``--executor`` names a Dask distributed cluster instead:

* ``dask://HOST:PORT`` or ``tcp://HOST:PORT`` (also ``tls://``, ``ws://``, ``wss://``): the
  scheduler of a running cluster (``dask scheduler`` + ``dask worker tcp://HOST:PORT`` on each
  machine, every one with this engine installed: ``pip install -e '.[scale]'``);
* ``local-cluster[:N]``: a Dask LocalCluster of N worker processes (one thread each; default
  ``--jobs``, else :func:`engine.batch.workers.default_workers`) on this machine, started and
  closed by the build;
* ``local`` (the default): today's in-process run or process pool.

The unit of work is the same in every executor: one model over the grid
(:func:`engine.batch.model_build.build_model`). A Dask task receives the build's inputs as bytes (the
corpus folder, the GPU folder and the grid file: a bundle of about 2 MB, sent to each worker once),
unpacks them into a temporary folder keyed by their digest (removed from every worker when the
build ends), evaluates the model into a private
staging folder and returns the files it wrote as bytes; the client writes them into the build's
staging folder. So workers need no shared file system, and the files are those the local
executor writes, byte for byte (``tests/test_executor.py``). A worker whose engine sources or
library versions (:mod:`engine.batch.dependencies`) differ from the client's refuses the task (one
line naming both digests): results never mix engines.

Dask distributed is an optional extra (``pip install -e '.[scale]'``); it is imported only when
``--executor`` names a cluster, and its absence is a one-line error saying how to install it.
docs/scaling.md gives the choice of Dask over Ray, the design for thousands of models and the
measured speed-up.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.batch import dependencies
from engine.language.errors import SpecError, Where

#: Address schemes of a running Dask scheduler (``dask://`` is ours: it means ``tcp://``).
SCHEMES = ("dask://", "tcp://", "tls://", "ws://", "wss://", "inproc://")
INSTALL = "pip install -e '.[scale]'  (or: pip install 'dask[distributed]>=2024')"


@dataclass(frozen=True)
class Executor:
    """A parsed ``--executor``: ``kind`` is local, local-cluster or cluster."""

    kind: str
    address: str = ""                 # cluster: the scheduler's address
    workers: int | None = None        # local-cluster: worker processes (None: --jobs, else the default count)

    def label(self) -> str:
        if self.kind == "cluster":
            return f"Dask cluster {self.address}"
        if self.kind == "local-cluster":
            return f"Dask LocalCluster ({self.workers or 'default'} workers)"
        return "local"


def _where() -> Where:
    return Where("<command line>", field="--executor")


def parse(text: str | None) -> Executor:
    """``--executor`` text -> :class:`Executor`; anything else is a one-line :class:`SpecError`."""
    if text is None or text == "local":
        return Executor("local")
    if text == "local-cluster" or text.startswith("local-cluster:"):
        count = text.partition(":")[2]
        if count and not (count.isdigit() and 1 <= int(count) <= 1024):
            raise SpecError(_where(), f"{count!r} is not a worker count",
                            "write local-cluster:N with N from 1 to 1024, or local-cluster for the default count")
        return Executor("local-cluster", workers=int(count) if count else None)
    for scheme in SCHEMES:
        if text.startswith(scheme) and len(text) > len(scheme):
            address = "tcp://" + text[len("dask://"):] if scheme == "dask://" else text
            return Executor("cluster", address=address)
    raise SpecError(_where(), f"unknown executor {text!r}",
                    "write local, local-cluster[:N], or a Dask scheduler address: dask://HOST:PORT or tcp://HOST:PORT")


def distributed_module():
    """``dask.distributed``, or a one-line error saying how to install it."""
    try:
        import distributed
    except ImportError:
        raise SpecError(_where(), "Dask distributed is not installed (an optional extra)",
                        f"install it: {INSTALL}") from None
    return distributed


# -- the inputs a remote task needs, as bytes ------------------------------------------------------

def _folder_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def make_bundle(corpus_root: Path, gpu_root: Path, grid_path: Path, engine_digest: str) -> dict:
    """The build's inputs as one picklable value: each folder under its own name (so every
    ``file:line`` a worker reports, and every path a result records, reads as on the client)."""
    corpus_root, gpu_root, grid_path = Path(corpus_root), Path(gpu_root), Path(grid_path)
    parts = {"corpus": (corpus_root.name, _folder_files(corpus_root)),
             "gpus": (gpu_root.name, _folder_files(gpu_root)),
             "grid": (grid_path.name, {grid_path.name: grid_path.read_bytes()})}
    digest = hashlib.sha256(engine_digest.encode())
    for part, (name, files) in sorted(parts.items()):
        digest.update(f"{part}/{name}".encode())
        for rel, data in files.items():
            digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return {"digest": digest.hexdigest(), "engine": engine_digest, "parts": parts}


#: This worker process's unpacked bundles, by digest (removed by :func:`forget` when the build ends).
_UNPACKED: dict[str, dict[str, Path]] = {}
#: How many tasks this worker process ran (read by the executor test through ``client.run``).
TASKS_RUN = 0


def _bundle_folder(digest: str) -> Path:
    return Path(tempfile.gettempdir()) / f"archledger-bundle-{digest[:16]}-{os.getpid()}"


def unpack(bundle: dict) -> dict[str, Path]:
    """The bundle's folders on this machine (once per process and bundle): corpus, gpus, grid."""
    digest = bundle["digest"]
    if digest not in _UNPACKED:
        base = _bundle_folder(digest)
        shutil.rmtree(base, ignore_errors=True)
        paths = {}
        for part, (name, files) in bundle["parts"].items():
            folder = base / part / name if part != "grid" else base / part
            for rel, data in files.items():
                target = folder / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            paths[part] = folder / name if part == "grid" else folder
        _UNPACKED[digest] = paths
    return _UNPACKED[digest]


def forget(digest: str) -> None:
    """Remove this worker's unpacked copy of the bundle ``digest`` (run on every worker when the
    build ends, so a long-lived cluster's temporary folder does not collect one corpus per build)."""
    _UNPACKED.pop(digest, None)
    shutil.rmtree(_bundle_folder(digest), ignore_errors=True)


def remote_task(bundle: dict, fn: Callable, model_id: str, args: tuple, engine_digest: Callable[[], str]) -> dict:
    """One unit of work on a Dask worker: ``fn(corpus, model_id, grid, gpus, staging, *args)``
    into a private staging folder; returns fn's counts and ``files`` (path relative to the staging
    folder -> bytes)."""
    global TASKS_RUN
    TASKS_RUN += 1
    mine = engine_digest()
    if mine != bundle["engine"]:
        raise RuntimeError(f"this Dask worker runs another engine ({mine[:12]}) than the build's client "
                           f"({bundle['engine'][:12]}): install the same checkout and the same versions of "
                           f"{', '.join(dependencies.RESULTS)} on every worker")
    paths = unpack(bundle)
    staging = Path(tempfile.mkdtemp(prefix="archledger-task-"))
    try:
        counts = fn(str(paths["corpus"]), model_id, str(paths["grid"]), str(paths["gpus"]), str(staging), *args)
        counts["files"] = {p.relative_to(staging).as_posix(): p.read_bytes()
                           for p in sorted(staging.rglob("*")) if p.is_file()}
        return counts
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_dask(executor: Executor, jobs: int | None, bundle: dict, fn: Callable, tasks: list[tuple[str, tuple]],
             staging: Path, engine_digest: Callable[[], str], finished: Callable[[dict], None]) -> None:
    """Run every ``(model_id, args)`` of ``tasks`` on the executor's cluster, slowest-first as
    listed; write each result's files under ``staging`` and call ``finished(counts)`` as they come.
    A failed task stops the build (the others are cancelled) and its error is raised here."""
    distributed = distributed_module()
    import logging
    cluster = None
    if executor.kind == "local-cluster":
        from engine.batch.workers import default_workers
        workers = executor.workers or jobs or default_workers()
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.ERROR)
    try:
        try:
            client = distributed.Client(cluster if cluster is not None else executor.address, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise SpecError(_where(), f"cannot reach the Dask scheduler at {executor.address}: "
                            f"{' '.join(str(exc).split())[:160]}",
                            "start one (dask scheduler; dask worker ADDRESS) or check the address") from None
        with client:
            shared = client.scatter(bundle, broadcast=True)
            futures = [client.submit(remote_task, shared, fn, model_id, args, engine_digest,
                                     key=f"archledger-{model_id.replace('/', '--')}-{i}", pure=False,
                                     priority=len(tasks) - i)
                       for i, (model_id, args) in enumerate(tasks)]
            try:
                for future in distributed.as_completed(futures):
                    result = future.result()
                    for rel, data in result.pop("files").items():
                        target = staging / rel
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(data)
                    finished(result)
            except BaseException:
                for future in futures:        # a failure stops the build: do not finish the others first
                    future.cancel()
                raise
            finally:
                # tidying only: an unreachable scheduler must not hide the build's own error
                with contextlib.suppress(Exception):
                    client.run(forget, bundle["digest"])
    finally:
        if cluster is not None:
            cluster.close()
