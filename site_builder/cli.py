"""The ``archledger`` command: the engine's commands, plus the site on top of ``build``.

Layer: site_builder (it may import engine; engine never imports it). One parser lists every
command: the engine's (``show``, ``list``, ``snapshot``, ``validate``, ``bench``, ``deploy``, ``plan``,
``build``) and the site's: ``build`` renders ``OUT/site/`` from the staged results and publishes
both together (``--no-site`` to skip), ``site`` re-renders the site from existing results,
``serve`` previews it on 127.0.0.1, ``screenshots`` saves PNGs of key pages with headless
Chromium. ``--corpus`` and ``--out`` work before or after the command; inside a checkout its own
``corpus/``, ``gpus/`` and ``build/`` are used (:mod:`engine.project`).
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from engine.batch import collector

# before the imports below: in this process and in every worker the build spawns (a spawned worker
# runs this module's top first), collections are rare (engine/batch/collector.py)
collector.tune()

from engine import cli as engine_cli  # noqa: E402

# engine.batch.results (the build, and its progress printer) is imported by the commands that use
# it, not here: a site render worker runs this module's top too, and never evaluates (that import
# brings sympy and the spec language: half of a render worker's start)


def cmd_build(args) -> int:
    import time
    from engine.batch import uptodate
    from site_builder.incremental import sources_digest
    started = time.perf_counter()
    # what the site is rendered from besides the results, taken before any work (a template edited
    # while the build runs is then a change for the next build); with nothing to do, the answer
    # comes before the build's imports (engine/batch/uptodate.py)
    sources = None if args.no_site else sources_digest()
    if uptodate.answer(args, sources, started):
        return 0
    from engine.batch.results import progress_printer, run
    from site_builder.render import prepare_worker, render_staged
    quiet = args.quiet

    def site(results: Path, site_dir: Path, progress=None, workers=None) -> None:
        # the published site beside the staged one: pages whose inputs did not change are carried from it
        render_staged(results, site_dir, progress if progress else (None if quiet else progress_printer("page groups")),
                      workers=workers)
    site.prepare = prepare_worker        # run in the build's idle workers before the render (its imports)

    return run(args, site=None if args.no_site else site, site_sources=sources)


#: The commands whose process, when it is the ``archledger`` program itself (:func:`main`), ends
#: without the interpreter's teardown: what they hold (sympy's caches, a plan's structures, the grid
#: half a split model evaluates in the build's process: engine.batch.tasks.HOME_PART) would be freed
#: object by object after the answer is printed or everything published (0.5-1.2 s measured: a
#: tenth to a fifth of a ``plan``), as the build's workers already end (engine.batch.tasks). They
#: write nothing at exit (no atexit hook, no open file, the build's pool and lock closed by then).
QUICK_EXIT = engine_cli.CACHED_COMMANDS | {"build"}


def cmd_site(args) -> int:
    from engine.batch.results import progress_printer
    from site_builder.render import render_site
    out = Path(args.out)
    if not (out / "results" / "models.parquet").exists():
        print(f"error: {out / 'results'}: no results — run `archledger build` first", file=sys.stderr)
        return 2
    site = render_site(out / "results", out, None if args.quiet else progress_printer("page groups"))
    pages = sum(1 for _ in site.rglob("index.html"))
    print(f"wrote {site} ({pages} pages)")
    return 0


def cmd_serve(args) -> int:
    from site_builder.serve import serve
    return serve(Path(args.out) / "site", args.port, args.project.root / "netlify.toml")


def cmd_screenshots(args) -> int:
    from site_builder.screenshots import screenshots
    return screenshots(Path(args.out) / "site", Path(args.to) if args.to else Path(args.out) / "screenshots",
                       args.model)


def parser():
    top = engine_cli.Parser(prog="archledger", description="What does it cost to run this LLM architecture: "
                            "verified specs, one symbolic evaluation, Parquet results and a static site.",
                            parents=[engine_cli.common_options()])
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = engine_cli.add_commands(sub)
    common = engine_cli.common_options(corpus=False)
    commands["build"].set_defaults(func=cmd_build)

    site = sub.add_parser("site", parents=[common], help="re-render OUT/site/ from OUT/results/ (no evaluation)")
    site.add_argument("--quiet", action="store_true", help="no progress")
    site.set_defaults(func=cmd_site)
    serve = sub.add_parser("serve", parents=[common], help="preview OUT/site/ on http://127.0.0.1:PORT/")
    serve.add_argument("--port", type=int, default=8000, help="TCP port on 127.0.0.1 (0: any free port)")
    serve.set_defaults(func=cmd_serve)
    shots = sub.add_parser("screenshots", parents=[common],
                           help="PNG screenshots of the gallery, a model, its deployments, compare and a graph diff (headless Chromium)")
    shots.add_argument("--to", default=None, metavar="DIR", help="folder for the PNGs (default: OUT/screenshots)")
    shots.add_argument("--model", default="deepseek-ai--DeepSeek-V3", help="model whose pages are captured (org--name)")
    shots.set_defaults(func=cmd_screenshots)
    return top


def main(argv: list[str] | None = None) -> int:
    code = engine_cli.dispatch(parser(), argv)
    if argv is None and engine_cli.last_command in QUICK_EXIT and _is_program():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):     # (a reader that left: dispatch answered it)
                stream.flush()
        os._exit(code)
    return code


def _is_program() -> bool:
    """This process runs the ``archledger`` command (its console script or ``python -m
    site_builder.cli``), not a caller that imported :func:`main` (a test, a library)."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    return program is not None and (program.name == "archledger" or program.resolve() == Path(__file__).resolve())


if __name__ == "__main__":
    sys.exit(main())
