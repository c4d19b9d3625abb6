"""The suite's own scheduling (issue 42, tenth pass): a module-scoped build is made once per run.

pytest-xdist (``--dist loadgroup``, pyproject.toml) spreads ungrouped tests one by one over the
workers, and a module-scoped fixture is then built in every worker that ran one of its tests. The
tests that read tests/test_cli_fast.py's ``two_model_checkout`` (a corpus copy built over the tiny
grid) carry one xdist group so that the build runs in one worker. The check below reads the marks
pytest reads (``pytestmark`` on each test function): a test that asks for the fixture without the
group, or a group of another name, fails it.
"""
from __future__ import annotations

import inspect

import pytest

from tests import test_cli_fast

GROUP = "cli_fast_checkout"


def _groups(function) -> list[str]:
    """The xdist groups a test function is marked with (pytest's ``pytestmark`` list)."""
    return [mark.args[0] for mark in getattr(function, "pytestmark", []) if mark.name == "xdist_group"]


def _tests(module):
    return [(name, f) for name, f in inspect.getmembers(module, inspect.isfunction)
            if name.startswith("test_") and f.__module__ == module.__name__]


def test_every_reader_of_the_two_model_checkout_shares_one_group():
    readers = [(name, f) for name, f in _tests(test_cli_fast)
               if "two_model_checkout" in inspect.signature(f).parameters]
    assert len(readers) == 5, [name for name, _ in readers]        # the five tests the group was made for
    assert {name: _groups(f) for name, f in readers} == {name: [GROUP] for name, _ in readers}


def test_the_subprocess_checks_stay_spread():
    """The tests that build nothing carry no group: they may run on any worker."""
    others = [(name, f) for name, f in _tests(test_cli_fast)
              if "two_model_checkout" not in inspect.signature(f).parameters]
    assert others and all(_groups(f) == [] for _, f in others), [name for name, _ in others]


def test_the_check_sees_a_missing_group():
    """The check of marks is not vacuous: a function without the mark has no group, one with it has."""
    def bare(two_model_checkout):
        pass
    assert _groups(bare) == []
    assert _groups(pytest.mark.xdist_group(GROUP)(bare)) == [GROUP]
