"""Publishing ``out/results`` and ``out/site`` together: one lock, one journal, nothing lost on a crash.

Layer: engine.batch (``engine.batch.results`` and ``site_builder.render`` call it; it imports neither).

Who may write ``out/``: only the holder of ``out/.lock`` (``fcntl.flock``; the file holds the
holder's pid, command and start time, so a waiting build can say who it waits for). The kernel
drops the lock when its holder exits in any way, ``kill -9`` included. Every command that writes
``out/`` (``archledger build``, ``archledger site``, :func:`swap_into_place`) holds it
from its first write to its last, so anything found in ``out/`` by a new holder that is not a
published folder was left by a dead process.

The publish protocol (:func:`publish`). Targets are folder names in ``out/`` (``results``,
``site``); each new tree is first written complete into a staging folder beside it (``.results-*``,
``.site-*``, made by :func:`stage`). Then:

1. fsync every staged file and folder (a journal must never name a half-written tree);
2. write the journal ``out/.publish.json`` (temp file, fsync, rename, fsync ``out/``): for each
   target, its staged folder and an aside name ``.old-<target>-<token>``;
3. for each target in order: rename the published folder to its aside name (if there is one),
   rename the staged folder to the target;
4. fsync ``out/``, delete the journal; 5. delete the aside folders.

The journal is the commit point. Before it exists, the published folders are untouched and a crash
leaves only staging folders, which the next holder sweeps (:func:`recover`). Once it exists, every
start rolls the publication forward (:func:`recover`, idempotent): a staged folder that still exists
replaces its target (moving the target aside first if it is still there); a target whose staged
folder is gone is already new. Two renames cannot be one atomic step, so a reader may see a mix
(new results, old site) or a missing target only while step 3 runs (microseconds) or, after a crash
inside it, until the next build/site command starts; from then on it sees every old tree or every
new one.

``site/pin.json`` pins which results a site was rendered from (the SHA-256 of the results'
``manifest.json``, which itself records the size and SHA-256 of every results file):
:func:`consistent` checks a published pair agrees. (``archledger build --no-site`` publishes results
alone and leaves the site as it was; its pin then names the older results it shows.)

Whose files ``out/`` holds (:func:`claim`): publishing replaces ``out/results`` and ``out/site`` whole
and deletes the trees they replace, and the lock's holder sweeps staging names from ``out/``. So a
command that publishes first checks, before it creates or locks anything, that a ``results/`` or
``site/`` in ``out/`` is absent, empty or carries ArchLedger's manifest, and that an ``out/`` which is
not an ArchLedger output (none of :data:`MARKERS`) holds no staging name; anything else is refused
with one line and left untouched. No other file in ``out/`` is ever written or deleted, but for
the parse cache ``out/cache/yaml/`` (engine.language.parse_cache: content-addressed files, each
written whole by a rename by the question commands on a built checkout,
engine.cli.CACHED_COMMANDS; never by build or site, never read by publishing).

Test hook: ``ARCHLEDGER_FAULT_AT=<stage>`` makes the process SIGKILL itself at that named stage
(:func:`fault`; stages are listed in :data:`FAULT_STAGES`). ``ARCHLEDGER_LOCK_TIMEOUT=<seconds>``
bounds the wait for the lock (default :data:`DEFAULT_LOCK_TIMEOUT`; a value that is not a number of
seconds from 0 to :data:`MAX_LOCK_TIMEOUT` is one line, :func:`lock_timeout`).
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import math
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LOCK = ".lock"
JOURNAL = ".publish.json"
PIN = "pin.json"
#: Names in ``out/`` that only exist while their writer holds the lock: swept by the next holder.
STAGING_PREFIXES = (".results-", ".site-", ".old-", JOURNAL + ".")
DEFAULT_LOCK_TIMEOUT = 1800.0     # longer than a cold full build: a live holder is worth waiting for
LOCK_TIMEOUT_ENV = "ARCHLEDGER_LOCK_TIMEOUT"
MAX_LOCK_TIMEOUT = 86400.0        # a day: past that a wait is a mistake, not patience
FAULT_ENV = "ARCHLEDGER_FAULT_AT"
#: Where :func:`fault` can kill the process (tests/test_faults.py kills a real build at each).
FAULT_STAGES = {
    "evaluate": "the build process, after the first model's partitions are written",
    "worker": "the build process is killed by its first --jobs worker, which then sleeps 60 s",
    "site": "during the site render, after the gallery page",
    "journal": "after the journal is written, before any rename",
    "publish-aside": "after the first published folder is renamed aside, before its new one moves in",
    "publish-results": "after the first target (results) is replaced, before the next (site)",
    "publish-site": "after every target is replaced, before the journal is removed",
    "cleanup": "after the journal is removed, before the aside folders are deleted",
}


class PublishError(Exception):
    """Publishing is impossible right now (lock held too long, unreadable journal) or would delete
    a user's files (:func:`claim`): one line."""


def fault(stage: str) -> None:
    """Test hook: SIGKILL this process when ``ARCHLEDGER_FAULT_AT`` names ``stage``."""
    if os.environ.get(FAULT_ENV) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


# -- whose folder out/ is -------------------------------------------------------------------------

#: What each published target holds that no user's folder does: its manifest (either name for the site).
TARGET_MANIFESTS = {"results": ("manifest.json",), "site": ("site-manifest.json", PIN)}
#: Paths in ``out/`` that only ArchLedger writes: one of them makes a non-empty ``out/`` an ArchLedger
#: output (the lock file: a first build killed before it published leaves only it and its staging folder).
MARKERS = (LOCK, JOURNAL, *(f"{target}/{name}" for target, names in TARGET_MANIFESTS.items() for name in names))


def _foreign_target(folder: Path) -> str | None:
    """Why publishing over ``folder`` (``out/results`` or ``out/site``) could delete a user's files, or None."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return "is not a folder ArchLedger wrote (a link or a file)"
    if not folder.exists() or not any(folder.iterdir()):
        return None
    manifests = TARGET_MANIFESTS[folder.name]
    if any((folder / name).is_file() for name in manifests):
        return None
    return f"holds files but no {' or '.join(manifests)}, so it is not an ArchLedger output"


def claim(out: Path) -> None:
    """Refuse (:class:`PublishError`, one line) an ``out`` where publishing could delete a user's
    files; reads only, touches nothing. Publishing writes nothing in ``out`` but ``results/``,
    ``site/``, the lock, the journal and staging names, so: ``out/results`` and ``out/site`` must be
    absent, empty or carry their manifest (they are replaced whole and the old trees deleted), and
    unless ``out`` holds one of :data:`MARKERS` (it is an ArchLedger output) it must hold no
    staging name (:func:`recover` sweeps those as leftovers). Other files of the user's in ``out``
    (a grid.yaml beside the results) are left alone, so they do not make ``out`` foreign."""
    out = Path(out)
    hint = "move your files elsewhere or choose an empty or new folder for --out"
    if out.is_symlink() and not out.exists() or out.exists() and not out.is_dir():
        raise PublishError(f"{out}: not a folder — {hint}")
    if not out.exists():
        return
    try:
        for target in TARGET_MANIFESTS:
            why = _foreign_target(out / target)
            if why:
                raise PublishError(f"{out / target}/: {why}; publishing replaces it whole — {hint}")
        if any((out / marker).exists() for marker in MARKERS):
            return
        swept = sorted(p.name for p in out.iterdir() if p.name.startswith(STAGING_PREFIXES))
    except OSError as exc:
        raise PublishError(f"{exc.filename or out}: cannot read ({exc.strerror}) — {hint}") from None
    if swept:
        raise PublishError(f"{out}/: not an ArchLedger output, yet it holds {swept[0]!r}, a name a build "
                           f"sweeps as its own leftover — {hint}")


# -- the lock -------------------------------------------------------------------------------------

def lock_timeout() -> float:
    """Seconds to wait for the lock: ``ARCHLEDGER_LOCK_TIMEOUT`` (unset or blank: the default), a
    finite number from 0 to :data:`MAX_LOCK_TIMEOUT`; anything else is :class:`PublishError` naming
    the variable and what to write."""
    text = os.environ.get(LOCK_TIMEOUT_ENV, "")
    if not text.strip():
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_LOCK_TIMEOUT):
        raise PublishError(f"{LOCK_TIMEOUT_ENV}={text[:40]!r}: not a number of seconds from 0 to "
                           f"{MAX_LOCK_TIMEOUT:g} — write e.g. {LOCK_TIMEOUT_ENV}=60, or unset it to wait "
                           f"up to {DEFAULT_LOCK_TIMEOUT:g} s")
    return value


_HELD: dict[str, tuple[int, int]] = {}     # resolved out -> (owning thread id, depth)
_HELD_GUARD = threading.Lock()


def _now() -> str:
    return datetime.datetime.now().isoformat(sep=" ", timespec="seconds")


def holder(out: Path) -> str:
    """Who holds (or last held) ``out/.lock``: 'pid N (command, started T)'."""
    try:
        info = json.loads((Path(out) / LOCK).read_text())
        return f"pid {info['pid']} ({info['command']}, started {info['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def holds(out: Path) -> bool:
    """True if this thread holds ``out``'s lock."""
    with _HELD_GUARD:
        held = _HELD.get(str(Path(out).resolve()))
    return held is not None and held[0] == threading.get_ident()


@contextlib.contextmanager
def lock(out: Path, command: str, timeout: float | None = None, log=None):
    """Hold ``out/.lock`` for the block (re-entrant in one thread; other threads and processes wait).

    Waiting prints one line through ``log`` (``waiting for build lock held by pid N (...)``) and
    raises :class:`PublishError` after ``timeout`` seconds (default: ``ARCHLEDGER_LOCK_TIMEOUT`` or
    :data:`DEFAULT_LOCK_TIMEOUT`). The lock file is unlinked on release; a waiter that got the lock
    on an unlinked file retries, so two holders never coexist."""
    out = Path(out)
    key = str(out.resolve())
    me = threading.get_ident()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held and held[0] == me:
            _HELD[key] = (me, held[1] + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _HELD_GUARD:
                _HELD[key] = (me, _HELD[key][1] - 1)
        return
    if timeout is None:
        timeout = lock_timeout()
    path = out / LOCK
    deadline = time.monotonic() + timeout
    announced = False
    pause = 0.001                     # short holders (a swap) hand over fast; long ones are polled at 10 Hz
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            who = holder(out)
            if time.monotonic() >= deadline:
                raise PublishError(f"{out}/: locked by {who} for more than {timeout:g} s — "
                                   f"wait for it to finish or stop it") from None
            if not announced and log:
                log(f"waiting for build lock held by {who}")
                announced = True
            time.sleep(pause)
            pause = min(0.1, pause * 2)
            continue
        # the previous holder unlinks the file before unlocking: a lock on an unlinked inode is no lock
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": command, "started": _now()}).encode())
        with _HELD_GUARD:
            _HELD[key] = (me, 1)
        try:
            yield
        finally:
            with _HELD_GUARD:
                del _HELD[key]
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        os.close(fd)      # closing the last descriptor releases the flock


def _require_lock(out: Path) -> None:
    if not holds(out):
        raise RuntimeError(f"{out}/: publishing without holding {out}/{LOCK}")


# -- staging and durability -----------------------------------------------------------------------

def stage(out: Path, kind: str) -> Path:
    """A new empty staging folder ``out/.<kind>-XXXX`` (same file system as the target), readable by
    all like any published folder (mkdtemp makes it private)."""
    folder = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=out))
    folder.chmod(0o755)
    return folder


@contextlib.contextmanager
def staged(out: Path, kind: str):
    """A staging folder for the block; removed if the block fails before its publication commits
    (once the journal exists it names the folder, and only :func:`recover` may touch it)."""
    folder = stage(out, kind)
    try:
        yield folder
    except BaseException:
        if not (Path(out) / JOURNAL).exists():
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    except OSError as exc:       # some file systems cannot fsync a folder; the data is what matters
        if not (directory and exc.errno in (errno.EINVAL, errno.ENOTSUP)):
            raise
    finally:
        os.close(fd)


#: Threads fsyncing a staged tree at once (:func:`_fsync_tree`).
FSYNC_THREADS = 16


def _fsync_tree(root: Path) -> None:
    """fsync every file (but those carried as hard links: their bytes are durable already) and
    folder under ``root``; returns when all are durable (or raises the first
    error). Many at once: fsync waits on the disk, not the CPU (it releases the GIL), and the file
    system commits concurrent requests together. A cold build's freshly written site (2,000 files)
    took about 13 s one after another on this machine's disk under load, 0.3-0.6 s in 16 threads."""
    paths: list[tuple[Path, bool]] = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            # a file with another link is one carried from a published tree (a hard link,
            # previous._carry, writer.Site.place): its bytes were made durable when that tree was
            # published; the link itself is a folder entry, made durable with its folder below
            if os.lstat(path).st_nlink == 1:
                paths.append((path, False))
        paths.append((Path(folder), True))
    with ThreadPoolExecutor(max_workers=FSYNC_THREADS) as pool:
        for _ in pool.map(lambda item: _fsync(*item), paths):    # each result read: an error is raised here
            pass


#: Threads of a :class:`Presync` (it runs beside a CPU-bound render: a few are enough to keep the
#: disk busy, and each fsync waits on the disk, not the CPU).
PRESYNC_THREADS = 4


class Presync:
    """Files fsynced early, in threads, while the caller goes on writing others: a render's page
    group is made durable while the next groups render, so the publish's own fsync of every staged
    file (:func:`_fsync_tree`, step 1 of the protocol) then finds its data on the disk already
    instead of writing the whole fresh site back after the render.

    Never a substitute for that step: :func:`publish` still fsyncs every file and folder before
    its journal, whatever was presynced (a file written again after its presync is made durable
    there, as before). So a presync that fails (a file gone, a disk error) is left to that step,
    which raises it; nothing here raises. :meth:`close` waits for every queued fsync (nothing
    touches the staged tree once it returns: it is then renamed into place)."""

    def __init__(self, threads: int = PRESYNC_THREADS):
        self._pool = ThreadPoolExecutor(max_workers=threads)

    def add(self, paths) -> None:
        """Queue an fsync of each file in ``paths`` (safe from any thread, a future's callback too).
        After :meth:`close` nothing is queued (a group that finishes while a failed render unwinds:
        nothing of it is published unfsynced, the publish's own step being the guarantee)."""
        for path in paths:
            try:
                self._pool.submit(_fsync_quietly, Path(path))
            except RuntimeError:        # closed
                return

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _fsync_quietly(path: Path) -> None:
    # an error is the publish's to raise (its own fsync of the same file): see Presync
    with contextlib.suppress(OSError):
        _fsync(path)


def file_digest(path: Path) -> dict:
    """{"size", "sha256"} of a file (what the results manifest records per file)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"size": path.stat().st_size, "sha256": digest.hexdigest()}


def matches(path: Path, expected) -> bool:
    """The file exists with the recorded size and SHA-256 (size first: a truncation costs no read)."""
    try:
        return (isinstance(expected, dict) and path.stat().st_size == expected.get("size")
                and file_digest(path)["sha256"] == expected.get("sha256"))
    except OSError:
        return False


# -- the journal ----------------------------------------------------------------------------------

def _plain(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _read_journal(out: Path) -> list[dict] | None:
    path = out / JOURNAL
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PublishError(f"{path}: unreadable publish journal ({exc}) — inspect {out}/ and delete it "
                           f"to continue") from None
    moves = data.get("moves") if isinstance(data, dict) else None
    if not (isinstance(moves, list) and all(
            isinstance(m, dict) and _plain(m.get("final")) and _plain(m.get("aside"))
            and _plain(m.get("staged")) for m in moves)):
        raise PublishError(f"{path}: malformed publish journal — inspect {out}/ and delete it to continue")
    return moves


def _write_journal(out: Path, moves: list[dict]) -> None:
    tmp = out / f"{JOURNAL}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(json.dumps({"version": 1, "pid": os.getpid(), "written": _now(), "moves": moves}, indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out / JOURNAL)
    _fsync(out, directory=True)


def _apply(out: Path, moves: list[dict]) -> None:
    """Roll every move forward. Idempotent: run after a crash at any point of it, it finishes it."""
    for index, move in enumerate(moves):
        final, aside = out / move["final"], out / move["aside"]
        staged_dir = out / move["staged"]
        if staged_dir.exists():
            if final.exists():
                if aside.exists():          # not reachable by this protocol; keep both, lose nothing
                    aside = out / f".old-{move['final']}-{secrets.token_hex(4)}"
                final.rename(aside)
                if index == 0:
                    fault("publish-aside")
            staged_dir.rename(final)
        elif not final.exists() and aside.exists():
            aside.rename(final)             # the new tree vanished (by hand): keep the old one
        if index == 0 and len(moves) > 1:
            fault("publish-results")
    _fsync(out, directory=True)
    fault("publish-site")


def _finish(out: Path, moves: list[dict]) -> None:
    # no fsync needed after the unlink: a journal that reappears after a power loss replays as a no-op
    (out / JOURNAL).unlink(missing_ok=True)
    fault("cleanup")
    for move in moves:
        remove_tree(out / move["aside"])


def remove_tree(root: Path) -> None:
    """``shutil.rmtree(root, ignore_errors=True)``, many entries at once: the files unlinked in
    threads, then the folders removed deepest first, each depth in threads. Removing a folder waits
    on the file system's journal, not the CPU: a published site's 900 folders took 2-3 s one after
    another on this machine's disk under load, about 0.5 s with the tree's 6,000 files in 16
    threads. Whatever cannot be removed is left (as rmtree's ignore_errors leaves it): the next
    holder's :func:`recover` sweeps it. A link is unlinked, never followed."""
    root = Path(root)
    if root.is_symlink() or not root.is_dir():
        with contextlib.suppress(OSError):
            root.unlink()
        return
    files: list[str] = []
    depths: dict[int, list[str]] = {}
    for folder, subfolders, names in os.walk(root):      # (os.walk does not follow links to folders)
        depths.setdefault(folder.count(os.sep), []).append(folder)
        files.extend(os.path.join(folder, name) for name in names)
        files.extend(os.path.join(folder, name) for name in subfolders if os.path.islink(os.path.join(folder, name)))

    def quietly(remove, path: str) -> None:
        with contextlib.suppress(OSError):
            remove(path)
    with ThreadPoolExecutor(max_workers=FSYNC_THREADS) as pool:
        list(pool.map(lambda path: quietly(os.unlink, path), files))
        for depth in sorted(depths, reverse=True):
            list(pool.map(lambda path: quietly(os.rmdir, path), depths[depth]))
    if root.exists():         # anything the threads could not remove: as rmtree would try it
        shutil.rmtree(root, ignore_errors=True)


def publish(out: Path, targets: list[tuple[str, Path]]) -> None:
    """Replace each ``out/<name>`` by its staged folder, all together, by the journal protocol of
    this module. Caller holds the lock; staged folders are in ``out/`` and complete."""
    out = Path(out)
    _require_lock(out)
    _finish_interrupted(out)          # never overwrite a journal that is not finished
    moves = []
    for name, staged_dir in targets:
        if Path(staged_dir).parent.resolve() != out.resolve():
            raise ValueError(f"{staged_dir}: staging folder must be directly in {out}/")
        _fsync_tree(Path(staged_dir))
        moves.append({"final": name, "staged": Path(staged_dir).name,
                      "aside": f".old-{name}-{secrets.token_hex(4)}"})
    _write_journal(out, moves)
    fault("journal")
    # committed: if the renames fail from here on, the journal stays and the next start finishes them
    _apply(out, moves)
    _finish(out, moves)


def _finish_interrupted(out: Path) -> str | None:
    moves = _read_journal(out)
    if moves is None:
        return None
    _apply(out, moves)
    _finish(out, moves)
    return f"{out}/: finished an interrupted publication of {', '.join(m['final'] for m in moves)}"


def swap_into_place(staging: Path, final: Path) -> None:
    """Replace the folder ``final`` by ``staging`` (a folder beside it), under the lock of their parent
    folder and through its publish journal: concurrent callers take turns, readers see the old tree or
    the new one, and a crash at any point is finished by the next writer's start."""
    out = Path(final).parent
    with lock(out, "swap_into_place"):
        publish(out, [(Path(final).name, Path(staging))])


def recover(out: Path, log=None) -> list[str]:
    """What every writer runs first, holding the lock: finish an interrupted publication (the
    journal), then delete staging folders left by dead processes. Returns what it did (one line
    each, also passed to ``log``)."""
    out = Path(out)
    _require_lock(out)
    done = [line for line in [_finish_interrupted(out)] if line]
    stale = [p for p in out.iterdir() if p.name.startswith(STAGING_PREFIXES)]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if stale:
        done.append(f"{out}/: removed {len(stale)} staging folder(s) left by an interrupted build")
    for line in done:
        if log:
            log(line)
    return done


# -- results <-> site -----------------------------------------------------------------------------

def results_digest(results: Path) -> str | None:
    """SHA-256 of the results' manifest.json (which records every results file's size and hash)."""
    try:
        return hashlib.sha256((Path(results) / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return None


def pin_site(site: Path, results: Path) -> None:
    """Record in ``site/pin.json`` which results the site was rendered from."""
    (Path(site) / PIN).write_text(json.dumps({"results_manifest_sha256": results_digest(results)}) + "\n")


def site_pin(site: Path) -> str | None:
    try:
        data = json.loads((Path(site) / PIN).read_text())
        return data.get("results_manifest_sha256") if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def consistent(out: Path) -> bool:
    """``out/site`` is absent, or was rendered from exactly the published ``out/results``."""
    site = Path(out) / "site"
    return not site.exists() or (site_pin(site) is not None and site_pin(site) == results_digest(Path(out) / "results"))
