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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.project import PACKAGE_ROOT
from engine.language import file_schemas
from engine.language.corpus import Reader, refuse_symlinks
from engine.language.errors import SpecError, Where
from engine.language.filememo import ContentMemo

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
    dict): each table's GPU must be one. A table lies in ``<folder(gpu)>/<framework>-<version>/``."""
    root = Path(root) if root else DEFAULT_ROOT
    if not root.is_dir():
        return {}
    refuse_symlinks(root, root.parent, root.parent.name)
    where = folder(gpu) if gpu else "*"
    globs = [f"{where}/{framework}-*/*.yaml", f"{where}/nccl-*/*.yaml"] if framework else [f"{where}/*/*.yaml"]
    files = sorted({p for g in globs for p in root.glob(g)})
    tables = dict(_MEMO.get(("measured", str(root), gpu, framework), files, lambda: _load(root, files)))
    if gpus is not None:
        for t in tables.values():
            if t.gpu not in gpus:
                raise SpecError(_where(t.path, "gpu"), f"unknown GPU {t.gpu!r}",
                                "use a `gpu:` name of gpus/*.yaml: " + ", ".join(sorted(gpus)))
    return tables


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
    edited file is parsed again)."""
    data = path.read_bytes()
    key = f"{path.resolve()}|{repo.resolve()}"
    found = _TABLES.get(key)
    if found is None or found[0] != data:
        found = _TABLES[key] = (data, load_table(path, repo))
    return found[1]


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
