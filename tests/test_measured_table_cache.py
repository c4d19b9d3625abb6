"""The measured kernel tables kept across processes (engine.deploy.measured_tables.cached_table, in
engine.language.parse_cache's store): a kept table is the parsed table, an edited table or loader is
parsed again, a table that does not load keeps nothing, and an entry that is damaged, planted or
not this user's own is never read (the file is parsed instead, and the entry rewritten whole).

The hand values come from the table file itself: NCCL's all-reduce on H100 over 2 GPUs at 512 bytes
is 6.18 µs (gpus/measured/h100/nccl-2.29.2/all_reduce-nccl.yaml, first row, first value)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.deploy import measured_tables
from engine.deploy.measured_tables import KERNELS, cached_table, load_table
from engine.language import parse_cache
from engine.language.errors import SpecError
from tests.conftest import REPO

NCCL = Path("gpus/measured/h100/nccl-2.29.2/all_reduce-nccl.yaml")


def _same(a, b) -> None:
    """Every field equal; axes and times bit for bit, of the same dtype and shape; times read-only."""
    for name in ("kernel", "variant", "gpu", "framework", "version", "axes", "path", "source", "keys", "rate"):
        assert getattr(a, name) == getattr(b, name), name
    assert len(a.values) == len(b.values)
    for x, y in zip(a.values, b.values):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
    assert a.seconds.dtype == b.seconds.dtype and a.seconds.shape == b.seconds.shape
    assert a.seconds.tobytes() == b.seconds.tobytes() and not b.seconds.flags.writeable


def _entries(folder: Path) -> list[Path]:
    """The table entries in ``folder`` (the YAML entries beside them are lists, a table's a mapping)."""
    return sorted(p for p in folder.glob("*.json") if json.loads(p.read_text()).__class__ is dict)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A cache folder of this test's own, and no earlier test's hook on the loader."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(parse_cache.ENV, str(folder))
    return folder


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The files :func:`load_table` parsed during the test (a kept table is read without it)."""
    seen: list[str] = []

    def counted(path, repo):
        seen.append(Path(path).name)
        return load_table(path, repo)
    monkeypatch.setattr(measured_tables, "load_table", counted)
    return seen


def _repo_with(tmp_path: Path, text: str | None = None) -> tuple[Path, Path]:
    """A repo of one table (NCCL's all-reduce, or ``text`` in its place): (repo, the table's path)."""
    repo = tmp_path / "repo"
    path = repo / NCCL
    path.parent.mkdir(parents=True)
    path.write_text(text if text is not None else (REPO / NCCL).read_text())
    return repo, path


def test_consistency_a_kept_table_is_the_parsed_table(store, parses):
    """One table of each kernel class (the keyed MoE curves too): the first read parses and keeps
    it, the second reads it back without parsing; both equal a plain parse in every field."""
    files = {}
    for path in sorted((REPO / "gpus" / "measured").glob("*/*/*.yaml")):
        files.setdefault(path.name.split("-")[0], path)
    assert set(files) == set(KERNELS)
    plain = {k: load_table(p, REPO) for k, p in files.items()}
    first = {k: cached_table(p, REPO) for k, p in files.items()}
    assert sorted(parses) == sorted(p.name for p in files.values())
    assert len(_entries(store)) == len(files)
    again = {k: cached_table(p, REPO) for k, p in files.items()}
    assert len(parses) == len(files)                    # nothing parsed the second time
    for kernel in files:
        _same(plain[kernel], first[kernel])
        _same(plain[kernel], again[kernel])
    moe = again["moe"]
    key = next(iter(moe.keys))
    assert np.array_equal(moe.curve(key).seconds, plain["moe"].curve(key).seconds)


def test_an_edited_table_is_parsed_again_and_a_broken_one_keeps_nothing(tmp_path, store, parses):
    repo, path = _repo_with(tmp_path)
    text = path.read_text()
    assert cached_table(path, repo).seconds[0, 0] == 6.18 * 1e-6
    assert cached_table(path, repo).seconds[0, 0] == 6.18 * 1e-6 and len(parses) == 1
    path.write_text(text.replace("- [6.18, 5.85,", "- [6.19, 5.85,", 1))     # same size, one time edited
    assert cached_table(path, repo).seconds[0, 0] == 6.19 * 1e-6 and len(parses) == 2
    kept = _entries(store)
    assert len(kept) == 2
    path.write_text(text.replace("values: [2, 4, 8]", "values: [2, 8, 4]", 1))   # not ascending
    for _ in range(2):                                  # the error every time, never a kept value
        with pytest.raises(SpecError, match="not ascending"):
            cached_table(path, repo)
    assert _entries(store) == kept and len(parses) == 4


def test_an_edited_loader_is_another_key(tmp_path, store, parses, monkeypatch):
    """The key holds the source of every module the table is a function of: with one of them
    edited, the kept entry is not read (the file is parsed again)."""
    repo, path = _repo_with(tmp_path)
    loader = tmp_path / "loader.py"
    loader.write_text("# one loader\n")
    sources = measured_tables._sources()
    monkeypatch.setattr(measured_tables, "_sources", lambda: (*sources, str(loader)))
    cached_table(path, repo)
    cached_table(path, repo)
    assert len(parses) == 1
    loader.write_text("# the loader, edited\n")
    parse_cache._SALTS.clear()            # (a new process: the sources are hashed once per process)
    cached_table(path, repo)
    assert len(parses) == 2 and len(_entries(store)) == 2


def _damaged(entry: dict) -> list[tuple[str, bytes]]:
    """Entries a reader must refuse: (what, the file's bytes)."""
    def edit(**changes) -> bytes:
        return json.dumps({**entry, **changes}).encode()
    seconds, values = entry["seconds"], entry["values"]
    return [
        ("not JSON", b"\x80\x04K\x01."),                 # a pickle: never unpickled
        ("truncated", json.dumps(entry).encode()[:-40]),
        ("NaN", json.dumps(entry).replace(str(seconds[0]), "NaN", 1).encode()),
        ("a time missing", edit(seconds=seconds[:-1])),
        ("a negative time", edit(seconds=[-seconds[0], *seconds[1:]])),
        ("a time past the schema's 10 s", edit(seconds=[11.0, *seconds[1:]])),
        ("an axis not ascending", edit(values=[[2, 8, 4], values[1]])),
        ("a boolean for a number", edit(values=[[True, 4, 8], values[1]])),
        ("another kernel's axes", edit(axes=["m", "n"])),
        ("an unknown kernel", edit(kernel="all_reduce2")),
        ("keys on an unkeyed table", edit(keys=[[1, 2, 3, 4, 5, 6, 0]])),
        ("another file's name", edit(path="gpus/measured/h100/nccl-2.29.2/all_gather-nccl.yaml")),
        ("a field more", edit(extra=1)),
        ("a list", json.dumps([entry]).encode()),
    ]


def test_a_damaged_or_planted_entry_is_refused_and_rewritten(tmp_path, store, parses):
    repo, path = _repo_with(tmp_path)
    plain = load_table(path, repo)
    cached_table(path, repo)
    [entry_path] = _entries(store)
    good = entry_path.read_bytes()
    entry = json.loads(good)
    for what, data in _damaged(entry):
        entry_path.write_bytes(data)
        before = len(parses)
        _same(plain, cached_table(path, repo))
        assert len(parses) == before + 1, f"{what}: read, not refused"
        assert entry_path.read_bytes() == good, f"{what}: not rewritten"


def test_an_entry_not_this_users_own_is_not_read(tmp_path, store, parses):
    """A well-formed entry planted with other times is read only where this user wrote it: writable
    by everyone, or in a folder writable by everyone, it is refused (the file is parsed)."""
    repo, path = _repo_with(tmp_path)
    cached_table(path, repo)
    [entry_path] = _entries(store)
    entry = json.loads(entry_path.read_text())
    planted = json.dumps({**entry, "seconds": [s * 2 for s in entry["seconds"]]})
    entry_path.write_text(planted)
    assert cached_table(path, repo).seconds[0, 0] == 6.18 * 1e-6 * 2 and len(parses) == 1   # (own file: read)
    entry_path.write_text(planted)
    os.chmod(entry_path, 0o666)
    assert cached_table(path, repo).seconds[0, 0] == 6.18 * 1e-6 and len(parses) == 2
    entry_path.write_text(planted)
    os.chmod(entry_path, 0o644)
    os.chmod(store, 0o777)
    try:
        assert cached_table(path, repo).seconds[0, 0] == 6.18 * 1e-6 and len(parses) == 3
        assert json.loads(entry_path.read_text()) != entry          # nothing written into that folder
    finally:
        os.chmod(store, 0o755)


def test_no_cache_where_it_is_turned_off(tmp_path, monkeypatch, parses):
    """``ARCHLEDGER_CACHE=`` (empty): every read parses and nothing is written anywhere."""
    monkeypatch.setenv(parse_cache.ENV, "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    repo, path = _repo_with(tmp_path)
    cached_table(path, repo)
    cached_table(path, repo)
    assert len(parses) == 2 and not (tmp_path / "home").exists()
    monkeypatch.delenv(parse_cache.ENV)                # unset: the user's cache folder
    cached_table(path, repo)
    cached_table(path, repo)
    assert len(parses) == 3 and len(_entries(tmp_path / "home" / ".cache" / "archledger")) == 1
    shutil.rmtree(tmp_path / "home")
