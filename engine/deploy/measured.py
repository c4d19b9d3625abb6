"""Measured kernel times (``gpus/measured/``): loading, interpolation, and each op's expected time.

Layer: engine.deploy. The tables are written by ``benchmarks/import_kernels.py`` from the public
aiconfigurator-core package (one file per GPU x framework x version x kernel class; their schema:
engine.spec.file_schemas.MEASURED) and are input like a GPU file: a damaged, truncated or absurd
table is one line naming the file and field (exit 2). Nothing here reads the package itself.

Invariants:

* **Interpolation** (:func:`interpolate`): multilinear in log(latency) over log(axis value)
  between the measured grid points, so a point on the grid returns its measured time and time
  scales as a power law between two neighbours. Outside the measured range of an axis the time
  continues from the nearest point of the range as the power law of the axis's last measured
  span, its slope clipped to [0, the slope of the kernel class's roofline over that span]
  (:func:`gemm_roof`, :func:`collective_roof`, :func:`attention_roof`): never steeper than the
  work grows, never faster with more work; a GEMM beyond the largest measured m grows as its
  FLOPs once the edge is compute-bound, a message below the smallest keeps its latency floor.
* **Expected time of an op** (:func:`expected_steps`): the measured time per call x calls where a
  table covers the op's kernel class on this GPU and framework, never below the op's bound
  (``t_sol_s``: no kernel beats the speed of light, whatever a table or its extrapolation says);
  elsewhere the bound / :data:`DEFAULT_EFFICIENCY`, flagged ``measured: false``.
* Which table covers which op (:func:`kernel_of`): a dense ``linear`` step (or a fused step whose
  members all are: QKV, gate-up) is a GEMM at m = its output rows on one GPU, k = its input
  features (split by the partial-sum groups of a row-parallel matmul), n = its FLOPs per call /
  2mk; its dtype is the GPU's compute dtype of its operands, FP8 reading the per-tensor ``fp8``
  table, else ``fp8_block``. A collective step inside one scale-up domain is its collective at the
  step's ranks and message bytes (the output it writes per call; a fused all-reduce + norm: its
  link bytes over the algorithm's share); an all-reduce takes the faster of the framework's
  custom all-reduce (its CUDA-graph table for decode, eager for prefill) and NCCL's, as the
  frameworks switch between them by size. A fused attention step (the ``flash_attention`` rule,
  plain GQA/MHA dims) is decode or prefill attention of its head size and KV-cache dtype at
  (requests, KV heads per GPU, query heads per KV head, context) or (prompts, prompt tokens, KV
  heads, query heads per KV head), requests and query heads as one GPU holds them (its output's
  local sizes), KV heads in the model's proportion (at least one); not with context parallelism
  or several query tokens per decode step. A fused MoE step (``fused_moe``) reads the curve of
  its exact expert shape and split (:data:`KEYED`: the model's hidden, d_ff_expert, top_k,
  n_experts; moe_tp = tp / ep, moe_ep = ep) at the layer's tokens (the point's batch x seq: one
  attention replica's tokens x dp_attn, the source's num_tokens). Other ops (MLA, norms,
  elementwise) have no table yet.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from engine.project import PACKAGE_ROOT
from engine.spec import file_schemas, symbols
from engine.spec.corpus import Reader, refuse_symlinks
from engine.spec.errors import SpecError, Where
from engine.spec.filememo import ContentMemo
from engine.deploy.cost import ARGS, KV_BYTES

DEFAULT_ROOT = PACKAGE_ROOT / "gpus" / "measured"
SEQ = symbols.dim(symbols.SEQ)
BATCH = symbols.dim(symbols.BATCH)

#: The expected time of an op no table covers: its bound / this. Not fitted: a round figure
#: below the GEMM tables' efficiency at decode sizes (their memory-bound GEMMs reach 60 to 90% of
#: HBM bandwidth on H100 and H200), standing for kernels nobody measured yet (norms,
#: elementwise, attention, MoE); docs/deployment.md "Expected time".
DEFAULT_EFFICIENCY = 0.7

#: Kernel class -> its axes in order (the file's ``axes`` must name exactly these).
KERNELS = {"gemm": ("m", "n", "k"), "all_reduce": ("gpus", "bytes"), "all_gather": ("gpus", "bytes"),
           "reduce_scatter": ("gpus", "bytes"), "all_to_all": ("gpus", "bytes"),
           "decode_attention": ("batch", "kv_heads", "q_per_kv", "ctx"),
           "prefill_attention": ("batch", "isl", "kv_heads", "q_per_kv"),
           "moe": ("tokens",)}
#: Kernel classes whose rows are curves picked by exact keys (the file's ``keys``), in this order.
KEYED = {"moe": ("hidden", "inter", "topk", "experts", "moe_tp", "moe_ep")}
#: The dims a fused attention step (the ``flash_attention`` rule) may have for an attention table
#: to cover it (a step with other dims, e.g. a latent or windowed variant, has none yet).
ATTENTION_DIMS = {"batch", "seq", "n_heads", "d_head", "kv_len", "n_kv_heads"}
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
        table = load_table(path, root.parent.parent)
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


# -- interpolation ----------------------------------------------------------------------------------

def gemm_roof(peak_flops: float, hbm_bytes_per_s: float, element_bytes: float) -> Callable:
    """The roofline of a GEMM at (m, n, k): max(2mnk / peak, (mk + nk + mn) x element bytes / HBM)."""
    def roof(m, n, k):
        return max(2.0 * m * n * k / peak_flops, (m * k + n * k + m * n) * element_bytes / hbm_bytes_per_s)
    return roof


def collective_roof(kernel: str) -> Callable:
    """Proportional to a collective's bandwidth time at (gpus, bytes): bytes x its algorithm's
    share (2(g-1)/g for an all-reduce, (g-1)/g otherwise); only its ratios are used."""
    def roof(gpus, size):
        share = (gpus - 1) / gpus
        return size * (2 * share if kernel == "all_reduce" else share)
    return roof


def attention_roof(kernel: str) -> Callable:
    """Proportional to an attention kernel's roofline: decode reads the KV cache (batch x KV heads
    x context), prefill computes scores (prompts x prompt length² x heads); only ratios are used."""
    if kernel == "decode_attention":
        return lambda batch, kv_heads, q_per_kv, ctx: batch * kv_heads * ctx
    return lambda batch, isl, kv_heads, q_per_kv: batch * isl * isl * kv_heads * q_per_kv


#: (id(table), point) -> (table, _inside's value): plan reads the same kernels at the same shapes
#: for many (config, batch) points (a DeepSeek-V3 plan: 41,000 interpolations of 2,500 distinct
#: points). The table is kept so its id is not reused; a pure function of both, so equal values.
_INSIDE: dict = {}


def _inside(table: Table, point: tuple[float, ...]) -> float:
    """Multilinear interpolation of log time over log axis values at a point inside the grid."""
    key = (id(table), point)
    found = _INSIDE.get(key)
    if found is not None and found[0] is table:
        return found[1]
    if len(_INSIDE) > 200_000:
        _INSIDE.clear()
    value = _inside_at(table, point)
    _INSIDE[key] = (table, value)
    return value


def _inside_at(table: Table, point: tuple[float, ...]) -> float:
    lo, weights = [], []
    for x, v in zip(point, table.values):
        i = min(int(np.searchsorted(v, x, side="right")) - 1, len(v) - 2)
        lo.append(i)
        weights.append((math.log(x) - math.log(v[i])) / (math.log(v[i + 1]) - math.log(v[i])))
    log_t = 0.0
    for corner in range(1 << len(lo)):
        w, index = 1.0, []
        for d, (i, f) in enumerate(zip(lo, weights)):
            up = (corner >> d) & 1
            w *= f if up else 1.0 - f
            index.append(i + up)
        if w:
            log_t += w * math.log(table.seconds[tuple(index)])
    return math.exp(log_t)


def interpolate(table: Table, point: tuple[float, ...], roof: Callable) -> tuple[float, bool]:
    """(seconds at ``point``, whether it lies outside the measured range) by the module's rule.

    Inside: :func:`_inside`. Outside on an axis: from the clamped point (the nearest on the grid's
    range) the time continues as the power law of the axis's last measured span (its slope in
    log time over log value between the edge value and the one next to it), the slope clipped to
    [0, the roofline's slope over the same span]: a kernel grows no faster than its roofline (one
    overhead-dominated edge point does not scale like the work) and never gets faster with more
    work. Axes outside add their log steps."""
    clamped = tuple(min(max(float(x), v[0]), v[-1]) for x, v in zip(point, table.values))
    t = _inside(table, clamped)
    outside = False
    for a, (x, c, v) in enumerate(zip(point, clamped, table.values)):
        if float(x) == c:
            continue
        outside = True
        inner = list(clamped)
        inner[a] = v[-2] if c == v[-1] else v[1]         # one measured value inward
        span = math.log(c) - math.log(inner[a])
        slope = (math.log(_inside(table, clamped)) - math.log(_inside(table, tuple(inner)))) / span
        roof_slope = (math.log(roof(*clamped)) - math.log(roof(*inner))) / span
        t *= math.exp(min(max(slope, 0.0), max(roof_slope, 0.0)) * (math.log(float(x)) - math.log(c)))
    return t, outside


# -- expected time of each step of a compiled program ---------------------------------------------

_FUNCS: dict = {}


def _at(expr, args: dict) -> float:
    """A step expression's value at one point (``args``: symbol -> number), once compiled per expression."""
    f = _FUNCS.get(expr)
    if f is None:
        if len(_FUNCS) > 50_000:        # the step expressions of a model or two: keep it bounded
            _FUNCS.clear()
        f = _FUNCS[expr] = symbols.checked_lambdify(ARGS, expr, modules="math")
    return float(f(*(args[a] for a in ARGS)))


def _linear(step, member_ops: dict) -> bool:
    """A dense matmul kernel: a ``linear`` step, or a fused step whose members all are linear."""
    if step.op == "linear" and step.kind == "compute":
        return True
    return step.kind == "fused" and not step.collective and bool(step.parts) and \
        all(member_ops.get(uid) == "linear" for uid in step.parts)


def kernel_of(step, member_ops: dict, phase: str = "decode") -> str:
    """The kernel class of a step (:data:`KERNELS`), or "" where no table applies."""
    if _linear(step, member_ops):
        return "gemm"
    if step.collective in KERNELS and step.nodes <= 1:
        return step.collective
    if step.op == "flash_attention" and step.kind == "fused" and set(step.dims) <= ATTENTION_DIMS:
        return f"{phase}_attention"
    if step.op == "fused_moe" and step.kind == "fused":
        return "moe"
    return ""


#: The model's dims an MoE table's key reads, in :data:`KEYED` order (moe_tp, moe_ep follow).
MOE_DIMS = ("hidden", "d_ff_expert", "top_k", "n_experts")


def _moe_key(bound: dict, config) -> tuple | None:
    """An MoE table's key for the model's routed experts under ``config``: (hidden, expert
    intermediate size, top-k, experts, moe_tp = tp / ep, moe_ep = ep); None where the model lacks
    one of the dims."""
    if any(d not in bound for d in MOE_DIMS) or config.tp % config.ep:
        return None
    return tuple(int(bound[d]) for d in MOE_DIMS) + (config.tp // config.ep, config.ep)


def _attention_shape(step, args: dict, config, kernel: str) -> tuple[float, ...] | None:
    """The attention table's point of a fused attention step (the module's rule), or None where
    the table does not apply (context parallelism, several query tokens per decode step)."""
    local = _local_axes(step, args)
    if config.cp > 1 or not {"batch", "seq", "n_heads"} <= set(local):
        return None
    d = step.dims
    heads = local["n_heads"]
    # KV heads split as the query heads are; fewer KV heads than that: each GPU keeps one
    kv_heads = max(1.0, float(d["n_kv_heads"]) * heads / float(d["n_heads"]))
    batch, seq, ctx = local["batch"], local["seq"], _at(d["kv_len"], args)
    if kernel == "decode_attention":
        return (batch, kv_heads, heads / kv_heads, ctx) if seq == 1 else None
    return batch, seq, kv_heads, heads / kv_heads


def _local_axes(step, args: dict) -> dict[str, float]:
    """Each axis of the step's output by name: its size on one GPU at the point (the size over the
    groups that split it; more GPUs than units of a fixed-size axis: one unit each, as placement
    splits heads)."""
    out = {}
    for axis, groups in zip(step.out.axes, step.layout.shards):
        size = _at(axis.size, args)
        ways = math.prod(g.size for g in groups)
        if getattr(axis.size, "is_number", False):
            ways = min(ways, size)
        out.setdefault(axis.name, size / max(ways, 1))
    return out


def _gemm_shape(step, args: dict, flops_per_call: float) -> tuple[float, float, float]:
    """(m, n, k) per GPU of a matmul step at one point (the module's rule): m the step's output
    rows on one GPU (the prefill logits: one position per prompt), k its input features (split by
    the partial-sum groups of a row-parallel matmul), n = FLOPs per call / 2mk (a fused QKV or
    gate-up: the members' output features together)."""
    local = _local_axes(step, args)
    rows = list(local.items())[:-1]                  # the last output axis: the features
    m = max(math.prod(1.0 if (step.last_token and name == "seq") else size for name, size in rows), 1.0)
    numeric = [float(e) for e in step.dims.values() if getattr(e, "is_number", True)]
    k = numeric[-1] / math.prod(g.size for g in step.layout.partial)
    return m, flops_per_call / (2.0 * m * k), k


@dataclass(frozen=True)
class Lookup:
    """What :func:`expected_steps` reads besides the program: the GPU, framework, phase and tables."""

    gpu: object
    framework: str
    phase: str
    tables: Tables
    kv_dtype: str = "bf16"
    config: object = None
    bound: dict = None                  # the model's bound dims (an MoE table's key)


def _tables_for(lookup: Lookup, kernel: str, dtype: str) -> list[Table]:
    g, fw, t = lookup.gpu.key, lookup.framework, lookup.tables
    if kernel == "gemm":
        names = ("fp8", "fp8_block") if dtype == "fp8" else (dtype,)
        found = [t[(g, fw, "gemm", v)] for v in names if (g, fw, "gemm", v) in t]
        return found[:1]
    if kernel.endswith("_attention"):
        key = (g, fw, kernel, f"{lookup.kv_dtype}_d{dtype}")
        return [t[key]] if key in t else []
    if kernel == "moe":
        key = _moe_key(lookup.bound or {}, lookup.config)
        names = ("fp8", "fp8_block") if dtype == "fp8" else (dtype,)
        curves = [t[(g, fw, "moe", v)].curve(key) for v in names if key and (g, fw, "moe", v) in t]
        return [c for c in curves if c is not None][:1]
    found = [t[(g, "nccl", kernel, "nccl")]] if (g, "nccl", kernel, "nccl") in t else []
    if kernel == "all_reduce":
        mode = "custom_graph" if lookup.phase == "decode" else "custom_eager"
        if (g, fw, kernel, mode) in t:
            found.append(t[(g, fw, kernel, mode)])
    return found


def step_expected(step, lookup: Lookup, member_ops: dict, args: dict, t_sol: float, flops: float,
                  repeat: float | None, comm: float = 0.0) -> tuple[float, bool, str]:
    """(expected seconds of the step's calls, measured?, source text) at one point; ``t_sol``,
    ``flops``, ``comm``: the step's bound, FLOPs and link bytes over its calls there."""
    kernel = kernel_of(step, member_ops, lookup.phase) if repeat else ""
    point, shape = None, ""
    if kernel.endswith("_attention"):
        point = _attention_shape(step, args, lookup.config, kernel)
        kernel = kernel if point is not None else ""
    if kernel and t_sol > 0:
        if point is not None:                   # attention: the table of its head size and KV dtype
            dtype = f"{float(step.dims['d_head']):g}"
            roof = attention_roof(kernel)
        elif kernel == "moe":                   # the layer's tokens: one attention replica's x dp_attn
            dtype = lookup.gpu.compute_dtype(step.compute_dtype)
            point = (args[BATCH] * args[SEQ],)
            roof = lambda tokens: tokens        # noqa: E731  (work grows with the tokens at most linearly)
            key = _moe_key(lookup.bound or {}, lookup.config) or ()
            shape = " " + " ".join(f"{n}={v}" for n, v in zip(KEYED["moe"], key))
        elif kernel == "gemm":
            dtype = lookup.gpu.compute_dtype(step.compute_dtype)
            point = _gemm_shape(step, args, flops / repeat)
            roof = gemm_roof(lookup.gpu.peak_flops(step.compute_dtype), lookup.gpu.hbm_bytes_per_s,
                             1.0 if dtype == "fp8" else 2.0)
        else:
            dtype = ""
            roof = collective_roof(kernel)
            # the message: what a collective step writes; a fused one (all-reduce + norm) also
            # writes its norm's output, so its link bytes over the algorithm's share
            size = _at(step.written, args) if step.kind == "comm" else comm / repeat / roof(step.ranks, 1.0)
            point = (float(step.ranks), size)
        best = None
        tables = _tables_for(lookup, kernel, dtype) if min(point) > 0 else []   # an empty shape: no lookup
        for table in tables:
            t, outside = interpolate(table, point, roof)
            if best is None or t < best[0]:
                best = (t, outside, table)
        if best is not None:
            t, outside, table = best
            at = " ".join(f"{a}={x:.0f}" for a, x in zip(table.axes, point)) + shape
            src = f"{table.name} ({table.source}) at {at}{', extrapolated' if outside else ''}"
            return max(t * repeat, t_sol), True, src
    return t_sol / DEFAULT_EFFICIENCY, False, f"bound / {DEFAULT_EFFICIENCY:g}"


def member_ops(structure, phase: str) -> dict[str, str]:
    """Step uid -> op of the phase's unfused program (what a fused step's members are)."""
    return {s.uid: s.op for s in structure.unfused[phase].steps}


def expected_steps(plan, phase: str, batch, seq, ctx, tables: Tables, values: dict,
                   keep=None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per kept step (``keep``: indices into the program's steps, default all) and point
    (``batch``, ``seq``, ``ctx``: 1-D arrays of the points), point-major like the per-op table:
    (expected seconds, measured?, source text). ``values``: the compiled program's evaluation at
    those points (engine.deploy.cost: ``t_sol``, ``flops``, ``comm_bytes``, each (steps, points))."""
    t_sol, flops, comm = values["t_sol"], values["flops"], values["comm_bytes"]
    s = plan.structure
    steps = s.programs[phase].steps
    keep = range(len(steps)) if keep is None else keep
    lookup = Lookup(plan.gpu, s.options.framework, phase, tables, plan.options.kv_dtype, s.config, s.ev.bound)
    members = member_ops(s, phase)
    dims = [symbols.dim(n) for n in symbols.SCENARIO_DIMS]     # (batch, seq, ctx)
    times, measured, sources = [], [], []
    # each kept step's repeat as a float, once (not once per point: sympy's float() is slow)
    repeats = {i: float(steps[i].repeat) if steps[i].repeat.is_number else None for i in keep}
    for p in range(len(batch)):
        args = dict(zip(dims, (float(batch[p]), float(seq[p]), float(ctx[p]))))
        args[KV_BYTES] = float(plan.kv_bytes)
        for i in keep:
            t, m, src = step_expected(steps[i], lookup, members, args, float(t_sol[i, p]), float(flops[i, p]),
                                      repeats[i], float(comm[i, p]))
            times.append(t)
            measured.append(m)
            sources.append(src)
    return np.asarray(times), np.asarray(measured, dtype=bool), sources
