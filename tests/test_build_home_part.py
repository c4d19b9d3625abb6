"""A lone split model's grid half runs in the build's own process (engine.batch.tasks.HOME_PART).

With --jobs 2 and one model worth two tasks, the build process evaluates the grid half itself while
a pool of one worker takes the other half (and the corpus-wide tables); every result file equals
the one-process build's, byte for byte (the manifest but for its timings). The model is Qwen3-0.6B on
the tiny grid, split by setting SPLIT_SECONDS to 0 (on this grid no model takes it).
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.batch import tasks
from engine.batch.results import build
from engine.language.corpus import load_corpus

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
MODEL = "Qwen/Qwen3-0.6B"


def _files(results: Path) -> dict[str, bytes]:
    return {p.relative_to(results).as_posix(): p.read_bytes() for p in sorted(results.rglob("*")) if p.is_file()}


def _without_seconds(manifest: bytes) -> dict:
    data = json.loads(manifest)
    for entry in data["models"].values():
        entry.pop("seconds")
        entry.pop("sizing_seconds", None)
    return data


def test_the_grid_half_runs_here_and_writes_what_one_process_writes(tmp_path, monkeypatch):
    one = _files(build(load_corpus(), tmp_path / "one", models=[MODEL], grid_path=TINY, jobs=1).results)
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
    halves = _files(build(load_corpus(), tmp_path / "halves", models=[MODEL], grid_path=TINY, jobs=2).results)
    assert here == [(MODEL, "grid")] and pools == [1]
    assert sorted(halves) == sorted(one)
    assert {name.split("/")[0] for name in one} >= {"deployments", "ops", "fronts", "sizing", "models", "formulas",
                                                     "playground", "variants.json"}
    for name in one:
        assert (_without_seconds(one[name]) == _without_seconds(halves[name]) if name == "manifest.json"
                else one[name] == halves[name]), name
