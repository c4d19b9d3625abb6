"""The mutation benchmark's list matches the code: a consistency test between the data of
benchmarks/mutants.py (each planted bug: a file, its exact old text, the new text, the tests that
should notice) and the source it plants into.

Why a test: the harness refuses to run a list whose old texts no longer occur (it must be updated,
not silently skipped), but nothing ran it between refactors, and by 2026-12-07 20 of its 69
mutants named code that had moved (the capacity, paging and DP-attention rules into the rule
programs of engine/deploy/rules.py, the lookups into engine/deploy/interpolation.py). A refactor
that moves a mutant's text, or renames the test meant to kill it, now fails here, where its author
is.
"""
from __future__ import annotations

import importlib.util
import re
import sys

from tests.conftest import REPO


def _benchmark():
    spec = importlib.util.spec_from_file_location("mutants_benchmark", REPO / "benchmarks" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_every_mutants_old_text_occurs_once_in_its_file():
    bench = _benchmark()
    assert len(bench.MUTANTS) >= 60
    assert bench.check_texts(bench.MUTANTS) == []


def test_every_named_killer_is_a_test_in_its_file():
    """A mutant's ``killer`` (``file::name``, its expectation hand-derived) is a test function of that
    file, and one of the files the harness runs for it."""
    missing = []
    for m in _benchmark().MUTANTS:
        if not m.killer:
            continue
        path, name = m.killer.split("::")
        name = name.split("[")[0]
        if path not in {t.split("::")[0] for t in m.tests} or \
                not re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.MULTILINE):
            missing.append(m.id)
    assert missing == []
