"""The corpus as one command that names one model needs it: the shared tables and components, and
that model's spec alone.

Layer: engine.language (on corpus). ``archledger deploy``, ``plan`` and ``disagg`` evaluate one model
per process; reading and checking all 38+ model specs (and the what-if variants) to find it was a
fifth of a cold ``deploy``. The *index* finds the model's file without parsing the others: a
corpus spec lives in ``models/<slug(id)>.yaml`` (:func:`engine.language.model_load.load_model` refuses any
other name), and every spec states its id on one top-level ``model:`` line.

Invariants (why the fast path answers exactly as :func:`engine.language.corpus.load_corpus` would):

* the model is the one :meth:`Corpus.find_model` picks in the full corpus: the index holds every
  model file's id, read from its ``model:`` line, and is used only when each of those ids is the
  one the file's name spells (so no two files can declare one id, and the full load would find
  the same ids); anything else — a file whose line is missing, repeated, quoted oddly or not its
  name's id, a file that is not a small regular file — gives no index, and the caller loads the
  whole corpus, which reports the problem with its usual one-line error;
* a query that matches no model or several is answered by the full load (its message lists the
  known ids, and a broken spec elsewhere is reported first, as before);
* the named model is read and checked by the same :func:`load_model`, the shared parts by the
  same :func:`load_shared`: an error in them is the same one line;
* what the fast path skips is only the *other* models' specs and the variants: an error there is
  reported by ``archledger check``/``validate`` and ``build`` (which load everything), not by a
  command about another model.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import Callable

from engine.language.corpus import Corpus, DEFAULT_ROOT, load_shared, pick_model
from engine.language.model_load import load_model
from engine.language.names import is_name, refuse_symlinks, slug
from engine.language.yamlio import MAX_FILE_BYTES

#: A top-level ``model: org/name`` line (optionally quoted, optionally followed by a comment).
_MODEL_LINE = re.compile(rb"""^model:[ \t]*(['"]?)([^'"\s#]+)\1[ \t]*(?:#.*)?$""", re.M)


def model_index(root: Path) -> dict[str, Path] | None:
    """Model id -> spec file for every ``models/*.yaml`` of ``root``, from each file's one top-level
    ``model:`` line, or None when a file does not plainly state the id its name spells."""
    out: dict[str, Path] = {}
    for path in sorted((root / "models").glob("*.yaml")):
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None
        found = _MODEL_LINE.findall(path.read_bytes())
        if len(found) != 1:
            return None
        try:
            model_id = found[0][1].decode("ascii")
        except UnicodeDecodeError:
            return None
        parts = model_id.split("/")
        if len(parts) != 2 or not all(is_name(p) for p in parts) or slug(model_id) != path.stem:
            return None
        out[model_id] = path
    return out


def corpus_for_model(query: str, root: Path | str | None = None,
                     shared: Callable[[Path], Corpus] = load_shared) -> Corpus | None:
    """The corpus holding only the model ``query`` names (its ``models`` has that one spec, no
    variants), or None when the index cannot tell which (the caller then loads the whole corpus).
    ``shared``: :func:`load_shared`, or a memo of it (the caller's, per root)."""
    root = Path(root) if root else DEFAULT_ROOT
    if not (root / "dims.yaml").exists():
        return None
    refuse_symlinks(root, root, root.name)   # as load_corpus, before reading anything
    index = model_index(root)
    if index is None:
        return None
    model_id, _ = pick_model(query, index)
    if model_id is None:
        return None
    tables = shared(root)
    return replace(tables, models={model_id: load_model(index[model_id], root, tables.roles, tables.schemes)})
