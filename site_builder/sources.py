"""The site's sources in the checkout: templates/, static/ (published under content-hashed names) and repo pages.

Layer: site_builder. :func:`static_assets` names static/'s files by content and :func:`_copy_static`
copies them into a staged site; :func:`_repo_text` reads a repo page source (docs/*.md,
CONTRIBUTING.md) that is published as a page.

Invariants: a static file's published name holds the first 8 hex of its SHA-256; a symbolic link
under static/, or on the way to a published page source, is refused with one line (it could publish
a file from outside the repository); a failed copy names its target. Tests point :data:`REPO` and
:data:`STATIC` at a copy: every reader of them is in this module, so the patch reaches each.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from engine.language.errors import SpecError, Where

if TYPE_CHECKING:
    from site_builder.writer import Site

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "templates"
STATIC = REPO / "static"


def static_assets() -> tuple[dict[str, str], str]:
    """static/'s files (without its README) and the content-hashed name each is published under
    (``js/deploy.js`` -> ``js/deploy.<first 8 hex of its SHA-256>.js``: a changed file gets a new
    URL, so netlify.toml may let browsers keep /static/* for a year), and one digest of them all.
    A symbolic link under static/ is refused with one line first (engine.language.names.refuse_symlinks):
    a committed link to /proc/self/environ would otherwise publish the build machine's environment."""
    from engine.language.names import refuse_symlinks  # (not at the top: see _worker_start)
    refuse_symlinks(STATIC, REPO)
    names, digest = {}, hashlib.sha256()
    for path in sorted(p for p in STATIC.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(STATIC).as_posix()
        if rel == "README.md":
            continue
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        stem, dot, ext = path.name.partition(".")
        names[rel] = (rel[:-len(path.name)] + f"{stem}.{sha[:8]}{dot}{ext}") if dot else f"{rel}.{sha[:8]}"
        digest.update(f"{rel}\0{sha}\n".encode())
    return names, digest.hexdigest()


def _copy(source: Path, target: Path, follow_symlinks: bool = True) -> None:
    """Copy a file; a failed write names the target (a full disk is the output folder's, not the source's)."""
    try:
        shutil.copy2(source, target, follow_symlinks=follow_symlinks)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), str(target)) from exc


def _copy_static(site: "Site", names: dict[str, str]) -> None:
    """Copy static/ into the site under its hashed names. ``follow_symlinks=False`` keeps a link that
    appears after the check a link (the copy never reads through it)."""
    for rel, name in names.items():
        _copy(STATIC / rel, site._target(f"static/{name}"), follow_symlinks=False)


def _repo_text(path: Path) -> str:
    """A page source from the repo (docs/*.md, CONTRIBUTING.md), refused if it or a folder on the
    way to it is a symbolic link, or if it resolves outside the repo: it is published as a page.
    Read as the corpus's files are (bounded, UTF-8: a bad byte is one line naming the page)."""
    from engine.language.names import refuse_symlinks  # (not at the top: see _worker_start)
    from engine.language.yamlio import read_text
    refuse_symlinks(path, REPO)
    shown = path.relative_to(REPO).as_posix()
    if not path.resolve().is_relative_to(REPO.resolve()):
        raise SpecError(Where(shown), "resolves outside the repository", "commit the file itself")
    return read_text(path, shown)

