"""``archledger --help`` answers without the evaluation's libraries (issue 42: <= 0.15 s wall).

A fact, not a timing: the modules a fresh interpreter imports to print the help, read from
``python -X importtime`` (one line per module the process imported, on stderr). sympy alone cost
about 0.3 s of the 0.56 s the help took; polars, numpy and altair are as heavy. The commands import
them where they run (engine/cli/*.py); the parser and its help need none of them.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

#: Top-level packages the help must not import (the evaluation, the tables, the charts).
HEAVY = {"sympy", "mpmath", "polars", "numpy", "altair", "pyarrow", "yaml", "jinja2"}


def _imported(*argv: str) -> tuple[str, set[str]]:
    """The help text and every module name ``python -m site_builder.cli ARGV`` imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "site_builder.cli", *argv], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    names = {m.group(1).strip() for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|(.+)$", done.stderr, re.M)}
    return done.stdout, names


@pytest.mark.parametrize("argv", [("--help",), ("deploy", "--help"), ("edit", "--help"), ("show", "--help")])
def test_help_imports_no_evaluation_library(argv):
    text, names = _imported(*argv)
    assert text.startswith("usage: archledger")
    # the whole parser was built: every command module is imported (so the check covers their tops)
    assert {"engine.cli.show", "engine.cli.edit", "engine.cli.deploy", "engine.cli.plan"} <= names
    assert {n.split(".")[0] for n in names} & HEAVY == set()
    # nor the spec language or the build (the help never evaluates or publishes)
    assert not {n for n in names if n.startswith(("engine.spec.corpus", "engine.spec.expr", "engine.build.results",
                                                   "engine.build.publish"))}


def test_the_check_sees_an_import_when_there_is_one():
    """The same reading of ``-X importtime`` finds sympy where a command does import it: ``show``
    evaluates a model (so the help's empty answer above is not an artefact of the parsing)."""
    _, names = _imported("show", "Qwen3-8B", "--json")
    assert "sympy" in names and "engine.spec.corpus" in names
