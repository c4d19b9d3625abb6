"""A question command run as the ``archledger`` program ends without the interpreter's teardown
(site_builder.cli.QUICK_EXIT) and still says all it has to say, with its exit status.

What could go wrong is output lost at the exit (a buffer not flushed) or a wrong status: the
program's stdout, through a pipe, equals what ``main()`` prints in this process (a consistency
test), an error still prints its one line with status 2, and a reader that leaves early ends the
program like a Unix filter killed by SIGPIPE (141), as before.
"""
from __future__ import annotations

import os
import subprocess
import sys

from site_builder import cli
from tests.conftest import REPO

SHOW = ["show", "Qwen3-0.6B", "--json"]


def _program(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "site_builder.cli", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, **kwargs)


def test_the_program_prints_what_main_prints_and_its_status(capsys):
    assert "show" in cli.QUICK_EXIT and "plan" in cli.QUICK_EXIT and "site" not in cli.QUICK_EXIT
    assert cli.main(SHOW) == 0
    mine = capsys.readouterr().out
    done = _program(*SHOW)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == mine and len(mine) > 1000
    bad = _program("show", "no-such-model-anywhere")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "no-such-model-anywhere" in bad.stderr


def test_a_reader_that_leaves_ends_the_program_with_sigpipes_status():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    program = subprocess.Popen([sys.executable, "-m", "site_builder.cli", *SHOW], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    program.stdout.close()                # the reader leaves before the answer is written (it takes a second)
    assert program.wait(timeout=120) == 141
    assert program.stderr.read() == b""
