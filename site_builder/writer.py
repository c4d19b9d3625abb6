"""How a staged site is written: pages from templates, text, gzip-compressed JSON, placed files.

Layer: site_builder. :class:`Site` writes under a staging folder (never the published site) and
records every file it writes (the site manifest's record of a page group).

Invariants: a file is always written new, never through an existing one (a carried file is a hard
link into the published site, which is replaced whole, never written in place); compressed files
carry no timestamp (the same value gives the same bytes, which the incremental render compares);
a page's data reaches its inline script only through :func:`site_builder.templating.script_json`.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
from pathlib import Path

import jinja2

from site_builder.data import compact_json
from site_builder.sources import _copy
from site_builder.templating import script_json


class Site:
    """Pages and files written under a staging folder."""

    def __init__(self, folder: Path, env: jinja2.Environment):
        self.folder = folder
        self.env = env
        self.pages: list[str] = []
        self.written: list[str] = []     # every file written, relative to the folder (the site manifest's record)
        self._made: set[Path] = set()       # folders made here (a mkdir per file was a system call each)

    def page(self, path: str, template: str, title: str, page_data: dict | None = None, **context) -> None:
        depth = len(path.split("/")) if path else 0     # pages live at <path>/index.html
        root = "../" * depth
        html = self.env.get_template(template).render(
            title=title, root=root, page_json=script_json(page_data or {}), **context)
        self.file(f"{path}/index.html" if path else "index.html", html)
        self.pages.append(path)

    def file(self, path: str, text: str) -> None:
        target = self._target(path)
        target.write_text(text)

    def gzip_text(self, path: str, text: str) -> None:
        """``text`` gzip-compressed at ``path`` (``.gz``), with no timestamp (same text, same bytes)."""
        self._target(path).write_bytes(gzip.compress(text.encode(), 9, mtime=0))

    def gzip_json(self, path: str, value) -> None:
        """``value`` as compact JSON, gzip-compressed at ``path`` (``.json.gz``): the deploy pages'
        formula files are a third of the site as plain JSON and a tenth of that compressed; the
        pages decompress them (static/js/deploy_eval.js). No timestamp in the header, so the same
        value gives the same bytes (the incremental render compares hashes)."""
        self.gzip_text(path, compact_json(value))

    def place(self, source: Path, path: str) -> None:
        """Put the file ``source`` at ``path``: a hard link where the file system allows (the site
        and the results it links to are only ever replaced whole, never written in place), else a copy."""
        target = self._target(path)
        try:
            os.link(source, target)
        except OSError:
            _copy(source, target)

    def _target(self, path: str) -> Path:
        # a new file, never a write through an existing one: a carried file is a hard link into the
        # published site
        target = self.folder / path
        if target.parent not in self._made:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(target.parent)
        target.unlink(missing_ok=True)
        self.written.append(path)
        return target


def _csv(rows: list[dict]) -> str:
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in row.items()})
    return out.getvalue()
