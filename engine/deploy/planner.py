"""Deployment plans: a model under a parallel config on a GPU type -> compiled device programs.

Layer: engine.deploy. :func:`plan` does the structural work once per (model, GPU, config, options):
placement propagation with communication insertion (:func:`place`) and fusion for prefill and
decode, under the numeric binding (numbers in the scenario symbols) and the symbolic one (formulas
over dims and parallel degrees), then compiles the numeric programs for vectorized evaluation
(:func:`build_structure`; GPU-free, so the grid build shares one structure between GPUs of the
same arch and domain). The types it builds are :mod:`engine.deploy.structure`'s; the
:class:`~engine.deploy.plan.Plan` it returns and :meth:`Plan.at` (a scenario point) are
:mod:`engine.deploy.sol`'s, which never imports this module; the grid build evaluates arrays of
points with the same functions.

Conventions (also on the methodology page):
* ``batch`` is the number of requests one model replica (``tp * pp * cp`` GPUs) holds; ``dp``
  replicas multiply GPUs, not per-GPU numbers.
* prefill runs the whole prompt of ``batch`` requests (TTFT); decode produces one token for each of
  ``batch`` requests at the last context position ``input + output`` (TPOT, an upper bound over
  the generation); logits are computed for the last position only in prefill.
* pipeline: ``k = min(pp, batch)`` micro-batches are in flight; programs are evaluated at one
  micro-batch, whose path through all stages is a decode round (TPOT); TTFT is that path times
  ``(pp + k - 1) / pp``. Memory: the weight-heaviest stage's weights plus the cache of the stage
  holding the most (an upper bound when they differ). The main stack is deployed, and with
  speculative decoding (``Options.mtp_tokens`` = k > 0) the ``mtp`` stack too: its weights and
  cache sit on the last stage, and the decode program is the main stack verifying k + 1 tokens
  per request followed by k draft passes of one MTP module at one token per request, and prefill
  adds the first module's pass over the prompt (:func:`with_drafts`).
"""
from __future__ import annotations

from collections import Counter
import copy
from dataclasses import replace
from typing import Mapping

import sympy

from engine.language import checkpoints, kv, quantities, storage, streams as stream_rules, symbols
from engine.language.api import Evaluation
from engine.deploy.cost import KV_BYTES, compile_program
from engine.language.errors import SpecError
from engine.language.ops import OPS
from engine.deploy.fusion import fuse, match, note_extension
from engine.deploy.fusion_table import FusionTable, admission_of, moe_routing_of, overlap_default, reserve_bytes
from engine.deploy.expert_comm import A2APolicy
from engine.deploy.transport import transport
from engine.deploy.hardware import GPU
from engine.deploy.parallel import Mesh, ParallelConfig, enumerate_configs, is_count
from engine.language.shapes import Tensor
from engine.deploy.placement import Placer, phase_rows, shard_unit
from engine.deploy.placement_arith import _add, _div, _mul
from engine.deploy.device_program import ZERO, DeviceTypes, Layout, Program, Step, step_with
from engine.deploy.plan import Plan
from engine.deploy.structure import (ACT_DTYPE_BYTES, LENGTH, MAX_TOKENS, MTP_STACK, PHASES, Options, Scenario, Structure,
                                     option_where, tokens_per_device)
from engine.deploy.replay import _LoggedMesh, _PhasePlacer, _ReplayPlacer


def check(ev: Evaluation, config: ParallelConfig) -> list[str]:
    """Why ``config`` cannot run this model (empty when it can)."""
    problems = config.problems()
    if problems:
        return problems
    mesh = Mesh(config, domain=1 << 30)
    rows = [r for r in ev.numeric.rows.values() if r.stack == "main"]
    dims_table = ev.corpus.dims
    seen = set()
    for region, world, unit, count in _sharded_axes(ev):
        group = mesh.world_group(world, region)
        if group is not None:
            if isinstance(count, Exception):
                raise count
            if (unit, count, group.name) in seen:
                continue
            seen.add((unit, count, group.name))
            replicable = dims_table[unit].replicate
            if count % group.size and not (replicable and group.size % count == 0):
                what = {"attn_tp": "attention TP (tp / dp_attn)", "moe_tp": "expert TP (tp / ep)"}.get(
                    group.name, group.name)
                where = " (experts)" if region == "experts" else ""
                problems.append(f"{unit}{where} = {count} is not divisible by {what} = {group.size}")
    experts = [r for r in rows if r.role == "experts" and r.instances != 1]
    if config.ep > 1 and not experts:
        problems.append(f"ep = {config.ep} but the model has no routed experts")
    for row in experts[:1]:
        count = int(row.instances)
        if count % config.ep:
            problems.append(f"n_experts = {count} is not divisible by ep = {config.ep}")
    layers = int(quantities.n_layers(ev.numeric))
    if layers and config.pp > layers:
        problems.append(f"pp = {config.pp} is more than the {layers} layers")
    if config.cp > 1 and config.cp_kind == "ulysses":
        for dim, info in dims_table.items():   # query heads move to the sequence's GPUs
            if info.kind == "heads" and not info.replicate and dim in ev.numeric.values:
                heads = int(ev.numeric.values[dim])
                if heads % (config.attn_tp * config.cp):
                    problems.append(f"Ulysses needs {dim} = {heads} divisible by attention TP x cp = "
                                    f"{config.attn_tp * config.cp}")
    return problems


_SHARDED: list = []      # [(numeric analysis, its sharded axes)]: the last model checked


def _sharded_axes(ev: Evaluation) -> list[tuple[str, str, str, int]]:
    """(region, world, shardable unit, units in the axis) of every weight axis of the main stack
    that a parallel world shards, in row order. Config-free, so computed once per model and read
    by every config :func:`check` looks at (the grid checks hundreds; the count is a sympy subs)."""
    if _SHARDED and _SHARDED[0][0] is ev.numeric:
        return _SHARDED[0][1]
    out = []
    for row in ev.numeric.rows.values():
        if row.stack != "main":
            continue
        region = "experts" if row.role == "experts" else "default"
        for param, world in row.weight_axes.items():
            name = row.dim_names[param]
            unit = shard_unit(name, ev.corpus.dims)
            if unit is not None:
                try:
                    count = _unit_count(row, name, unit, ev.numeric.values)
                except Exception as exc:     # raised where a config shards it, as before
                    count = exc
                out.append((region, world, unit, count))
    _SHARDED[:] = [(ev.numeric, out)]
    return out


def configs_for(ev: Evaluation, n_gpus: int, **limits) -> tuple[list[ParallelConfig], list[tuple]]:
    """The legal configs of ``ev`` on ``n_gpus`` GPUs, and the rejected ones with their reasons."""
    moe = any(r.role == "experts" for r in ev.numeric.rows.values())
    legal, rejected = [], []
    for config in enumerate_configs(n_gpus, moe=moe, **limits):
        problems = check(ev, config)
        if problems:
            rejected.append((config, problems))
        else:
            legal.append(config)
    return legal, rejected


def _unit_count(row, name: str, unit: str, values: Mapping[str, sympy.Expr]) -> int:
    """How many units of ``unit`` an axis named ``name`` holds in this row (component-local
    bindings such as an expert's ``d_ff: d_ff_expert`` keep the name but change the size)."""
    from engine.language import expr as exprs
    axis = next(a for axes in (row.out.axes, *(t.axes for t in row.in_shapes), *(l.axes for l in row.leaves))
                for a in axes if a.name == name)
    values = {**values, **row.name_values}   # the names' values where the row was walked
    parsed = exprs.evaluate(name, exprs.Scope({k: symbols.dim(k) for k in {*values, unit}}))
    per_unit = (parsed / symbols.dim(unit)).subs({symbols.dim(k): v for k, v in values.items()})
    return int(axis.size / per_unit)


def weight_format_model(model, corpus, name: str):
    """The spec stored as weight format ``name``: ``checkpoint`` (its own published storage), a
    published checkpoint's format or Hub id (its REAL storage: that checkpoint's quant context,
    engine.language.checkpoints), or a quant scheme applied to every matrix (a what-if, not published)."""
    if name == checkpoints.OWN:
        return model
    found = checkpoints.find(model, name)
    if found is not None:
        return checkpoints.variant(model, found)
    if name not in corpus.schemes:
        published = ", ".join(checkpoints.formats(model))
        raise SpecError(option_where("--weight-format"), f"unknown weight format {name!r}",
                        f"use a published checkpoint of {model.model_id} ({published}) or a quant scheme for "
                        "every matrix: " + ", ".join(sorted(corpus.schemes)))
    return replace(model, quant={"*": name})


_WEIGHTS: list = []      # [(numeric, symbolic analysis, {weight format: row -> stored leaves})]: the last model


def _weights_fn(ev: Evaluation, options: Options):
    corpus, model = ev.corpus, ev.model
    override = None
    if options.weight_format != "checkpoint":
        override = weight_format_model(model, corpus, options.weight_format)
    # a row's stored leaves do not depend on the config: one cache per model and weight format
    if not (_WEIGHTS and _WEIGHTS[0][0] is ev.numeric and _WEIGHTS[0][1] is ev.symbolic):
        _WEIGHTS[:] = [(ev.numeric, ev.symbolic, {})]
    cache: dict[tuple, list] = _WEIGHTS[0][2].setdefault(options.weight_format, {})

    spec = override or model
    quant = (id(corpus), repr(sorted(spec.quant.items())))

    def weights(row):
        # keyed by the row object: the entry holds the row, so its id cannot be reused by a later
        # row (the playground splices short-lived rows into an evaluation's plans)
        key = (row.uid, id(row))
        if key not in cache or cache[key][0] is not row:
            # leaf_storage reads the leaves, the instances, stacking and (numeric) the row's place,
            # and the spec's quant: rows equal in those store alike (the playground places the same
            # filler's rows in many models)
            shared = (row.leaves, row.instances, row.stacked, quant)
            found = _LEAF_STORAGE.get(shared)
            if found is None or found[0] is not corpus:
                numeric = not any(isinstance(l.numel, sympy.Expr) and l.numel.free_symbols for l in row.leaves)
                found = (corpus, [(leaf, *storage.leaf_storage(row, leaf, spec, corpus, numeric))
                                  for leaf in row.leaves], numeric)
                if not numeric:        # a numeric row's storage also names its place in errors
                    if len(_LEAF_STORAGE) > 50_000:
                        _LEAF_STORAGE.clear()
                    _LEAF_STORAGE[shared] = found
            cache[key] = (row, found[1])
        return cache[key][1]
    return weights


_LEAF_STORAGE: dict[tuple, tuple] = {}    # (leaves, instances, stacked, quant) -> (corpus, symbolic leaf storage)


def _decider(bound: Mapping[str, sympy.Expr]):
    subs = {symbols.dim(k): v for k, v in bound.items()}
    seen: dict[sympy.Expr, int | None] = {}     # the same sizes are decided for every config and phase

    def decide(value: sympy.Expr) -> int | None:
        if isinstance(value, int):
            return value
        if value.is_number:
            return int(value)
        if value not in seen:
            found = value.subs(subs)
            seen[value] = int(found) if found.is_number else None
        return seen[value]
    decide.seen = seen       # what was decided on which expression (the playground's validity conditions)
    return decide


_DECIDERS: list = []     # [(numeric analysis, its decider)]: the last model placed


def _model_decider(ev: Evaluation):
    """:func:`_decider` of the model's numeric values, one per model (the grid places it under
    hundreds of configs; the decisions only depend on the dims)."""
    if not (_DECIDERS and _DECIDERS[0][0] is ev.numeric):
        _DECIDERS[:] = [(ev.numeric, _decider(ev.bound))]
    return _DECIDERS[0][1]


def _stage_of_layers(ev: Evaluation, pp: int) -> dict[str, list[int]]:
    """Template component uid -> its layer count on each pipeline stage."""
    total = _layer_count(ev.numeric)
    out = {}
    for comp in ev.numeric.components.values():
        if comp.template and comp.stack == "main":
            counts = Counter(stream_rules.stage_of(i, pp, total) for i in comp.layers)
            out[comp.uid] = [counts.get(s, 0) for s in range(pp)]
    return out


#: (id(numeric analysis), pp, row uids) -> (the analysis, :func:`_stage_rows` of them)
_STAGE_ROWS: dict[tuple, tuple] = {}


def _stage_rows(stored: Mapping[str, sympy.Expr], ev: Evaluation, pp: int) -> list[list[tuple[str, sympy.Expr]]]:
    """Per stage: (row uid, layers of it on the stage). Layers go to stages in order; rows outside
    the layer stack go to the first (embedding) or the last (everything after the stack) stage.

    A function of the numeric analysis, ``pp`` and the uids of ``stored`` (in order), not of
    their values: every placement of a model stores the same rows, so it is computed once per
    pipeline degree (the memo holds the analysis; callers only read the lists)."""
    key = (id(ev.numeric), pp, tuple(stored))
    hit = _STAGE_ROWS.get(key)
    if hit is None or hit[0] is not ev.numeric:
        if len(_STAGE_ROWS) > 256:       # the pipeline degrees of a few models
            _STAGE_ROWS.clear()
        hit = _STAGE_ROWS[key] = (ev.numeric, _stage_rows_of(stored, ev, pp))
    return hit[1]


def _stage_rows_of(stored: Mapping[str, sympy.Expr], ev: Evaluation, pp: int) -> list[list[tuple[str, sympy.Expr]]]:
    per_template = _stage_of_layers(ev, pp)
    stages: list[list] = [[] for _ in range(pp)]
    for uid in stored:
        row = ev.numeric.rows[uid]
        template = next((t for t in per_template if uid.startswith(t + "/")), None)
        if template is not None:
            for s, n in enumerate(per_template[template]):
                if n:
                    stages[s].append((uid, sympy.Integer(n) if pp > 1 else row.repeat))
        else:
            stages[0 if row.role == "embedding" else pp - 1].append((uid, row.repeat))
    return stages


def mtp_modules(ev: Evaluation) -> int:
    """MTP modules of the model: the layers of its ``mtp`` stack's templates (one draft token each)."""
    return sum(len(c.layers) for c in ev.numeric.components.values() if c.template and c.stack == MTP_STACK)


def validate_options(options: Options, ev: Evaluation | None = None) -> None:
    if options.kv_dtype not in kv.KV_DTYPE_BYTES:
        raise SpecError(option_where("--kv-dtype"), f"unknown KV dtype {options.kv_dtype!r}",
                        "use one of: " + ", ".join(kv.KV_DTYPE_BYTES))
    if options.act_dtype not in ACT_DTYPE_BYTES:
        raise SpecError(option_where("--act-dtype"), f"unknown activation dtype {options.act_dtype!r}",
                        "use one of: " + ", ".join(ACT_DTYPE_BYTES))
    if not 0 < options.hbm_fraction <= 1:
        raise SpecError(option_where("--hbm-fraction"), f"{options.hbm_fraction} is not in (0, 1]", "e.g. 0.9")
    if not is_count(options.prefill_tokens, 1, MAX_TOKENS):
        raise SpecError(option_where("--prefill-tokens"), f"{options.prefill_tokens!r} is not a token count",
                        "e.g. --prefill-tokens 8192 (vLLM's max_num_batched_tokens)")
    k, a = options.mtp_tokens, options.mtp_acceptance
    if not is_count(k, 0, 64):
        raise SpecError(option_where("--mtp"), f"{k!r} is not a number of draft tokens",
                        "write --mtp K with K a whole number from 0 (off) to the model's MTP modules, e.g. --mtp 1")
    if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1:
        raise SpecError(option_where("--acceptance"), f"{a!r} is not an acceptance rate in [0, 1]",
                        "write --acceptance A with 0 <= A <= 1, e.g. --acceptance 0.85 (DeepSeek-V3's reported rate)")
    if ev is not None and k:
        modules = mtp_modules(ev)
        if k > modules:
            has = f"has {modules} MTP module(s)" if modules else "has no MTP stack"
            raise SpecError(option_where("--mtp"), f"{ev.model.model_id} {has}; --mtp {k} needs one per draft token",
                            f"write --mtp {modules}" if modules else "leave out --mtp (or write --mtp 0) for this model")


def place(ev: Evaluation, config: ParallelConfig, domain: int, options: Options, symbolic: bool,
          stack: str = "main") -> dict[str, tuple[Program, Placer]]:
    """Placement with communication, per phase, under one binding (no fusion), of one stack's rows
    (``main``, the served model; the model document also places its other stacks, e.g. ``mtp``,
    for their per-block bytes)."""
    analysis = ev.symbolic if symbolic else ev.numeric
    out = {}
    for phase in PHASES:
        program, placer = _placed_stage(ev, config, domain, options, symbolic, stack, phase)
        out[phase] = (_with_pipeline(program, placer), placer)
    if stack == "main" and options.mtp_tokens:
        drafts = place(ev, config, domain, replace(options, mtp_tokens=0), symbolic, MTP_STACK)
        out = with_mtp(out, drafts, analysis, options.mtp_tokens)
    return out


#: (id(ev), stage config, stage domain, act dtype, weight format, symbolic, stack, phase) ->
#: (ev, program, placer) of :func:`_placed_stage`.
_STAGES: dict[tuple, tuple] = {}


def _placed_stage(ev: Evaluation, config: ParallelConfig, domain: int, options: Options, symbolic: bool,
                  stack: str, phase: str) -> tuple[Program, Placer]:
    """One phase's placed program before pipeline stages, and its placer (with ``config``'s mesh).

    Placing an op reads the TP, EP, DP-attention and CP groups and whether a group's ranks fit in
    one scale-up domain; never the pipeline degree (``_with_pipeline`` adds the stage hops) nor
    data parallelism. Every group spans at most tp x cp consecutive ranks, so a domain of
    min(domain, tp x cp) takes every link decision alike. Configs that differ only in pp or dp
    (tp8, tp8-pp2 ... tp8-pp16: most of a large model's configs) therefore place once."""
    stage = replace(config, pp=1, dp=1, gpus_per_node=None)
    key = (id(ev), stage, min(domain, config.tp * config.cp), options.act_dtype, options.weight_format,
           symbolic, stack, phase)
    hit = _STAGES.get(key)
    if hit is None or hit[0] is not ev:
        if len(_STAGES) > 2048:      # the configs of one model at a time, roughly
            _STAGES.clear()
        analysis = ev.symbolic if symbolic else ev.numeric
        types = DeviceTypes(ACT_DTYPE_BYTES[options.act_dtype], KV_BYTES)
        # decode repeats the rows the prefill placement of this key placed alike (_PhasePlacer)
        prefill = _STAGES.get(key[:-1] + ("prefill",)) if phase == "decode" else None
        prefill = prefill[2] if prefill is not None and prefill[0] is ev and prefill[2].record else None
        mesh = prefill.mesh if prefill is not None else _LoggedMesh(stage, key[2], symbolic)
        placer = _PhasePlacer(analysis, mesh, phase, ev.corpus.dims, _weights_fn(ev, options), types,
                              _model_decider(ev), prefill=prefill,
                              library=_library(ev, stage, options, symbolic, stack, phase))
        if prefill is not None:      # split factors and local sizes: phase-free (as place_symbolic shares)
            placer._factors, placer._locals, placer._units = prefill._factors, prefill._locals, prefill._units
        hit = _STAGES[key] = (ev, placer.run(phase_rows(analysis, phase, stack)), placer)
        if prefill is not None:      # read once (decode is placed once per key); copies of the
            prefill.record.clear()   # prefill placer (other configs' meshes) hold the same dict
            prefill.record = None
    program, placer = hit[1], hit[2]
    if placer.mesh.config != config or placer.mesh.domain != domain:
        placer = copy.copy(placer)   # the same placement, under this config's mesh (pp, domain)
        placer.mesh = Mesh(config, domain, symbolic)
    return program, placer


#: (id(ev), act dtype, weight format, symbolic, stack, phase, tp, cp kind) -> (ev, {row uid: [records]}):
#: what placing each row did in the placements of other stage configs (:class:`_PhasePlacer`).
_LIBRARIES: dict[tuple, tuple] = {}


def _library(ev: Evaluation, stage: ParallelConfig, options: Options, symbolic: bool, stack: str,
             phase: str) -> dict:
    """The records a placement of ``stage`` may repeat rows from: those of the model's other stage
    configs in the same phase, binding, options and stack (what a placer reads besides its mesh),
    and the same TP degree and CP kind (the two mesh fields rules read directly, ``groups["tp"]``
    and ``config.cp_kind``, rather than through the mesh's methods, whose answers are recorded)."""
    key = (id(ev), options.act_dtype, options.weight_format, symbolic, stack, phase, stage.tp, stage.cp_kind)
    hit = _LIBRARIES.get(key)
    if hit is None or hit[0] is not ev:
        if len(_LIBRARIES) > 64:        # a few models' bindings and degrees
            _LIBRARIES.clear()
        hit = _LIBRARIES[key] = (ev, {})
    return hit[1]


def with_mtp(main: dict[str, tuple[Program, Placer]], drafts: dict[str, tuple[Program, Placer]], analysis,
             k: int) -> dict[str, tuple[Program, Placer]]:
    """The main stack's placements (:func:`place`, per phase) with ``k`` MTP draft tokens added from
    the MTP stack's (``place(..., stack=MTP_STACK)``): decode drafts ``k`` tokens (:func:`with_drafts`);
    prefill runs the first MTP module over the prompt (its KV cache, the first draft) whatever ``k``.
    The grid's export (engine.batch.deploy_export) builds its k = 1 structures from this too."""
    return {"decode": (with_drafts(main["decode"][0], drafts["decode"][0], analysis, k), main["decode"][1]),
            "prefill": (with_drafts(main["prefill"][0], drafts["prefill"][0], analysis, 1, one_token=False),
                        main["prefill"][1])}


def with_drafts(main: Program, mtp: Program, analysis, k: int, one_token: bool = True) -> Program:
    """The program of speculative decoding with k MTP draft tokens. Decode: the main stack's steps
    (evaluated at seq = k + 1: the last accepted token and the k drafts it verifies), then k draft
    passes, each one MTP module at one token per request. A pass runs one layer of the stack's
    layer templates (draft i uses module i, as vLLM's and SGLang's MTP drafters do) and its other
    steps once, so each step's calls are ``repeat x k / layers`` inside a template and ``repeat x
    k`` outside. With ``one_token`` the draft steps are marked ``last_token`` so their totals take
    seq = 1 whatever the step's seq (:func:`engine.deploy.cost.step_totals`); without it (prefill,
    k = 1) the first module runs over the same tokens as the main stack, as the drafters' first
    pass over new tokens does. Layouts and stored weights of both stacks are kept (weights and KV
    of the MTP stack are counted from them). The deploy page applies this rule in the browser
    (static/js/deploy_eval.js: k times the exported k = 1 draft steps, engine.batch.deploy_export):
    a change here changes there too; tests/test_site_mtp.py and tests/test_mtp_export.py hold them
    equal."""
    return replace(main, steps=main.steps + _draft_steps(mtp, analysis, k, one_token),
                   layouts={**mtp.layouts, **main.layouts}, stored={**main.stored, **mtp.stored})


#: (id(MTP program), id(analysis), k, one_token) -> (program, analysis, its draft steps)
_DRAFT_STEPS: dict[tuple, tuple] = {}


def _draft_steps(mtp: Program, analysis, k: int, one_token: bool) -> tuple[Step, ...]:
    """:func:`with_drafts`' draft steps, once per placed MTP program: configs that differ only in
    what the MTP stack's placement does not read (pp, dp) share that program object, and the grid's
    export asks for every one of them."""
    key = (id(mtp), id(analysis), k, one_token)
    hit = _DRAFT_STEPS.get(key)
    if hit is not None and hit[0] is mtp and hit[1] is analysis:     # (a freed object's id can recur)
        return hit[2]
    templates = {c.uid: c.repeat for c in analysis.components.values() if c.template and c.stack == MTP_STACK}
    steps = []
    for s in mtp.steps:
        if s.kind == "input":
            continue
        layers = next((n for uid, n in templates.items() if s.uid.startswith(uid + "/")), None)
        repeat = s.repeat * k if layers is None else s.repeat * k / layers
        steps.append(step_with(s, repeat=repeat, last_token=s.last_token or one_token))
    if len(_DRAFT_STEPS) > 256:           # the configs of one model at a time, roughly (it holds them)
        _DRAFT_STEPS.clear()
    _DRAFT_STEPS[key] = (mtp, analysis, tuple(steps))
    return _DRAFT_STEPS[key][2]


def build_structure(ev: Evaluation, config: ParallelConfig, options: Options, domain: int,
                    fusion: FusionTable | None, gpu: GPU, tokens: Mapping[str, int | None],
                    placed: tuple | None = None, memo: dict | None = None, compile: bool = True) -> Structure:
    """Fuse (rules decided for ``gpu``'s arch and ``tokens`` per device) and compile placed programs.

    ``placed`` reuses (numeric, symbolic) placements of the same (model, config, domain, options);
    ``memo`` (a dict the caller keeps, e.g. :class:`engine.deploy.structure_cache.StructureCache`'s)
    reuses fused and compiled programs across structures of those placements (:func:`_fused`).
    ``compile=False`` leaves ``compiled`` empty: for a structure only read for its programs, formulas
    and memory (the deploy page's export of MTP drafts), never evaluated at a point."""
    numeric, symbolic = placed or (place(ev, config, domain, options, False), place(ev, config, domain, options, True))
    programs, formulas, compiled = {}, {}, {}
    a2a = fusion.a2a if fusion else None
    for phase in PHASES:
        num, sym = numeric[phase][0], symbolic[phase][0]
        found = match(num, fusion, gpu, config, phase, tokens.get(phase)) if fusion else []
        programs[phase], compiled[phase] = _fused(num, found, compile, memo, a2a)
        # without a symbolic placement (the numeric one stands in) the formulas are the programs
        formulas[phase] = programs[phase] if sym is num else _fused(sym, found, False, memo, a2a)[0]
    weights, weight_formula, kv_dev = _memory(ev, config, options, numeric, symbolic)
    if not options.overlap:             # the framework's own schedule overlap (its table's default)
        options = replace(options, overlap=overlap_default(fusion))
    elif options.overlap != "none" and options.overlap not in ((fusion.overlap or {}) if fusion else {}):
        raise SpecError(option_where("--overlap"), f"framework {options.framework!r} declares no {options.overlap} overlap",
                        "leave out --overlap, or use a framework whose corpus/fusion table lists it (sglang)")
    return Structure(ev, config, options, domain, programs, formulas,
                     # unfused: before kernel fusion, the framework's all-to-all library still applies
                     {p: transport(numeric[p][0], a2a) for p in PHASES}, {p: transport(symbolic[p][0], a2a) for p in PHASES},
                     compiled if compile else {}, weights, weight_formula, kv_dev, reserve_bytes(fusion, config),
                     admission_of(fusion), moe_routing_of(fusion))


def _fused(program, found: list, compile_it: bool, memo: dict | None, a2a: A2APolicy | None = None) -> tuple:
    """``fuse(program, found)`` with its expert all-to-alls priced under ``a2a``
    (:func:`engine.deploy.transport.transport`) and (when asked) its compiled form, once per placed
    program, set of matches and policy in ``memo`` ((id(program), matches, compiled?, policy) ->
    (program, fused, compiled or None)):
    structures of other regimes, arch classes or frameworks often fuse one phase alike (a prefill
    beyond every token limit, a phase no arch-bound rule reaches), and fusing and compiling are pure
    functions of the program and the matches."""
    key = (id(program), tuple(found), compile_it, a2a)
    hit = memo.get(key) if memo is not None else None
    if hit is not None and hit[0] is program:
        return hit[1], hit[2]
    fused = transport(fuse(program, found), a2a)
    out = (fused, compile_program(fused) if compile_it else None)
    if memo is not None:
        memo[key] = (program, *out)
    return out


_MEMORY: dict[tuple, tuple] = {}     # placement identity -> (the placements, their memory figures)


def _memory(ev: Evaluation, config: ParallelConfig, options: Options, numeric: dict, symbolic: dict) -> tuple:
    """Weights on the fullest pipeline stage (bytes, formula) and KV per request per device: they
    depend on the placements only, not on fusion, so structures sharing placements (every
    framework, fusion signature and token regime of a config) share them; computed once."""
    key = (id(numeric["prefill"][0]), id(numeric["decode"][0]), id(symbolic["prefill"][0]), config.pp,
           options.mtp_tokens)
    found = _MEMORY.get(key)
    if found is not None and found[0][0] is numeric and found[0][1] is symbolic:
        return found[1]
    # memory: the fullest pipeline stage (weights are stored as the prefill placement says)
    # (the main stack's rows: with MTP drafting the programs also hold the MTP stack's, counted below)
    stored = {u: v for u, v in numeric["prefill"][0].stored.items() if ev.numeric.rows[u].stack == "main"}
    sym_stored = symbolic["prefill"][0].stored
    stages = _stage_rows(stored, ev, config.pp)
    # sympy.Add(*terms) flattens once; sum() would re-flatten a growing Add at every term
    # (the products through placement's memo: configs of one stage placement and pipeline degree
    # multiply the same stored bytes by the same layer counts)
    per_stage = [_stage_bytes(stored, rows) for rows in stages]
    # speculative decoding: the whole MTP stack (every module, as frameworks load it) on the last stage
    # (a row that shares a main-stack tensor, e.g. MiMo's head, stores nothing of its own)
    mtp = [u for u in numeric["decode"][0].stored if ev.numeric.rows[u].stack == MTP_STACK
           and not ev.numeric.rows[u].shares] if options.mtp_tokens else []
    mtp_weights = sympy.Add(*(numeric["decode"][0].stored[u] * ev.numeric.rows[u].repeat for u in mtp))
    per_stage[-1] += mtp_weights
    worst = max(range(config.pp), key=lambda s: float(per_stage[s]))
    weight_formula = _sum(tuple(_mul(sym_stored[u], n if config.pp > 1 else ev.symbolic.rows[u].repeat)
                                for u, n in stages[worst]))
    if worst == config.pp - 1:
        weight_formula += sympy.Add(*(symbolic["decode"][0].stored[u] * ev.symbolic.rows[u].repeat for u in mtp))
    # KV: the stage holding the most cache, which in a hybrid stack need not be the weight-heaviest
    # one (a stage of only Mamba layers keeps fixed states, one with attention grows with context);
    # weights of the heaviest stage + cache of the fullest is an upper bound of any one stage's need
    per_stage_kv = [_kv_per_device(ev, numeric["decode"][0], numeric["decode"][1], rows) for rows in stages]
    if options.mtp_tokens:
        per_stage_kv[-1] += _kv_per_device(ev, numeric["decode"][0], numeric["decode"][1], None, MTP_STACK)
    kv_dev = _max(frozenset(per_stage_kv))
    if len(_MEMORY) > 256:          # the placements of one model at a time, roughly
        _MEMORY.clear()
    result = (float(per_stage[worst]), weight_formula, kv_dev)
    _MEMORY[key] = ((numeric, symbolic), result)
    return result


def _stage_bytes(stored: Mapping[str, sympy.Expr], rows: list[tuple[str, sympy.Expr]]) -> sympy.Expr:
    """The weight bytes of a stage: ``sympy.Add`` of stored bytes times layers, row by row. A
    numeric placement's stored bytes and layer counts are Integers (checkpoint weights), whose
    products and sum are those of Python's ints: summed so, without a sympy object per term."""
    pairs = [(stored[u], n) for u, n in rows]
    if all(isinstance(v, sympy.Integer) and isinstance(n, sympy.Integer) for v, n in pairs):
        return sympy.Integer(sum(v.p * n.p for v, n in pairs))
    return _sum(tuple(_mul(v, n) for v, n in pairs))


#: ids of terms -> (their sympy.Add, the terms): see :func:`_sum`.
_SUMS: dict[tuple, tuple] = {}


def _sum(terms: tuple) -> sympy.Expr:
    """``sympy.Add(*terms)``, once per tuple of the same term objects (in the same order): the
    configs of a model store the same bytes per row (numeric: one stage placement under several
    pipeline degrees; symbolic: degrees are symbols, so tp 8 and tp 16 store alike), and placement's
    memo hands back the same product objects, while flattening and sorting a sum of a hundred
    terms is slow. Keyed by the terms' ids, the entry holding the terms (an id is not reused while
    its object lives)."""
    key = tuple(map(id, terms))
    hit = _SUMS.get(key)
    if hit is None:
        if len(_SUMS) > 4096:
            _SUMS.clear()
        hit = _SUMS[key] = (sympy.Add(*terms), terms)
    return hit[0]


_MAXIMA: dict[frozenset, sympy.Expr] = {}    # {per-stage KV expressions} -> their sympy.Max


def _max(terms: frozenset) -> sympy.Expr:
    """``sympy.Max`` of a set of expressions, once per set: configs that differ in what does not
    split the cache (experts, DP) have the same per-stage KV, and comparing expressions in
    ``length`` to drop the ones never largest is slow. Max's result does not depend on the order
    of its arguments (it sorts what survives), so a set is the key."""
    found = _MAXIMA.get(terms)
    if found is None:
        if len(_MAXIMA) > 4096:
            _MAXIMA.clear()
        found = _MAXIMA[terms] = sympy.Max(*terms)
    return found


def plan(ev: Evaluation, gpu: GPU, config: ParallelConfig, options: Options = Options(),
         fusion: FusionTable | None = None, scenario: Scenario | None = None) -> Plan:
    """Place, fuse and compile ``ev`` on ``gpu`` under ``config`` (raises SpecError if illegal).

    ``scenario`` only decides fusions with a token limit (``max_tokens``); without it they are
    not applied."""
    problems = check(ev, config)
    if problems:
        raise SpecError(option_where("parallel config"), f"{config.label()} cannot run {ev.model.model_id}: "
                        + "; ".join(problems), "pick degrees that divide the model's heads, experts and layers")
    validate_options(options, ev)
    domain = min(gpu.scale_up_domain, config.gpus_per_node or gpu.scale_up_domain)
    tokens = tokens_per_device(config, scenario, options.prefill_tokens, options.decode_seq) if scenario else {}
    return Plan(build_structure(ev, config, options, domain, fusion, gpu, tokens), gpu)

def _kv_per_device(ev: Evaluation, program: Program, placer: Placer,
                   stage: list[tuple[str, sympy.Expr]] | None, stack: str = "main") -> sympy.Expr:
    """Cache bytes one device holds for one request at context ``length`` (its stage's layers; with
    ``stage`` None every layer of ``stack``, e.g. the whole MTP stack)."""
    total = ZERO
    for cache in kv.caches(ev.numeric, stack):
        row = ev.numeric.rows[cache.node_uid]
        layout = program.layouts.get(cache.node_uid, program.layouts.get(cache.node_uid + "@decode"))
        if layout is None:
            continue
        count = cache.repeat if stage is None else _layers_on_stage(ev, cache.node_uid, stage)
        if OPS[row.op].state is not None:   # a recurrent state: shards with heads / channels
            split = placer.split(Tensor(row.out.axes[2:]), Layout(layout.shards[2:]))
        else:
            split = placer.split(Tensor(row.out.axes[1:]), Layout(layout.shards[1:]))
        total = _add(total, _mul(_div(_cache_bytes(cache), split), count))   # (a + b / c * d, memoized)
    return total


_CACHE_BYTES: dict[int, tuple] = {}     # id(cache entry) -> (the entry, :func:`_cache_bytes` of it)


def _cache_bytes(cache) -> sympy.Expr:
    """Bytes one layer of a cache entry holds for one request at context ``length``, unsharded:
    tokens kept x elements per token x element bytes (``kv_bytes`` unless the entry has its own
    dtype). A function of the entry alone, and every config's memory figures read it for every
    stage (``sympy.Min`` of a window is slow to build): computed once per entry object."""
    found = _CACHE_BYTES.get(id(cache))
    if found is None or found[0] is not cache:
        if len(_CACHE_BYTES) > 4096:      # the entries of a few models at a time
            _CACHE_BYTES.clear()
        element = cache.own_bytes if cache.dtype else KV_BYTES
        found = _CACHE_BYTES[id(cache)] = (cache, kv.tokens_kept(cache, LENGTH) * cache.per_token * element)
    return found[1]


def _layers_on_stage(ev: Evaluation, uid: str, stage: list[tuple[str, sympy.Expr]]) -> sympy.Expr:
    """Layers of ``uid``'s template on a stage, read off any weighted row of the same template
    (the first one); both lookups through :data:`_ON_STAGE` (every cache entry of every stage of
    every config asks, and a stage lists a hundred rows)."""
    hit = _ON_STAGE.get(id(stage))
    if hit is None or hit[0] is not stage or hit[1] is not ev.numeric:
        if len(_ON_STAGE) > 4096:
            _ON_STAGE.clear()
        hit = _ON_STAGE[id(stage)] = (stage, ev.numeric, {})
    found = hit[2].get(uid)
    if found is None:
        template = next((c.uid for c in ev.numeric.components.values()
                         if c.template and uid.startswith(c.uid + "/")), None)
        found = hit[2][uid] = next((n for row_uid, n in stage if template and row_uid.startswith(template + "/")),
                                   ZERO)
    return found


#: id(stage rows) -> (the rows, the numeric analysis, {cache uid: its layers on the stage}). Stage
#: lists are :func:`_stage_rows`' memoized objects, read-only, so the answers stay valid.
_ON_STAGE: dict[int, tuple] = {}


def _with_pipeline(program: Program, placer: Placer) -> Program:
    """Add the pipeline's send/recv steps: the carried hidden state leaving each stage (pp - 1
    hops) and every stream value that crosses a stage boundary (engine.language.streams.stage_hops)."""
    config = placer.mesh.config
    if config.pp == 1:
        return program
    steps = {s.uid: s for s in program.steps}
    templates = tuple(c.uid + "/" for c in placer.a.components.values() if c.template and c.stack == "main")
    in_layers = {s.uid for s in program.steps if (s.component_uid + "/").startswith(templates)}
    after = next((s for s in program.steps if s.uid not in in_layers and s.kind != "input"
                  and any(i in in_layers for i in s.inputs)), None)
    if after is None:
        return program
    link = "scale_up" if config.cp * config.tp * config.pp <= placer.mesh.domain else "scale_out"
    sends = [(steps[next(i for i in after.inputs if i in in_layers)], placer.mesh.degrees["pp"] - 1, after)]
    n_layers = _layer_count(placer.a)
    for stream in placer.a.streams:
        if stream.stack != "main" or not stream.pairs or stream.value_uids[0] not in steps:
            continue
        hops = stream_rules.stage_hops(stream, config.pp, n_layers)
        if hops:
            reader = steps[stream.value_uids[0]]
            sends.append((reader, sympy.Integer(hops), reader))
    added = tuple(Step(f"{source.uid}>send_recv[pp]", "send_recv(pp)", "send_recv", "comm", "pipeline",
                       at.component, at.component_uid, hops, (source.uid,), ZERO, 2 * source.out_read, ZERO,
                       source.out_read, "bf16", source.layout, source.out, source.out_read, group="pp",
                       link=link, written=source.out_read, collective="send_recv", ranks=2,
                       nodes=1 if link == "scale_up" else 2)
                  for source, hops, at in sends)
    out = replace(program, steps=program.steps + added)
    note_extension(out, program)     # fusion reuses the stage program's candidates and fused steps
    return out


def _layer_count(analysis) -> int:
    """Main-stack layers, read off the template components (valid under either binding)."""
    return sum(len(c.layers) for c in analysis.components.values() if c.template and c.stack == "main")


def decider(bound: Mapping[str, sympy.Expr]):
    """A placement's ``decide`` at ``bound`` (dim -> value): expression -> its integer value (None
    when not a number), each decision recorded in ``decide.seen`` (expression -> value)."""
    return _decider(bound)


def place_symbolic(ev: Evaluation, analysis, config: ParallelConfig, domain: int, options: Options,
                   fusion: FusionTable | None, gpu: GPU, tokens: Mapping[str, int | None], decide,
                   record: dict | None = None, reuse: dict | None = None) -> dict[str, Program]:
    """Per phase, the fused symbolic program :func:`build_structure` makes, of ``analysis`` (``ev``'s
    symbolic analysis, or one made from it: the playground splices a new filler's rows into a
    base's, engine.playground.playground_sol) with decisions by ``decide`` (:func:`decider`): the same
    placement, pipeline hops and fusion rules; the matches are found on this program (build_structure
    finds them on the numeric one: the same steps and tests). ``ev`` supplies the weights' storage
    (its spec's quant) and the dims table. ``record`` (a dict) receives per phase what placing each
    row did; ``reuse`` (another run's record, on the same config and decisions) repeats it for every
    row that is the same object reading equal inputs (:class:`_ReplayPlacer`): a spliced analysis
    places only the rows the splice touches."""
    stage = replace(config, pp=1, dp=1, gpus_per_node=None)
    types = DeviceTypes(ACT_DTYPE_BYTES[options.act_dtype], KV_BYTES)
    out = {}
    memo = None
    for phase in PHASES:
        placer = _ReplayPlacer(analysis, Mesh(stage, min(domain, config.tp * config.cp), True), phase, ev.corpus.dims,
                               _weights_fn(ev, options), types, decide)
        if memo is None:     # split factors and local sizes: the same analysis, mesh and decisions in every phase
            memo = (placer._factors, placer._locals, placer._units)
        else:
            placer._factors, placer._locals, placer._units = memo
        if record is not None:
            placer.record = record.setdefault(phase, {})
        if reuse is not None:
            placer.reuse = reuse.get(phase)
        program = placer.run(phase_rows(analysis, phase))
        if placer.mesh.config != config or placer.mesh.domain != domain:
            placer.mesh = Mesh(config, domain, True)
        program = _with_pipeline(program, placer)
        found = match(program, fusion, gpu, config, phase, tokens.get(phase)) if fusion else []
        out[phase] = transport(fuse(program, found), fusion.a2a if fusion else None)
    return out
