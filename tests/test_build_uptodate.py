"""A whole-corpus build with nothing to do answers from the stamp of the published trees and writes
nothing (engine/batch/uptodate.py); every change it must see still rebuilds: a spec edit that keeps
the file's size and mtime, a damaged result file with its size and mtime put back, a file added to
the results, a file written in the stamp's last clock tick (checked by content).

The corpus is the checkout's cut to one small model (Qwen3-0.6B, no what-if variants: they name
other models), over the tiny test grid, so a whole-corpus build takes seconds.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.batch import publish, uptodate
from site_builder import incremental, pages
from site_builder.cli import main
from tests.file_helpers import same_stat_edit
from tests.conftest import REPO

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
SPEC = "models/Qwen--Qwen3-0.6B.yaml"
PAGE = "models/Qwen--Qwen3-0.6B/index.html"


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "corpus"
    shutil.copytree(REPO / "corpus", root)
    for spec in (root / "models").glob("*.yaml"):
        if spec.name != Path(SPEC).name:
            spec.unlink()
    for variant in (root / "variants").glob("*.yaml"):
        variant.unlink()
    return root


def _build(corpus: Path, out: Path, capsys, *extra: str) -> str:
    assert main(["--corpus", str(corpus), "build", "--out", str(out), "--grid", str(TINY), "--quiet",
                 "--jobs", "1", *extra]) == 0
    return capsys.readouterr().out


def _state(out: Path) -> dict[str, tuple]:
    """Every entry below ``out`` with its bytes and inode: 'nothing written' compares this."""
    return {p.relative_to(out).as_posix(): (None if p.is_dir() else p.read_bytes(), p.stat().st_ino)
            for p in sorted(out.rglob("*")) if p.name != ".lock"}




def test_nothing_to_do_writes_nothing_and_every_planted_change_rebuilds(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert "1 models evaluated" in _build(corpus, out, capsys)
    before = _state(out)
    said = _build(corpus, out, capsys)
    assert "up to date, nothing written" in said and "0 models evaluated, 1 reused" in said
    assert "site: up to date (" in said
    assert _state(out) == before                      # not a byte, not an inode

    # a spec edit that keeps the file's size and mtime: its bytes are hashed, so it rebuilds
    same_stat_edit(corpus / SPEC, b"Dense GQA transformer", b"Dense GQA Transformer")
    assert "1 models evaluated" in _build(corpus, out, capsys)
    # the old trees' removal changed every carried file's ctime just before the stamp: on a file
    # system with sub-second times they are let age, so the stamp hashes none of them
    stamp = json.loads(uptodate.stamp_path(out).read_text())
    walked = {name: (tree["files"], tree["folders"]) for name, tree in stamp["trees"].items()}
    if uptodate._window(walked) == uptodate.FINE_RACY_NS:
        assert all(not tree["racy"] for tree in stamp["trees"].values())
    assert "up to date" in _build(corpus, out, capsys)

    _stamp_vouches_only_for_its_own_unchanged_trees(out, tmp_path)

    # a damaged result and a damaged page with their size and mtime put back: the ctime differs, so
    # the build looks (the stamp vouches for neither: uptodate.vouched), finds each SHA-256 wrong,
    # rebuilds the model and renders the page again
    document = next((out / "results" / "models").glob("*.json"))
    data = document.read_bytes()
    page = out / "site" / PAGE
    html = page.read_bytes()
    same_stat_edit(document, data[:1], b"[" if data[:1] != b"[" else b"{")
    same_stat_edit(page, b"<main", b"<MAIN")
    said = _build(corpus, out, capsys)
    assert "up to date" not in said and "1 models evaluated" in said
    assert document.read_bytes() == data and page.read_bytes() == html

    # a file added to the published results: not what a build publishes, so the build runs; it
    # carries the model's files and every page group without reading them (their stat is the
    # stamp's): it hashes only what it writes (and the corpus-wide tables' three small files, which
    # their own carry rule reads: engine/batch/corpus_tables.py)
    assert "up to date" in _build(corpus, out, capsys)
    (out / "results" / "stray.txt").write_text("x")
    hashed = _hashed(monkeypatch)
    said = _build(corpus, out, capsys)
    assert "up to date" not in said and "0 models evaluated, 1 reused" in said
    assert not (out / "results" / "stray.txt").exists()
    published = [p for p in hashed if p.is_relative_to(out) and p.relative_to(out).parts[0] in ("results", "site")
                 and p.name not in ("contracts.json", "variants.json", "variants.parquet")]
    assert published == [], published[:5]
    monkeypatch.undo()

    # --models and --no-site: a subset never answers from the stamp; a results-only build does
    assert "up to date" not in _build(corpus, out, capsys, "--models", "Qwen3-0.6B")
    assert "up to date" in _build(corpus, out, capsys, "--no-site")


def _hashed(monkeypatch) -> list[Path]:
    """The files publish.file_digest reads from now on (every SHA-256 of a file goes through it)."""
    seen: list[Path] = []
    digest = publish.file_digest

    def recording(path):
        seen.append(Path(path))
        return digest(path)
    monkeypatch.setattr(publish, "file_digest", recording)
    return seen


def _stamp_vouches_only_for_its_own_unchanged_trees(out: Path, tmp_path: Path) -> None:
    """The stamp vouches for the published files of its own output (a copy's are other files),
    a file's stat decides only with its stamped key, and nothing of a tree whose manifest (the
    record the files are compared with) is not the stamped file."""
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert uptodate.vouched(copy, "site", "site-manifest.json") == {}       # another output's stamp
    vouched = uptodate.vouched(out, "site", "site-manifest.json")
    assert PAGE in vouched and "site-manifest.json" in vouched
    record = json.loads((out / "site" / "site-manifest.json").read_text())["groups"]["Qwen/Qwen3-0.6B"]["files"][PAGE]
    assert uptodate.matches(out / "site" / PAGE, record, vouched[PAGE])
    assert not uptodate.matches(copy / "site" / PAGE, {**record, "sha256": "0" * 64}, vouched[PAGE])
    manifest = copy / "results" / "manifest.json"
    assert uptodate.vouched(out, "results", "manifest.json")
    # the anchor rewritten (same bytes, a new file): nothing of that tree is vouched for
    shutil.copy2(manifest, out / "results" / "manifest.json.new")
    (out / "results" / "manifest.json.new").replace(out / "results" / "manifest.json")
    assert uptodate.vouched(out, "results", "manifest.json") == {}
    assert uptodate.vouched(out, "site", "site-manifest.json") == vouched
    shutil.rmtree(copy)


def test_a_file_written_in_the_stamps_last_clock_tick_is_checked_by_content(tmp_path, monkeypatch):
    """A file whose times are within RACY_NS of the stamp is recorded with its SHA-256: a later
    write in the same clock tick (same size and times: simulated here by a stat key without the
    times) is still seen."""
    root = tmp_path / "results"
    root.mkdir()
    (root / "a.json").write_text("[1,2]")
    monkeypatch.setattr(uptodate, "_key", lambda st: [st.st_size, st.st_ino, st.st_dev])
    files, folders = uptodate._tree(root)
    stamped = {"files": files, "folders": folders, "racy": {"a.json": uptodate._sha256(root / "a.json")}}
    assert uptodate._same_tree(root, stamped)
    (root / "a.json").write_text("[1,3]")
    assert not uptodate._same_tree(root, stamped)


def test_the_site_sources_digest_covers_every_published_page_source():
    """A consistency test: each Markdown page the site publishes (site_builder.pages.DOCS) is one
    of the files sources_digest hashes (docs/*.md and CONTRIBUTING.md)."""
    hashed = {*(REPO / "docs").glob("*.md"), REPO / "CONTRIBUTING.md"}
    assert {path for _, path, _ in pages.DOCS} <= hashed
    assert len(incremental.sources_digest()) == 64
