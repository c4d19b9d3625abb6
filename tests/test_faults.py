"""Faults: a killed, raced or starved build loses nothing (engine.batch.publish, engine.batch.results, site_builder.render).

Every scenario ends with the same checks: ``out/results`` and ``out/site`` are byte for byte the
previous pair or the new pair (every file hashed), the site's pin names the published results'
manifest, no staging folder survives the next start, and the next build succeeds. Real builds run
in subprocesses killed with SIGKILL at named stages (the ``ARCHLEDGER_FAULT_AT`` test hook of
engine.batch.publish); two models over a tiny grid keep each run to a few seconds.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import polars as pl
import pytest

from engine.batch import model_build
from engine.batch import publish
from engine.batch.publish import swap_into_place
from engine.batch.results import build, run
from engine.language.corpus import load_corpus
from site_builder.render import render_site, render_staged

from tests.conftest import REPO

#: One pytest-xdist worker runs the whole module (``--dist loadgroup``, pyproject.toml): its tests spread
#: over two workers paid its published build of two models twice.
pytestmark = pytest.mark.xdist_group("faults")

MODELS = ["Qwen3-8B", "Llama-3.1-8B"]
QWEN, LLAMA = "Qwen/Qwen3-8B", "meta-llama/Meta-Llama-3.1-8B"
SMALL = Path(__file__).parent / "data" / "grid_small.yaml"
#: Runs engine.batch.results.run with the site renderer, as the CLI does (incremental against the
#: published site; argv[1]: the args as JSON). Each killed build is a fresh process: it reads the
#: run's parse cache (``$ARCHLEDGER_CACHE``, tests/conftest.py; engine.language.parse_cache,
#: content-addressed: a file's entry is its parse, whatever process wrote it), as parsing the measured
#: kernel tables was about half of its CPU; what the scenarios check (the kill, the recovery, the
#: published pair) is unchanged.
SCRIPT = """
import argparse, json, sys
from engine.batch.results import run
from site_builder.render import render_staged
args = json.loads(sys.argv[1])
site = render_staged if args.pop("site") else None
sys.exit(run(argparse.Namespace(**args), site=site))
"""
TAG = "ARCHLEDGER_TEST_TAG"
LEFTOVERS = (".results-", ".site-", ".old-", ".publish")


# -- helpers --------------------------------------------------------------------------------------

def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` -> its SHA-256 (None if the folder is absent)."""
    if not folder.exists():
        return None
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _state(out: Path) -> dict:
    return {"results": _tree(out / "results"), "site": _tree(out / "site")}


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith(LEFTOVERS))


def _args(out: Path, corpus: Path, grid: Path, models=MODELS, jobs: int = 1, **extra) -> dict:
    return {"out": str(out), "models": list(models), "grid": str(grid), "jobs": jobs, "quiet": True,
            "corpus": str(corpus), **extra}


def _run_in_process(out: Path, corpus: Path, grid: Path, models=MODELS, site=True) -> int:
    return run(argparse.Namespace(**_args(out, corpus, grid, models)), site=render_staged if site else None)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (publish.FAULT_ENV, "ARCHLEDGER_LOCK_TIMEOUT")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def _build_process(args: dict, site: bool = True, log: Path | None = None, **env) -> subprocess.Popen:
    """The build in a subprocess; its output in pipes, or in the file ``log`` (a pipe would stay open
    as long as any process it started lives)."""
    output = open(log, "w") if log else subprocess.PIPE
    try:
        payload = {**args, "site": site}
        return subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(payload)], cwd=REPO,
                                env=_env(**env), stdout=output, stderr=output, text=True)
    finally:
        if log:
            output.close()


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (the build and every process it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{TAG}={tag}".encode() in (entry / "environ").read_bytes() and \
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _gone(tag: str, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (alive := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _check_published(out: Path) -> None:
    """The published pair agrees and every results file matches the manifest's record."""
    assert publish.consistent(out) and (out / "site").exists()
    manifest = json.loads((out / "results" / "manifest.json").read_text())
    for name, record in manifest["files"].items():
        assert publish.matches(out / "results" / name, record), name
    for entry in manifest["models"].values():
        for name, record in entry["files"].items():
            assert publish.matches(out / "results" / name, record), name
    assert sorted(pl.read_parquet(out / "results" / "models.parquet")["model_id"]) == sorted(manifest["models"])


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    """One GPU, two GPU counts, BF16 KV, two prompts, two batches: a few seconds per build."""
    text = SMALL.read_text()
    for old, new in (("gpus: [H100, B200]", "gpus: [H100]"), ("gpu_counts: [1, 2, 8]", "gpu_counts: [1, 2]"),
                     ("kv_dtypes: [bf16, fp8]", "kv_dtypes: [bf16]"),
                     ("input_lengths: [1024, 8192, 200000]", "input_lengths: [1024, 8192]"),
                     ("batches: [1, 8, 64]", "batches: [1, 8]")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path_factory.mktemp("grid") / "tiny.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(before, after, after_one): corpus copies; after edits both models' specs (both are rebuilt),
    after_one only Qwen3-8B's."""
    root = tmp_path_factory.mktemp("corpora")
    folders = root / "before", root / "after", root / "after_one"
    for folder, edited in zip(folders, ((), ("Qwen--Qwen3-8B", "meta-llama--Meta-Llama-3.1-8B"), ("Qwen--Qwen3-8B",))):
        shutil.copytree(REPO / "corpus", folder)
        for name in edited:
            spec = folder / "models" / f"{name}.yaml"
            spec.write_text(spec.read_text() + "\n# edited\n")
    return folders


@pytest.fixture(scope="module")
def published(tmp_path_factory, corpora, grid) -> Path:
    """An output folder with results and site of the two models (the "before" of every scenario)."""
    out = tmp_path_factory.mktemp("published") / "out"
    assert _run_in_process(out, corpora[0], grid) == 0
    _check_published(out)
    return out


@pytest.fixture
def out(tmp_path, published) -> Path:
    target = tmp_path / "out"
    shutil.copytree(published, target)
    return target


# -- kill -9 at every stage -----------------------------------------------------------------------

COMMITTED = ("journal", "publish-aside", "publish-results", "publish-site", "cleanup")


def _pending(out: Path) -> dict:
    """What the interrupted publication publishes: each journaled staged folder, or the target it
    already replaced."""
    journal = out / publish.JOURNAL
    if not journal.exists():
        return _state(out)
    moves = {m["final"]: m["staged"] for m in json.loads(journal.read_text())["moves"]}
    return {name: _tree(out / moves[name]) if (out / moves[name]).exists() else _tree(out / name)
            for name in ("results", "site")}


@pytest.mark.parametrize("stage", ["evaluate", "worker", "site", *COMMITTED])
def test_killed_build_publishes_all_or_nothing(stage, out, corpora, grid, tmp_path):
    assert stage in publish.FAULT_STAGES
    before = _state(out)
    tag = uuid.uuid4().hex
    # with two models to evaluate in two workers, which must die with the build; else one model, in-process
    jobs, corpus = (2, corpora[1]) if stage in ("evaluate", "worker") else (1, corpora[2])
    log = tmp_path / "build.log"
    proc = _build_process(_args(out, corpus, grid, jobs=jobs), log=log, **{publish.FAULT_ENV: stage, TAG: tag})
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()
    alive = _gone(tag)
    for pid in alive:                       # do not leave them running when the check fails
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"processes outlived the killed build: {alive}"
    if stage in COMMITTED:
        expected = _pending(out)
        assert expected != before
    else:
        assert _state(out) == before                        # nothing published before the journal
        expected = before
    # the next start finishes or discards what the killed build left
    with publish.lock(out, "test"):
        done = publish.recover(out)
    assert done, "nothing left to repair?"
    assert _state(out) == expected
    assert publish.consistent(out) and not _leftovers(out)
    # ... and the next build publishes the new pair
    assert _run_in_process(out, corpus, grid) == 0
    _check_published(out)
    assert not _leftovers(out) and not (out / publish.LOCK).exists()


def test_kill_during_site_command_keeps_the_site(out):
    before = _state(out)
    script = ("import sys; from pathlib import Path; from site_builder.render import render_site; "
              "render_site(Path(sys.argv[1]) / 'results', Path(sys.argv[1]))")
    for stage in ("site", "journal"):
        proc = subprocess.run([sys.executable, "-c", script, str(out)], cwd=REPO, capture_output=True, text=True,
                              env=_env(**{publish.FAULT_ENV: stage}), timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        render_site(out / "results", out)                   # recovers first, then renders again
        assert _state(out)["results"] == before["results"] and publish.consistent(out)
        assert _state(out)["site"] == before["site"]         # the same results render the same site
        assert not _leftovers(out)


# -- the lock -------------------------------------------------------------------------------------

def test_a_second_build_waits_for_the_lock_or_names_its_holder(out, corpora, grid):
    args = _args(out, corpora[0], grid)
    with publish.lock(out, "test holder"):
        quick = _build_process(args, ARCHLEDGER_LOCK_TIMEOUT="0.5")
        _, err = quick.communicate(timeout=120)
        assert quick.returncode == 2
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"error: {out}/: locked by pid {os.getpid()} (test holder, started "), err
        patient = _build_process(args, ARCHLEDGER_LOCK_TIMEOUT="120")
        line = patient.stderr.readline()
        assert line.startswith(f"waiting for build lock held by pid {os.getpid()} (test holder, started "), line
        time.sleep(0.3)
        assert patient.poll() is None                        # still waiting while we hold it
    _, err = patient.communicate(timeout=120)
    assert patient.returncode == 0, err
    _check_published(out)


def test_lock_is_exclusive_across_threads_and_reentrant_in_one(tmp_path):
    inside, overlaps = [], []

    def hold():
        with publish.lock(tmp_path, "thread"):
            with publish.lock(tmp_path, "thread again"):     # re-entrant: no self-deadlock
                inside.append(1)
                overlaps.append(len(inside))
                time.sleep(0.01)
                inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [1] * 8 and not (tmp_path / publish.LOCK).exists()


SWAPPER = """
import sys, tempfile
from pathlib import Path
from engine.batch.publish import swap_into_place
out, who, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for i in range(n):
    staging = Path(tempfile.mkdtemp(prefix=".results-", dir=out))
    (staging / "who").write_text(f"{who}-{i}")
    swap_into_place(staging, out / "results")
"""


def test_swap_into_place_raced_leaves_exactly_the_final_folder(tmp_path):
    errors, written = [], set()

    def swapper(who: str, n: int):
        try:
            for i in range(n):
                staging = Path(tempfile.mkdtemp(prefix=".results-", dir=tmp_path))
                (staging / "who").write_text(f"{who}-{i}")
                written.add(f"{who}-{i}")
                swap_into_place(staging, tmp_path / "results")
        except Exception as exc:             # noqa: BLE001 (collected and asserted below)
            errors.append(exc)

    processes = [subprocess.Popen([sys.executable, "-c", SWAPPER, str(tmp_path), f"p{k}", "25"], cwd=REPO,
                                  env=_env(), stderr=subprocess.PIPE, text=True) for k in range(2)]
    threads = [threading.Thread(target=swapper, args=(f"t{k}", 20)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in processes:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    written |= {f"p{k}-{i}" for k in range(2) for i in range(25)}
    assert not errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert (tmp_path / "results" / "who").read_text() in written


# -- damaged previous results ---------------------------------------------------------------------

def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


PARTITION = "results/deployments/model=Qwen--Qwen3-8B/part.parquet"
DAMAGE = {
    "truncated partition": (lambda out: _truncate(out / PARTITION), [QWEN], PARTITION),
    "flipped byte in a partition": (lambda out: _flip(out / PARTITION), [QWEN], PARTITION),
    "deleted inspector document": (lambda out: (out / "results/models/Qwen--Qwen3-8B.json").unlink(), [QWEN],
                                   "missing"),
    "garbage models.parquet": (lambda out: (out / "results/models.parquet").write_bytes(b"PAR1 garbage"),
                               [QWEN, LLAMA], "models.parquet is damaged"),
    "manifest is a list": (lambda out: (out / "results/manifest.json").write_text("[1, 2]"), [QWEN, LLAMA],
                           "not a results manifest (a JSON list"),
    "manifest is not JSON": (lambda out: (out / "results/manifest.json").write_text("{oops"), [QWEN, LLAMA],
                             "not a results manifest (not JSON"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_previous_results_are_rebuilt_not_carried(damage, out, corpora, grid):
    spoil, rebuilt, said = DAMAGE[damage]
    spoil(out)
    lines = []
    report = build(load_corpus(corpora[0]), out, MODELS, grid, jobs=1, log=lines.append, site=render_staged)
    assert sorted(report.recomputed) == sorted(rebuilt)
    assert sorted(report.reused) == sorted({QWEN, LLAMA} - set(rebuilt))
    assert len([line for line in lines if said in line]) == 1, lines
    _check_published(out)
    assert not _leftovers(out)


# -- missing evidence -----------------------------------------------------------------------------

def test_missing_evidence_skips_the_model_and_the_site_still_renders(out, corpora, grid, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    shutil.copytree(corpora[0], corpus)
    (corpus / "snapshots" / "Qwen--Qwen3-8B.tensors.yaml").unlink()
    assert _run_in_process(out, corpus, grid) == 0
    err = capsys.readouterr().err
    skip = [line for line in err.splitlines() if line.startswith(f"skip {QWEN}")]
    assert skip == [f"skip {QWEN}: evidence corpus/snapshots/Qwen--Qwen3-8B.tensors.yaml missing — skipped as "
                    f"unverified (record it: archledger snapshot {QWEN})"], err
    _check_published(out)
    assert list(pl.read_parquet(out / "results" / "models.parquet")["model_id"]) == [LLAMA]
    assert list(json.loads((out / "results" / "manifest.json").read_text())["skipped"]) == [QWEN]
    assert not (out / "site" / "models" / "Qwen--Qwen3-8B").exists()
    assert (out / "site" / "models" / "meta-llama--Meta-Llama-3.1-8B" / "index.html").exists()
    # nothing verified at all: an empty but whole results tree, and a site that says so
    empty = tmp_path / "empty"
    assert _run_in_process(empty, corpus, grid, models=["Qwen3-8B"]) == 0
    _check_published(empty)
    assert pl.read_parquet(empty / "results" / "models.parquet").height == 0
    assert (empty / "site" / "index.html").exists()


# -- a disk that refuses writes -------------------------------------------------------------------

def _to_dev_full(original):
    def write_parquet(frame, path, **options):          # the real writer, onto a device that is always full
        return original(frame, Path("/dev/full"), **options)
    return write_parquet


def _refuse(code: int, where):
    """A writer that fails like a full (ENOSPC) or read-only (EROFS) disk at ``where(*args)``."""
    def write(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(where(*args, **kwargs)))
    return write


INJECTIONS = {
    # a real ENOSPC from the kernel: the build's Parquet writer aimed at /dev/full
    "ENOSPC in a partition": (errno.ENOSPC, lambda mp: mp.setattr(
        model_build, "write_parquet", _to_dev_full(model_build.write_parquet))),
    "ENOSPC in the site": (errno.ENOSPC, lambda mp: mp.setattr(
        "site_builder.writer.Site.page", _refuse(errno.ENOSPC, lambda site, path, *a, **k: site.folder / path))),
    "ENOSPC writing the journal": (errno.ENOSPC, lambda mp: mp.setattr(
        publish, "_write_journal", _refuse(errno.ENOSPC, lambda out, moves: out / publish.JOURNAL))),
    "EROFS making the staging folder": (errno.EROFS, lambda mp: mp.setattr(
        publish.tempfile, "mkdtemp", _refuse(errno.EROFS, lambda **kw: kw["dir"]))),
}


@pytest.mark.parametrize("injection", list(INJECTIONS))
def test_a_disk_that_refuses_writes_is_one_line_and_changes_nothing(injection, out, corpora, grid, monkeypatch,
                                                                     capsys):
    code, inject = INJECTIONS[injection]
    before = _state(out)
    inject(monkeypatch)
    assert _run_in_process(out, corpora[1], grid) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {out}/: cannot write ({os.strerror(code)}) — the previous results and site are "
                   f"unchanged; free space or choose another --out"), err
    assert _state(out) == before and not _leftovers(out) and not (out / publish.LOCK).exists()


def test_a_real_full_then_read_only_file_system(published, corpora, grid, tmp_path, capsys):
    """The same on a real tmpfs (skipped where mounting is not allowed)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    used = sum(p.stat().st_blocks * 512 for p in published.rglob("*"))    # room for the copy, not for a build
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={used + 512 * 1024}", "tmpfs", str(mount)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        out = mount / "out"
        shutil.copytree(published, out)
        # what is left is filled but for 16 KiB: a build carries unchanged files as hard links (no
        # room needed), so the room a real build lacks is what its changed files need
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - 16 * 1024))
            os.close(fd)
        before = _state(out)
        assert _run_in_process(out, corpora[1], grid) == 2
        assert "cannot write (No space left on device)" in capsys.readouterr().err
        assert _state(out) == before and not _leftovers(out)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        assert _run_in_process(out, corpora[1], grid) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {out}/: cannot write (Read-only file system) — ")
        assert _state(out) == before
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_fsync_tree_syncs_every_staged_file_and_folder_and_raises_a_failure(tmp_path, monkeypatch):
    """The staged tree is fsynced in threads (publish._fsync_tree): still every file and every
    folder, each once, before it returns; and an fsync that fails fails the publication (the
    journal must never name a tree that is not on disk)."""
    for rel in ("a.json", "d/b.parquet", "d/e/c.txt", "f/g.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    expected = {p for p in tmp_path.rglob("*")} | {tmp_path}
    seen: list[Path] = []
    lock = threading.Lock()
    real = publish._fsync

    def record(path, directory=False):
        assert directory == Path(path).is_dir()
        with lock:
            seen.append(Path(path))
        real(path, directory)
    monkeypatch.setattr(publish, "_fsync", record)
    publish._fsync_tree(tmp_path)
    assert sorted(seen) == sorted(expected)

    def failing(path, directory=False):
        if Path(path).name == "c.txt":
            raise OSError(errno.EIO, "I/O error", str(path))
    monkeypatch.setattr(publish, "_fsync", failing)
    with pytest.raises(OSError, match="I/O error"):
        publish._fsync_tree(tmp_path)
