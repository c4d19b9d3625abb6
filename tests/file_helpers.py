"""Test helpers for files: edits a cache must not be fooled by, and a build's files read for a byte comparison."""
from __future__ import annotations

import json
import os
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
