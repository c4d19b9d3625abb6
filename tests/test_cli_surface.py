"""The command line as a user meets it: every command listed, every option explained, the
checkout you stand in used, options anywhere, and the small failures (a closed pipe, a busy port,
a zero degree) ending in one line.

These run the real ``archledger`` entry point (``python -m site_builder.cli``) in subprocesses
where the current folder or a pipe matters, in-process otherwise.
"""
from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from site_builder import cli
from tests.conftest import REPO

ARCHLEDGER = [sys.executable, "-m", "site_builder.cli"]


def _commands() -> dict[str, argparse.ArgumentParser]:
    top = cli.parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_help_lists_every_command_and_build_has_no_site(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    commands = _commands()
    assert {"show", "list", "snapshot", "validate", "bench", "deploy", "build", "site", "serve",
            "screenshots"} <= set(commands)
    for name in commands:
        assert f"    {name}" in text, name
    assert "--no-site" in commands["build"].format_help()


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_option_has_help_and_shows_its_default(command):
    parser = _commands()[command]
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help and action.help.strip(), (command, action.option_strings)
        shown = parser._get_formatter()._expand_help(action)   # the text --help prints for it
        if action.default not in (None, False, argparse.SUPPRESS):
            assert f"default: {action.default}" in shown or "(default" in shown, (command, shown)


@pytest.mark.parametrize("command", sorted(_commands()))
def test_help_prints_no_rst_markup(command):
    """``--help`` is read in a terminal: the docstrings' double-backtick literals print as single
    backticks (issue 41: ``archledger deploy``: printed literally)."""
    text = _commands()[command].format_help()
    assert "``" not in text, (command, text[:300])


def _checkout(tmp_path: Path, drop: str = "openai--gpt-oss-20b") -> Path:
    """A second checkout (corpus/ and gpus/ only) with one model fewer than the installed one."""
    root = tmp_path / "other-checkout"
    shutil.copytree(REPO / "corpus", root / "corpus")
    (root / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    shutil.copytree(REPO / "gpus", root / "gpus")
    (root / "corpus" / "models" / f"{drop}.yaml").unlink()
    for variant in (root / "corpus" / "variants").glob("*.yaml"):   # a what-if variant needs its base
        if f"base: {drop.replace('--', '/', 1)}\n" in variant.read_text():
            variant.unlink()
    (root / "docs").mkdir()
    return root


def _run(args, cwd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(ARCHLEDGER + args, cwd=cwd, capture_output=True, text=True, timeout=300, **kw)


def test_a_command_inside_a_checkout_uses_that_checkouts_corpus_and_build(tmp_path):
    root = _checkout(tmp_path)
    (root / "docs" / "deep").mkdir()
    listed = _run(["list"], cwd=root / "docs" / "deep")
    assert listed.returncode == 0, listed.stderr
    assert "openai/gpt-oss-120b" in listed.stdout and "openai/gpt-oss-20b " not in listed.stdout
    # a header, then one line per model (one was dropped from this checkout)
    assert len(listed.stdout.splitlines()) == 1 + len(list((REPO / "corpus" / "models").glob("*.yaml"))) - 1
    # the output folder is the checkout's build/, not ./build of the installed tree
    site = _run(["site"], cwd=root / "docs")
    assert site.returncode == 2
    assert f"{root / 'build' / 'results'}: no results" in site.stderr


@pytest.mark.parametrize("argv", [["--corpus", "{c}", "list"], ["list", "--corpus", "{c}"], ["list", "--corpus={c}"]])
def test_corpus_before_or_after_the_command(tmp_path, argv, capsys):
    root = _checkout(tmp_path, drop="Qwen--Qwen3-8B")
    assert cli.main([a.format(c=root / "corpus") for a in argv]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-32B" in out and "Qwen/Qwen3-8B " not in out


@pytest.mark.parametrize("argv", [["--out", "{o}", "site"], ["site", "--out", "{o}"], ["site", "--out={o}"]])
def test_out_before_or_after_the_command(tmp_path, argv, capsys):
    out = tmp_path / "elsewhere"
    assert cli.main([a.format(o=out) for a in argv]) == 2
    assert f"{out / 'results'}: no results" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly(tmp_path):
    proc = subprocess.Popen(ARCHLEDGER + ["list"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                      # the reader (`| head`) is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141     # 128 + SIGPIPE, as any Unix filter
    assert err == "", err                    # no BrokenPipeError traceback


def test_a_busy_port_is_one_line(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<!doctype html>")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _run(["serve", "--out", str(tmp_path), "--port", str(port)], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in done.stderr and "port already in use" in done.stderr


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--batch", "--input", "--gpus"])
@pytest.mark.parametrize("value", ["0", "-2", "eight"])
def test_deploy_degrees_and_lengths_must_be_positive_whole_numbers(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["deploy", "Qwen3-8B", "--gpu", "H100", flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: archledger deploy: argument " + flag)


def test_unknown_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["list", "--colour"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--colour" in err


def test_validate_ends_with_a_summary_line(capsys):
    assert cli.main(["validate", "Qwen3-8B", "Mixtral-8x7B"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "2 models: 2 verified, 0 with errors; 0 warnings"


def test_corpus_before_build_and_out_with_equals_still_render_the_site(tmp_path, capsys):
    """`archledger --corpus X build --out=Y` once skipped the site and `--out=Y` rendered ./build."""
    root = _checkout(tmp_path, drop="Qwen--Qwen3-32B")
    out = tmp_path / "elsewhere"
    tiny = REPO / "tests" / "data" / "grid_tiny.yaml"
    assert cli.main(["--corpus", str(root / "corpus"), "build", f"--out={out}", "--grid", str(tiny),
                     "--models", "Qwen3-8B", "--quiet", "--jobs", "1"]) == 0
    assert (out / "site" / "index.html").is_file() and (out / "results" / "models.parquet").is_file()
    assert (out / "site" / "models" / "Qwen--Qwen3-8B" / "index.html").is_file()
    from engine.batch.publish import consistent
    assert consistent(out)                 # the site was rendered from these results


@pytest.mark.parametrize("command", ["deploy", "plan"])
def test_hbm_fraction_default_is_the_engines(command):
    """Consistency of the CLI with the engine: the parser keeps its imports light, so it writes the
    default out; it must be the one Options and the grid use (engine.deploy.structure)."""
    from engine.deploy.structure import HBM_FRACTION, Options
    args = cli.parser().parse_args([command, "Llama-3.1-8B", "--gpu", "H100", "--input", "1024", "--output", "128", "--ttft", "1", "--tpot", "1"]
                                   if command == "plan" else [command, "Llama-3.1-8B", "--gpu", "H100"])
    assert args.hbm_fraction == HBM_FRACTION == Options().hbm_fraction
