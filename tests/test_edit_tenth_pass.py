"""A one-spec edit of a family's follower is split like its family's leader (engine.batch.tasks._alone_seconds).

A whole build runs a family's models one after the other in one process (engine.batch.families),
so a follower's recorded seconds are a fraction of what it costs alone (DeepSeek-V3 after
DeepSeek-R1: 3.2 s against 18 s); the split decision of a one-spec edit (tasks._split) reads the
longest seconds recorded for a model of the edited model's family instead. Expectations here are
hand-derived from the planted manifests, and the split build's files are checked against the
one-process build's, byte for byte (a consistency check: where a model runs never changes its files).
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.batch import tasks
from engine.batch.previous import Previous
from engine.batch.results import build
from engine.language.corpus import load_corpus
from tests.file_helpers import files_of, without_seconds

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
LEADER, FOLLOWER = "Qwen/Qwen3-1.7B", "Qwen/Qwen3-0.6B"     # one family (Qwen3) in the corpus


def _previous(seconds: dict[str, float]) -> Previous:
    return Previous(Path("."), models={m: {"seconds": s} for m, s in seconds.items()})


FAMILIES = {"ds/R1": "DeepSeek-V3", "ds/V3": "DeepSeek-V3", "ds/V3.2": "DeepSeek-V3", "q/8B": "Qwen3",
            "lone/X": None}


def _family(model: str):
    return FAMILIES[model]          # KeyError for a model the corpus no longer has, as corpus.models[m]


def test_a_follower_stands_for_its_family_s_longest_seconds():
    previous = _previous({"ds/R1": 18.4, "ds/V3": 3.2, "ds/V3.2": 31.9, "q/8B": 2.0, "lone/X": 1.0,
                          "gone/Y": 99.0})
    # by hand: V3's family holds R1 (18.4) and V3.2 (31.9): the longest is 31.9
    assert tasks._alone_seconds("ds/V3", previous, _family) == 31.9
    assert tasks._alone_seconds("ds/V3.2", previous, _family) == 31.9
    # a family of one keeps its own; no family (None) is no family shared with another None;
    # a removed model (not in the corpus: KeyError) is nobody's kin
    assert tasks._alone_seconds("q/8B", previous, _family) == 2.0
    assert tasks._alone_seconds("lone/X", previous, _family) == 1.0
    # without families (the former rule): the model's own seconds
    assert tasks._alone_seconds("ds/V3", previous) == 3.2


def test_the_split_reads_the_family_s_seconds():
    previous = _previous({"ds/R1": 18.4, "ds/V3": 3.2, "q/8B": 2.0})
    assert tasks._split(["ds/V3"], previous, 2, _family) == {"ds/V3"}
    assert tasks._split(["ds/V3"], previous, 2) == set()             # its own 3.2 s < SPLIT_SECONDS
    assert tasks._split(["q/8B"], previous, 2, _family) == set()
    assert tasks._split(["ds/V3", "q/8B"], previous, 2, _family) == set()   # as many models as workers: none


def test_a_rebuilt_follower_is_split_by_the_build_and_writes_the_same_files(tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = files_of(build(load_corpus(), out, models=[LEADER, FOLLOWER], grid_path=TINY, jobs=1).results)
    # the previous build as a whole build records a chain: the leader slow, its follower quick
    manifest = json.loads((out / "results" / "manifest.json").read_text())
    manifest["models"][LEADER]["seconds"] = tasks.SPLIT_SECONDS + 6.0
    manifest["models"][FOLLOWER]["seconds"] = tasks.SPLIT_SECONDS - 3.0
    (out / "results" / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    # the follower's document damaged: the build finds it changed and evaluates the follower alone
    damaged = out / "results" / "models" / "Qwen--Qwen3-0.6B.json"
    damaged.write_text(damaged.read_text() + " ")
    here = []
    build_model = tasks.build_model

    def recorded_build(*args, **kwargs):          # what ran in this process (the worker imports its own)
        here.append((args[1], kwargs.get("part", "all")))
        return build_model(*args, **kwargs)
    monkeypatch.setattr(tasks, "build_model", recorded_build)
    again = files_of(build(load_corpus(), out, models=[LEADER, FOLLOWER], grid_path=TINY, jobs=2).results)
    assert here == [(FOLLOWER, "grid")]          # split: its grid half here, the other half in the worker
    assert sorted(again) == sorted(first)
    for name in first:
        assert (without_seconds(first[name]) == without_seconds(again[name]) if name == "manifest.json"
                else first[name] == again[name]), name
