"""The build grid: which GPUs, GPU counts, parallel configs and scenarios every spec is evaluated at.

Layer: engine.batch. ``corpus/grid.yaml`` (or ``archledger build --grid FILE``) is read with a schema
check; :func:`model_cells` picks, for one model, the (GPU, config) pairs worth evaluating: legal
configs (``engine.deploy.check``) made of the allowed degrees, from the smallest GPU count at which
the weights can fit up to ``beyond_fit`` times it. Nothing here computes a number of the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.project import GRID_FILE as DEFAULT
from engine.project import grid_file  # noqa: F401 (a light module's now: the build's up-to-date check reads it)
from engine.language.checked import choices_field as _choices, count_field as _count, list_field as _list
from engine.language.api import Evaluation
from engine.language.names import is_name, shown_value
from engine.language.reader import Reader
from engine.language.file_schemas import GRID
from engine.deploy import MAX_BATCH, MAX_TOKENS, check
from engine.deploy.structure import HBM_FRACTION
from engine.language.errors import SpecError, Where
from engine.language.filememo import ContentMemo
from engine.deploy import fusion_table
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import GPU
from engine.language.kv import KV_DTYPE_BYTES
from engine.deploy.parallel import MAX_GPUS, ParallelConfig



_TOP = ("doc", "gpus", "gpu_counts", "beyond_fit", "parallel", "frameworks", "kv_dtypes", "scenarios", "ops", "sizing",
        "checkpoints")
_REQUIRED = _TOP[1:-2]
_PARALLEL = ("max_pp", "cp", "ep", "dp_attn", "tp_in_domain", "pp_after_tp")
_SCENARIOS = ("input_lengths", "beyond_max_context", "output_lengths", "batches")
#: Bounds of a grid, on top of those of one deployment (engine.deploy.parallel.MAX_GPUS for GPU counts and
#: degrees, engine.deploy.MAX_TOKENS and MAX_BATCH for lengths and batches): every list is
#: evaluated in every combination, so each list is short, and prompts reach at most this many
#: times a model's max context.
MAX_BEYOND_CONTEXT = 16
#: Bound of one model's grid points (candidate configs x frameworks x KV dtypes x prompts x outputs
#: x batches, the batches counted with the capacity point each prompt may add), checked as that
#: product before any structure is built (:func:`model_cells`): lists within MAX_LIST can still
#: multiply to tens of millions of points (three lists of 64 drove one 8B model to 19 GB). The
#: default grid's largest bound is 96,768 (GLM-5.2; tests/test_bounds.py). Memory grows with the
#: points: Llama-3.1-8B at a bound of 340,032 (174,666 points evaluated) peaked at 0.77 GB.
MAX_POINTS = 300_000
#: Bound of one model's per-op table points (candidate cells x frameworks x ``ops.kv_dtypes`` x
#: ``ops.points``), checked with MAX_POINTS: each is every op of a program (about a hundred rows
#: per phase), so 64 points per cell would write millions of rows. The default grid's largest is
#: 1,152 (GLM-5.2: 288 cells x 2 frameworks x 1 x 2).
MAX_OPS_POINTS = 8_192


@dataclass(frozen=True)
class Grid:
    path: str
    gpus: tuple[str, ...] | None          # None: every GPU of gpus/
    gpu_counts: tuple[int, ...]
    beyond_fit: int
    max_pp: int
    cp: tuple[int, ...]
    ep: tuple                             # ints, or "tp"
    dp_attn: tuple
    tp_in_domain: bool
    pp_after_tp: int
    frameworks: tuple[str, ...]
    kv_dtypes: tuple[str, ...]
    input_lengths: tuple[int, ...]
    beyond_max_context: float
    output_lengths: tuple[int, ...]
    batches: tuple[int, ...]
    ops_kv_dtypes: tuple[str, ...]
    ops_points: tuple[tuple[int, int, int], ...]   # (batch, input, output)
    #: The ``scenarios:`` and ``ops:`` blocks' places in the file (the bounds on a model's points name them).
    where: Where = field(default=Where(), compare=False)
    ops_where: Where = field(default=Where(), compare=False)
    #: The ``checkpoints:`` block: where a model's other published checkpoints (weight formats
    #: besides ``checkpoint``) get rows: these GPUs (None: the grid's), frameworks and KV dtypes.
    checkpoint_gpus: tuple[str, ...] | None = None
    checkpoint_frameworks: tuple[str, ...] = ()
    checkpoint_kv_dtypes: tuple[str, ...] = ()

    def for_checkpoints(self) -> "Grid":
        """The grid a published checkpoint's rows are evaluated over (its GPUs, frameworks, KV
        dtypes; the per-op points at those KV dtypes only)."""
        kv = self.checkpoint_kv_dtypes or self.kv_dtypes
        return replace(self, gpus=self.checkpoint_gpus if self.checkpoint_gpus is not None else self.gpus,
                       frameworks=self.checkpoint_frameworks or self.frameworks, kv_dtypes=kv,
                       ops_kv_dtypes=tuple(d for d in self.ops_kv_dtypes if d in kv))


def _ints(reader: Reader, parent, key: str, field: str, high: int, what: str, allow_tp: bool = False) -> tuple:
    return tuple(_count(item, reader.where(parent, f"{field}[{i}]", key), high, what, allow_tp)
                 for i, item in enumerate(_list(reader, parent, key, field)))


def load_grid(path: Path | str | None = None) -> Grid:
    """Read and check a grid file: every value is of its type and within the bounds above, so a
    hostile or mistyped grid is one line (file:line: field: problem — allowed values), never a
    traceback nor a build that runs for an hour."""
    path = Path(path) if path else DEFAULT
    if not path.exists():
        raise SpecError(Where(str(path)), "grid file not found", "pass --grid pointing at a grid YAML")
    # once per process and content of the files read (a build asks per model; the fusion tables
    # name the frameworks allowed); a Grid is frozen tuples
    files = [path, *fusion_table.table_files()]
    return _GRIDS.get(("grid", str(path)), files, lambda: _load_grid(path))


_GRIDS = ContentMemo()


def _load_grid(path: Path) -> Grid:
    reader = Reader(path, path.parent.parent, GRID)
    data = reader.mapping(reader.data, "")
    reader.keys(data, "", _TOP, _REQUIRED)   # sizing (engine/serving/fronts.py reads it) and checkpoints: optional
    par = reader.mapping(data["parallel"], "parallel", data, "parallel")
    reader.keys(par, "parallel", _PARALLEL, _PARALLEL)
    sc = reader.mapping(data["scenarios"], "scenarios", data, "scenarios")
    reader.keys(sc, "scenarios", _SCENARIOS, _SCENARIOS)
    ops = reader.mapping(data["ops"], "ops", data, "ops")
    reader.keys(ops, "ops", ("kv_dtypes", "points"), ("kv_dtypes", "points"))
    gpus = data["gpus"]
    if gpus != "all":
        gpus = _list(reader, data, "gpus", "gpus")
        for i, name in enumerate(gpus):
            if not is_name(name):
                raise SpecError(reader.where(data, f"gpus[{i}]", "gpus"), f"{shown_value(name)} is not a GPU name",
                                "write `gpus: all` or `gpus: [H100, B200]` (the `gpu:` names of gpus/*.yaml)")
    counts, tokens, batches = "GPU counts", "token counts", "batches (requests per model replica)"
    points = []
    for i, point in enumerate(_list(reader, ops, "points", "ops.points", empty_ok=True)):
        field = f"ops.points[{i}]"
        point = reader.mapping(point, field, ops, "points")
        reader.keys(point, field, ("batch", "input", "output"), ("batch", "input", "output"))
        points.append(tuple(_count(point[key], reader.where(point, f"{field}.{key}", key), high, what)
                            for key, high, what in (("batch", MAX_BATCH, batches), ("input", MAX_TOKENS, tokens),
                                                    ("output", MAX_TOKENS, tokens))))
    frameworks = ("none", *sorted(load_tables()))
    kv_dtypes = tuple(KV_DTYPE_BYTES)
    if not isinstance(par["tp_in_domain"], bool):
        raise SpecError(reader.where(par, "parallel.tp_in_domain", "tp_in_domain"),
                        f"expected true or false, got {shown_value(par['tp_in_domain'])}", "write `tp_in_domain: true`")
    beyond = sc["beyond_max_context"]
    if (isinstance(beyond, bool) or not isinstance(beyond, (int, float)) or not math.isfinite(beyond)
            or not 0 < beyond <= MAX_BEYOND_CONTEXT):
        raise SpecError(reader.where(sc, "scenarios.beyond_max_context", "beyond_max_context"),
                        f"{shown_value(beyond)} is not a number above 0 and at most {MAX_BEYOND_CONTEXT}",
                        "write e.g. `beyond_max_context: 2` (prompts up to twice the model's max context)")
    ck = {"gpus": None, "frameworks": (), "kv_dtypes": ()}
    if data.get("checkpoints") is not None:
        raw = reader.mapping(data["checkpoints"], "checkpoints", data, "checkpoints")
        reader.keys(raw, "checkpoints", ("doc", "gpus", "frameworks", "kv_dtypes"), ("gpus", "frameworks", "kv_dtypes"))
        names = _list(reader, raw, "gpus", "checkpoints.gpus")
        for i, name in enumerate(names):
            if not is_name(name):
                raise SpecError(reader.where(raw, f"checkpoints.gpus[{i}]", "gpus"), f"{shown_value(name)} is not a GPU name",
                                "write e.g. `gpus: [H100, B200]` (the `gpu:` names of gpus/*.yaml)")
        ck = {"gpus": tuple(names), "frameworks": _choices(reader, raw, "frameworks", "checkpoints.frameworks", frameworks),
              "kv_dtypes": _choices(reader, raw, "kv_dtypes", "checkpoints.kv_dtypes", kv_dtypes)}
    return Grid(str(path), None if gpus == "all" else tuple(gpus),
                _ints(reader, data, "gpu_counts", "gpu_counts", MAX_GPUS, counts),
                _count(data["beyond_fit"], reader.where(data, "beyond_fit", "beyond_fit"), MAX_GPUS,
                       "a multiple of the first GPU count that fits"),
                _count(par["max_pp"], reader.where(par, "parallel.max_pp", "max_pp"), MAX_GPUS, "pipeline stages"),
                _ints(reader, par, "cp", "parallel.cp", MAX_GPUS, counts),
                _ints(reader, par, "ep", "parallel.ep", MAX_GPUS, counts, True),
                _ints(reader, par, "dp_attn", "parallel.dp_attn", MAX_GPUS, counts, True),
                par["tp_in_domain"],
                _count(par["pp_after_tp"], reader.where(par, "parallel.pp_after_tp", "pp_after_tp"), MAX_GPUS, counts),
                _choices(reader, data, "frameworks", "frameworks", frameworks),
                _choices(reader, data, "kv_dtypes", "kv_dtypes", kv_dtypes),
                _ints(reader, sc, "input_lengths", "scenarios.input_lengths", MAX_TOKENS, tokens),
                float(beyond),
                _ints(reader, sc, "output_lengths", "scenarios.output_lengths", MAX_TOKENS, tokens),
                _ints(reader, sc, "batches", "scenarios.batches", MAX_BATCH, batches),
                _choices(reader, ops, "kv_dtypes", "ops.kv_dtypes", kv_dtypes, empty_ok=True), tuple(points),
                Where(reader.display, data.line_of("scenarios"), "scenarios"),
                Where(reader.display, data.line_of("ops"), "ops"),
                ck["gpus"], ck["frameworks"], ck["kv_dtypes"])


@lru_cache(maxsize=None)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _allowed(value: int, tp: int, choices: tuple) -> bool:
    return any(value == (tp if c == "tp" else c) for c in choices)


def _candidates(grid: Grid, gpu: GPU, n_gpus: int, moe: bool):
    """(tp, pp, cp, eps, dp_attns) of every split of ``n_gpus`` GPUs the grid's parallel rules
    allow (no replicas: dp = 1): the candidate configs are each tuple's eps x dp_attns, before the
    model's own check. Counting them costs no check (:func:`points_bound`)."""
    for cp in grid.cp:
        if n_gpus % cp:
            continue
        for tp in _divisors(n_gpus // cp):
            pp = n_gpus // (cp * tp)
            if pp > grid.max_pp or (grid.tp_in_domain and tp > gpu.scale_up_domain):
                continue
            if pp > 1 and tp * cp < min(n_gpus, grid.pp_after_tp):
                continue      # pipeline stages only once TP (x CP) spans pp_after_tp GPUs
            # dense: ep = dp_attn = 1 (attention replicas are replicas)
            degrees = _divisors(tp) if moe else (1,)
            yield (tp, pp, cp, [d for d in degrees if _allowed(d, tp, grid.ep)],
                   [d for d in degrees if _allowed(d, tp, grid.dp_attn)])


def _is_moe(ev: Evaluation) -> bool:
    return any(r.role == "experts" for r in ev.numeric.rows.values())


def configs(ev: Evaluation, grid: Grid, gpu: GPU, n_gpus: int) -> list[ParallelConfig]:
    """The legal configs of ``n_gpus`` GPUs that the grid allows (no replicas: dp = 1)."""
    out: dict[ParallelConfig, None] = {}      # ordered, and a repeated cp in the grid adds nothing
    for tp, pp, cp, eps, dp_attns in _candidates(grid, gpu, n_gpus, _is_moe(ev)):
        for ep in eps:
            for dp_attn in dp_attns:
                config = ParallelConfig(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp, cp=cp)
                if config not in out and not check(ev, config):
                    out[config] = None
    return list(out)


def model_cells(ev: Evaluation, grid: Grid, gpus: dict[str, GPU], stored_bytes: float,
                hbm_fraction: float = HBM_FRACTION) -> list[tuple[GPU, ParallelConfig]]:
    """(GPU, config) pairs for one model: counts from the first at which ``stored_bytes`` (the
    model's weights) can fit split over every GPU, up to ``beyond_fit`` times that count, and the
    GPU's whole scale-up domain. Refused in one line when the model's points over the grid could
    exceed :data:`MAX_POINTS` (:func:`points_bound`), or its per-op table points
    :data:`MAX_OPS_POINTS`, before any config is checked."""
    picked = _gpu_counts(grid, gpus, stored_bytes, hbm_fraction)
    factors = _point_factors(ev, grid, picked)
    ops = {**{k: factors[k] for k in ("(GPU, config) cells", "frameworks")},
           "ops KV dtypes": len(grid.ops_kv_dtypes), "ops points": len(grid.ops_points)}
    for what, found, limit, name, where in (("points", factors, MAX_POINTS, "MAX_POINTS", grid.where),
                                            ("per-op table points", ops, MAX_OPS_POINTS, "MAX_OPS_POINTS", grid.ops_where)):
        product = math.prod(found.values())
        if product > limit:
            shown = " x ".join(f"{n:,} {k}" for k, n in found.items())
            raise SpecError(where, f"{ev.model.model_id} would be evaluated at up to {product:,} {what} "
                            f"({shown}), more than the limit of {limit:,}",
                            "shorten the grid's lists: every combination is evaluated (the bound is "
                            f"engine/batch/grid.py's {name})")
    return [(gpu, c) for gpu, n in picked for c in configs(ev, grid, gpu, n)]


def points_bound(ev: Evaluation, grid: Grid, gpus: dict[str, GPU], stored_bytes: float,
                 hbm_fraction: float = HBM_FRACTION) -> dict[str, int]:
    """The factors whose product bounds ``ev``'s points over the grid, what :data:`MAX_POINTS`
    bounds: candidate (GPU, config) cells (before the model's check) x frameworks x KV dtypes x
    its prompts x outputs x the batches with the capacity point a prompt may add
    (engine.batch.grid_eval.grid_batches: the larger of the worst-case and steady-state capacities)."""
    return _point_factors(ev, grid, _gpu_counts(grid, gpus, stored_bytes, hbm_fraction))


def _gpu_counts(grid: Grid, gpus: dict[str, GPU], stored_bytes: float, hbm_fraction: float) -> list[tuple[GPU, int]]:
    """(GPU, count) of :func:`model_cells`, in its order."""
    names = grid.gpus if grid.gpus is not None else tuple(gpus)
    picked = []
    for name in names:
        if name not in gpus:
            raise SpecError(Where(grid.path, field="gpus"),
                            f"unknown GPU {name!r}", "known: " + ", ".join(sorted(gpus)))
        gpu = gpus[name]
        usable = gpu.hbm_bytes * hbm_fraction
        counts = sorted(n for n in grid.gpu_counts if n <= gpu.scale_up_domain or n % gpu.scale_up_domain == 0)
        first = next((n for n in counts if stored_bytes / n < usable), None)
        if first is None:
            continue
        # ... and a whole scale-up domain (an NVL72 rack) when it is in the grid
        picked += [(gpu, n) for n in counts if first <= n <= first * grid.beyond_fit
                   or (n == gpu.scale_up_domain and n >= first)]
    return picked


def _point_factors(ev: Evaluation, grid: Grid, picked: list[tuple[GPU, int]]) -> dict[str, int]:
    moe = _is_moe(ev)
    cells = sum(len(eps) * len(dps) for gpu, n in picked for _, _, _, eps, dps in _candidates(grid, gpu, n, moe))
    return {"(GPU, config) cells": cells, "frameworks": len(grid.frameworks), "KV dtypes": len(grid.kv_dtypes),
            "prompts": len(input_lengths(grid, int(ev.numeric.max_context))), "outputs": len(grid.output_lengths),
            "batches": len(grid.batches) + 1}


def input_lengths(grid: Grid, max_context: int) -> list[int]:
    """The grid's prompt lengths for a model: up to ``beyond_max_context`` x its max context."""
    return [n for n in grid.input_lengths if n <= grid.beyond_max_context * max_context]


def as_dict(grid: Grid) -> dict[str, Any]:
    return {k: getattr(grid, k) for k in grid.__dataclass_fields__}
