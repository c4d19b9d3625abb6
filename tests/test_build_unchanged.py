"""A build whose inputs are byte for byte those of the published results skips the input checks
(engine.batch.results._checked_before), and only then: the measured kernel tables are part of the
input hash, so an edited table is checked (a broken one stops the build) and rebuilds every model."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.batch import inputs, results
from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from tests.conftest import REPO

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
MODEL = "Qwen3-0.6B"


def _a_measured_table(gpus: Path) -> Path:
    return sorted((gpus / "measured").glob("*/*/*.yaml"))[0]


def test_a_measured_table_edit_changes_every_input_hash(tmp_path):
    gpus = tmp_path / "gpus"
    shutil.copytree(REPO / "gpus", gpus)
    corpus = load_corpus()
    grid = REPO / "corpus" / "grid.yaml"
    before = results.shared_hash(corpus, grid, gpus)
    table = _a_measured_table(gpus)
    table.write_text(table.read_text() + "\n# edited\n")
    after = results.shared_hash(corpus, grid, gpus)
    assert after != before
    assert results.model_hash(corpus, "Qwen/Qwen3-8B", after) != results.model_hash(corpus, "Qwen/Qwen3-8B", before)


def test_unchanged_inputs_skip_the_checks_and_a_broken_table_still_stops_the_build(tmp_path, monkeypatch):
    gpus, out = tmp_path / "gpus", tmp_path / "out"
    shutil.copytree(REPO / "gpus", gpus)
    calls = []
    real = inputs.check_all

    def counted(*args, **kwargs):        # the real check, counted
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(inputs, "check_all", counted)
    corpus = load_corpus()
    first = results.build(corpus, out, [MODEL], TINY, gpu_root=gpus, jobs=1)
    assert len(first.recomputed) == 1 and len(calls) == 1
    second = results.build(corpus, out, [MODEL], TINY, gpu_root=gpus, jobs=1)
    assert second.recomputed == [] and len(calls) == 1          # same bytes: not checked again
    # a table whose axis is no longer ascending: the hash differs, so the check runs and refuses it
    table = _a_measured_table(gpus)
    text = table.read_text()
    values = next(line for line in text.splitlines() if line.lstrip().startswith("values:"))
    table.write_text(text.replace(values, values.split(":")[0] + ": [4, 2, 1]", 1))
    before = {p: p.read_bytes() for p in (out / "results").rglob("*") if p.is_file()}
    with pytest.raises(SpecError, match="not ascending"):
        results.build(corpus, out, [MODEL], TINY, gpu_root=gpus, jobs=1)
    assert len(calls) == 2
    assert {p: p.read_bytes() for p in (out / "results").rglob("*") if p.is_file()} == before
