"""The repository stands alone: nothing in it reads outside its own tree.

A clone in an empty folder must pass its tests. Two checks: no tracked file names a path that
leaves the repo (the development machines keep reference facts in a sibling folder, a clone does
not have them), and the tests that read published facts pass when run from a copy of the tracked
files placed where no sibling folder exists.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO



def _outside() -> re.Pattern:
    """What a path leaving the repo looks like in source, docs or data: a relative path into a
    folder that sits beside this checkout (the development machines keep reference facts there; a
    clone in an empty folder has none), or an absolute path through the folder holding it. Read off
    the machine, not written down: a new sibling folder is covered the day it appears."""
    siblings = sorted(p.name for p in REPO.parent.iterdir() if p.is_dir() and p.resolve() != REPO.resolve())
    parts = _parent_path()
    for name in siblings:
        parts += [rf"\.\./{re.escape(name)}\b", rf"(?<![\w\]\[.-]){re.escape(name)}/(?:reference|hf_configs|DESIGN|STYLE)"]
    return re.compile("|".join(parts) or r"(?!x)x")


def _parent_path() -> list[str]:
    """The absolute path of the folder holding the checkout, as a pattern (none at the root)."""
    return [re.escape(str(REPO.parent).rstrip("/") + "/")] if REPO.parent != REPO.parent.parent else []


def _could_leave() -> re.Pattern:
    """What every line :func:`_outside` matches contains: ``../``, a slash before one of the reference
    folders' names, or the absolute path of the folder holding the checkout. A line without any of
    them cannot match, so the test searches only the lines that have one (the same offenders): the
    full pattern holds two alternatives per sibling folder, and a checkout kept in a busy folder (a
    system temporary folder of some 150 folders) spent 100 s of one worker matching it on every
    line of every file."""
    return re.compile("|".join([r"\.\./", "/(?:reference|hf_configs|DESIGN|STYLE)", *_parent_path()]))


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in out.decode().split("\0") if name]


def test_no_tracked_file_names_a_path_outside_the_repo():
    outside = _outside()
    could = _could_leave()
    offenders = []
    for name in _tracked():
        path = REPO / name
        if name == "tests/test_self_contained.py" or not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        offenders += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1)
                      if could.search(line) and outside.search(line)]
    assert not offenders, offenders


@pytest.mark.long
def test_reference_tests_pass_from_a_copy_with_nothing_beside_it(tmp_path):
    """Copy the tracked files to <tmp>/alone/repo (nothing beside it) and run the fact tests."""
    copy = tmp_path / "alone" / "repo"
    for name in _tracked():
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    assert [p.name for p in copy.parent.iterdir()] == ["repo"]      # nothing beside the copy
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    where = subprocess.run([sys.executable, "-c", "import engine, tests.conftest as c; print(engine.__file__)"],
                           cwd=copy, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(copy)), where.stdout  # the copy's code, not the checkout's
    # test_models' per-model consistency of active with total params is left out: it reads each
    # model's config.json, which test_published_configs checks for every model (present, hashed,
    # equal to the snapshot), and evaluating all 31 models again was most of this test's time; the
    # per-model GQA KV check likewise evaluates each model again (the suite runs it on the checkout)
    # -n 0: one process (this test already runs in one of the suite's workers; two more would only
    # compete with the other worker for the machine's cores)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                          "tests/test_published_configs.py", "tests/test_hardware.py",
                          "tests/test_models.py", "-k", "not slow and not test_active_params_from_config "
                          "and not test_gqa_kv_bytes_per_token"],
                         cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
