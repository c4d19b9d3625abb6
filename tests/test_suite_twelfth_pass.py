"""The suite's twelfth pass (issue 42): a case's checkout is a tree of hard links to its module's
pristine copy (tests/file_helpers.py ``linked_copy``), and the one file a case breaks is replaced,
never written in place (``rewrite``), so no case reaches the pristine tree or another case."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import REPO
from tests.file_helpers import files_of, linked_copy, rewrite
from tests.test_schema import KINDS, RANGES, broken_checkout


@pytest.fixture()
def pristine(tmp_path):
    """corpus/ and gpus/ copied as tests/test_schema.py's module fixture copies them."""
    root = tmp_path / "pristine"
    shutil.copytree(REPO / "corpus", root / "corpus")
    (root / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    shutil.copytree(REPO / "gpus", root / "gpus")
    return root


def test_a_linked_copy_has_the_same_files_and_shares_their_inodes(pristine, tmp_path):
    copy = linked_copy(pristine, tmp_path / "copy")
    assert files_of(copy) == files_of(pristine)
    assert (copy / "corpus" / "components" / "drafts").is_dir()          # empty folders too
    for name in ("corpus/lineage.yaml", "gpus/h100-sxm.yaml"):
        assert os.stat(copy / name).st_ino == os.stat(pristine / name).st_ino


@pytest.mark.parametrize("data", ["lineages: []\n", b"lineages: []\n"], ids=["text", "bytes"])
def test_rewrite_changes_the_copy_and_never_the_pristine_tree(pristine, tmp_path, data):
    before = files_of(pristine)
    copy = linked_copy(pristine, tmp_path / "copy")
    rewrite(copy / "corpus" / "lineage.yaml", data)
    assert (copy / "corpus" / "lineage.yaml").read_bytes() == b"lineages: []\n"
    assert files_of(pristine) == before
    # the mechanism the rule stands on: an in-place write would have reached the pristine file
    shared = copy / "gpus" / "h100-sxm.yaml"
    assert os.stat(shared).st_ino == os.stat(pristine / "gpus" / "h100-sxm.yaml").st_ino


@pytest.mark.parametrize("name", ["contract-unknown-gpu", next(iter(RANGES))])
def test_consistency_a_broken_checkout_differs_from_the_repo_in_its_one_file(pristine, tmp_path, name):
    """Consistency check on real cases of tests/test_schema.py: the broken checkout equals the repo's
    corpus/ and gpus/ but for the case's file, and the pristine tree still equals the repo's."""
    case = KINDS.get(name) or RANGES[name]
    repo_files = {**{f"corpus/{k}": v for k, v in files_of(REPO / "corpus").items()},
                  **{f"gpus/{k}": v for k, v in files_of(REPO / "gpus").items()}}
    root, _ = broken_checkout(pristine, tmp_path, case)
    broken = files_of(root)
    assert {k for k in broken if broken[k] != repo_files.get(k)} == {case.file}
    assert broken[case.file] == repo_files[case.file].replace(case.old.encode(), case.new.encode(), 1)
    assert files_of(pristine) == repo_files


def test_consistency_every_line_the_outside_pattern_finds_passes_the_prefilter():
    """tests/test_self_contained.py searches a line with the full pattern only where the prefilter
    finds something: every line the full pattern matches must pass the prefilter. Checked on a path
    into each sibling folder in both forms the pattern knows, the parent's absolute path, and every
    line of the tracked tests (which quote such paths to check the rule)."""
    from tests.test_self_contained import _could_leave, _outside, _tracked
    outside, could = _outside(), _could_leave()
    siblings = sorted(p.name for p in REPO.parent.iterdir() if p.is_dir() and p.resolve() != REPO.resolve())
    planted = [f"see ../{name}/notes" for name in siblings] + [f"read {name}/reference/x.md" for name in siblings]
    planted.append(f"open {REPO.parent.as_posix().rstrip('/')}/elsewhere/file")
    assert all(outside.search(line) for line in planted)                    # the rule finds each form
    lines = planted + [line for name in _tracked() if name.startswith("tests/") and name.endswith(".py")
                       for line in (REPO / name).read_text(encoding="utf-8").splitlines()]
    assert [line for line in lines if outside.search(line) and not could.search(line)] == []


class _Item:
    """What tests/conftest.py's reorder reads of a collected item: its marks by name."""

    def __init__(self, name: str, long: bool = False):
        self.name, self.long = name, long

    def get_closest_marker(self, name: str):
        return object() if name == "long" and self.long else None


def test_the_long_tests_go_first_and_nothing_else_moves():
    from tests.conftest import pytest_collection_modifyitems
    items = [_Item("a"), _Item("b", long=True), _Item("c@group"), _Item("d"), _Item("e", long=True), _Item("f")]
    pytest_collection_modifyitems(items)
    assert [i.name for i in items] == ["b", "e", "a", "c@group", "d", "f"]


def test_consistency_the_marked_tests_are_ungrouped_and_collected_first(request):
    """On this run's own collection: every ``long`` test precedes every other test, and none is in an
    xdist group (a grouped test goes with its group, so the mark would do nothing)."""
    items = request.session.items
    flags = [item.get_closest_marker("long") is not None for item in items]
    marked = [item for item, flag in zip(items, flags) if flag]
    assert flags == sorted(flags, reverse=True)
    assert all(item.get_closest_marker("xdist_group") is None for item in marked)
