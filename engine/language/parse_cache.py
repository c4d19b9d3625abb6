"""What :func:`engine.language.yamlio.load_yaml` parsed (and whole measured kernel tables), kept on disk by content hash.

Layer: engine.language. A cold ``archledger deploy`` parses about 65 YAML files (the shared corpus,
the model's spec, the GPU's measured kernel tables, the GPUs and fusion tables): a quarter of its
CPU. On a built checkout (``<out>/results/`` exists) the command line keeps each parsed value in
``<out>/cache/yaml/<key>.json`` (:func:`use`, called by :func:`engine.cli.dispatch`), and the next
process reads it back instead of parsing.

Invariants:

* the key is the SHA-256 of :data:`FORMAT`, PyYAML's version, the bytes of ``yamlio.py``,
  ``expr.py`` (its number bound) and this module (the loader and its limits), and the file's
  text (a table's: its loader's modules too): an edited file, or an edited loader, is a different
  key, so a stale entry is never read (there is nothing to invalidate);
* only a parse that succeeded is kept (an error is never cached: a bad file raises the same
  one-line error every time); the caller's other checks (top-level mapping, the file's schema)
  run on a cached value as on a parsed one;
* an entry holds plain JSON: mappings and lists with their lines (:class:`LineDict`,
  :class:`LineList`), strings, whole numbers, floats (``repr`` round-trips exactly), booleans and
  nulls; a value with anything else, or with one container reached twice (a YAML alias), is not
  kept. Reading an entry checks every node (kinds, lines, finite numbers within the loader's
  magnitude); any entry that does not decode is a miss, and the file is parsed;
* entries are written to a temporary name and renamed (a reader sees a whole entry or none); a
  folder that cannot be written just means no cache;
* an entry is read only where this user wrote it: the folder and the file must be owned by this
  process's user and not writable by everyone (another user's file, or one in a world-writable
  folder such as /tmp itself, is a miss), and it is JSON, never pickle: a planted entry can at
  worst be refused by the reader's checks, never run.

Where the entries live (:func:`folder`): the folder :func:`use` named (a built checkout's
``<out>/cache/yaml``, for the question commands), else ``$ARCHLEDGER_CACHE`` (any process: a
build, its ``--jobs`` workers and the commands; the test suite points it at one folder per run, so
its many fresh processes share their parses; empty: no cache). The same store also keeps whole
parsed measured kernel tables (:func:`get_entry` / :func:`put_entry`, engine.deploy.measured_tables,
keyed by their own loader's source too): those alone also default to the user's cache folder
(:func:`tables_folder`), as parsing and checking all ~170 of them is 2-3 CPU-s of every fresh
process that reads them (a build checks them all).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

#: Bumped when the entry's format changes.
FORMAT = "archledger-yaml-cache-1"
#: An entry larger than this is not read (the largest corpus file's entry is about 100 KB).
MAX_ENTRY_BYTES = 8 << 20
#: No entry found (a parsed value may be None: an empty file).
MISS = object()

#: The environment variable naming the cache folder of any process (empty: no cache).
ENV = "ARCHLEDGER_CACHE"

_DIR: list = [None]        # [the folder :func:`use` named, or None: the default]
_SALTS: dict = {}          # (namespace, sources) -> hash state of FORMAT, PyYAML's version and the sources


class _NotKept(ValueError):
    """A value or an entry outside the plain-JSON form above."""


def use(folder: Path | None) -> None:
    """Keep parsed values under ``folder`` from now on (None: back to the default, :func:`folder`)."""
    _DIR[0] = Path(folder) if folder is not None else None


def folder() -> Path | None:
    """Where YAML parses are kept now: :func:`use`'s folder, else ``$ARCHLEDGER_CACHE`` (unset or
    empty: none)."""
    if _DIR[0] is not None:
        return _DIR[0]
    named = os.environ.get(ENV)
    return Path(named) if named else None


def tables_folder() -> Path | None:
    """Where parsed measured tables are kept: :func:`folder`, else (``$ARCHLEDGER_CACHE`` unset) the
    user's cache folder, ``$XDG_CACHE_HOME/archledger`` or ``~/.cache/archledger``; none where
    ``$ARCHLEDGER_CACHE`` is empty or no home is known."""
    found = folder()
    if found is not None or ENV in os.environ:
        return found
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        home = os.environ.get("HOME")
        if not home:
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "archledger"


def folder_for(out: Path) -> Path | None:
    """The cache folder of an output folder: ``out/cache/yaml`` on a built checkout (``out/results``
    exists), else None (a command never creates ``out/`` or writes into a fresh one)."""
    return out / "cache" / "yaml" if (out / "results").is_dir() else None


def _yaml_sources() -> tuple[str, ...]:
    """The source files a YAML entry's value depends on: the loader, its number bound, this module."""
    from importlib.util import find_spec     # found, not imported: expr would load sympy
    return (find_spec("engine.language.yamlio").origin, find_spec("engine.language.expr").origin, __file__)


def _key(namespace: str, sources: tuple[str, ...], data: bytes) -> str:
    """SHA-256 of :data:`FORMAT`, ``namespace``, PyYAML's version, the bytes of each source file in
    ``sources`` (the code that made the value) and ``data``: what the entry's value is a function of."""
    salt = _SALTS.get((namespace, sources))
    if salt is None:
        import yaml
        salt = hashlib.sha256(f"{FORMAT}\0{namespace}\0{yaml.__version__}\0".encode())
        for source in sources:
            body = Path(source).read_bytes()
            salt.update(f"{len(body)}\0".encode() + body)
        salt = _SALTS[(namespace, sources)] = salt
    h = salt.copy()
    h.update(data)
    return h.hexdigest()


def _mine(stat: os.stat_result) -> bool:
    """Owned by this process's user and not writable by everyone."""
    return stat.st_uid == os.geteuid() and not stat.st_mode & 0o002


def get_entry(where: Path | None, namespace: str, sources: tuple[str, ...], data: bytes) -> Any:
    """The JSON value kept in ``where`` for ``data`` under ``namespace`` (see :func:`_key`), or
    :data:`MISS` (no folder, no entry, not this user's, too large, not JSON). The caller checks
    the value's form and refuses what it would not have written (:func:`get`: :func:`_decode`)."""
    if where is None:
        return MISS
    try:
        if not _mine(os.stat(where)):
            return MISS
        fd = os.open(where / f"{_key(namespace, sources, data)}.json", os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, "rb") as handle:
            if not _mine(os.fstat(handle.fileno())):
                return MISS
            raw = handle.read(MAX_ENTRY_BYTES + 1)
        if len(raw) > MAX_ENTRY_BYTES:
            return MISS
        return json.loads(raw, parse_constant=_refuse)
    except (OSError, ValueError, TypeError, RecursionError, _NotKept):
        return MISS


def put_entry(where: Path | None, namespace: str, sources: tuple[str, ...], data: bytes, value: Any) -> None:
    """Keep the JSON ``value`` for ``data`` (silently not, where it cannot: no folder, not this
    user's, not plain JSON, a write that fails)."""
    if where is None:
        return
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        where.mkdir(parents=True, exist_ok=True)
        if not _mine(os.stat(where)):
            return
        path = where / f"{_key(namespace, sources, data)}.json"
        tmp = where / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_bytes(text)
        os.replace(tmp, path)
    except (OSError, ValueError, TypeError, RecursionError):
        return


def _text_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def get(text: str) -> Any:
    """The kept value of a file with this ``text``, or :data:`MISS`."""
    found = get_entry(folder(), "yaml", _yaml_sources(), _text_bytes(text))
    if found is MISS:
        return MISS
    try:
        return _decode(found)
    except (ValueError, TypeError, RecursionError, _NotKept):
        return MISS


def put(text: str, value: Any) -> None:
    """Keep ``value``, what the file with this ``text`` parsed to (silently not, where it cannot)."""
    where = folder()
    if where is None:
        return
    try:
        encoded = _encode(value, set())
    except (ValueError, RecursionError, _NotKept):
        return
    put_entry(where, "yaml", _yaml_sources(), _text_bytes(text), encoded)


def _refuse(token: str):
    raise _NotKept(f"non-finite number {token}")


def _encode(value: Any, seen: set) -> Any:
    from engine.language.yamlio import LineDict, LineList
    kind = type(value)
    if kind is LineDict:
        if id(value) in seen:
            raise _NotKept("an alias")
        seen.add(id(value))
        flat = []
        for key, item in value.items():
            if type(key) is not str:
                raise _NotKept("a key that is not text")
            line = value.key_lines.get(key) if isinstance(getattr(value, "key_lines", None), dict) else None
            if line is None:
                raise _NotKept("a key without its line")
            flat += (key, line, _encode(item, seen))
        return ["d", value.line, flat]
    if kind is LineList:
        if id(value) in seen:
            raise _NotKept("an alias")
        seen.add(id(value))
        lines = list(value.item_lines)
        if len(lines) != len(value):
            raise _NotKept("item lines")
        return ["l", value.line, lines, [_encode(item, seen) for item in value]]
    if value is None or kind in (str, int, float, bool):
        return value
    raise _NotKept(f"a {kind.__name__}")


def _line(x: Any) -> int:
    if type(x) is not int or x < 0:
        raise _NotKept("a line")
    return x


def _decode(x: Any) -> Any:
    from engine.language.yamlio import MAX_MAGNITUDE
    from engine.language.yamlio import LineDict, LineList
    kind = type(x)
    if kind is list:
        if len(x) == 3 and x[0] == "d" and type(x[2]) is list and len(x[2]) % 3 == 0:
            out = LineDict()
            out.line, out.key_lines, flat = _line(x[1]), {}, x[2]
            for i in range(0, len(flat), 3):
                key = flat[i]
                if type(key) is not str or key in out:
                    raise _NotKept("a key")
                out.key_lines[key] = _line(flat[i + 1])
                out[key] = _decode(flat[i + 2])
            return out
        if len(x) == 4 and x[0] == "l" and type(x[2]) is list and type(x[3]) is list and len(x[2]) == len(x[3]):
            out = LineList(_decode(item) for item in x[3])
            out.line, out.item_lines = _line(x[1]), tuple(_line(n) for n in x[2])
            return out
        raise _NotKept("a container")
    if kind is float and not (math.isfinite(x) and abs(x) <= MAX_MAGNITUDE):
        raise _NotKept("a number")
    if kind is int and abs(x) > MAX_MAGNITUDE:
        raise _NotKept("a number")
    if x is None or kind in (str, int, float, bool):
        return x
    raise _NotKept(f"a {kind.__name__}")
