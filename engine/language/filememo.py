"""Per-process memo of what a loader made of a few small files, keyed by the files' bytes.

Layer: engine.language. A build evaluates every model against the same grid, GPU and fusion files;
reading and checking them once per model cost about 3 s of CPU over the corpus. The loaders
(:func:`engine.batch.grid.load_grid`, :func:`engine.deploy.hardware.load_gpus`,
:func:`engine.deploy.fusion_table.load_tables`, :func:`engine.serving.fronts.load_sizing`, and
:func:`engine.language.corpus.load_corpus` over every file of the corpus) keep their
checks and their errors; they hand :meth:`ContentMemo.get` a key naming the files they read.

Invariants:

* a memoized value is what the loader returned for files of exactly these names and bytes (and the
  loader's other arguments, which the key names too): a file edited, added or removed between two
  calls is a different key, so the second call reads it again (content, not mtime: two edits
  within one timestamp tick are still seen);
* an error is never memoized: a bad file raises on every call, the same one-line error;
* a file that is not a small regular file (a symbolic link, a FIFO, a file above
  :data:`engine.language.yamlio.MAX_FILE_BYTES`) makes no key: the loader runs, and refuses it, as
  without the memo;
* values are shared between callers: a loader memoizes frozen dataclasses and hands each caller
  its own copy of a mutable container (the dict of GPUs or of fusion tables). A few frozen values
  hold a dict (a GPU's ``peak``, the collectives' ``base``/``hop``, a rule's ``when``); nothing
  writes to them, as every caller of one load already shared them before this memo.
"""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.language.yamlio import MAX_FILE_BYTES


def file_bytes(paths: Iterable[Path | str]) -> tuple | None:
    """``((name, bytes or None when absent), ...)`` of ``paths`` (absent as ``Path.exists`` says:
    also a path through a plain file), or None when one of them is not a regular file of at most
    MAX_FILE_BYTES or cannot be read (the loader then decides, and refuses it)."""
    out = []
    for path in paths:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):     # absent (a loader may fall back)
            out.append((str(path), None))
            continue
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None
        out.append((str(path), Path(path).read_bytes()))
    return tuple(out)


def _key(head: tuple, paths: list[Path]) -> tuple | None:
    found = file_bytes(paths)
    return None if found is None else (head, found)


class ContentMemo:
    """The last few values of one loader, by its arguments and the bytes of the files it read."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self._values: dict[tuple, Any] = {}

    def get(self, head: tuple, paths: list[Path], load: Callable[[], Any]) -> Any:
        """``load()``, or its value for the same ``head`` (the loader's other arguments) and the same
        bytes of ``paths``. The bytes are read again after loading and the value kept only when they
        are unchanged (a file edited while it was read is memoized under neither content)."""
        before = _key(head, paths)
        if before is not None and before in self._values:
            return self._values[before]
        value = load()
        if before is not None and _key(head, paths) == before:
            if len(self._values) >= self.keep:
                self._values.pop(next(iter(self._values)))      # the oldest
            self._values[before] = value
        return value

    def clear(self) -> None:
        """Forget every value: the next call loads."""
        self._values.clear()


# -- a folder tree's values, trusted on its stat once it has settled ---------------------------------
#
# ContentMemo reads every file it keys on at every call: for the measured tables of one GPU that is
# 16 files, plus the walk of the whole gpus/measured/ tree that refuses symbolic links, about 2 ms
# per deployment point, a third of a warm re-evaluation. StampMemo answers from the stat of the
# tree instead, under git's rule for racy files: a stamp is trusted only when every entry it covers
# last changed at least SETTLED_S before the load began.
#
# Why that is sound: an entry's ctime is set by the kernel from the clock at every change of its
# bytes, size, name, links or times (utime included), and no call sets it to a chosen value. Any
# change after the load began therefore gives its entry a ctime at or after that moment (minus the
# file system's timestamp granularity, well under SETTLED_S), which differs from the recorded ctime
# (older than the moment by SETTLED_S): the stamp no longer matches and the loader runs. A change
# during the load is caught the same way; an entry that changed less than SETTLED_S before the load
# is never stamped, so an edit within one timestamp tick of the last one (same size, same mtime, same
# ctime tick) cannot be mistaken for no change: those loads go through the loader (and its
# ContentMemo) every time until the tree has settled. The stamp covers every folder of the tree
# (an entry added, removed, renamed or replaced by a link changes its folder's stat) and every
# file the value was read from. Assumes file times come from this machine's clock (a local file
# system), as the loaders' other checks do.

#: Seconds since its last change before an entry's stat is trusted (see above).
SETTLED_S = 2.0


def _stat_of(path: str) -> tuple | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def tree_folders(root: Path) -> list[str]:
    """``root`` and every folder under it (not through links), in a fixed order."""
    out, stack = [], [str(root)]
    while stack:
        folder = stack.pop()
        out.append(folder)
        try:
            with os.scandir(folder) as entries:
                stack.extend(sorted((e.path for e in entries if e.is_dir(follow_symlinks=False)), reverse=True))
        except OSError:
            pass
    return out


class StampMemo:
    """The last few values of one loader over files of one folder tree, by its arguments; a value
    is returned again while the stat of the tree's folders and of the files it was read from is
    unchanged and settled (see above), else the loader runs (errors are never kept)."""

    def __init__(self, keep: int = 8, clock: Callable[[], float] = time.time):
        self.keep = keep
        self.clock = clock
        self._values: dict[tuple, tuple] = {}

    def get(self, head: tuple, root: Path, load: Callable[[], tuple[Any, list]]) -> Any:
        """``load()``'s value (``load`` returns (value, the files it read)), or the one kept for
        ``head`` while the stamp of ``root``'s tree and those files is unchanged."""
        found = self._values.get(head)
        if found is not None and [_stat_of(p) for p in found[0]] == found[1]:
            return found[2]
        started = self.clock()
        value, files = load()
        paths = tree_folders(root) + [str(f) for f in files]
        stamp = [_stat_of(p) for p in paths]
        settled = started - SETTLED_S
        if all(s is not None for s in stamp) and max(max(s[4], s[5]) for s in stamp) < settled * 1e9:
            if head not in self._values and len(self._values) >= self.keep:
                self._values.pop(next(iter(self._values)))      # the oldest
            self._values[head] = (paths, stamp, value)
        else:
            self._values.pop(head, None)
        return value
