"""Publishing's bulk file-system work (engine/batch/publish.py): the staged tree's fsync skips the
files carried as hard links from a published tree (their bytes were made durable when it was
published), never a freshly written file or a folder; the old trees are removed in threads, a link
unlinked and never followed."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from engine.batch import publish


def test_fsync_tree_skips_carried_hard_links_and_keeps_their_folders(tmp_path, monkeypatch):
    published, staged = tmp_path / "published", tmp_path / "staged"
    (published / "d").mkdir(parents=True)
    (published / "d" / "carried.json").write_text("old")
    (staged / "d").mkdir(parents=True)
    os.link(published / "d" / "carried.json", staged / "d" / "carried.json")     # previous._carry's way
    (staged / "new.json").write_text("new")
    seen: list[Path] = []
    lock = threading.Lock()

    def record(path, directory=False):
        with lock:
            seen.append(Path(path))
    monkeypatch.setattr(publish, "_fsync", record)
    publish._fsync_tree(staged)
    assert sorted(seen) == sorted([staged, staged / "d", staged / "new.json"])


def test_remove_tree_removes_everything_below_and_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    root = tmp_path / ".old-site-abcd"
    for rel in ("index.html", "models/a/index.html", "models/a/deploy/index.html", "static/js/x.js"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / "models" / "link").symlink_to(outside)           # a link to a folder: unlinked, not entered
    (root / "models" / "file-link").symlink_to(outside / "keep.txt")
    publish.remove_tree(root)
    assert not root.exists() and not root.is_symlink()
    assert (outside / "keep.txt").read_text() == "mine"
    publish.remove_tree(tmp_path / "absent")                 # nothing there: nothing done, no error
