"""A build with nothing to do: the published results (and site) are already what ``archledger build`` would publish.

Layer: engine.batch (the standard library, :mod:`engine.batch.hashing`, :mod:`engine.batch.publish`
and :mod:`engine.language.parse_cache`'s folder: no sympy, polars or corpus load, so the answer
comes before the build's imports).

A whole-corpus build whose inputs are those of the published results carries every model and
every page group and renders only the downloads group again (the same bytes): it publishes what is
there. :func:`answer` tells that case apart without doing it, and :func:`record` (the end of every
build that publishes) writes what the answer needs: a *stamp* of the published trees, kept in the
user's cache folder (``parse_cache.tables_folder()/stamps/<SHA-256 of the output folder>.json``,
never in ``out/``, which holds only what publishing writes). The answer is "nothing to do" only if
all of these hold; anything else (an unreadable stamp included) runs the build as before:

* the inputs, hashed by content every time (never by their times: an edit that keeps a file's size
  and mtime still changes its bytes): the corpus digest and the shared hash (grid, GPU files and
  measured tables, fusion tables, engine sources, library versions) equal the results manifest's,
  and the grid is the one it was built over;
* the manifest lists every model of that corpus, none stale, no spec skipped (a skipped spec is
  walked and checked again by every build), the schema version is this engine's;
* with a site: the published site is pinned to these results, and its renderer's sources
  (templates, static files, site_builder's code, the published docs, the rendering libraries'
  versions: :func:`site_builder.incremental.sources_digest`, passed in) are those the stamp's build
  rendered with;
* the published trees are the stamped ones: the same files and folders, none a link, each file
  with the recorded size, mtime, ctime, inode and device. The ctime is set by the kernel on every
  write, rename or ``utime`` and cannot be set back by a user, so a same-size, same-mtime edit
  (``os.utime`` restoring the time) still differs. A file whose times are within :data:`RACY_NS`
  of the stamp's start (:data:`FINE_RACY_NS` on a file system with sub-second times, after letting
  the build's last writes age that long) is "racily clean", as git calls it (a later write in the
  same clock tick would keep its times): it is trusted only by its SHA-256, recorded in the stamp
  and read again.

The stamp describes the trees at the end of the build that wrote it; the manifest and the site
pin say what they were built from, so a stamp is never more than a fast way to know the trees are
unchanged since.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

from engine.batch import hashing, publish

STAMP_VERSION = 1
#: A file whose mtime or ctime is this close to the stamp's start (or later) is checked by content:
#: two seconds covers file systems whose timestamps have a one- or two-second granularity.
RACY_NS = 2_000_000_000
#: The same window where the file system keeps sub-second times (ext4, xfs, btrfs, tmpfs: the
#: kernel's coarse clock, a tick of 1-10 ms): a build's last writes (the old trees' removal changes
#: the carried files' ctime: one link fewer) are then let age this long before the stamp, so the
#: stamp trusts their times instead of hashing the whole site again.
FINE_RACY_NS = 100_000_000
TREES = ("results", "site")


def stamp_path(out: Path) -> Path | None:
    """Where the stamp of ``out`` is kept (None: no cache folder, ``$ARCHLEDGER_CACHE`` empty)."""
    from engine.language.parse_cache import tables_folder
    folder = tables_folder()
    if folder is None:
        return None
    key = hashlib.sha256(str(Path(out).resolve()).encode()).hexdigest()
    return folder / "stamps" / f"{key}.json"


def _key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _tree(root: Path) -> tuple[dict[str, list[int]], list[str]] | None:
    """Every file (its stat key) and folder below ``root``, or None where ``root`` is not a plain
    folder or holds a link or anything but files and folders."""
    if root.is_symlink() or not root.is_dir():
        return None
    files: dict[str, list[int]] = {}
    folders: list[str] = []
    todo = [("", root)]
    while todo:
        rel, folder = todo.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                name = f"{rel}{entry.name}"
                if entry.is_symlink():
                    return None
                if entry.is_dir(follow_symlinks=False):
                    folders.append(name)
                    todo.append((name + "/", Path(entry.path)))
                elif entry.is_file(follow_symlinks=False):
                    files[name] = _key(entry.stat(follow_symlinks=False))
                else:
                    return None
    return files, sorted(folders)


def _sha256(path: Path) -> str:
    return publish.file_digest(path)["sha256"]


def record(out: Path, site_sources: str | None) -> None:
    """Stamp the published trees of ``out`` (the caller holds its lock, after publishing):
    ``site_sources`` is the renderer's sources digest the published site was rendered with, None
    when this build rendered no site (then no later build skips on the site's account). Best
    effort: a stamp that cannot be written is removed, and the next build runs in full."""
    path = stamp_path(out)
    if path is None:
        return
    names = TREES if site_sources is not None else TREES[:1]
    try:
        path.unlink(missing_ok=True)
        start, found = _walk(Path(out), names)
        if found is None:
            return
        window = _window(found)
        # (the ctime: every write, utime or link count change sets it to the kernel's now; an mtime
        # may be copied from elsewhere, static/'s by copy2)
        newest = max((key[2] for files, _ in found.values() for key in files.values()), default=0)
        if window == FINE_RACY_NS and newest >= start - window:      # let the last writes age (<= 0.1 s)
            time.sleep(min(newest + window - start, window) / 1e9 + 0.001)
            start, found = _walk(Path(out), names)
            if found is None:
                return
        trees = {}
        for name, (files, folders) in found.items():
            racy = {rel: _sha256(Path(out) / name / rel) for rel, key in files.items()
                    if key[2] >= start - window}
            trees[name] = {"files": files, "folders": folders, "racy": racy}
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"version": STAMP_VERSION, "out": str(Path(out).resolve()),
                                         "site_sources": site_sources, "trees": trees}, separators=(",", ":")))
        os.replace(temporary, path)
    except OSError:
        if path is not None:
            path.unlink(missing_ok=True)


def _walk(out: Path, names) -> tuple[int, dict | None]:
    """(the time before the walk, each tree's :func:`_tree`), None for the trees where one is not a
    plain folder."""
    start = time.time_ns()
    found = {name: _tree(out / name) for name in names}
    return start, None if any(v is None for v in found.values()) else found


def _window(found: dict) -> int:
    """:data:`FINE_RACY_NS` where the trees' files have sub-second times (the file system keeps
    them), else :data:`RACY_NS`."""
    fine = any(key[1] % 1_000_000_000 or key[2] % 1_000_000_000
               for files, _ in found.values() for key in files.values())
    return FINE_RACY_NS if fine else RACY_NS


def _same_tree(root: Path, stamped: dict) -> bool:
    """``root``'s files and folders are the stamp's, each file with its stat key (a racy one also
    with its SHA-256)."""
    found = _tree(root)
    if found is None:
        return False
    files, folders = found
    if files != stamped.get("files") or folders != stamped.get("folders"):
        return False
    return all(_sha256(root / rel) == sha for rel, sha in stamped.get("racy", {}).items())


def unchanged(out: Path, corpus_root: Path, grid_path: Path, gpu_root: Path,
              site_sources: str | None) -> dict | None:
    """The published results manifest of ``out`` when a whole-corpus build over these inputs would
    publish exactly what ``out`` holds (the module's rules; ``site_sources``: the renderer's
    sources digest when the build renders the site, else None); None otherwise. Reads only."""
    out = Path(out)
    path = stamp_path(out)
    try:
        stamp = json.loads(path.read_text()) if path is not None else None
        if not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION \
                or stamp.get("out") != str(out.resolve()):
            return None
        if site_sources is not None and stamp.get("site_sources") != site_sources:
            return None
        trees = stamp["trees"]
        if not all(name in trees and _same_tree(out / name, trees[name])
                   for name in (TREES if site_sources is not None else TREES[:1])):
            return None
        manifest = json.loads((out / "results" / "manifest.json").read_text())
        models, corpus = manifest["models"], manifest["corpus"]
        if (manifest.get("schema_version") != hashing.SCHEMA_VERSION or manifest.get("skipped")
                or not isinstance(models, dict) or any("stale" in e for e in models.values())
                or set(corpus["models"]) != set(models) | set(manifest.get("unverified") or {})
                or hashing._grid_of(manifest["grid"]) != hashing.grid_id(grid_path)
                or corpus["digest"] != hashing.corpus_digest(corpus_root)
                or manifest["shared_hash"] != hashing.shared_hash_at(corpus_root, grid_path, gpu_root)):
            return None
        if site_sources is not None and publish.site_pin(out / "site") != publish.results_digest(out / "results"):
            return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def vouched(out: Path, tree: str, anchor: str) -> dict[str, list[int]]:
    """The files of the published tree ``out/<tree>`` whose bytes the stamp vouches for, each with
    its stat key: {} where there is no stamp (or one of another output, version or tree), or where
    ``anchor`` (the tree's own record of each file's size and SHA-256: results' ``manifest.json``,
    the site's ``site-manifest.json``) is not itself the stamped file, unchanged. Racy files (checked
    by content: the stamp's last clock tick) are never vouched for. Reads only.

    Why this is sound: the stamp is taken under the lock right after the build that wrote ``anchor``
    published the tree, when every file was what ``anchor`` records; a file whose size, mtime,
    ctime, inode and device are still those of the stamp has not been written, replaced, renamed
    or ``utime``-d since (the kernel sets the ctime on each, and it cannot be set back), so its bytes
    are still the recorded ones (:func:`matches`). Any other file is read and hashed as before."""
    path = stamp_path(out)
    try:
        stamp = json.loads(path.read_text()) if path is not None else None
        if not isinstance(stamp, dict) or stamp.get("version") != STAMP_VERSION \
                or stamp.get("out") != str(Path(out).resolve()):
            return {}
        stamped = stamp["trees"][tree]
        files, racy = stamped["files"], stamped.get("racy", {})
        if not isinstance(files, dict) or not isinstance(racy, dict) or anchor in racy \
                or files.get(anchor) != _key(os.stat(Path(out) / tree / anchor, follow_symlinks=False)):
            return {}
        return {rel: key for rel, key in files.items() if rel not in racy and isinstance(key, list)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def matches(path: Path, expected, key: list[int] | None) -> bool:
    """:func:`engine.batch.publish.matches` (a regular file, not a link, of the recorded size and
    SHA-256), answered by the file's stat when ``key`` (its entry of :func:`vouched`) is its stat key
    and the recorded size; read and hashed otherwise."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if key is not None and isinstance(expected, dict) and expected.get("size") == st.st_size and _key(st) == key:
        return True
    return publish.matches(path, expected)


def pages(out: Path) -> int:
    """The published site's pages (its ``index.html`` files), counted from the stamp."""
    path = stamp_path(out)
    try:
        files = json.loads(path.read_text())["trees"]["site"]["files"]
        return sum(1 for rel in files if rel == "index.html" or rel.endswith("/index.html"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0


def answer(args, site_sources: str | None, started: float) -> bool:
    """``archledger build`` with nothing to do: True after printing what the build would say (its
    log lines, the models reused, no file written), False where the build must run. Only a whole-corpus
    build on this machine's executor (no ``--models``, no Dask cluster to check for), ``site_sources``
    as in :func:`unchanged`. Holds ``out``'s lock while it looks (an interrupted publication found
    there is finished by the build, which then runs); a bad output folder is the build's own error,
    so it is left to the build; a lock held past the timeout is :class:`publish.PublishError`, as
    the build's."""
    import sys
    if getattr(args, "models", None) or getattr(args, "executor", None) not in (None, "", "local"):
        return False
    out, corpus_root = Path(args.out), Path(args.corpus)
    try:
        publish.claim(out)
        timeout = getattr(args, "lock_timeout", None)
        timeout = publish.lock_timeout() if timeout is None else timeout
    except publish.PublishError:
        return False
    if not (out / "results" / "manifest.json").is_file() or stamp_path(out) is None:
        return False
    from engine.project import PACKAGE_ROOT, grid_file
    grid = grid_file(corpus_root, getattr(args, "grid", None))
    gpu_root = Path(getattr(args, "gpus_root", None) or PACKAGE_ROOT / "gpus")
    with publish.lock(out, "archledger build", timeout, lambda line: print(line, file=sys.stderr)):
        if (out / publish.JOURNAL).exists() or any(p.name.startswith(publish.STAGING_PREFIXES)
                                                    for p in out.iterdir()):
            return False        # an interrupted build's leftovers: the build finishes or sweeps them
        manifest = unchanged(out, corpus_root, grid, gpu_root, site_sources)
        if manifest is None:
            return False
        site_pinned = publish.site_pin(out / "site") == publish.results_digest(out / "results")
    why = manifest.get("unverified") or {}
    for mid in sorted(why):
        print(f"unverified {mid}: {why[mid]} (declared in its spec; not published)", file=sys.stderr)
    if site_sources is None and (out / "site").exists() and not site_pinned:
        print(f"{out / 'site'}/ still shows the previous results (no site asked for): "
              f"`archledger site` renders it from the new ones", file=sys.stderr)
    entries = manifest["models"]
    rows = sum(e.get("deployments", 0) for e in entries.values()), sum(e.get("ops", 0) for e in entries.values())
    print(f"{out / 'results'}: up to date, nothing written (no input changed since it was built): 0 models "
          f"evaluated, {len(entries)} reused; {rows[0]:,} deployment rows, {rows[1]:,} op rows, 0 new grid points "
          f"in {time.perf_counter() - started:.1f} s")
    if site_sources is not None:
        print(f"{out / 'site'}: up to date ({pages(out)} pages)")
    return True
