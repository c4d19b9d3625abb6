"""The ``archledger`` command: the engine's commands, plus the site on top of ``build``.

Layer: site_builder (it may import engine; engine never imports it). ``archledger build`` runs the
engine's grid build and then renders ``build/site/`` from ``build/results/`` (``--no-site`` to
skip); ``archledger site`` renders the site from existing results; ``archledger serve`` previews
``build/site`` on 127.0.0.1; ``archledger screenshots`` saves PNGs of key pages with headless
Chromium. Everything else is ``engine.cli``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine import cli as engine_cli
from engine.errors import SpecError

OWN = ("site", "serve", "screenshots")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="archledger")
    sub = parser.add_subparsers(dest="command", required=True)
    site = sub.add_parser("site", help="render build/site/ from build/results/")
    site.add_argument("--out", default="build")
    serve = sub.add_parser("serve", help="preview build/site on http://127.0.0.1:PORT/")
    serve.add_argument("--out", default="build")
    serve.add_argument("--port", type=int, default=8000)
    shots = sub.add_parser("screenshots", help="PNG screenshots of the gallery, a model and a deployment page")
    shots.add_argument("--out", default="build")
    shots.add_argument("--to", default="build/screenshots")
    shots.add_argument("--model", default="deepseek-ai--DeepSeek-V3")
    return parser


def render(out: Path) -> int:
    from site_builder.render import render_site
    results = out / "results"
    if not (results / "models.parquet").exists():
        print(f"error: {results}: no results — run `archledger build` first", file=sys.stderr)
        return 2
    site = render_site(results, out)
    pages = sum(1 for _ in site.rglob("index.html"))
    print(f"wrote {site} ({pages} pages)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in OWN:
        args = _parser().parse_args(argv)
        if args.command == "site":
            return render(Path(args.out))
        if args.command == "serve":
            from site_builder.serve import serve
            return serve(Path(args.out) / "site", args.port)
        from site_builder.screenshots import screenshots
        return screenshots(Path(args.out) / "site", Path(args.to), args.model)
    no_site = "--no-site" in argv
    if no_site:
        argv.remove("--no-site")
    code = engine_cli.main(argv)
    if code == 0 and command == "build" and not no_site:
        out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path("build")
        try:
            return render(out)
        except SpecError as exc:
            print(f"error: {exc.one_line()}", file=sys.stderr)
            return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
