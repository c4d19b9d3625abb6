"""The ``archledger`` command line.

Layer: engine (the CLI of the engine half; the site half adds its own commands later).
Every failure caused by input prints one line (``file:line: field: problem — hint``) on stderr
and exits with status 2; nothing is written in that case.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import sympy

from engine.errors import SpecError


def _human(value: sympy.Expr, unit: str = "") -> str:
    """1234567 -> '1.23 M' (decimal prefixes); exact integer kept alongside by callers."""
    number = float(value)
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(number) >= scale:
            return f"{number / scale:.2f} {prefix}{unit}"
    return f"{number:g} {unit}".rstrip()


def _formula(expr: sympy.Expr) -> str:
    return str(expr)


def _flatten(overview: dict) -> list[tuple[str, object]]:
    rows = []
    for key, value in overview.items():
        if isinstance(value, dict):
            rows.extend((f"{key}[{sub}]", q) for sub, q in value.items())
        else:
            rows.append((key, value))
    return rows


def cmd_show(args: argparse.Namespace) -> int:
    from engine.api import evaluate
    ev = evaluate(args.model, args.corpus)
    overview = ev.overview(args.kv_dtype)
    if args.json:
        out = {"model_id": ev.model.model_id, "family": ev.model.family, "kv_dtype": args.kv_dtype,
               "bound": {k: int(v) for k, v in sorted(ev.bound.items())}}
        for key, q in _flatten(overview):
            out[key] = {"value": int(q.value), "formula": _formula(q.formula)}
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"{ev.model.display_name}  ({ev.model.model_id}, {ev.model.model_type})")
    units = {"params": "", "checkpoint_bytes": "B", "kv": "B"}
    for key, q in _flatten(overview):
        unit = next((u for prefix, u in units.items() if key.startswith(prefix)), "")
        print(f"  {key:44s} {int(q.value):>20,}  {_human(q.value, unit)}")
        if args.formula:
            print(f"  {'':44s} = {_formula(q.formula)}")
    if args.formula:
        print("  bound: " + ", ".join(f"{k}={int(v)}" for k, v in sorted(ev.bound.items())))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from engine.corpus import load_corpus
    corpus = load_corpus(args.corpus)
    for model in corpus.models.values():
        print(f"{model.model_id:45s} {model.model_type:12s} {model.family}")
    return 0


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (unless it has none or already says it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
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
    parents = [common_options(out=False)]
    show = sub.add_parser("show", parents=parents, help="overview of one model: params, checkpoint bytes, KV per token")
    show.add_argument("model", help="HF id or a unique suffix, e.g. DeepSeek-V3")
    show.add_argument("--formula", action="store_true", help="print the formula behind each number")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp8"], help="KV cache dtype")
    show.set_defaults(func=cmd_show)

    lst = sub.add_parser("list", parents=parents, help="the models in the corpus")
    lst.set_defaults(func=cmd_list)

    from engine import verify_cli
    verify_cli.add_parsers(sub, parents)

    bench = sub.add_parser("bench", parents=parents, help="time loading and evaluating the corpus")
    bench.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    bench.set_defaults(func=lambda a: __import__("engine.bench", fromlist=["run"]).run(a))

    from engine import deploy_cli
    deploy_cli.add_parser(sub, parents)

    build = sub.add_parser(
        "build", parents=[common_options()], help="evaluate every spec over the grid; write results/ and the site",
        description="Evaluate every verified spec over the grid and publish OUT/results/ (Parquet) and "
                    "OUT/site/ together. A model whose inputs did not change is carried over. "
                    "--models or --grid build a subset: models not named keep their previous results "
                    "(nothing is discarded); a grid other than the one the previous results were "
                    "built with needs another --out.")
    build.add_argument("--models", nargs="*", metavar="MODEL", help="limit to these models (HF ids or unique suffixes)")
    build.add_argument("--grid", default=None, metavar="FILE", help="grid YAML (default: grid.yaml of the corpus)")
    build.add_argument("--jobs", type=int, default=None, help="worker processes (default: one per core)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.add_argument("--no-site", action="store_true", help="write results/ only, leave the site as it is")
    build.set_defaults(func=lambda a: __import__("engine.build", fromlist=["run"]).run(a))
    return {"show": show, "list": lst, "bench": bench, "build": build}


def dispatch(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse, resolve the project's folders, run the command; errors and closed pipes end quietly.

    After this, ``args.corpus`` and ``args.out`` are absolute paths and ``args.project`` is the
    :class:`engine.project.Project` the command works on.
    """
    from engine.project import locate
    args = parser.parse_args(argv)
    project = locate(getattr(args, "corpus", None), getattr(args, "out", None))
    args.project, args.corpus, args.out, args.gpus_root = project, str(project.corpus), str(project.out), project.gpus
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe surfaces here, not in the interpreter's exit flush
        return code
    except SpecError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
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


def parser() -> argparse.ArgumentParser:
    """The engine's commands alone (``archledger`` itself is :mod:`site_builder.cli`)."""
    top = Parser(prog="archledger", description=__doc__.splitlines()[0], parents=[common_options()])
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_commands(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    return dispatch(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
