"""Default worker counts (`--jobs`, local-cluster, the site render) are bounded: a build container
that reports 64 CPUs must not start 64 processes of ~1.1 GB each (engine/batch/workers.py).

The expectations are written from the rule the module states: min(CPUs this process may use,
available memory // 1.2 GB, 4), at least 1; an explicit count is used as given.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from engine.batch import tasks, workers

GB = 1_000_000_000


@pytest.fixture
def host(monkeypatch):
    """Pretend to run on a host of ``cpus`` CPUs with ``memory`` bytes available (None: unknown)."""
    def set_host(cpus: int, memory: int | None):
        monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
        monkeypatch.setattr(workers.os, "cpu_count", lambda: cpus)
        monkeypatch.setattr(workers, "available_memory", lambda: memory)
    return set_host


@pytest.mark.parametrize("cpus, memory, expected", [
    (64, 512 * GB, 4),      # many CPUs, much memory: the fixed cap
    (64, 3 * GB, 2),        # memory binds: 3 GB // 1.2 GB = 2
    (64, GB, 1),            # less than one worker's memory: still one
    (2, 512 * GB, 2),       # a two-core runner: its cores
    (1, None, 1),           # memory unknown: CPUs and the cap decide
    (16, None, 4),
])
def test_default_worker_count_is_capped(host, cpus, memory, expected):
    host(cpus, memory)
    assert workers.default_workers() == expected


def test_affinity_not_the_host_count_decides(monkeypatch):
    """A process pinned to 2 of 64 CPUs counts 2."""
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(workers.os, "cpu_count", lambda: 64)
    assert workers.cpu_count() == 2


def test_cgroup_limit_bounds_the_memory(monkeypatch, tmp_path):
    """A container's limit (cgroup v2 memory.max, minus what it already uses) binds before the
    host's free memory: 5 GB limit - 1 GB used = 4 GB -> 3 workers of 1.2 GB."""
    (tmp_path / "memory.max").write_text("5000000000\n")
    (tmp_path / "memory.current").write_text("1000000000\n")
    monkeypatch.setattr(workers, "CGROUP", tmp_path)
    monkeypatch.setattr(workers.os, "sysconf", lambda name: {"SC_AVPHYS_PAGES": 10**8, "SC_PAGE_SIZE": 4096}[name])
    assert workers.available_memory() == 4 * GB
    monkeypatch.setattr(workers, "cpu_count", lambda: 64)
    assert workers.default_workers() == 3
    (tmp_path / "memory.max").write_text("max\n")             # no limit: the host's 409.6 GB
    assert workers.available_memory() == 10**8 * 4096


def test_build_and_render_pools_use_the_capped_default(host, monkeypatch):
    """The build's process pool and the site render's pool start the capped count on a 64-CPU host
    (pools start their processes on first use: none is started here); --jobs is used as given."""
    host(64, 512 * GB)
    from site_builder import render
    monkeypatch.delenv("ARCHLEDGER_RENDER_JOBS", raising=False)
    with contextlib.ExitStack() as stack:
        assert tasks._pool(stack, None, tasks=100)._max_workers == 4
        assert tasks._pool(stack, 6, tasks=100)._max_workers == 6          # asked for: as given
        assert render._render_pool(stack, groups=100)._max_workers == 4 - 1  # the calling process renders too
    # five slow models and four workers: no model is split in two (64 workers would split all five)
    slow = tasks.Previous(Path("."), models={m: {"seconds": 60.0} for m in "abcde"})
    assert tasks._split(list("abcde"), slow, None) == set()
    assert tasks._split(list("abc"), slow, None) == set("abc")
