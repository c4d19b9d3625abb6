"""Which Chromium the screenshots command and the browser tests drive (issue 42: the suite's time).

The headless shell renders the same pages for about half the CPU of a full Chromium in its
``--headless=new`` mode (docs/scaling-2.md, "The test suite, fifteenth pass"), so it is preferred;
``$ARCHLEDGER_CHROMIUM`` still names any binary, and a machine with only a full Chromium keeps
working. Fake executables on a PATH of the test's own stand in for the packages: the choice is a
lookup, not a launch.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from site_builder import screenshots
from site_builder.screenshots import chromium_args, chromium_path


def _executable(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A PATH of one empty folder, no $ARCHLEDGER_CHROMIUM, and no /usr/bin/chromium: nothing found."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv("ARCHLEDGER_CHROMIUM", raising=False)
    # Debian's /usr/bin/chromium is looked up by its path: this machine's is left out of the lookup
    monkeypatch.setattr(screenshots, "FULL_CHROMIUMS", tuple(n for n in screenshots.FULL_CHROMIUMS if os.sep not in n))
    return folder


def test_nothing_installed_finds_nothing(bare):
    assert chromium_path() is None
    _executable(bare, "chromium-headless-shell").chmod(0o644)      # there, but not executable
    assert chromium_path() is None


def test_the_headless_shell_is_chosen_over_a_full_chromium(bare):
    _executable(bare, "chromium")
    shell = _executable(bare, "chromium-headless-shell")
    assert chromium_path() == shell


def test_a_full_chromium_alone_is_still_used(bare):
    full = _executable(bare, "chromium")
    assert chromium_path() == full


def test_page_timings_ask_for_a_full_chromium(bare):
    """benchmarks/site.py times pages for a reader's browser: the shell is never its answer."""
    _executable(bare, "chromium-headless-shell")
    assert chromium_path(full=True) is None
    full = _executable(bare, "chromium")
    assert chromium_path(full=True) == full


def test_the_named_binary_wins(bare, tmp_path, monkeypatch):
    _executable(bare, "chromium-headless-shell")
    named = _executable(tmp_path, "my-chrome")
    monkeypatch.setenv("ARCHLEDGER_CHROMIUM", str(named))
    assert chromium_path() == named


def test_only_a_full_chromium_is_told_which_headless_mode():
    """A full Chromium has one headless mode to ask for; the shell is headless and takes no such flag."""
    assert chromium_args(Path("/usr/bin/chromium"))[0] == "--headless=new"
    assert chromium_args(Path("/usr/lib/chromium/chromium-headless-shell")) == screenshots.CHROMIUM_ARGS
    assert chromium_args(Path("/usr/bin/chromium-headless-shell")) == screenshots.CHROMIUM_ARGS
    assert chromium_args(Path("/opt/chrome-headless-shell-linux64/chrome-headless-shell")) == screenshots.CHROMIUM_ARGS
    for path in ("/usr/bin/chromium", "/usr/bin/chromium-headless-shell"):
        args = chromium_args(Path(path))
        assert {"--no-sandbox", "--disable-background-networking"} <= set(args)   # offline and root-safe either way
        assert len(args) == len(set(args))
    assert not any(a.startswith("--headless") for a in screenshots.CHROMIUM_ARGS)
