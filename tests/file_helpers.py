"""Test helpers for files: edits a cache must not be fooled by, and a build's files read for a byte comparison."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def same_stat_edit(path: Path, old: bytes | str, new: bytes | str) -> None:
    """Replace ``old`` by ``new`` (same length) in ``path`` and put its atime and mtime back: only
    its bytes differ (its size and mtime are what they were)."""
    old, new = (s.encode() if isinstance(s, str) else s for s in (old, new))
    assert len(old) == len(new)
    st = path.stat()
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its POSIX path relative to ``root``: its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def without_seconds(manifest: bytes) -> dict:
    """A results manifest minus each model's wall-clock timings (``seconds``, ``sizing_seconds``:
    different on every run)."""
    data = json.loads(manifest)
    for entry in data["models"].values():
        entry.pop("seconds")
        entry.pop("sizing_seconds", None)
    return data


def linked_copy(pristine: Path, to: Path) -> Path:
    """A copy of the tree ``pristine`` at ``to`` whose files are hard links to pristine's: the same
    bytes for a tenth of the time and the disk writes of a real copy (a corpus and gpus/ tree is
    some 540 files, copied again for each of a module's cases). Invariant: ``pristine`` stays as it
    was only while nothing writes into a file of the copy in place; a case edits a file through
    :func:`rewrite`, which gives the copy its own file. ``pristine`` must itself be a test's copy,
    never the repository's tree."""
    shutil.copytree(pristine, to, copy_function=os.link)
    return to


def rewrite(path: Path, data: bytes | str) -> None:
    """Writes ``data`` to ``path`` as a new file (the old name unlinked first), so that a file
    :func:`linked_copy` shares with its pristine tree is replaced in the copy only."""
    path.unlink(missing_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
