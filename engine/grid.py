"""The build grid: which GPUs, GPU counts, parallel configs and scenarios every spec is evaluated at.

Layer: engine. ``corpus/grid.yaml`` (or ``archledger build --grid FILE``) is read with a schema
check; :func:`model_cells` picks, for one model, the (GPU, config) pairs worth evaluating: legal
configs (``engine.deploy.check``) made of the allowed degrees, from the smallest GPU count at which
the weights can fit up to ``beyond_fit`` times it. Nothing here computes a number of the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api import Evaluation
from engine.corpus import _Reader
from engine.deploy import check
from engine.errors import SpecError, Where
from engine.hardware import GPU
from engine.parallel import ParallelConfig

DEFAULT = Path(__file__).resolve().parent.parent / "corpus" / "grid.yaml"
_TOP = ("doc", "gpus", "gpu_counts", "beyond_fit", "parallel", "frameworks", "kv_dtypes", "scenarios", "ops")
_PARALLEL = ("max_pp", "cp", "ep", "dp_attn", "tp_in_domain", "pp_after_tp")
_SCENARIOS = ("input_lengths", "beyond_max_context", "output_lengths", "batches")


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


def _ints(reader: _Reader, parent, key: str, field: str, allow_tp: bool = False) -> tuple:
    value = parent.get(key)
    if not isinstance(value, list) or not value:
        raise SpecError(reader.where(parent, field, key), "expected a non-empty list", f"write `{key}: [1, 2, 4]`")
    for item in value:
        if not ((isinstance(item, int) and not isinstance(item, bool) and item > 0) or (allow_tp and item == "tp")):
            raise SpecError(reader.where(parent, field, key), f"{item!r} is not a positive integer",
                            "write positive integers" + (" or `tp`" if allow_tp else ""))
    return tuple(value)


def load_grid(path: Path | str | None = None) -> Grid:
    path = Path(path) if path else DEFAULT
    if not path.exists():
        raise SpecError(Where(str(path)), "grid file not found", "pass --grid pointing at a grid YAML")
    reader = _Reader(path, path.parent.parent)
    data = reader.mapping(reader.data, "")
    reader.keys(data, "", _TOP, _TOP[1:])
    par = reader.mapping(data["parallel"], "parallel", data, "parallel")
    reader.keys(par, "parallel", _PARALLEL, _PARALLEL)
    sc = reader.mapping(data["scenarios"], "scenarios", data, "scenarios")
    reader.keys(sc, "scenarios", _SCENARIOS, _SCENARIOS)
    ops = reader.mapping(data["ops"], "ops", data, "ops")
    reader.keys(ops, "ops", ("kv_dtypes", "points"), ("kv_dtypes", "points"))
    gpus = data["gpus"]
    if gpus != "all" and not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)):
        raise SpecError(reader.where(data, "gpus", "gpus"), "expected `all` or a list of GPU names",
                        "write `gpus: all` or `gpus: [H100, B200]`")
    points = []
    for i, point in enumerate(ops["points"] or []):
        point = reader.mapping(point, f"ops.points[{i}]", ops, "points")
        reader.keys(point, f"ops.points[{i}]", ("batch", "input", "output"), ("batch", "input", "output"))
        points.append((int(point["batch"]), int(point["input"]), int(point["output"])))
    for key in ("frameworks", "kv_dtypes"):
        if not isinstance(data[key], list) or not data[key]:
            raise SpecError(reader.where(data, key, key), "expected a non-empty list", f"write `{key}: [...]`")
    return Grid(str(path), None if gpus == "all" else tuple(gpus), _ints(reader, data, "gpu_counts", "gpu_counts"),
                int(data["beyond_fit"]), int(par["max_pp"]), _ints(reader, par, "cp", "parallel.cp"),
                _ints(reader, par, "ep", "parallel.ep", True), _ints(reader, par, "dp_attn", "parallel.dp_attn", True),
                bool(par["tp_in_domain"]), int(par["pp_after_tp"]), tuple(data["frameworks"]), tuple(data["kv_dtypes"]),
                _ints(reader, sc, "input_lengths", "scenarios.input_lengths"), float(sc["beyond_max_context"]),
                _ints(reader, sc, "output_lengths", "scenarios.output_lengths"),
                _ints(reader, sc, "batches", "scenarios.batches"), tuple(ops["kv_dtypes"]), tuple(points))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _allowed(value: int, tp: int, choices: tuple) -> bool:
    return any(value == (tp if c == "tp" else c) for c in choices)


def configs(ev: Evaluation, grid: Grid, gpu: GPU, n_gpus: int) -> list[ParallelConfig]:
    """The legal configs of ``n_gpus`` GPUs that the grid allows (no replicas: dp = 1)."""
    moe = any(r.role == "experts" for r in ev.numeric.rows.values())
    out = []
    for cp in grid.cp:
        if n_gpus % cp:
            continue
        for tp in _divisors(n_gpus // cp):
            pp = n_gpus // (cp * tp)
            if pp > grid.max_pp or (grid.tp_in_domain and tp > gpu.scale_up_domain):
                continue
            if pp > 1 and tp * cp < min(n_gpus, grid.pp_after_tp):
                continue      # pipeline stages only once TP (x CP) spans pp_after_tp GPUs
            for ep in _divisors(tp) if moe else [1]:
                for dp_attn in _divisors(tp) if moe else [1]:   # dense: attention replicas = replicas
                    if not (_allowed(ep, tp, grid.ep) and _allowed(dp_attn, tp, grid.dp_attn)):
                        continue
                    config = ParallelConfig(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp, cp=cp)
                    if config not in out and not check(ev, config):
                        out.append(config)
    return out


def model_cells(ev: Evaluation, grid: Grid, gpus: dict[str, GPU], stored_bytes: float,
                hbm_fraction: float = 0.9) -> list[tuple[GPU, ParallelConfig]]:
    """(GPU, config) pairs for one model: counts from the first at which ``stored_bytes`` (the
    model's weights) can fit split over every GPU, up to ``beyond_fit`` times that count, and the
    GPU's whole scale-up domain."""
    names = grid.gpus if grid.gpus is not None else tuple(gpus)
    cells = []
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
        for n in counts:   # ... and a whole scale-up domain (an NVL72 rack) when it is in the grid
            if first <= n <= first * grid.beyond_fit or (n == gpu.scale_up_domain and n >= first):
                cells.extend((gpu, c) for c in configs(ev, grid, gpu, n))
    return cells


def input_lengths(grid: Grid, max_context: int) -> list[int]:
    """The grid's prompt lengths for a model: up to ``beyond_max_context`` x its max context."""
    return [n for n in grid.input_lengths if n <= grid.beyond_max_context * max_context]


def as_dict(grid: Grid) -> dict[str, Any]:
    return {k: getattr(grid, k) for k in grid.__dataclass_fields__}
