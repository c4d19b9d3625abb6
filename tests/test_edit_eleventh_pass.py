"""The one-spec edit's site tail, eleventh pass (issue 42): the downloads page reads each Parquet
footer once.

The downloads group is re-rendered on every build (it lists every group's files), in the build's
own process after the site-wide groups: on a one-spec edit it is on the command's critical path.
It asked each placed Parquet file's row count twice (whether to place it, then for the listing:
two footer reads of the same file, under results/ and as its hard link under downloads/). Here a
small results folder is made by hand (row counts chosen per model and table, one partition empty,
so a memo under the wrong key lists wrong rows), the group is rendered, and:

* consistency check: the listing the page was rendered from equals a fresh listing that reads
  every footer again from the placed files (``listing`` without the render's counts);
* each Parquet file's footer is read exactly once (planted bugs, checked: the memo dropped reads
  each placed file twice and fails this; a memo keyed by the table alone lists the first file's
  rows for every model and fails both).
"""
from __future__ import annotations

import json

import polars as pl
import pytest

from site_builder import downloads
from site_builder.data import Results

#: (model, its rows per table): every count different, one sizing partition empty (not placed).
MODELS = {"org/Alpha-1B": {"deployments": 3, "ops": 5, "fronts": 2, "sizing": 0},
          "org/Beta-7B": {"deployments": 7, "ops": 11, "fronts": 4, "sizing": 6}}
VARIANT_ROWS = 2


def _write(path, rows: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"x": list(range(rows))}, schema={"x": pl.Int64}).write_parquet(path)


@pytest.fixture
def results(tmp_path):
    """A results folder with the files the downloads group reads, and its :class:`Results`."""
    root = tmp_path / "results"
    models = pl.DataFrame({"model_id": list(MODELS)})
    root.mkdir()
    models.write_parquet(root / "models.parquet")
    for model_id, tables in MODELS.items():
        slug = model_id.replace("/", "--")
        for table, rows in tables.items():
            _write(root / table / f"model={slug}" / "part.parquet", rows)
    _write(root / "variants.parquet", VARIANT_ROWS)
    documents = {m: {"name": m.split("/")[1]} for m in MODELS}
    return Results(root, models, documents, None, None)


class _Site:
    """The part of :class:`site_builder.writer.Site` the group uses, the page's data kept."""

    def __init__(self, folder, place):
        self.folder, self._place, self.pages, self.files = folder, place, {}, {}

    def place(self, source, path):
        self._place(self, source, path)

    def file(self, path, text):
        self.files[path] = text

    def page(self, path, template, title, data, **context):
        self.pages[path] = json.loads(json.dumps(context))


@pytest.fixture
def site(tmp_path):
    from site_builder.writer import Site
    real = Site(tmp_path / "site", None)
    return _Site(real.folder, lambda _, source, path: real.place(source, path))


def _rendered(site, results, monkeypatch) -> list:
    """Render the group; the footers it read, in order."""
    read = []
    real = downloads._rows

    def counting(path):
        read.append(path)
        return real(path)
    monkeypatch.setattr(downloads, "_rows", counting)
    downloads.render(site, results, lambda rows: "")
    monkeypatch.setattr(downloads, "_rows", real)
    return read


def test_the_listing_equals_one_that_reads_every_placed_file_again(site, results, monkeypatch):
    _rendered(site, results, monkeypatch)
    fresh = json.loads(json.dumps(downloads.listing(site.folder, results)))
    assert site.pages["downloads"] == fresh
    listed = {f["href"]: f["rows"] for t in fresh["per_model"] for f in t["files"]}
    # by hand: every non-empty partition placed and listed with its own rows, the empty one absent
    assert listed == {f"{t}/model={m.replace('/', '--')}/part.parquet": n
                      for m, tables in MODELS.items() for t, n in tables.items() if n}
    assert {t["href"]: t["rows"] for t in fresh["tables"] if t["href"].endswith(".parquet")} == \
        {"models.parquet": len(MODELS), "variants.parquet": VARIANT_ROWS}


def test_each_parquet_footer_is_read_once(site, results, monkeypatch):
    read = _rendered(site, results, monkeypatch)
    names = [p.relative_to(p.parents[2]).as_posix() if "model=" in p.as_posix() else p.name for p in read]
    # 8 partitions (the empty one read to decide it is not placed), variants and models: 10 files
    assert len(names) == len(set(names)) == 2 * 4 + 2


# -- the render queues the groups it must render before carrying the others ---------------------------
#
# On a one-spec edit the build hands its idle worker to the render, and the edited model's page group
# was submitted only after this process had carried every other model's group (hard links, a fifth
# of its render), so the worker waited that long. Now a group whose key changed is queued first; a
# group whose carry fails (a damaged published file) is queued after the carries. So is the deploy
# pages' shared group (render.POOLED) when its key changed: with it in the worker, the build process
# builds no chart on such an edit and never imports Altair.

import shutil  # noqa: E402
from concurrent.futures import Future  # noqa: E402
from pathlib import Path  # noqa: E402

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
PAIR = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"]


class _Pool:
    """An executor that runs nothing: each submitted group is recorded and left pending, so the
    render takes every one back (``_take_share``) and renders it in this process."""

    def __init__(self, events: list):
        self.events = events

    def submit(self, fn, *args):
        self.events.append(("queued", args[-1]))
        return Future()


@pytest.fixture(scope="module")
def pair_site(tmp_path_factory):
    from engine.batch.results import build
    from engine.language.corpus import load_corpus
    from site_builder.render import render_staged
    out = tmp_path_factory.mktemp("edit-eleventh") / "out"
    build(load_corpus(), out, PAIR, TINY, jobs=1, site=render_staged)
    return out


def _files(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


def test_changed_groups_are_queued_before_the_carries_and_a_damaged_one_after(pair_site, tmp_path, monkeypatch):
    from site_builder import render
    from site_builder.incremental import SITE_MANIFEST
    previous = tmp_path / "site"
    shutil.copytree(pair_site / "site", previous)           # copies: nothing vouched, every carry hashes
    manifest = json.loads((previous / SITE_MANIFEST).read_text())
    manifest["groups"][PAIR[0]]["key"] = "an older key"      # PAIR[0]'s inputs "changed"
    manifest["groups"]["deploy-shared"]["key"] = "an older key"       # and the deploy pages' shared group's
    (previous / SITE_MANIFEST).write_text(json.dumps(manifest))
    damaged = previous / "models" / "Qwen--Qwen3-1.7B" / "index.html"
    damaged.write_bytes(damaged.read_bytes().replace(b"<main", b"<main data-damaged"))   # PAIR[1] cannot be carried
    events: list = []
    real_carry = render._carry

    def carry(prev, site, record, vouched=None):
        ok = real_carry(prev, site, record, vouched)
        models = sorted({rel.split("/")[1] for rel in record["files"] if rel.startswith("models/")})
        if models:
            events.append(("carried" if ok else "not carried", models[0].replace("--", "/")))
        return ok
    monkeypatch.setattr(render, "_carry", carry)
    staged = tmp_path / "staged"
    render.render_pages(pair_site / "results", staged, previous=previous, workers=_Pool(events))
    assert events == [("queued", PAIR[0]), ("queued", "deploy-shared"), ("not carried", PAIR[1]), ("queued", PAIR[1])]
    # consistency: the staged site equals a fresh render of the same results, byte for byte
    fresh = tmp_path / "fresh"
    render.render_pages(pair_site / "results", fresh)
    assert _files(staged) == _files(fresh)


def test_an_unchanged_group_is_carried_and_nothing_is_queued(pair_site, tmp_path, monkeypatch):
    from site_builder import render
    previous = tmp_path / "site"
    shutil.copytree(pair_site / "site", previous)
    events: list = []
    staged = tmp_path / "staged"
    render.render_pages(pair_site / "results", staged, previous=previous, workers=_Pool(events))
    assert events == []
    assert _files(staged) == _files(pair_site / "site")


def test_the_renderer_imports_altair_only_when_a_chart_is_built():
    """A build's own process imports the renderer at its start; Altair (about 0.25 CPU-s) is imported
    by the first chart built (site_builder/charts.py), which on a one-spec edit is in the worker."""
    import subprocess
    import sys
    code = ("import sys, site_builder.render as r; assert 'altair' not in sys.modules, 'imported'; "
            "from site_builder import charts; charts.deployment_specs(); assert 'altair' in sys.modules; "
            "r.prepare_worker(); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.strip() == "ok", done.stderr
