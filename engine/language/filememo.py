"""Per-process memo of what a loader made of a few small files, keyed by the files' bytes.

Layer: engine.language. A build evaluates every model against the same grid, GPU and fusion files;
reading and checking them once per model cost about 3 s of CPU over the corpus. The loaders
(:func:`engine.batch.grid.load_grid`, :func:`engine.deploy.hardware.load_gpus`,
:func:`engine.deploy.fusion_table.load_tables`, :func:`engine.serving.fronts.load_sizing`) keep their
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
