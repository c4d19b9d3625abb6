"""Which measured table covers a step, and at what point: engine.deploy.measured's rule per step.

Layer: engine.deploy. The rule (engine.deploy.measured's module doc: a step's kernel class, the
tables of its GPU, framework, dtype and shape, its point on their axes and where they apply) as a
:class:`Spec` per step and lookup (:func:`step_spec`); :mod:`engine.deploy.measured` evaluates specs
at the grid's points, :mod:`engine.deploy.measured_tree` writes them as the browser's formula trees.
The memos here are keyed by what each function reads (their docstrings say which); the tests of
tests/test_measured_memo.py and tests/test_grid_speed_memos.py hold them to hand values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import sympy   # annotations; imported where used (a stored deploy never loads sympy)

from engine.language.memo import remembered, remembered_for
from engine.language import symbols
from engine.deploy.interpolation import _roof
from engine.deploy.measured_tables import ATTENTION_DIMS, KERNELS, KEYED, MLA_KERNELS, MLA_SHAPE, Table, Tables

# the scenario dims' symbols, symbols.dim(...) where read (made on first use: symbols.dim is cached)

#: The expected time of an op no table covers: its bound / this. Not fitted: a round figure
#: below the GEMM tables' efficiency at decode sizes (their memory-bound GEMMs reach 60 to 90% of
#: HBM bandwidth on H100 and H200), standing for kernels nobody measured yet (norms,
#: elementwise, attention, MoE); docs/deployment.md "Expected time".
DEFAULT_EFFICIENCY = 0.7


def _step_totals(step):
    # engine.deploy.step_totals (sympy's) on first use: a structure read from a build's document
    # has its totals already
    from engine.deploy.step_totals import step_totals
    return step_totals(step)


def _linear(step, member_ops: dict) -> bool:
    """A dense matmul kernel: a ``linear`` step, or a fused step whose members all are linear."""
    if step.op == "linear" and step.kind == "compute":
        return True
    return step.kind == "fused" and not step.collective and bool(step.parts) and \
        _linear_uids(member_ops).issuperset(step.parts)


_LINEAR_UIDS: dict[int, tuple] = {}      # id(member_ops) -> (it, the uids of its linear ops)


def _linear_uids(member_ops: dict) -> frozenset:
    """The uids ``member_ops`` maps to ``linear``, once per ``member_ops`` object (its callers only
    read it; engine.deploy.measured.member_ops hands out one per program): a fused MoE step's parts
    are hundreds of experts' ops, tested in C against the set instead of one dict lookup each."""
    found = _LINEAR_UIDS.get(id(member_ops))
    if found is None or found[0] is not member_ops:
        if len(_LINEAR_UIDS) > 20_000:
            _LINEAR_UIDS.clear()
        found = _LINEAR_UIDS[id(member_ops)] = (member_ops, frozenset(u for u, op in member_ops.items() if op == "linear"))
    return found[1]


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
    one of the dims. Once per (dims object, tp, ep), all it reads (a model's bound dims are made
    once by its evaluation and never changed; the object is held beside the key, so its id names
    it): every MoE step of every group asks, and ``int`` of a sympy number is slow."""
    def make():
        if any(d not in bound for d in MOE_DIMS) or config.tp % config.ep:
            return None
        return tuple(int(bound[d]) for d in MOE_DIMS) + (config.tp // config.ep, config.ep)
    return remembered_for(_MOE_KEYS, bound, make, 10_000, key=(id(bound), config.tp, config.ep))


_MOE_KEYS: dict[tuple, tuple] = {}     # (id(bound dims), tp, ep) -> (the dims, _moe_key's answer)


def _sym(x) -> sympy.Expr:
    """A step's size as a sympy expression (an int or float as its exact sympy number; no text)."""
    import sympy
    if isinstance(x, sympy.Basic):
        return x
    return sympy.Integer(x) if isinstance(x, int) else sympy.Float(float(x))


def _attention_point(step, config, kernel: str) -> tuple | None:
    """(the attention table's point of a fused attention step, when the table applies), as
    expressions of the point (the module's rule), or None where it applies nowhere (context
    parallelism); a decode point with several query tokens per request has none (it applies
    where the step's local seq is 1)."""
    import sympy
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
    import sympy
    local = _local_axes(step)
    if _cp(config) > 1 or not {"batch", "seq", "n_heads"} <= set(local):
        return None
    batch, seq, heads = local["batch"], local["seq"], local["n_heads"]
    if kernel == "decode_mla":
        if step.dims.get("kv_len") != symbols.dim(symbols.CTX):
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
    import sympy
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
    import sympy
    out = {}
    for axis, groups in zip(step.out.axes, step.layout.shards):
        size = _sym(axis.size)
        ways = sympy.Integer(math.prod(g.size for g in groups))
        if type(size) is sympy.Integer:         # sympy.Min of two Integers: the smaller one
            ways = ways if ways <= size else size
        elif size.is_number:
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
            _step_totals(step)[0], step.repeat)


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
    return remembered(_GEMMS, _gemm_key(step), lambda: _gemm_point_of(step), 50_000)


def _gemm_point_of(step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr]:
    """:func:`_gemm_point` computed (its key's fields are all this reads)."""
    import sympy
    local = _local_axes(step)
    rows = list(local.items())[:-1]                  # the last output axis: the features
    m = sympy.Integer(1)
    for name, size in rows:
        if not (step.last_token and name == "seq"):
            m = m * size
    m = _at_least(m, 1)
    k = sympy.Float(float(_numeric_dims(step.dims)[-1]) / math.prod(g.size for g in step.layout.partial))
    flops = _step_totals(step)[0] / step.repeat
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
    (engine.deploy.step_functions.ARGS), and an MoE table's key as text. :func:`_ask` evaluates it at the
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


#: The kernel classes whose tables are measured per KV dtype (:func:`_tables_for` reads
#: ``lookup.kv_dtype`` for these only): the attention classes and the MLA cache kernels. A new
#: branch of :func:`_tables_for` that reads the KV dtype belongs here too; the per-step comparison
#: under both dtypes on real programs (tests/test_symb_thirteenth_pass.py) fails until it is.
KV_DTYPE_KERNELS = ("decode_mla", "prefill_mla")


def reads_kv_dtype(kernel: str) -> bool:
    """Whether :func:`step_spec` of a step of class ``kernel`` reads the lookup's KV dtype. For
    every other class the Spec is the same value under any KV dtype (the same tables, roof, point,
    condition and shape: :func:`_tables_for` picks them by GPU, framework, compute dtype and the
    model's dims), so its expected-time tree is too."""
    return kernel.endswith("_attention") or kernel in KV_DTYPE_KERNELS


_KV_STEPS: dict[tuple, tuple] = {}      # (id(program), id(member_ops), phase) -> (program, positions)


def kv_dtype_steps(program, member_ops: dict, phase: str) -> tuple[int, ...]:
    """The positions in ``program`` of the steps whose :func:`step_spec` reads the KV dtype
    (:func:`reads_kv_dtype` of their kernel class); once per program, ``member_ops`` object and
    phase (the key names all three; the entry holds ``program`` and ``member_ops``, so neither id is
    reused while it lives)."""
    return remembered_for(_KV_STEPS, program, lambda: (member_ops, tuple(
        i for i, st in enumerate(program.steps) if reads_kv_dtype(_kernel(st, member_ops, phase)))),
        20_000, key=(id(program), id(member_ops), phase))[1]


def step_spec(step, lookup: Lookup, member_ops: dict) -> Spec | None:
    """The step's :class:`Spec` by the module's rule, None where no table covers it (a kernel class
    without a table of this GPU, framework, dtype or shape); once per step object and what of the
    lookup it reads (the grid and the deploy export ask each step under every GPU, framework, KV
    dtype and config: the step's kernel class is derived once per step, and of the config only the
    context-parallel degree and an MoE table's key are read, of the model's dims only that key and
    whether it has the MLA tables' shape)."""
    import sympy
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
        point = (symbols.dim(symbols.BATCH) * symbols.dim(symbols.SEQ),)
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
    import sympy
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
            _step_totals(step)[2] / step.repeat / sympy.Float(float(_roof((kernel,))(step.ranks, 1.0)))
        got = (_sym(step.ranks), size), sympy.true
    if len(_POINTS) > 50_000:
        _POINTS.clear()
    _POINTS[key] = (step, got)
    return got
