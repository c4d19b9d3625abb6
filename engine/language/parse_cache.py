"""What :func:`engine.language.yamlio.load_yaml` parsed, kept on disk by the text's hash, for a built checkout.

Layer: engine.language. A cold ``archledger deploy`` parses about 65 YAML files (the shared corpus,
the model's spec, the GPU's measured kernel tables, the GPUs and fusion tables): a quarter of its
CPU. On a built checkout (``<out>/results/`` exists) the command line keeps each parsed value in
``<out>/cache/yaml/<key>.json`` (:func:`use`, called by :func:`engine.cli.dispatch`), and the next
process reads it back instead of parsing.

Invariants:

* the key is the SHA-256 of :data:`FORMAT`, PyYAML's version, the bytes of ``yamlio.py``,
  ``expr.py`` (its number bound) and this module (the loader and its limits), and the file's
  text: an edited file, or an edited loader, is a different key, so a stale entry is never read
  (there is nothing to invalidate);
* only a parse that succeeded is kept (an error is never cached: a bad file raises the same
  one-line error every time); the caller's other checks (top-level mapping, the file's schema)
  run on a cached value as on a parsed one;
* an entry holds plain JSON: mappings and lists with their lines (:class:`LineDict`,
  :class:`LineList`), strings, whole numbers, floats (``repr`` round-trips exactly), booleans and
  nulls; a value with anything else, or with one container reached twice (a YAML alias), is not
  kept. Reading an entry checks every node (kinds, lines, finite numbers within the loader's
  magnitude); any entry that does not decode is a miss, and the file is parsed;
* entries are written to a temporary name and renamed (a reader sees a whole entry or none); a
  folder that cannot be written just means no cache.
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

_DIR: list = [None]        # [the cache folder, or None: no cache]
_SALT: list = []           # [hash state of FORMAT, PyYAML's version and the loader's source]


class _NotKept(ValueError):
    """A value or an entry outside the plain-JSON form above."""


def use(folder: Path | None) -> None:
    """Keep parsed values under ``folder`` from now on (None: no cache)."""
    _DIR[0] = Path(folder) if folder is not None else None


def folder_for(out: Path) -> Path | None:
    """The cache folder of an output folder: ``out/cache/yaml`` on a built checkout (``out/results``
    exists), else None (a command never creates ``out/`` or writes into a fresh one)."""
    return out / "cache" / "yaml" if (out / "results").is_dir() else None


def _key(text: str) -> str:
    if not _SALT:
        import yaml
        from engine.language import expr, yamlio
        h = hashlib.sha256(f"{FORMAT}\0{yaml.__version__}\0".encode())
        for source in (yamlio.__file__, expr.__file__, __file__):   # the loader, its number bound, this
            h.update(Path(source).read_bytes())
        _SALT.append(h)
    h = _SALT[0].copy()
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def get(text: str) -> Any:
    """The kept value of a file with this ``text``, or :data:`MISS`."""
    folder = _DIR[0]
    if folder is None:
        return MISS
    try:
        with open(folder / f"{_key(text)}.json", "rb") as handle:
            data = handle.read(MAX_ENTRY_BYTES + 1)
        if len(data) > MAX_ENTRY_BYTES:
            return MISS
        return _decode(json.loads(data, parse_constant=_refuse))
    except (OSError, ValueError, TypeError, RecursionError, _NotKept):
        return MISS


def put(text: str, value: Any) -> None:
    """Keep ``value``, what the file with this ``text`` parsed to (silently not, where it cannot)."""
    folder = _DIR[0]
    if folder is None:
        return
    try:
        data = json.dumps(_encode(value, set()), separators=(",", ":"), allow_nan=False).encode()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_key(text)}.json"
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except (OSError, ValueError, RecursionError, _NotKept):
        return


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
    from engine.language.expr import MAX_MAGNITUDE
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
