"""A build carries the published files the stamp of the published trees vouches for without reading
them (engine.batch.uptodate.vouched), and still sees every change a stat can show: a same-size,
same-mtime edit of a carried page or result file (its ctime differs) is read, found wrong and
rendered or evaluated again; a stamp whose anchor (the tree's manifest) changed vouches for nothing.

The corpus is the checkout's cut to one small model (Qwen3-0.6B, no what-if variants), over the
tiny test grid; ``--models`` makes the build run (a subset never answers from the stamp) while it
carries the model and every page group.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from engine.batch import publish, uptodate
from site_builder.cli import main
from tests.conftest import REPO
from tests.file_helpers import same_stat_edit

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
SPEC = "models/Qwen--Qwen3-0.6B.yaml"
PAGE = "models/Qwen--Qwen3-0.6B/index.html"
DOCUMENT = "models/Qwen--Qwen3-0.6B.json"


def _built(tmp_path, capsys) -> tuple[Path, Path]:
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    for spec in (root / "models").glob("*.yaml"):
        if spec.name != Path(SPEC).name:
            spec.unlink()
    for variant in (root / "variants").glob("*.yaml"):
        variant.unlink()
    out = tmp_path / "out"
    assert "1 models evaluated" in _build(root, out, capsys)
    return root, out


def _build(corpus: Path, out: Path, capsys, *extra: str) -> str:
    assert main(["--corpus", str(corpus), "build", "--out", str(out), "--grid", str(TINY), "--quiet",
                 "--jobs", "1", *extra]) == 0
    return capsys.readouterr().out


def _hashed(monkeypatch) -> list[Path]:
    """The files publish.file_digest reads from now on (every SHA-256 of a file goes through it)."""
    seen: list[Path] = []
    digest = publish.file_digest

    def recording(path):
        seen.append(Path(path))
        return digest(path)
    monkeypatch.setattr(publish, "file_digest", recording)
    return seen


def test_vouched_files_are_carried_unread_and_a_same_stat_edit_is_still_seen(tmp_path, capsys, monkeypatch):
    corpus, out = _built(tmp_path, capsys)
    _only_its_own_unchanged_trees(out, tmp_path)
    page, document = (out / "site" / PAGE).read_bytes(), (out / "results" / DOCUMENT).read_bytes()
    hashed = _hashed(monkeypatch)
    said = _build(corpus, out, capsys, "--models", "Qwen3-0.6B")
    assert "0 models evaluated, 1 reused" in said
    # the carried model's files and the carried page groups were not read: only what this build wrote
    # (the corpus-wide tables' own carry rule reads its three small files: engine/batch/corpus_tables.py)
    published = [p for p in hashed if p.is_relative_to(out) and p.relative_to(out).parts[0] in ("results", "site")
                 and p.name not in ("contracts.json", "variants.json", "variants.parquet")]
    assert published == [], published[:5]
    assert (out / "site" / PAGE).read_bytes() == page

    # a carried page and a carried result edited in place, size and mtime put back: only the ctime
    # tells, and the build reads both, renders the page and evaluates the model again
    same_stat_edit(out / "site" / PAGE, b"<main", b"<MAIN")
    same_stat_edit(out / "results" / DOCUMENT, document[:1], b"[" if document[:1] != b"[" else b"{")
    hashed.clear()
    said = _build(corpus, out, capsys, "--models", "Qwen3-0.6B")
    assert "1 models evaluated" in said
    assert (out / "site" / PAGE).read_bytes() == page
    assert (out / "results" / DOCUMENT).read_bytes() == document

    # the anchor rewritten (same bytes, a new file): the stamp vouches for nothing of that tree
    manifest = out / "results" / "manifest.json"
    assert DOCUMENT in uptodate.vouched(out, "results", "manifest.json")
    data = manifest.read_bytes()
    manifest.unlink()
    manifest.write_bytes(data)
    assert uptodate.vouched(out, "results", "manifest.json") == {}


def _only_its_own_unchanged_trees(out: Path, tmp_path: Path) -> None:
    """A stamp vouches for its own output's files only (a copy's are other files), and a file's
    stat decides only with its stamped key (another file is hashed)."""
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert uptodate.vouched(copy, "site", "site-manifest.json") == {}       # another output's stamp
    vouched = uptodate.vouched(out, "site", "site-manifest.json")
    assert PAGE in vouched and "site-manifest.json" in vouched
    assert DOCUMENT in uptodate.vouched(out, "results", "manifest.json")
    # an edited page is not vouched for by its stat (read and hashed: the recorded SHA-256 decides)
    record = json.loads((out / "site" / "site-manifest.json").read_text())["groups"]["Qwen/Qwen3-0.6B"]["files"][PAGE]
    assert uptodate.matches(out / "site" / PAGE, record, vouched[PAGE])
    assert not uptodate.matches(copy / "site" / PAGE, {**record, "sha256": "0" * 64}, vouched[PAGE])
