"""Measured kernel tables (``gpus/measured/``): the kernel classes and their axes, one table, and
loading them (checked like any input file).

Layer: engine.deploy. The tables are written by ``benchmarks/import_kernels.py`` from the public
aiconfigurator-core package (one file per GPU x framework x version x kernel class; their schema:
engine.language.file_schemas.MEASURED) and are input like a GPU file: a damaged, truncated or absurd
table is one line naming the file and field (exit 2). Nothing here reads the package itself. How a
table is read (interpolation) is engine.deploy.interpolation; which table an op reads and its
expected time, engine.deploy.measured.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.project import PACKAGE_ROOT
from engine.language import file_schemas
from engine.language.names import refuse_symlinks
from engine.language.reader import Reader
from engine.language.errors import SpecError, Where
from engine.language.filememo import ContentMemo, StampMemo

DEFAULT_ROOT = PACKAGE_ROOT / "gpus" / "measured"

#: Kernel class -> its axes in order (the file's ``axes`` must name exactly these).
KERNELS = {"gemm": ("m", "n", "k"), "all_reduce": ("gpus", "bytes"), "all_gather": ("gpus", "bytes"),
           "reduce_scatter": ("gpus", "bytes"), "all_to_all": ("gpus", "bytes"),
           "decode_attention": ("batch", "kv_heads", "q_per_kv", "ctx"),
           "prefill_attention": ("batch", "isl", "kv_heads", "q_per_kv"),
           "decode_mla": ("batch", "heads", "ctx"),
           "mla_bmm": ("tokens", "heads"),
           "prefill_mla": ("batch", "isl", "heads"),
           "moe": ("tokens",)}
#: Kernel classes whose rows are curves picked by exact keys (the file's ``keys``), in this order.
KEYED = {"moe": ("hidden", "inter", "topk", "experts", "moe_tp", "moe_ep")}
#: The dims a fused attention step (the ``flash_attention`` rule) may have for an attention table
#: to cover it (a step with other dims, e.g. a latent or windowed variant, has none yet).
ATTENTION_DIMS = {"batch", "seq", "n_heads", "d_head", "kv_len", "n_kv_heads"}
#: The MLA shape the imported MLA tables measured (DeepSeek-V3's: latent 512, query/key heads of
#: 128 + 64 rotary, value heads of 128); a model of another shape has no MLA table.
MLA_SHAPE = {"kv_lora_rank": 512, "d_qk_nope": 128, "d_qk_rope": 64, "d_v_head": 128}
#: The kernel classes of those tables (only a model of :data:`MLA_SHAPE` reads them).
MLA_KERNELS = ("decode_mla", "prefill_mla", "mla_bmm")
#: The most grid points one table holds (a million-row table is refused before it is used).
MAX_POINTS = 100_000


@dataclass(frozen=True)
class Table:
    """One measured table: the grid's axis values (ascending) and latency in seconds over them."""

    kernel: str
    variant: str
    gpu: str
    framework: str
    version: str
    axes: tuple[str, ...]
    values: tuple[np.ndarray, ...]
    seconds: np.ndarray                 # shape: the axes' lengths
    path: str                           # the file, relative to the repo
    source: str                         # package and version it was imported from
    keys: dict = None                   # keyed tables: key values -> index of the first axis of seconds
    rate: float | None = None           # a distilled part: its whole table's peak_rate under its roofline

    @property
    def name(self) -> str:
        return f"{self.kernel}-{self.variant} {self.framework} {self.version}"

    def curve(self, key: tuple) -> "Table | None":
        """A keyed table's curve at ``key`` (a table of the axes alone), None where it has none; the
        same object on every call for one key (:func:`_inside` memoizes by table)."""
        i = self.keys.get(tuple(int(k) for k in key)) if self.keys else None
        if i is None:
            return None
        found = _CURVES.get((id(self), i))
        if found is None or found[0] is not self:
            found = _CURVES[(id(self), i)] = (self, replace(self, seconds=self.seconds[i], keys=None))
        return found[1]


#: (id(table), row) -> (table, its curve): the table is kept so its id is not reused.
_CURVES: dict = {}


#: (gpu, framework, kernel, variant) -> Table
Tables = dict[tuple[str, str, str, str], Table]


def folder(gpu: str) -> str:
    """The folder of a GPU's tables under ``gpus/measured/``: its ``gpu:`` name in lower case (a
    deployment reads its own GPU's folder alone: parsing every table costs about a second)."""
    return gpu.lower()


def load_measured(root: Path | str | None = None, gpus: dict | None = None, gpu: str | None = None,
                  framework: str | None = None) -> Tables:
    """Every table under ``root`` (default: the repo's ``gpus/measured/``; absent: none), or with
    ``gpu`` that GPU's alone (and with ``framework`` that framework's and NCCL's alone: a
    deployment reads no other), keyed by (gpu, framework, kernel, variant); ``gpus`` (load_gpus'
    dict): each table's GPU must be one. A table lies in ``<folder(gpu)>/<framework>-<version>/``.
    Each call returns its own dict (of shared, frozen tables)."""
    tables = dict(shared_measured(root, gpu, framework))
    if gpus is not None:
        for t in tables.values():
            if t.gpu not in gpus:
                raise SpecError(_where(t.path, "gpu"), f"unknown GPU {t.gpu!r}",
                                "use a `gpu:` name of gpus/*.yaml: " + ", ".join(sorted(gpus)))
    return tables


def shared_measured(root: Path | str | None = None, gpu: str | None = None, framework: str | None = None) -> Tables:
    """:func:`load_measured`'s tables (without the GPU check), one dict object per content of the
    files: callers only read it (a deployment point asks its GPU's tables at every call, and the
    lookups' memos key on the dict's identity). While the tree under ``root`` and the files read are
    unchanged and settled (:class:`engine.language.filememo.StampMemo`: their stat, racy changes
    excluded) nothing is read again; otherwise the folder is checked for links, listed, and the files'
    bytes compared (:class:`engine.language.filememo.ContentMemo`), so an edit is always seen."""
    root = Path(root) if root else DEFAULT_ROOT
    if not root.is_dir():
        return {}
    return _STAMPS.get(("measured", str(root), gpu, framework), root, lambda: _listed(root, gpu, framework))


def _listed(root: Path, gpu: str | None, framework: str | None) -> tuple[Tables, list[Path]]:
    """(the tables of ``gpu`` and ``framework`` under ``root``, the files they were read from)."""
    refuse_symlinks(root, root.parent, root.parent.name)
    where = folder(gpu) if gpu else "*"
    globs = [f"{where}/{framework}-*/*.yaml", f"{where}/nccl-*/*.yaml"] if framework else [f"{where}/*/*.yaml"]
    files = sorted({p for g in globs for p in root.glob(g)})
    return _MEMO.get(("measured", str(root), gpu, framework), files, lambda: _load(root, files)), files


_STAMPS = StampMemo(keep=32)
_MEMO = ContentMemo()


def _where(path: str, field: str) -> Where:
    return Where(path, 0, field)


def _load(root: Path, files: list[Path]) -> Tables:
    out: Tables = {}
    for path in files:
        table = _table_at(path, root.parent.parent)
        place = f"{folder(table.gpu)}/{table.framework}-{table.version}"
        if path.parent.relative_to(root).as_posix() != place:
            raise SpecError(_where(table.path, "gpu"), f"a {table.gpu} {table.framework} {table.version} table "
                            f"in {path.parent.relative_to(root).as_posix()}/", f"move it to gpus/measured/{place}/")
        key = (table.gpu, table.framework, table.kernel, table.variant)
        if key in out:
            raise SpecError(_where(table.path, "variant"), f"a second {table.name} table for {table.gpu}",
                            f"also {out[key].path}; keep one version per framework")
        out[key] = table
    return out


_TABLES: dict[str, tuple[bytes, Table]] = {}      # path -> (its bytes, its table): each file parsed once


def _table_at(path: Path, repo: Path) -> Table:
    """:func:`load_table`, once per file content per process: the grid asks every GPU's tables
    under each framework, and parsing them all costs seconds (a bad file raises every time; an
    edited file is parsed again). A process's first read of a file goes through
    :func:`cached_table` (kept across processes)."""
    data = path.read_bytes()
    key = f"{path.resolve()}|{repo.resolve()}"
    found = _TABLES.get(key)
    if found is None or found[0] != data:
        found = _TABLES[key] = (data, cached_table(path, repo, data))
    return found[1]


# -- the parsed tables kept across processes ---------------------------------------------------------
#
# Parsing and checking every table is 2-3 CPU-s, paid by every fresh process that reads them (a
# build checks them all; each `archledger` command reads its GPU's). A table that loaded is kept
# whole, as plain JSON, in engine.language.parse_cache's store (parse_cache.tables_folder: the
# user's cache folder, $ARCHLEDGER_CACHE, or a built checkout's), under the SHA-256 of the file's
# bytes, its name as errors show it, PyYAML's version and the source of every module the table is a
# function of (_SOURCES): an edited table, or an edited loader or check, is another key, so nothing
# kept is ever stale. A file that does not load raises as always and keeps nothing. An entry is
# read back only through _from_entry, which checks everything load_table promises (kinds, the
# kernel's axes, ascending finite axes within the schema's range, the shape, finite times within
# the schema's range, unique keys) and refuses anything else: the file is then parsed again.

_NAMESPACE = "measured-table"
_FIELDS = ("kernel", "variant", "gpu", "framework", "version", "axes", "values", "seconds", "path", "source", "keys")
_STRINGS = ("kernel", "variant", "gpu", "framework", "version", "path", "source")
#: The schema's ranges (engine.language.file_schemas.MEASURED): axis values in (0, 2**40], latencies
#: in (0, 1e7] µs, key values in [1, 2**24].
_AXIS_MAX, _SECONDS_MAX, _KEY_MAX = float(1 << 40), 1e7 * 1e-6, 1 << 24


def _sources() -> tuple[str, ...]:
    """The modules a loaded table is a function of: this loader, its schema and checks, the YAML
    reader under them and the store itself."""
    from importlib.util import find_spec
    # the files found, not imported: importing corpus and expr would load sympy into a command that
    # reads a build's formula document only (find_spec gives the path an import would load)
    names = ("file_schemas", "schema", "corpus", "yamlio", "expr", "parse_cache")
    return (sys.modules[__name__].__file__,) + tuple(find_spec(f"engine.language.{n}").origin for n in names)


def _display(path: Path, repo: Path) -> str:
    """The file's name as :class:`engine.language.corpus.Reader` shows it (relative to the repo)."""
    try:
        return str(path.relative_to(repo))
    except ValueError:
        return str(path)


def cached_table(path: Path, repo: Path, data: bytes | None = None) -> Table:
    """:func:`load_table` of the file whose bytes are ``data`` (read when None), or the same table
    read back from the cache (see above)."""
    from engine.language import parse_cache
    data = path.read_bytes() if data is None else data
    display = _display(path, repo)
    where, sources = parse_cache.tables_folder(), _sources()
    named = display.encode("utf-8", "surrogatepass") + b"\0" + data
    entry = parse_cache.get_entry(where, _NAMESPACE, sources, named)
    if entry is not parse_cache.MISS:
        table = _from_entry(entry, display)
        if table is not None:
            return table
    table = load_table(path, repo)
    if where is not None and table.path == display:
        parse_cache.put_entry(where, _NAMESPACE, sources, named, _to_entry(table))
    return table


def _to_entry(table: Table) -> dict:
    keys = None if table.keys is None else [[*k, i] for k, i in table.keys.items()]
    return {"kernel": table.kernel, "variant": table.variant, "gpu": table.gpu, "framework": table.framework,
            "version": table.version, "axes": list(table.axes), "values": [v.tolist() for v in table.values],
            "seconds": table.seconds.ravel().tolist(), "path": table.path, "source": table.source, "keys": keys}


def _numbers(x, lo: float, hi: float, *, whole: bool = False) -> np.ndarray | None:
    """A JSON list of numbers (no booleans) as floats, each finite and in (lo, hi]; None otherwise."""
    if type(x) is not list or not all(type(v) is int or (type(v) is float and not whole) for v in x):
        return None
    v = np.asarray(x, dtype=float)
    if v.ndim != 1 or not np.isfinite(v).all() or (v <= lo).any() or (v > hi).any():
        return None
    return v


def _from_entry(entry, display: str) -> Table | None:
    """The table a cache entry holds, or None where it is not exactly what :func:`_to_entry` writes
    for a table :func:`load_table` accepted (kinds, the kernel's axes, ranges, shape, keys)."""
    if type(entry) is not dict or tuple(sorted(entry)) != tuple(sorted(_FIELDS)):
        return None
    if not all(type(entry[f]) is str for f in _STRINGS) or entry["path"] != display:
        return None
    kernel = entry["kernel"]
    if kernel not in KERNELS or entry["axes"] != list(KERNELS[kernel]) or type(entry["values"]) is not list \
            or len(entry["values"]) != len(KERNELS[kernel]):
        return None
    values = []
    for axis in entry["values"]:
        v = _numbers(axis, 0.0, _AXIS_MAX)
        if v is None or not 2 <= v.size <= file_schemas.MAX_AXIS_VALUES or (np.diff(v) <= 0).any():
            return None
        values.append(v)
    keys, rows = entry["keys"], ()
    if (keys is None) != (kernel not in KEYED):
        return None
    if keys is not None:
        width = len(KEYED[kernel])
        if type(keys) is not list or not 1 <= len(keys) <= file_schemas.MAX_MEASURED_ROWS:
            return None
        found = {}
        for row in keys:
            if type(row) is not list or len(row) != width + 1 or not all(type(k) is int for k in row) \
                    or not all(1 <= k <= _KEY_MAX for k in row[:width]) or tuple(row[:width]) in found:
                return None
            found[tuple(row[:width])] = row[width]
        if sorted(found.values()) != list(range(len(found))):
            return None
        keys, rows = found, (len(found),)
    shape = rows + tuple(v.size for v in values)
    seconds = _numbers(entry["seconds"], 0.0, _SECONDS_MAX)
    if seconds is None or math.prod(shape) > MAX_POINTS or seconds.size != math.prod(shape):
        return None
    seconds = seconds.reshape(shape)
    seconds.flags.writeable = False
    return Table(kernel, entry["variant"], entry["gpu"], entry["framework"], entry["version"], tuple(entry["axes"]),
                 tuple(values), seconds, entry["path"], entry["source"], keys)


def parsed_tables() -> dict:
    """What this process has parsed so far (:func:`_table_at`'s memo): handed to a build's worker
    processes, which would otherwise parse the same files again (about a second each)."""
    return dict(_TABLES)


def adopt_tables(parsed: dict) -> None:
    """Take another process's :func:`parsed_tables` (unpickled). Each entry keeps the bytes it was
    parsed from and :func:`_table_at` uses it only while the file still has them, so an adopted
    table is exactly the one this process would parse (an edited file is parsed again)."""
    for key, (data, table) in parsed.items():
        table.seconds.flags.writeable = False       # (unpickled arrays are writeable)
        _TABLES.setdefault(key, (data, table))


def load_table(path: Path, repo: Path) -> Table:
    """One table file, schema-checked (kinds and ranges) and then checked for what a schema cannot
    say: the kernel's axes by name, each axis strictly ascending, the rows the axes ask for."""
    reader = Reader(path, repo / "gpus", file_schemas.MEASURED)
    data = reader.data
    kernel = data["kernel"]
    if kernel not in KERNELS:
        raise SpecError(reader.where(data, "kernel", "kernel"), f"unknown kernel class {kernel!r}",
                        "use one of: " + ", ".join(KERNELS))
    names = tuple(a["name"] for a in data["axes"])
    if names != KERNELS[kernel]:
        raise SpecError(reader.where(data, "axes", "axes"), f"axes {list(names)} for {kernel}",
                        f"write the axes {list(KERNELS[kernel])} in that order")
    values = []
    for i, axis in enumerate(data["axes"]):
        v = np.asarray(axis["values"], dtype=float)
        bad = np.flatnonzero(np.diff(v) <= 0)
        if bad.size:
            raise SpecError(reader.where(axis, f"axes[{i}].values", "values"),
                            f"axis {axis['name']} is not ascending ({v[bad[0]]:g} then {v[bad[0] + 1]:g})",
                            "write each axis's values in strictly ascending order")
        values.append(v)
    keys = _keys(reader, data, kernel)
    shape = ((len(keys),) if keys is not None else ()) + tuple(len(v) for v in values)
    points = math.prod(shape)
    rows = data["latency_us"]
    if points > MAX_POINTS:
        raise SpecError(reader.where(data, "axes", "axes"), f"{points:,} grid points",
                        f"keep at most {MAX_POINTS:,} (distil the table)")
    if len(rows) != points // shape[-1]:
        raise SpecError(reader.where(data, "latency_us", "latency_us"),
                        f"{len(rows)} rows, the axes ask for {points // shape[-1]}",
                        "write one row per combination of the axes but the last (re-run the import)")
    for j, row in enumerate(rows):
        if len(row) != shape[-1]:
            raise SpecError(reader.where(data, f"latency_us[{j}]", "latency_us"),
                            f"{len(row)} latencies, the last axis has {shape[-1]} values",
                            "write one latency per value of the last axis (re-run the import)")
    seconds = np.asarray(rows, dtype=float).reshape(shape) * 1e-6
    seconds.flags.writeable = False
    src = data["source"]
    return Table(kernel, data["variant"], data["gpu"], data["framework"], data["framework_version"], names,
                 tuple(values), seconds, reader.display, f"{src['package']} {src['version']}", keys)


def _keys(reader, data, kernel: str) -> dict | None:
    """A keyed table's key values -> row (None for a grid table): the kernel's key names in
    order, one value per name, no key twice."""
    keys = data.get("keys")
    if (keys is None) != (kernel not in KEYED):
        raise SpecError(reader.where(data, "keys", "keys" if keys is not None else None),
                        f"the {kernel} table {'has' if keys is not None else 'lacks'} keys",
                        f"write keys: {{names: {list(KEYED[kernel])}, values: [...]}}" if kernel in KEYED
                        else "leave keys out (only " + ", ".join(KEYED) + " tables have them)")
    if keys is None:
        return None
    if tuple(keys["names"]) != KEYED[kernel]:
        raise SpecError(reader.where(keys, "keys.names", "names"), f"keys {list(keys['names'])} for {kernel}",
                        f"write the keys {list(KEYED[kernel])} in that order")
    out: dict[tuple, int] = {}
    for i, row in enumerate(keys["values"]):
        if len(row) != len(keys["names"]) or tuple(row) in out:
            problem = (f"{len(row)} key values for {len(keys['names'])} names" if len(row) != len(keys["names"])
                       else f"key {row} twice")
            raise SpecError(reader.where(keys, f"keys.values[{i}]", "values"), problem,
                            "write one value per key name, each key once (re-run the import)")
        out[tuple(row)] = i
    return out
