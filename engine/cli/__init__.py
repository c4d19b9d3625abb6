"""The ``archledger`` command line.

Layer: engine.cli, on top of every engine concern (one module per command: show, verify, bench,
kernelbench, deploy, plan, disagg, build, new); ``archledger`` itself is :mod:`site_builder.cli`, which adds the site's commands.
Every failure caused by input prints one line (``file:line: field: problem — hint``) on stderr
and exits with status 2; nothing is written in that case.
"""
from __future__ import annotations

import argparse
import os
import sys

from engine.language.errors import SpecError


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (unless it has none or already says it); the
    docstrings' reStructuredText literals (````x````) print as a terminal reader writes them (```x```)."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(text.replace("``", "`"))

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").replace("``", "`")
        default = action.default
        if (default is not None and not isinstance(default, bool) and default != argparse.SUPPRESS
                and action.option_strings and "default" not in text):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with the project's error form: one line on stderr, exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 — argparse's hook
        print(f"error: {self.prog}: {message} — see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def common_options(corpus: bool = True, out: bool = True) -> argparse.ArgumentParser:
    """``--corpus`` and ``--out``, accepted before or after the command (and as ``--out=DIR``).

    Their default is SUPPRESS on every parser, so a value given before the command is not
    overwritten by the sub-parser's default; :func:`dispatch` fills in the project's folders.
    """
    common = argparse.ArgumentParser(add_help=False)
    if corpus:
        common.add_argument("--corpus", metavar="DIR", default=argparse.SUPPRESS,
                            help="corpus folder (default: corpus/ of the checkout you stand in, else the installed one)")
    if out:
        common.add_argument("--out", metavar="DIR", default=argparse.SUPPRESS,
                            help="output folder holding results/ and site/ (default: build/ of the checkout you stand in)")
    return common


def add_commands(sub) -> dict[str, argparse.ArgumentParser]:
    """Register the engine's commands on ``sub``; returns them by name (the site half adds more)."""
    from engine.cli import bench, build, check, deploy, disagg, edit, kernelbench, new, plan, show, verify
    parents = [common_options(out=False)]
    commands = show.add_parsers(sub, parents)
    verify.add_parsers(sub, parents)
    commands["bench"] = bench.add_parser(sub, parents)
    kernelbench.add_parser(sub, parents)
    deploy.add_parser(sub, parents)
    plan.add_parser(sub, parents)
    disagg.add_parser(sub, parents)
    edit.add_parser(sub, parents)
    check.add_parser(sub, parents)
    new.add_parser(sub, parents)
    commands["build"] = build.add_parser(sub, [common_options()])
    return commands


#: The commands that keep parsed YAML in ``<out>/cache/yaml/`` (engine.language.parse_cache): questions
#: asked of a built checkout, which never write its results or site. ``build``, ``site`` and the
#: rest leave the output folder to the publish protocol alone (its lock, its owner check).
CACHED_COMMANDS = frozenset({"deploy", "plan", "disagg", "show", "list"})


#: The command :func:`dispatch` ran last in this process (site_builder.cli.main reads it: which
#: commands end without the interpreter's teardown).
last_command: str | None = None


def dispatch(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse, resolve the project's folders, run the command; errors and closed pipes end quietly.

    After this, ``args.corpus`` and ``args.out`` are absolute paths and ``args.project`` is the
    :class:`engine.project.Project` the command works on.
    """
    args = parser.parse_args(argv)    # `--help` and a usage error end here, before the imports below
    global last_command
    last_command = args.command
    from engine.batch.publish import PublishError
    from engine.project import locate
    project = locate(getattr(args, "corpus", None), getattr(args, "out", None))
    args.project, args.corpus, args.out, args.gpus_root = project, str(project.corpus), str(project.out), project.gpus
    from engine.language import parse_cache
    if args.command in CACHED_COMMANDS:   # YAML parsed once per text on a built checkout
        parse_cache.use(parse_cache.folder_for(project.out))
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit flush
        return code
    except SpecError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except PublishError as exc:     # the output folder's lock or owner (`archledger site`; build says it itself)
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `archledger show X | head`: the reader left; silence the flush at exit and end like
        # any Unix filter killed by SIGPIPE (128 + 13).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        parse_cache.use(None)     # this command's output folder only (main() may run again in-process)


def parser() -> argparse.ArgumentParser:
    """The engine's commands alone (``archledger`` itself is :mod:`site_builder.cli`)."""
    top = Parser(prog="archledger", description=__doc__.splitlines()[0], parents=[common_options()])
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_commands(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    return dispatch(parser(), argv)

