"""A lone split model's grid half runs in the build's own process (engine.batch.tasks.HOME_PART).

With --jobs 2 and one model worth two tasks, the build process evaluates the grid half itself while
a pool of one worker takes the other half (and the corpus-wide tables); every result file equals
the one-process build's, byte for byte (the manifest but for its timings). The model is Qwen3-0.6B on
the tiny grid, split by setting SPLIT_SECONDS to 0 (on this grid no model takes it). The site then
renders the model's page group in that idle worker (engine.batch.results._publish hands the pool
over), readied first by the site callable's ``prepare``, and equals a one-process render.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.batch import tasks
from engine.batch.results import build
from engine.language.corpus import load_corpus
from site_builder.render import render_pages, render_staged
from tests.file_helpers import files_of, without_seconds

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
MODEL = "Qwen/Qwen3-0.6B"


PREPARED = "ARCHLEDGER_TEST_PREPARED"


def _prepare() -> None:
    """The test's site ``prepare``: says which process ran it (a file named by the environment)."""
    Path(os.environ[PREPARED]).write_text(str(os.getpid()))


@pytest.mark.long
def test_the_grid_half_runs_here_and_writes_what_one_process_writes(tmp_path, monkeypatch):
    one = files_of(build(load_corpus(), tmp_path / "one", models=[MODEL], grid_path=TINY, jobs=1).results)
    monkeypatch.setattr(tasks, "SPLIT_SECONDS", 0.0)
    here, pools = [], []
    build_model, pool = tasks.build_model, tasks._pool

    def recorded_build(*args, **kwargs):          # what ran in this process (the workers import their own)
        here.append((args[1], kwargs.get("part", "all")))
        return build_model(*args, **kwargs)

    def recorded_pool(*args, **kwargs):
        made = pool(*args, **kwargs)
        pools.append(None if made is None else made._max_workers)
        return made
    monkeypatch.setattr(tasks, "build_model", recorded_build)
    monkeypatch.setattr(tasks, "_pool", recorded_pool)
    import engine.batch.results as results
    monkeypatch.setattr(results, "_pool", recorded_pool)
    monkeypatch.setenv(PREPARED, str(tmp_path / "prepared"))
    handed = []

    def site(results_dir, site_dir, progress=None, workers=None):   # the command's site callable, recorded
        handed.append(workers)
        render_staged(results_dir, site_dir, progress, workers=workers)
    site.prepare = _prepare
    halves = files_of(build(load_corpus(), tmp_path / "halves", models=[MODEL], grid_path=TINY, jobs=2, site=site).results)
    assert here == [(MODEL, "grid")] and pools == [1]
    # the site's model group went to the build's idle worker, readied by the site's prepare (run
    # there, not here), and the pages are a one-process render's, byte for byte
    assert handed[0] is not None and handed[0]._max_workers == 1
    assert int((tmp_path / "prepared").read_text()) != os.getpid()
    render_pages(tmp_path / "halves" / "results", tmp_path / "fresh")
    assert files_of(tmp_path / "halves" / "site") == files_of(tmp_path / "fresh")
    assert sorted(halves) == sorted(one)
    assert {name.split("/")[0] for name in one} >= {"deployments", "ops", "fronts", "sizing", "models", "formulas",
                                                     "playground", "variants.json"}
    for name in one:
        assert (without_seconds(one[name]) == without_seconds(halves[name]) if name == "manifest.json"
                else one[name] == halves[name]), name
