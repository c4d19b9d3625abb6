"""The site render is incremental and its static files are content-addressed (issue 19).

A build with nothing changed carries every page group from the published site (hard links, the
same files); a one-spec edit re-renders that model's pages and the corpus-wide ones only; either
way the published site is byte for byte what a from-scratch render of the same results gives.
Every static URL a page references names its file by content hash, so netlify.toml's year-long
``immutable`` on /static/* never keeps a stale file.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from engine.batch.results import build
from engine.language.corpus import load_corpus
from site_builder.render import SITE_MANIFEST, render_pages, render_staged

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its built site twice.
pytestmark = pytest.mark.xdist_group("site_incremental")

REPO = Path(__file__).resolve().parent.parent
TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
MODELS = ["Qwen3-8B", "gpt-oss-20b"]


def _tree(site: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of a site: its inode and bytes."""
    return {p.relative_to(site).as_posix(): (p.stat().st_ino, p.read_bytes())
            for p in sorted(site.rglob("*")) if p.is_file()}


def _fresh(results: Path, tmp: Path) -> dict[str, bytes]:
    target = tmp / "fresh-site"
    shutil.rmtree(target, ignore_errors=True)
    render_pages(results, target)
    return {k: v for k, (_, v) in _tree(target).items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("incremental")
    corpus_dir = tmp / "corpus"
    shutil.copytree(REPO / "corpus", corpus_dir)
    out = tmp / "out"
    build(load_corpus(corpus_dir), out, MODELS, TINY, jobs=1, site=render_staged)
    return tmp, corpus_dir, out


def test_no_change_build_carries_every_page(built):
    tmp, corpus_dir, out = built
    before = _tree(out / "site")
    manifest = json.loads((out / "site" / SITE_MANIFEST).read_text())
    assert {"static", "gallery", "Qwen/Qwen3-8B", "openai/gpt-oss-20b", "methodology"} <= set(manifest["groups"])
    build(load_corpus(corpus_dir), out, MODELS, TINY, jobs=1, site=render_staged)
    after = _tree(out / "site")
    assert set(after) == set(before)
    for rel, (inode, data) in after.items():
        assert data == before[rel][1], rel
        if rel.startswith(("models/", "data/", "static/", "methodology/", "components/")) or rel == "index.html":
            assert inode == before[rel][0], f"{rel} was rendered again although nothing changed"
    assert {k: v for k, (_, v) in after.items()} == _fresh(out / "results", tmp)


def test_one_spec_edit_renders_that_model_again_and_matches_a_fresh_render(built):
    tmp, corpus_dir, out = built
    before = _tree(out / "site")
    spec = corpus_dir / "models" / "Qwen--Qwen3-8B.yaml"
    spec.write_text(spec.read_text().replace("head_dim is set in the config", "head_dim (128) is set in the config"))
    report = build(load_corpus(corpus_dir), out, MODELS, TINY, jobs=1, site=render_staged)
    assert report.recomputed == ["Qwen/Qwen3-8B"]
    after = _tree(out / "site")
    assert "head_dim (128) is set" in (out / "site" / "models" / "Qwen--Qwen3-8B" / "index.html").read_text()
    for rel, (inode, _) in after.items():
        if "gpt-oss-20b" in rel and not rel.startswith("downloads/"):
            assert inode == before[rel][0], f"{rel}: another model's page was rendered again"
        if rel.startswith(("data/models/Qwen--Qwen3-8B", "models/Qwen--Qwen3-8B/")) and rel in before:
            assert inode != before[rel][0], f"{rel}: the edited model's page was carried"
    assert {k: v for k, (_, v) in after.items()} == _fresh(out / "results", tmp)


def test_a_notes_edit_carries_the_components_pages(built):
    """Issue 19: the components pages are keyed by what they show (each attention component's uses,
    the graph it is drawn from, contracts.json), not by every model's results: a model's notes
    change none of it, so they are carried (same files), and the site still equals a fresh render."""
    tmp, corpus_dir, out = built
    before = _tree(out / "site")
    spec = corpus_dir / "models" / "openai--gpt-oss-20b.yaml"
    spec.write_text(spec.read_text().replace("notes: >-", "notes: >-\n  (edited)", 1))
    report = build(load_corpus(corpus_dir), out, MODELS, TINY, jobs=1, site=render_staged)
    assert report.recomputed == ["openai/gpt-oss-20b"]
    after = _tree(out / "site")
    assert "(edited)" in (out / "site" / "models" / "openai--gpt-oss-20b" / "index.html").read_text()
    shown = [rel for rel in after if rel.startswith("components/")]
    assert {"components/index.html", "components/gqa_attention/index.html"} <= set(shown)
    for rel in shown:
        assert after[rel][0] == before[rel][0], f"{rel} was rendered again although nothing it shows changed"
    assert after["index.html"][0] != before["index.html"][0]      # the gallery (it shows every model) was not
    assert {k: v for k, (_, v) in after.items()} == _fresh(out / "results", tmp)


def test_a_damaged_published_page_is_rendered_again(built):
    tmp, corpus_dir, out = built
    page = out / "site" / "models" / "openai--gpt-oss-20b" / "index.html"
    good = page.read_bytes()
    page.unlink()                       # never write through a published file: it may be linked
    page.write_bytes(good.replace(b"<main", b"<main data-damaged"))
    build(load_corpus(corpus_dir), out, MODELS, TINY, jobs=1, site=render_staged)
    assert page.read_bytes() == good


# -- static files: content-hashed names ------------------------------------------------------------

STATIC_URL = re.compile(r'(?:src|href)="((?:\.\./)*static/[^"]+)"')


def test_every_static_url_names_its_content_hash(built):
    tmp, corpus_dir, out = built
    site = out / "site"
    seen = set()
    for page in site.rglob("*.html"):
        for url in STATIC_URL.findall(page.read_text()):
            target = (page.parent / url).resolve()
            assert target.is_file(), f"{page.relative_to(site)}: {url} does not exist"
            name = target.name
            sha = hashlib.sha256(target.read_bytes()).hexdigest()[:8]
            assert f".{sha}." in name or name.endswith(f".{sha}"), f"{url}: name does not carry its content hash"
            seen.add(name)
    assert any(n.startswith("deploy.") for n in seen) and any(n.startswith("site.") for n in seen)
    # nothing under static/ is published under a name that would outlive a change of its bytes
    for path in (site / "static").rglob("*"):
        if path.is_file():
            assert hashlib.sha256(path.read_bytes()).hexdigest()[:8] in path.name, path


def test_a_changed_static_file_gets_a_new_name(tmp_path, monkeypatch):
    from site_builder import sources
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "static", repo / "static")
    monkeypatch.setattr(sources, "STATIC", repo / "static")
    monkeypatch.setattr(sources, "REPO", repo)
    before, digest = sources.static_assets()
    (repo / "static" / "js" / "deploy.js").write_text((repo / "static" / "js" / "deploy.js").read_text() + "\n// edit\n")
    after, digest2 = sources.static_assets()
    assert after["js/deploy.js"] != before["js/deploy.js"] and digest2 != digest
    assert {k: v for k, v in after.items() if k != "js/deploy.js"} == \
        {k: v for k, v in before.items() if k != "js/deploy.js"}


def test_netlify_marks_only_hashed_paths_immutable():
    """Every header rule of netlify.toml that says ``immutable`` covers /static/ only, which holds
    content-hashed names alone (the tests above)."""
    import tomllib
    config = tomllib.loads((REPO / "netlify.toml").read_text())
    for rule in config.get("headers", []):
        if "immutable" in rule.get("values", {}).get("Cache-Control", ""):
            assert rule["for"].startswith("/static/"), rule


def test_ci_builds_restore_the_previous_build():
    """The incremental build only pays off if build/ survives between runs: the workflow restores
    it with actions/cache (an exact key on the inputs, falling back to the newest previous build of
    the same Python) before `archledger build`. Netlify does not build (CI is the one deploy path:
    tests/test_ci_workflow.py), so it keeps no build/ of its own."""
    import tomllib
    import yaml
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "site.yml").read_text())
    steps = workflow["jobs"]["build"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    cache = next(s for s in steps if str(s.get("uses", "")).startswith("actions/cache"))
    assert cache["with"]["path"] == "build"
    assert cache["with"]["key"].startswith(cache["with"]["restore-keys"]) and cache["with"]["restore-keys"].startswith("build-")
    assert steps.index(cache) < names.index("Build results and site")
    netlify = tomllib.loads((REPO / "netlify.toml").read_text())
    assert not any(p["package"] == "netlify-plugin-cache" for p in netlify.get("plugins", []))


def test_parallel_render_is_byte_identical_to_serial(built, tmp_path, monkeypatch):
    """Consistency (the renderer with itself): model page groups rendered in worker processes give
    the same files, byte for byte, as the same groups rendered in this process."""
    _, _, out = built
    trees = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("ARCHLEDGER_RENDER_JOBS", jobs)
        target = tmp_path / f"site-{jobs}"
        render_pages(out / "results", target)
        trees[jobs] = {k: v for k, (_, v) in _tree(target).items()}
    assert len(trees["1"]) > 20 and any(k.startswith("models/Qwen--Qwen3-8B/") for k in trees["1"])
    assert trees["1"] == trees["2"]
