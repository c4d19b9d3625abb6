"""What a name in a spec may be, and the paths names lead to: the identity grammar and the link refusal.

Layer: engine.language. Names become file names and URL path segments, and specs arrive in pull
requests, so every model, component, scheme, variant and snapshot name follows one grammar
(:data:`NAME_RULE`, the Hugging Face Hub's rule for a repo name part); dims and layer templates are
sympy symbols too (:func:`check_symbol_name`).

Invariants: :func:`slug` is one-to-one (names hold no ``--``); a snapshot path stays inside
``corpus/snapshots/`` (checked by grammar and on the resolved path); :func:`refuse_symlinks` refuses
a symbolic link at, on the way to, or below a path, so nothing outside the repository is read.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from engine.language import symbols
from engine.language.errors import SpecError, Where

#
# Names become file names and URL path segments (``build/site/models/<org--name>/``,
# ``corpus/snapshots/<name>.yaml``, ``/components/<name>/``), and specs arrive in pull requests: a
# name like ``..`` or ``/etc/passwd`` would overwrite the gallery or read a file outside the corpus.
# So every such name follows one grammar, the Hugging Face Hub's rule for a repo name part.

#: What a name may be, as the hint of every error about one.
NAME_RULE = ("letters, digits, '-', '_' and '.', at most 96 characters, not starting or ending "
             "with '-' or '.', no '--' or '..'")
_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")


def shown_value(value: Any, limit: int = 60) -> str:
    """``repr`` of a hostile value, escaped (no control characters) and cut to keep one short line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_name(text: Any) -> bool:
    """A Hub-style name part (see :data:`NAME_RULE`). ``--`` is refused because it is the slug
    separator: ``a--b/c`` and ``a/b--c`` would share the folder ``a--b--c``."""
    return isinstance(text, str) and bool(_NAME.fullmatch(text)) and "--" not in text and ".." not in text


def check_name(text: Any, where: Where, what: str, example: str) -> str:
    """``text`` if it is a valid name (:func:`is_name`), else a one-line :class:`SpecError`."""
    if not is_name(text):
        raise SpecError(where, f"{what} {shown_value(text)} is not a valid name", f"write e.g. {example} ({NAME_RULE})")
    return text


def check_symbol_name(text: Any, where: Where, what: str, example: str) -> str:
    """``text`` if it can name a sympy symbol (:func:`engine.language.symbols.is_symbol_name`: dims and
    layer templates, whose layer groups become symbols), else a one-line :class:`SpecError`."""
    if not symbols.is_symbol_name(text):
        raise SpecError(where, f"{what} {shown_value(text)} is not an identifier",
                        f"write e.g. {example} ({symbols.SYMBOL_RULE})")
    return text


def check_model_id(model_id: Any, where: Where) -> str:
    """A model id is the Hub's ``org/name``: two names (:func:`is_name`) joined by one ``/``."""
    parts = model_id.split("/") if isinstance(model_id, str) else []
    if len(parts) != 2 or not all(is_name(p) for p in parts):
        raise SpecError(where, f"model id {shown_value(model_id)} is not a Hugging Face id `org/name`",
                        f"write e.g. `model: Qwen/Qwen3-8B` (org and name: {NAME_RULE})")
    return model_id


def slug(model_id: str) -> str:
    """``org/name`` -> ``org--name``: the model's file, snapshot and site folder name (one-to-one,
    as names hold no ``--``)."""
    return model_id.replace("/", "--")


def is_snapshot_name(name: Any) -> bool:
    """A snapshot file's base name: a slug ``org--name`` or a single name; never a path."""
    parts = name.split("--") if isinstance(name, str) else []
    return 1 <= len(parts) <= 2 and all(is_name(p) for p in parts)


def snapshot_path(root: Path, name: Any, where: Where, suffix: str = ".yaml") -> Path:
    """``corpus/snapshots/<name><suffix>``, refused unless ``name`` is a snapshot name and the path
    stays inside ``corpus/snapshots/`` (checked twice: by grammar, and on the resolved path)."""
    folder = Path(root) / "snapshots"
    if not is_snapshot_name(name):
        raise SpecError(where, f"snapshot {shown_value(name)} is not a snapshot name",
                        "write the file's base name under corpus/snapshots/, e.g. `snapshot: Qwen--Qwen3-8B` "
                        f"(one name or org--name; {NAME_RULE})")
    path = folder / f"{name}{suffix}"
    if not path.resolve().is_relative_to(folder.resolve()):
        raise SpecError(where, f"snapshot {shown_value(name)} resolves outside corpus/snapshots/",
                        "commit the snapshot file itself under corpus/snapshots/")
    return path


def refuse_symlinks(path: Path, below: Path, shown: str = "") -> None:
    """Refuse a symbolic link at ``path``, on the way down to it from ``below``, or anywhere under it.

    Specs, static files and docs arrive in pull requests, and a committed link can point anywhere
    on the machine that builds (``/proc/self/environ``, ``~/.ssh/``): whatever it points at would be
    read and could be published. Nothing in the repo needs a link, so links are refused outright
    (no resolve-and-compare that ``..``, a link to a link or a later change of the target could
    talk around). Errors name the link as ``shown/<path below below>``."""
    path, below = Path(path), Path(below)

    def refuse(link: Path) -> None:
        rel = link.relative_to(below).as_posix()
        name = f"{shown}/{rel}" if shown else rel
        raise SpecError(Where(name), "is a symbolic link, which could publish a file from outside the repository",
                        "commit the file itself")

    parts = path.relative_to(below).parts
    for i in range(1, len(parts) + 1):
        if below.joinpath(*parts[:i]).is_symlink():
            refuse(below.joinpath(*parts[:i]))
    if not path.is_dir():
        return
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_symlink():
                    refuse(Path(entry.path))
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))


def pick_model(query: str, ids) -> tuple[str | None, list[str]]:
    """(the model id of ``ids`` that ``query`` names, or None; the ids it matches): the HF id itself,
    a file stem, or a case-insensitive part of an id that picks one (an exact last name first)."""
    if query in ids:
        return query, [query]
    wanted = query.lower().replace("--", "/")
    hits = [i for i in ids if wanted in i.lower()]
    exact = [i for i in hits if i.lower().split("/")[-1] == wanted.split("/")[-1]]
    if len(exact) == 1:
        return exact[0], hits
    return (hits[0] if len(hits) == 1 else None), hits
