"""Measured kernel times (``gpus/measured/``): loading, interpolation, and each op's expected time.

Layer: engine.deploy. The tables are written by ``benchmarks/import_kernels.py`` from the public
aiconfigurator-core package (one file per GPU x framework x version x kernel class; their schema:
engine.language.file_schemas.MEASURED) and are input like a GPU file: a damaged, truncated or absurd
table is one line naming the file and field (exit 2). Nothing here reads the package itself.

Invariants:

* **Interpolation** (:func:`interpolate`): multilinear in log(latency) over log(axis value)
  between the measured grid points, so a point on the grid returns its measured time and time
  scales as a power law between two neighbours. Outside the measured range of an axis the time
  continues from the nearest point of the range as the power law of the axis's last measured
  span, its slope clipped to [0, the slope of the kernel class's roofline over that span]
  (:func:`gemm_roof`, :func:`collective_roof`, :func:`attention_roof`): never steeper than the
  work grows, never faster with more work; a GEMM beyond the largest measured m grows as its
  FLOPs once the edge is compute-bound, a message below the smallest keeps its latency floor; and
  never more efficient than the table's best measured point (:func:`peak_rate`: the time at least
  the roofline's work over the highest work per second the grid reaches).
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
  custom all-reduce (its CUDA-graph table for decode, eager for prefill; a framework with one
  table, TensorRT-LLM, that one: ``custom``) and NCCL's, as the
  frameworks switch between them by size. A fused attention step (the ``flash_attention`` rule,
  plain GQA/MHA dims) is decode or prefill attention of its head size and KV-cache dtype at
  (requests, KV heads per GPU, query heads per KV head, context) or (prompts, prompt tokens, KV
  heads, query heads per KV head), requests and query heads as one GPU holds them (its output's
  local sizes), KV heads in the model's proportion (at least one); not with context parallelism
  or several query tokens per decode step. A fused MoE step (``fused_moe``) reads the curve of
  its exact expert shape and split (:data:`KEYED`: the model's hidden, d_ff_expert, top_k,
  n_experts; moe_tp = tp / ep, moe_ep = ep) at the layer's tokens (the point's batch x seq: one
  attention replica's tokens x dp_attn, the source's num_tokens); under expert parallelism
  (moe_ep > 1) the table of the framework's routing (its fusion table's ``moe_routing``, e.g.
  ``fp8_power_law_1.2``: every rank waits for the busiest), else the balanced one. An absorbed-MLA decode
  attention step (the ``flash_mla`` rule: scores, softmax and the latent-space output over the
  latent + rotary cache) is ``decode_mla`` of its KV-cache dtype and latent rank
  (``<kv dtype>_r<kv_lora_rank>``) at (requests, query heads, context) as one GPU holds them; one
  query token per request, no context parallelism. The two per-head matmuls around it in decode
  (``head_linear`` steps: the query's absorption into the latent, ``pre``, and the latent output's
  up-projection, ``post``) are ``mla_bmm`` of their side, the GPU's compute dtype and the latent
  rank (``pre_bf16_r512``) at (tokens, heads) on one GPU. An MLA model's prefill attention (a
  fused attention step whose value heads are ``d_v_head``: K and V decompressed from the latent)
  is ``prefill_mla`` of its KV dtype and latent rank at (prompts, prompt tokens, query heads) on
  one GPU, where the prompt has no cached prefix (its context = its tokens). All three only where
  the model has the source's one MLA shape (:data:`MLA_SHAPE`) and attends to the whole context
  (a sparse DSA step, ``kv_len`` min(2048, ctx), reads none). Other ops (norms, elementwise) have
  no table.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import sympy

from engine.language import formula_tree, symbols
from engine.language.formula_tree import to_tree
from engine.deploy.cost import ARGS, KV_BYTES, step_totals
# re-exported: the tables (their classes, one table, loading) and how a table is read moved out of
# this module (one job each); importers keep reading them here
from engine.deploy.interpolation import (  # noqa: F401
    _lower, _roof, attention_roof, collective_roof, gemm_roof, interpolate,
    interpolate_many, nearest, peak_rate, roof_expr)
from engine.deploy.measured_tables import (  # noqa: F401
    ATTENTION_DIMS, KERNELS, KEYED, MAX_POINTS, MLA_KERNELS, MLA_SHAPE, Table, Tables,
    adopt_tables, folder, load_measured, load_table, parsed_tables)

SEQ = symbols.dim(symbols.SEQ)
CTX = symbols.dim(symbols.CTX)
BATCH = symbols.dim(symbols.BATCH)

#: The expected time of an op no table covers: its bound / this. Not fitted: a round figure
#: below the GEMM tables' efficiency at decode sizes (their memory-bound GEMMs reach 60 to 90% of
#: HBM bandwidth on H100 and H200), standing for kernels nobody measured yet (norms,
#: elementwise, attention, MoE); docs/deployment.md "Expected time".
DEFAULT_EFFICIENCY = 0.7

# -- expected time of each step of a compiled program ---------------------------------------------

_FUNCS: dict = {}


def _at(expr, args: dict) -> np.ndarray:
    """A step expression's values at the points (``args``: symbol -> 1-D array of the points),
    as an array over them; compiled once per expression (NumPy)."""
    f = _FUNCS.get(expr)
    if f is None:
        if len(_FUNCS) > 50_000:        # the step expressions of a model or two: keep it bounded
            _FUNCS.clear()
        f = _FUNCS[expr] = symbols.checked_lambdify(ARGS, expr, modules=list(symbols.NUMPY_MODULES))
    n = len(args[ARGS[0]])
    value = np.asarray(f(*(args[a] for a in ARGS)), dtype=float)
    return value if value.shape == (n,) else np.broadcast_to(value, (n,))


def _at_once(expr, args: dict, values: dict) -> np.ndarray:
    """:func:`_at` of ``expr`` over ``args``, once per expression in ``values`` (for these args alone)."""
    found = values.get(expr)
    if found is None:
        found = values[expr] = _at(expr, args)
    return found


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
    if step.op == "flash_attention" and step.kind == "fused" and phase == "prefill" and "d_v_head" in step.dims:
        return "prefill_mla"
    if step.op == "flash_mla" and step.kind == "fused" and phase == "decode":
        return "decode_mla"
    if step.op == "head_linear" and step.kind == "compute" and phase == "decode" and _bmm_side(step):
        return "mla_bmm"
    return ""


def _bmm_side(step) -> str:
    """An MLA per-head matmul's side: ``pre`` when it writes the latent (the query absorbed into
    it: its output's last axis ``kv_lora_rank``), ``post`` when it reads the latent and writes the
    value heads (``d_v_head``); "" for another per-head matmul."""
    if "kv_lora_rank" not in step.dims or not step.out.axes:
        return ""
    last = step.out.axes[-1].name
    return "pre" if last == "kv_lora_rank" else "post" if last == "d_v_head" else ""


#: The model's dims an MoE table's key reads, in :data:`KEYED` order (moe_tp, moe_ep follow).
MOE_DIMS = ("hidden", "d_ff_expert", "top_k", "n_experts")


def _moe_key(bound: dict, config) -> tuple | None:
    """An MoE table's key for the model's routed experts under ``config``: (hidden, expert
    intermediate size, top-k, experts, moe_tp = tp / ep, moe_ep = ep); None where the model lacks
    one of the dims."""
    if any(d not in bound for d in MOE_DIMS) or config.tp % config.ep:
        return None
    return tuple(int(bound[d]) for d in MOE_DIMS) + (config.tp // config.ep, config.ep)


def _sym(x) -> sympy.Expr:
    """A step's size as a sympy expression (an int or float as its exact sympy number; no text)."""
    if isinstance(x, sympy.Basic):
        return x
    return sympy.Integer(x) if isinstance(x, int) else sympy.Float(float(x))


def _attention_point(step, config, kernel: str) -> tuple | None:
    """(the attention table's point of a fused attention step, when the table applies), as
    expressions of the point (the module's rule), or None where it applies nowhere (context
    parallelism); a decode point with several query tokens per request has none (it applies
    where the step's local seq is 1)."""
    local = _local_axes(step)
    if config.cp > 1 or not {"batch", "seq", "n_heads"} <= set(local):
        return None
    d = step.dims
    heads = local["n_heads"]
    # KV heads split as the query heads are; fewer KV heads than that: each GPU keeps one
    kv_heads = sympy.Max(1, _sym(d["n_kv_heads"]) * heads / _sym(d["n_heads"]))
    batch, seq, ctx = local["batch"], local["seq"], _sym(d["kv_len"])
    if kernel == "decode_attention":
        return (batch, kv_heads, heads / kv_heads, ctx), sympy.Eq(seq, 1)
    return (batch, seq, kv_heads, heads / kv_heads), sympy.true


def _mla_model(bound: dict | None) -> bool:
    """The model's MLA has the shape the MLA tables measured (:data:`MLA_SHAPE`): another rank,
    rotary width, query/key or value head size (GLM-5's 192 / 256) is another kernel."""
    bound = bound or {}
    return all(bound.get(d) == v for d, v in MLA_SHAPE.items())


def _cp(config) -> int:
    """The context-parallel degree (1 without a configuration): a per-GPU table applies only at 1
    (its tokens are not split by position)."""
    return 1 if config is None else config.cp


def _mla_point(step, config, kernel: str) -> tuple | None:
    """(an MLA table's point of the step, when the table applies) as expressions of the point (the
    module's rule), or None where it applies nowhere (context parallelism, no local batch, seq
    and heads). ``decode_mla`` (a ``flash_mla`` decode step): requests and query heads as one GPU
    holds them (its output's local sizes) and the cached tokens, where one query token per request;
    a sparse step (DSA: kv_len min(2048, ctx)) is another kernel. ``prefill_mla``: prompts, their
    tokens and heads on one GPU, where the prompt has no cached prefix (its tokens = its context).
    ``mla_bmm``: tokens and heads on one GPU."""
    local = _local_axes(step)
    if _cp(config) > 1 or not {"batch", "seq", "n_heads"} <= set(local):
        return None
    batch, seq, heads = local["batch"], local["seq"], local["n_heads"]
    if kernel == "decode_mla":
        if step.dims.get("kv_len") != CTX:
            return None
        return (batch, heads, _sym(step.dims["kv_len"])), sympy.Eq(seq, 1)
    if kernel == "prefill_mla":
        return (batch, seq, heads), sympy.Eq(seq, _sym(step.dims["kv_len"]))
    return (batch * seq, heads), sympy.true


_MAXIMA: dict = {}


def _at_least(expr: sympy.Expr, floor: int) -> sympy.Expr:
    """``sympy.Max(expr, floor)``, once per distinct pair: its simplification compares the
    arguments symbolically (most of a plan's expected-time setup), and the steps of another
    config or fusion regime repeat the same local sizes (equal arguments, an equal Max)."""
    key = (expr, floor)
    found = _MAXIMA.get(key)
    if found is None:
        if len(_MAXIMA) > 50_000:
            _MAXIMA.clear()
        found = _MAXIMA[key] = sympy.Max(expr, floor)
    return found


def _local_axes(step) -> dict[str, sympy.Expr]:
    """Each axis of the step's output by name: its size on one GPU (the size over the groups that
    split it; more GPUs than units of a fixed-size axis: one unit each, as placement splits
    heads), an expression of the point."""
    out = {}
    for axis, groups in zip(step.out.axes, step.layout.shards):
        size = _sym(axis.size)
        ways = sympy.Integer(math.prod(g.size for g in groups))
        if size.is_number:
            ways = sympy.Min(ways, size)
        out.setdefault(axis.name, size / _at_least(ways, 1))
    return out


def _gemm_key(step) -> tuple:
    """Everything :func:`_gemm_point` reads of a step, by value: its output axes (names and
    sizes), the sizes of the groups splitting each axis and of its partial-sum groups, whether it
    computes the last token alone, its numeric dims in order, its FLOPs over all calls and its
    calls. Steps of other placements, regimes and frameworks repeat these exactly (a GEMM's point
    is the same wherever the same shard of the same matmul runs); sympy compares the expressions
    structurally (an Integer is not a Float of the same value), so equal keys give equal points."""
    return (tuple((a.name, _sym(a.size)) for a in step.out.axes),     # (as _local_axes reads them)
            tuple(tuple(g.size for g in groups) for groups in step.layout.shards),
            tuple(g.size for g in step.layout.partial), step.last_token,
            _numeric_dims(step.dims),
            step_totals(step)[0], step.repeat)


_NUMERIC: dict[tuple, tuple] = {}     # a step's dims' values -> those that are numbers, in order


def _numeric_dims(dims: dict) -> tuple:
    """The values of a step's ``dims`` that are numbers, in order, once per distinct tuple of
    values: sympy's ``is_number`` walks a compound expression's arguments on every call, and every
    step of every placement asks (equal values are equally numbers)."""
    values = tuple(dims.values())
    found = _NUMERIC.get(values)
    if found is None:
        if len(_NUMERIC) > 50_000:
            _NUMERIC.clear()
        found = _NUMERIC[values] = tuple(e for e in values if getattr(e, "is_number", True))
    return found


_GEMMS: dict[tuple, tuple] = {}      # _gemm_key -> the point: building it is sympy Min/Max work


def _gemm_point(step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """(m, n, k) per GPU of a matmul step (the module's rule), expressions of the point: m the
    step's output rows on one GPU (the prefill logits: one position per prompt), k its input
    features (split by the partial-sum groups of a row-parallel matmul), n = FLOPs per call / 2mk
    (a fused QKV or gate-up: the members' output features together). Once per :func:`_gemm_key`."""
    key = _gemm_key(step)
    found = _GEMMS.get(key)
    if found is None:
        if len(_GEMMS) > 50_000:
            _GEMMS.clear()
        found = _GEMMS[key] = _gemm_point_of(step)
    return found


def _gemm_point_of(step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """:func:`_gemm_point` computed (its key's fields are all this reads)."""
    local = _local_axes(step)
    rows = list(local.items())[:-1]                  # the last output axis: the features
    m = sympy.Integer(1)
    for name, size in rows:
        if not (step.last_token and name == "seq"):
            m = m * size
    m = _at_least(m, 1)
    k = sympy.Float(float(_numeric_dims(step.dims)[-1]) / math.prod(g.size for g in step.layout.partial))
    flops = step_totals(step)[0] / step.repeat
    return m, flops / (2 * m * k), k


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
    moe_routing: str = "balanced"       # the framework's routing of an expert-parallel MoE (its fusion table's)


def _tables_for(lookup: Lookup, kernel: str, dtype: str) -> list[Table]:
    g, fw, t = lookup.gpu.key, lookup.framework, lookup.tables
    if kernel == "gemm":
        names = ("fp8", "fp8_block") if dtype == "fp8" else (dtype,)
        found = [t[(g, fw, "gemm", v)] for v in names if (g, fw, "gemm", v) in t]
        return found[:1]
    if kernel.endswith("_attention"):
        key = (g, fw, kernel, f"{lookup.kv_dtype}_d{dtype}")
        return [t[key]] if key in t else []
    if kernel in MLA_KERNELS and not _mla_model(lookup.bound):
        return []
    if kernel == "decode_mla":          # ``dtype``: the latent rank
        key = (g, fw, kernel, f"{lookup.kv_dtype}_r{dtype}")
        return [t[key]] if key in t else []
    if kernel == "prefill_mla":
        key = (g, fw, kernel, f"{lookup.kv_dtype}_r{MLA_SHAPE['kv_lora_rank']}")
        return [t[key]] if key in t else []
    if kernel == "mla_bmm":             # ``dtype``: side_dtype_rank, e.g. pre_bf16_r512
        key = (g, fw, kernel, dtype)
        return [t[key]] if key in t else []
    if kernel == "moe":
        key = _moe_key(lookup.bound or {}, lookup.config)
        names = ("fp8", "fp8_block") if dtype == "fp8" else (dtype,)
        if key and key[-1] > 1 and lookup.moe_routing != "balanced":
            # under expert parallelism every rank waits for the busiest: the tables measured at the
            # framework's uneven routing (moe_routing:), never the balanced ones in their place
            names = tuple(f"{v}_{lookup.moe_routing}" for v in names)
        curves = [t[(g, fw, "moe", v)].curve(key) for v in names if key and (g, fw, "moe", v) in t]
        return [c for c in curves if c is not None][:1]
    found = [t[(g, "nccl", kernel, "nccl")]] if (g, "nccl", kernel, "nccl") in t else []
    if kernel == "all_reduce":
        # the phase's backend where the framework measured two (vLLM, SGLang: CUDA graphs in
        # decode, eager in prefill), else its one custom all-reduce (TensorRT-LLM's allreduce op)
        mode = "custom_graph" if lookup.phase == "decode" else "custom_eager"
        for variant in (mode, "custom"):
            if (g, fw, kernel, variant) in t:
                found.append(t[(g, fw, kernel, variant)])
                break
    return found


@dataclass(frozen=True)
class Spec:
    """What the tables read of one step, whatever the point: its kernel class, the tables that
    cover it (the faster one's time wins), the roofline key (:func:`roof_expr`), its point on the
    tables' axes and the condition under which a table applies, as expressions of the point
    (engine.deploy.cost.ARGS), and an MoE table's key as text. :func:`_ask` evaluates it at the
    grid's points, :func:`expected_tree` exports it for the browser: one rule for both."""

    kernel: str
    tables: tuple
    roof: tuple
    point: tuple
    applies: object                     # a sympy condition (sympy.true where the table always applies)
    shape: str


_SPECS: dict = {}
_KERNELS: dict = {}     # (id(step), id(member_ops), phase) -> (them, the step's kernel class or "")


def _kernel(step, member_ops: dict, phase: str) -> str:
    """:func:`kernel_of` of a step that runs (a whole, non-zero number of calls), else ""; once per
    step object, ``member_ops`` object (:func:`member_ops` hands out one per program) and phase."""
    key = (id(step), id(member_ops), phase)
    found = _KERNELS.get(key)
    if found is not None and found[0] is step and found[1] is member_ops:
        return found[2]
    kernel = kernel_of(step, member_ops, phase) if step.repeat.is_number and float(step.repeat) else ""
    if len(_KERNELS) > 200_000:
        _KERNELS.clear()
    _KERNELS[key] = (step, member_ops, kernel)
    return kernel


_KERNEL_STEPS: dict[tuple, tuple] = {}    # (id(program), id(member_ops), phase) -> (them, positions)


def kernel_steps(program, member_ops: dict, phase: str) -> list[bool]:
    """Per step of ``program``: whether it has a kernel class (:func:`_kernel`), i.e. whether
    :func:`step_spec` can give it a :class:`Spec` under any lookup (every other step's is None:
    bound / the default efficiency); once per program, ``member_ops`` object and phase (the deploy
    export asks a program under every GPU, framework, KV dtype and config). Only read."""
    key = (id(program), id(member_ops), phase)
    found = _KERNEL_STEPS.get(key)
    if found is None or found[0] is not program or found[1] is not member_ops:
        if len(_KERNEL_STEPS) > 20_000:
            _KERNEL_STEPS.clear()
        found = _KERNEL_STEPS[key] = (program, member_ops, [bool(_kernel(st, member_ops, phase)) for st in program.steps])
    return found[2]


def step_spec(step, lookup: Lookup, member_ops: dict) -> Spec | None:
    """The step's :class:`Spec` by the module's rule, None where no table covers it (a kernel class
    without a table of this GPU, framework, dtype or shape); once per step object and what of the
    lookup it reads (the grid and the deploy export ask each step under every GPU, framework, KV
    dtype and config: the step's kernel class is derived once per step, and of the config only the
    context-parallel degree and an MoE table's key are read, of the model's dims only that key and
    whether it has the MLA tables' shape)."""
    kernel = _kernel(step, member_ops, lookup.phase)
    if not kernel:
        return None
    config = lookup.config
    moe = _moe_key(lookup.bound or {}, config) if kernel == "moe" else None
    mla = _mla_model(lookup.bound) if kernel in MLA_KERNELS else None
    key = (id(step), id(lookup.tables), lookup.gpu.key, lookup.framework, lookup.phase, lookup.kv_dtype,
           _cp(config), kernel, moe, lookup.moe_routing if moe else None, mla)
    found = _SPECS.get(key)
    if found is not None and found[0] is step and found[1] is lookup.tables:
        return found[2]
    applies, shape, point = sympy.true, "", None
    tables: list = []
    if kernel.endswith("_attention"):
        got = _step_point(step, kernel, lookup.config)
        if got is not None:                     # attention: the table of its head size and KV dtype
            point, applies = got
            roof = (kernel,)
            tables = _tables_for(lookup, kernel, f"{float(step.dims['d_head']):g}")
    elif kernel in MLA_KERNELS:
        got = _step_point(step, kernel, lookup.config)
        if got is not None:                     # MLA: the table of its latent rank, KV or compute dtype
            point, applies = got
            roof = (kernel,)
            if kernel == "prefill_mla":         # its K and V decompressed: the rank is the model's
                tables = _tables_for(lookup, kernel, "")
            else:
                rank = f"{float(step.dims['kv_lora_rank']):g}"
                dtype = lookup.gpu.compute_dtype(step.compute_dtype)    # bf16 or fp8 BMM tables; another: none
                tables = _tables_for(lookup, kernel, rank if kernel == "decode_mla" else
                                     f"{_bmm_side(step)}_{dtype}_r{rank}")
    elif kernel == "moe":                       # the layer's tokens: one attention replica's x dp_attn
        point = (BATCH * SEQ,)
        roof = ("moe",)
        shape = " " + " ".join(f"{k}={v}" for k, v in zip(KEYED["moe"], moe or ()))
        tables = _tables_for(lookup, kernel, lookup.gpu.compute_dtype(step.compute_dtype))
    elif kernel == "gemm":
        dtype = lookup.gpu.compute_dtype(step.compute_dtype)
        point = _step_point(step, kernel, lookup.config)[0]
        roof = ("gemm", lookup.gpu.peak_flops(step.compute_dtype), lookup.gpu.hbm_bytes_per_s,
                1.0 if dtype == "fp8" else 2.0)
        tables = _tables_for(lookup, kernel, dtype)
    else:
        roof = (kernel,)
        point = _step_point(step, kernel, lookup.config)[0]
        tables = _tables_for(lookup, kernel, "")
    spec = Spec(kernel, tuple(tables), roof, point, applies, shape) if tables else None
    if len(_SPECS) > 50_000:
        _SPECS.clear()
    _SPECS[key] = (step, lookup.tables, spec)
    return spec


_POINTS: dict = {}


def _step_point(step, kernel: str, config) -> tuple | None:
    """(the step's point on its kernel class's axes, when a table applies) as expressions of the
    point, by the module's rule; what no table selection changes, so once per step object and
    kernel (and context parallelism, which attention reads): building them costs sympy work."""
    key = (id(step), kernel, _cp(config) if kernel.endswith("_attention") or kernel in MLA_KERNELS else 1)
    found = _POINTS.get(key)
    if found is not None and found[0] is step:
        return found[1]
    if kernel.endswith("_attention"):
        got = _attention_point(step, config, kernel)
    elif kernel in MLA_KERNELS:
        got = _mla_point(step, config, kernel)
    elif kernel == "gemm":
        got = _gemm_point(step), sympy.true
    else:
        # the message: what a collective step writes; a fused one (all-reduce + norm) also
        # writes its norm's output, so its link bytes over the algorithm's share
        size = _sym(step.written) if step.kind == "comm" else \
            step_totals(step)[2] / step.repeat / sympy.Float(float(_roof((kernel,))(step.ranks, 1.0)))
        got = (_sym(step.ranks), size), sympy.true
    if len(_POINTS) > 50_000:
        _POINTS.clear()
    _POINTS[key] = (step, got)
    return got


@dataclass
class Ask:
    """One step's lookups: at its points ``at`` (rows of ``points``) in each of ``tables`` under the
    roofline ``roof``; :func:`resolve` fills ``found`` (per table: seconds, outside?)."""

    row: int                            # the step's row in its Gathered
    at: np.ndarray                      # indices of the points a table covers
    points: np.ndarray                  # (len(at), axes): the step's point on the tables' axes
    tables: list
    roof: tuple
    repeat: float
    shape: str                          # an MoE table's key, as text
    found: list = None


def _ask(step, lookup: Lookup, member_ops: dict, args: dict, t_sol: np.ndarray, row: int,
         values: dict | None = None) -> Ask | None:
    """The step's lookups at every point (``args``: symbol -> 1-D array of the points; ``t_sol``:
    the step's bound over its calls there): its :class:`Spec` evaluated there; a table applies
    where the step's bound and every coordinate of its point are positive and the spec's
    condition holds. None where no table covers it at any point. ``values``: expression -> its
    :func:`_at` over these very ``args`` (a program's steps share most coordinates: ``batch``,
    a shard's heads), filled as the steps ask; the arrays are only read."""
    spec = step_spec(step, lookup, member_ops)
    if spec is None:
        return None
    at = _at if values is None else lambda e, a: _at_once(e, a, values)
    points = np.column_stack([at(e, args) for e in spec.point])
    valid = (t_sol > 0) & (at(spec.applies, args) != 0)
    at = np.flatnonzero(valid & (points.min(axis=1) > 0))   # an empty shape: no lookup
    if not len(at):
        return None
    return Ask(row, at, points[at], list(spec.tables), spec.roof, float(step.repeat), spec.shape)


# -- the same rule as a formula tree (engine.language.formula_tree's ``lookup`` node) --------------------

#: The symbol of a step's bound (its t_sol over its calls) in :func:`expected_tree`: the evaluator of
#: the step's formula trees computes it beside (static/js/deploy_eval.js stepValues).
T_SOL = "t_sol"


def distil(table: Table, point: tuple) -> Table:
    """The part of ``table`` a lookup at ``point`` (expressions of the point) can read: on an axis
    whose coordinate is a number, the two measured values of the span it lies in (or of the edge
    span it continues from), the only ones the interpolation and the out-of-range rule read
    there; the whole axis elsewhere. Interpolating the part gives the whole table's floats."""
    constants = _CONSTANTS.get(point)
    if constants is None:           # (once per point: is_number and float() are sympy work)
        if len(_CONSTANTS) > 20_000:
            _CONSTANTS.clear()
        constants = _CONSTANTS[point] = tuple(float(e) if getattr(e, "is_number", False) else None for e in point)
    found = _DISTILLED.get((id(table), constants))
    if found is not None and found[0] is table:
        return found[1]
    values, cut = [], []
    for v, e in zip(table.values, point):
        if getattr(e, "is_number", False) and len(v) > 2:
            i = int(_lower(replace(table, values=(v,)), np.array([[float(e)]]))[0][0])
            cut.append(slice(i, i + 2))
        else:
            cut.append(slice(None))
        values.append(v[cut[-1]])
    part = replace(table, values=tuple(values), seconds=table.seconds[tuple(cut)], keys=None)
    if len(_DISTILLED) > 20_000:
        _DISTILLED.clear()
    _DISTILLED[(id(table), constants)] = (table, part)
    return part


_CONSTANTS: dict[tuple, tuple] = {}     # a lookup's point -> its coordinates that are numbers, as floats
_DISTILLED: dict = {}        # (id(table), the point's constants) -> (table, its part): tables are read-only
_ENTRIES: dict = {}          # (id(part), roof) -> (part, its JSON)


def lookup_table(table: Table, roof: tuple, rate: float | None = None) -> dict:
    """A lookup node's table as JSON: the axes' names and values, the latencies over them in µs as
    the table file writes them (flat, last axis fastest; seconds = µs x 1e-6, as :func:`load_table`
    reads them), the roofline as a formula tree of the axes (:func:`roof_expr`), and what the
    per-op tooltip names (the kernel and source, the file); with ``rate`` (a distilled part: its
    whole table's :func:`peak_rate`) that rate, the out-of-range floor's."""
    found = _ENTRIES.get((id(table), roof, rate))
    if found is not None and found[0] is table:
        return found[1]
    entry = {"axes": list(table.axes), "values": [[_short(x) for x in v.tolist()] for v in table.values],
             "us": [_short(float(f"{x * 1e6:.12g}")) for x in table.seconds.reshape(-1).tolist()],
             "roof": _roof_tree(roof), "name": f"{table.name} ({table.source})", "path": table.path}
    if rate is not None:
        entry["rate"] = float(rate)
    if len(_ENTRIES) > 20_000:
        _ENTRIES.clear()
    _ENTRIES[(id(table), roof, rate)] = (table, entry)
    return entry


@functools.lru_cache(maxsize=4096)
def _roof_tree(roof: tuple) -> list:
    return to_tree(roof_expr(roof))


def _short(x: float):
    """A whole float as an int (shorter JSON; the same number)."""
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def expected_tree(step, lookup: Lookup, member_ops: dict, table_ref: Callable[[dict], object]) -> list:
    """The step's expected time as a formula tree of the point and its bound :data:`T_SOL`, by the
    module's rule (what :func:`expected_steps` gives at any point): where a table applies, max(calls
    x the faster table's time, the bound); elsewhere the bound / :data:`DEFAULT_EFFICIENCY`. A
    table is a ``lookup`` node ``["lookup", ref, coordinate trees...]``, ``ref`` what ``table_ref``
    gives for the :func:`lookup_table` of its distilled table (:func:`distil`; the file's table index)."""
    spec = step_spec(step, lookup, member_ops)
    return spec_tree(spec, float(step.repeat) if spec is not None else 0.0, table_ref)


def spec_tree(spec: Spec | None, repeat: float, table_ref: Callable[[dict], object]) -> list:
    """:func:`expected_tree` of a step whose :func:`step_spec` is ``spec`` and whose calls are
    ``repeat``: the tree reads nothing else of the step (so steps of one spec and repeat share
    one tree; ``repeat`` is unused where ``spec`` is None)."""
    fallback = ["/", T_SOL, DEFAULT_EFFICIENCY]
    if spec is None:
        return fallback
    point = [_tree(e) for e in spec.point]
    nodes = [["lookup", table_ref(lookup_table(distil(t, spec.point), spec.roof, peak_rate(t, _roof(spec.roof)))),
              *point] for t in spec.tables]
    time = nodes[0] if len(nodes) == 1 else ["min", *nodes]
    applies = ["and", [">", T_SOL, 0], *([">", p, 0] for p in point), _tree(spec.applies)]
    return ["pw", [["max", ["*", repeat, time], T_SOL], applies], [fallback, 1]]


_TREES: dict = {}       # a coordinate or condition of a Spec -> its formula tree (read-only, shared)


def _tree(expr) -> object:
    """``to_tree(expr)``, once per distinct expression: the specs of one step under every GPU, KV
    dtype and framework hold the same point (sympy compares structurally: equal expressions, equal
    trees). The trees are shared between the trees that hold them, which are only encoded."""
    found = _TREES.get(expr)
    if found is None:
        if len(_TREES) > 50_000:
            _TREES.clear()
        found = _TREES[expr] = to_tree(expr)
    return found


def node_lookup(tables: dict) -> Callable[[object, list], float]:
    """The ``lookup`` of :func:`engine.language.formula_tree.evaluate` for trees whose lookup nodes
    refer to ``tables`` (ref -> :func:`lookup_table`'s JSON): :func:`interpolate` of that table at
    the node's point under its roofline tree. This is the lookup node's meaning; static/js/formula.js
    mirrors it."""
    def lookup(ref, point: list) -> float:
        entry = tables[ref]
        axes = tuple(entry["axes"])
        values = tuple(np.asarray(v, dtype=float) for v in entry["values"])
        seconds = np.asarray(entry["us"], dtype=float).reshape([len(v) for v in values]) * 1e-6
        table = Table("", "", "", "", "", axes, values, seconds, entry["path"], entry["name"], rate=entry.get("rate"))

        def roof(*columns):
            return np.array([formula_tree.evaluate(entry["roof"], dict(zip(axes, p))) for p in zip(*columns)])
        return interpolate(table, tuple(point), roof)[0]
    return lookup


def resolve(asks: list[Ask]) -> None:
    """Interpolate every ask's points, each table once over the points of all the asks that read it
    under one roofline (:func:`interpolate_many`): the grid gathers thousands of asks of a few
    dozen points each, and an interpolation's cost is mostly per call."""
    by_table: dict[tuple, list] = {}
    for a in asks:
        a.found = [None] * len(a.tables)
        for i, table in enumerate(a.tables):
            by_table.setdefault((id(table), a.roof), (table, []))[1].append((a, i))
    for (_, roof), (table, users) in by_table.items():
        t, outside = interpolate_many(table, np.concatenate([a.points for a, _ in users]), _roof(roof))
        start = 0
        for a, i in users:
            cut = slice(start, start + len(a.points))
            a.found[i] = (t[cut], outside[cut])
            start += len(a.points)


@dataclass
class Gathered:
    """One program's expected times over its points before the lookups are resolved: every step
    at its bound / :data:`DEFAULT_EFFICIENCY`, ``asks`` the lookups of the steps a table covers."""

    times: np.ndarray                   # (kept steps, points)
    measured: np.ndarray
    t_sol: np.ndarray
    asks: list


def gather(plan, phase: str, batch, seq, ctx, tables: Tables, values: dict, keep=None) -> Gathered:
    """The lookups of a program's kept steps (``keep``: indices into its steps, default all) at the
    points (``batch``, ``seq``, ``ctx``: 1-D arrays), each step a table may cover at all the points
    at once; ``values``: the compiled program's evaluation there (engine.deploy.cost: ``t_sol``,
    ``flops``, ``comm_bytes``, each (steps, points))."""
    s = plan.structure
    steps = s.programs[phase].steps
    keep = list(range(len(steps)) if keep is None else keep)
    n = len(batch)
    t_sol = _rows(values["t_sol"], keep, n)
    out = Gathered(t_sol / DEFAULT_EFFICIENCY, np.zeros((len(keep), n), dtype=bool), t_sol, [])
    if not tables:
        return out
    lookup = Lookup(plan.gpu, s.options.framework, phase, tables, plan.options.kv_dtype, s.config, s.ev.bound,
                    s.moe_routing)
    members = member_ops(s, phase)
    covered = _covered(plan, phase, lookup, members, keep)
    if covered:
        dims = [symbols.dim(d) for d in symbols.SCENARIO_DIMS]     # (batch, seq, ctx)
        args = {d: np.broadcast_to(np.asarray(x, dtype=float), (n,)) for d, x in zip(dims, (batch, seq, ctx))}
        args[KV_BYTES] = np.full(n, float(plan.kv_bytes))
        values: dict = {}       # each coordinate's values at these points, once per expression
        for j in covered:
            step = steps[keep[j]]
            a = _ask(step, lookup, members, args, t_sol[j], j, values)
            if a is not None:
                out.asks.append(a)
    return out


def finish(g: Gathered, detail: bool = False) -> tuple[np.ndarray, np.ndarray, dict | None]:
    """A gathered program's expected times once :func:`resolve` ran: at a covered point the faster
    table's time x calls, never below the step's bound; point-major (expected seconds, measured?,
    with ``detail`` {src, table, nearest}: per row the source text, the table file and the
    measured points around the point, "" or ``bound / 0.7`` where no table covers it)."""
    times, measured = g.times.copy(), g.measured
    k, n = times.shape
    fallback = f"bound / {DEFAULT_EFFICIENCY:g}"
    text = {key: [[fallback if key == "src" else ""] * n for _ in range(k)] for key in ("src", "table", "nearest")} \
        if detail else None
    for a in g.asks:
        if len(a.found) == 1 and not detail:            # one table: its times (argmin's only choice)
            t = a.found[0][0]
        else:
            t_all = np.stack([t for t, _ in a.found])
            best = np.argmin(t_all, axis=0)                 # the faster table (the first of equals)
            t = t_all[best, np.arange(len(a.at))]
        times[a.row, a.at] = np.maximum(t * a.repeat, g.t_sol[a.row, a.at])
        measured[a.row, a.at] = True
        if detail:
            src, path, near = text["src"][a.row], text["table"][a.row], text["nearest"][a.row]
            for j, (p, point) in enumerate(zip(a.at.tolist(), a.points.tolist())):
                table = a.tables[best[j]]
                src[p], near[p] = _point_text(table, tuple(point), bool(a.found[best[j]][1][j]), a.shape)
                path[p] = table.path
    if detail:      # point-major, as the times: each point's steps in turn
        text = {key: list(itertools.chain.from_iterable(zip(*rows))) for key, rows in text.items()}
    return times.T.reshape(-1), measured.T.reshape(-1), text


_TEXTS: dict[tuple, tuple] = {}      # (id(table), point, outside?, shape) -> (table, src, nearest)


def _point_text(table: Table, point: tuple, outside: bool, shape: str) -> tuple[str, str]:
    """(the per-op table's ``expected_src`` and ``expected_nearest`` of a lookup of ``table`` at
    ``point`` (its coordinates as floats), outside its measured range or not, of an MoE table's
    ``shape`` text), once per distinct (table, point, outside, shape): the grid's op points repeat
    the same coordinates (a shard of a matmul, a message size) under many steps, configs and GPUs."""
    key = (id(table), point, outside, shape)
    found = _TEXTS.get(key)
    if found is None or found[0] is not table:
        where = " ".join(f"{ax}={x:.0f}" for ax, x in zip(table.axes, point)) + shape
        if len(_TEXTS) > 100_000:
            _TEXTS.clear()
        found = _TEXTS[key] = (table, f"{table.name} ({table.source}) at {where}{', extrapolated' if outside else ''}",
                               nearest(table, point) + shape)
    return found[1], found[2]


def member_ops(structure, phase: str) -> dict[str, str]:
    """Step uid -> op of the phase's unfused program (what a fused step's members are); one dict
    per program object (structures of other regimes share their unfused programs), which callers
    only read, so :func:`step_spec` can key on it by identity."""
    program = structure.unfused[phase]
    found = _MEMBERS.get(id(program))
    if found is None or found[0] is not program:
        if len(_MEMBERS) > 20_000:
            _MEMBERS.clear()
        found = _MEMBERS[id(program)] = (program, {s.uid: s.op for s in program.steps})
    return found[1]


_MEMBERS: dict[int, tuple] = {}      # id(unfused program) -> (program, its member_ops)


_COVERED: dict[tuple, tuple] = {}


def _covered(plan, phase: str, lookup: Lookup, members: dict, keep) -> list[int]:
    """The positions in ``keep`` of the steps a table may cover (a kernel class with a table of
    this GPU and framework: the others are bound / the default efficiency at every point), once
    per program, GPU, framework, KV dtype and config (the grid asks the same again and again)."""
    program = plan.structure.programs[phase]
    steps = program.steps
    key = (id(program), id(lookup.tables), lookup.gpu.key, lookup.framework, phase, lookup.kv_dtype,
           lookup.config, len(keep), keep[0] if keep else -1, keep[-1] if keep else -1)
    found = _COVERED.get(key)
    if found is None or found[0] is not program or found[1] is not lookup.tables or found[3] != keep:
        if len(_COVERED) > 20_000:
            _COVERED.clear()
        out = []
        for j, i in enumerate(keep):
            step = steps[i]
            kernel = kernel_of(step, members, phase) if step.repeat.is_number else ""
            if kernel and any(k[0] == lookup.gpu.key and k[2] == kernel for k in lookup.tables):
                out.append(j)
        found = _COVERED[key] = (program, lookup.tables, out, list(keep))
    return found[2]


def _rows(value, keep: list[int], n: int) -> np.ndarray:
    """The kept steps' rows of an evaluation (steps, points) over the ``n`` points."""
    rows = np.asarray(value, dtype=float)[keep]
    return rows if rows.shape == (len(keep), n) else np.broadcast_to(rows, (len(keep), n))


def expected_steps(plan, phase: str, batch, seq, ctx, tables: Tables, values: dict,
                   keep=None, detail: bool = False) -> tuple[np.ndarray, np.ndarray, dict | None]:
    """Per kept step (``keep``: indices into the program's steps, default all) and point
    (``batch``, ``seq``, ``ctx``: 1-D arrays of the points), point-major like the per-op table:
    (expected seconds, measured?, with ``detail`` {src, table, nearest}: lists of text, else None).
    ``values``: the compiled program's evaluation at those points (engine.deploy.cost: ``t_sol``,
    ``flops``, ``comm_bytes``, each (steps, points)). :func:`gather`, :func:`resolve` and
    :func:`finish` of one program; the build runs the three over many programs at once
    (engine.deploy.plan.expected_phase_times_many), the same arithmetic per point."""
    g = gather(plan, phase, batch, seq, ctx, tables, values, keep)
    resolve(g.asks)
    return finish(g, detail)
