"""Test helpers that edit files the way a cache must not be fooled by."""
from __future__ import annotations

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
