"""The distributed executor (engine/batch/executor.py): a build on a Dask cluster writes the same
files as the local executor, byte for byte; bad --executor values and a missing extra are one line.

The cluster is a Dask LocalCluster of 2 worker processes with one thread each, reached through its
scheduler's tcp:// address, as a remote cluster is (the inputs travel as bytes, the files come back
as bytes). ``dask[distributed]`` is in the ``test`` extra, so CI runs this file.
"""
from __future__ import annotations

import os
import tempfile
import logging
from pathlib import Path

import pytest

from engine.batch import executor as executors, tasks
from engine.batch.results import build
from engine.cli import main
from engine.language.corpus import load_corpus
from engine.language.errors import SpecError
from tests.conftest import REPO
from tests.file_helpers import files_of, without_seconds

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its Dask cluster twice.
pytestmark = pytest.mark.xdist_group("executor")

try:        # the test extra installs dask[distributed]: a missing package fails, never skips
    import distributed
except ImportError:  # pragma: no cover
    pytest.fail("the Python package `distributed` is not installed: pip install -e '.[test]' (or '.[scale]')",
                pytrace=False)

TINY = Path(__file__).parent / "data" / "grid_tiny.yaml"
MODELS = ["Qwen/Qwen3-8B", "mistralai/Mixtral-8x7B-v0.1"]     # a dense model and a MoE one (EP configs)


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=logging.ERROR) as c:
        yield c


def test_a_build_on_a_dask_cluster_writes_the_local_executors_files_byte_for_byte(tmp_path, cluster, monkeypatch):
    local = build(load_corpus(), tmp_path / "local", models=MODELS, grid_path=TINY, jobs=1)
    remote = build(load_corpus(), tmp_path / "dask", models=MODELS, grid_path=TINY,
                   executor=cluster.scheduler_address)
    assert sorted(remote.recomputed) == sorted(local.recomputed) == sorted(MODELS)
    assert remote.points == local.points > 0
    a, b = files_of(local.results), files_of(remote.results)
    assert sorted(a) == sorted(b)
    kinds = {name.split("/")[0] for name in a}
    assert {"deployments", "ops", "models", "models.parquet", "manifest.json", "contracts.json"} <= kinds
    for name in a:
        if name == "manifest.json":
            # every file's size and SHA-256 is in it: equal records mean equal files as well
            assert without_seconds(a[name]) == without_seconds(b[name])
        else:
            assert a[name] == b[name], f"{name} differs between the local and the Dask executor"
    # and with a local pool of two (models, contracts and variants written by its workers)
    pooled = files_of(build(load_corpus(), tmp_path / "pool", models=MODELS, grid_path=TINY, jobs=2).results)
    assert sorted(pooled) == sorted(a)
    for name in a:
        assert (without_seconds(a[name]) == without_seconds(pooled[name]) if name == "manifest.json"
                else a[name] == pooled[name]), f"{name} differs between one process and a pool of two"
    # one model with --jobs 2: its halves (grid; fronts, document and playground) run in the build's
    # process and one worker, each with its own structures, and write the files one process writes (any model is
    # worth splitting here: on the tiny grid none takes SPLIT_SECONDS)
    monkeypatch.setattr(tasks, "SPLIT_SECONDS", 0.0)
    assert tasks._split(MODELS[1:], tasks.Previous(tmp_path), 2) == set(MODELS[1:])
    lone = files_of(build(load_corpus(), tmp_path / "halves", models=MODELS[1:], grid_path=TINY, jobs=2).results)
    mine = sorted(name for name in a if "Mixtral" in name)
    assert mine == sorted(name for name in lone if "Mixtral" in name)
    assert {name.split("/")[0] for name in mine} >= {"deployments", "ops", "fronts", "sizing", "models", "formulas",
                                                      "playground"}
    for name in mine:
        assert a[name] == lone[name], f"{name} differs between one process and a lone model's two halves"
    again = build(load_corpus(), tmp_path / "dask", models=MODELS, grid_path=TINY, executor=cluster.scheduler_address)
    assert again.recomputed == [] and sorted(again.reused) == sorted(MODELS)     # incremental as before
    # the models were evaluated in the cluster's worker processes, and each worker removed its
    # unpacked inputs when the build ended (a long-lived cluster's /tmp does not fill up)
    def worker_state():
        from engine.batch import executor
        return executor.TASKS_RUN, len(executor._UNPACKED), sorted(
            p.name for p in Path(tempfile.gettempdir()).glob(f"archledger-bundle-*-{os.getpid()}"))
    with distributed.Client(cluster.scheduler_address) as client:
        state = client.run(worker_state)
    assert sum(ran for ran, _, _ in state.values()) >= len(MODELS)
    assert all(unpacked == 0 and folders == [] for _, unpacked, folders in state.values()), state


@pytest.mark.parametrize("text, kind, detail", [
    (None, "local", None), ("local", "local", None), ("local-cluster", "local-cluster", None),
    ("local-cluster:3", "local-cluster", 3), ("dask://sched.example:8786", "cluster", "tcp://sched.example:8786"),
    ("tcp://10.0.0.5:8786", "cluster", "tcp://10.0.0.5:8786"),
])
def test_executor_values(text, kind, detail):
    parsed = executors.parse(text)
    assert parsed.kind == kind
    if kind == "local-cluster":
        assert parsed.workers == detail
    if kind == "cluster":
        assert parsed.address == detail


@pytest.mark.parametrize("text", ["ray://head:10001", "local-cluster:0", "local-cluster:two", "local-cluster:9999",
                                  "dask://", "spark", ""])
def test_bad_executor_values_are_one_line_errors(text):
    with pytest.raises(SpecError) as info:
        executors.parse(text)
    assert "--executor" in info.value.one_line() and "\n" not in info.value.one_line()


@pytest.mark.parametrize("text", ["ray://head:10001", "local-cluster:0"])
def test_a_bad_executor_is_one_line_and_nothing_is_written(tmp_path, capsys, text):
    out = tmp_path / "out"
    code = main(["build", "--out", str(out), "--grid", str(TINY), "--models", MODELS[0], "--no-site",
                 "--executor", text])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--executor" in err
    assert not (out / "results").exists()


def test_without_the_extra_the_error_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError("No module named 'distributed'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(SpecError, match=r"pip install -e '\.\[scale\]'"):
        executors.distributed_module()
    code = main(["build", "--out", str(tmp_path / "out"), "--grid", str(TINY), "--models", MODELS[0],
                 "--no-site", "--executor", "local-cluster:2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "[scale]" in err
    assert not (tmp_path / "out" / "results").exists()


def test_a_worker_with_another_engine_refuses_the_task(tmp_path):
    bundle = executors.make_bundle(REPO / "corpus", REPO / "gpus", TINY, "a" * 64)
    with pytest.raises(RuntimeError, match="another engine"):
        executors.remote_task(bundle, lambda *a: {}, MODELS[0], (), lambda: "b" * 64)


def test_a_lone_model_is_split_only_when_the_last_build_found_it_slow(tmp_path):
    """Two tasks pay a worker start each: only a model the previous build timed at SPLIT_SECONDS or
    more, and only with fewer models than workers."""
    slow, quick = "deepseek-ai/DeepSeek-V3", "Qwen/Qwen3-8B"
    previous = tasks.Previous(tmp_path, models={slow: {"seconds": tasks.SPLIT_SECONDS + 0.5},
                                                  quick: {"seconds": tasks.SPLIT_SECONDS - 0.5}})
    assert tasks._split([slow], previous, 2) == {slow}
    assert tasks._split([quick], previous, 2) == set()
    assert tasks._split([slow, quick], previous, 2) == set()          # as many models as workers
    assert tasks._split([slow, quick], previous, 4) == {slow}
    assert tasks._split(["new/model"], previous, 2) == set()          # never timed: one task
