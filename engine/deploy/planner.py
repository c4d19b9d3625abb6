"""Deployment plans: a model under a parallel config on a GPU type -> compiled device programs.

Layer: engine.deploy. :func:`plan` does the structural work once per (model, GPU, config, options):
placement propagation with communication insertion (:func:`place`) and fusion for prefill and
decode, under the numeric binding (numbers in the scenario symbols) and the symbolic one (formulas
over dims and parallel degrees), then compiles the numeric programs for vectorized evaluation
(:func:`build_structure`; GPU-free, so the grid build shares one structure between GPUs of the
same arch and domain). The types it builds are :mod:`engine.deploy.structure`'s; the
:class:`~engine.deploy.plan.Plan` it returns and :meth:`Plan.at` (a scenario point) are
:mod:`engine.deploy.sol`'s, which never imports this module; the grid build evaluates arrays of
points with the same functions. Whether a config and options can run a model is
:mod:`engine.deploy.legality`'s (:func:`~engine.deploy.legality.check`, ``configs_for``,
``validate_options``); the memory figures (weights per stage, KV per device) are
:mod:`engine.deploy.stage_memory`'s.

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

import copy
from dataclasses import replace
from typing import Mapping

import sympy

from engine.language import checkpoints, storage, streams as stream_rules, symbols
from engine.language.api import Evaluation
from engine.deploy.cost import compile_program
from engine.deploy.step_functions import KV_BYTES
from engine.language.errors import SpecError
from engine.deploy.fusion import fuse, match, note_extension
from engine.deploy.fusion_table import FusionTable, admission_of, moe_routing_of, overlap_default, reserve_bytes
from engine.deploy.expert_comm import A2APolicy
from engine.deploy.transport import transport
from engine.deploy.hardware import GPU
from engine.deploy.legality import check, validate_options
from engine.deploy.parallel import Mesh, ParallelConfig
from engine.deploy.placement import Placer, phase_rows
from engine.deploy.device_program import ZERO, DeviceTypes, Program, Step, step_with
from engine.deploy.plan import Plan
from engine.deploy.stage_memory import _layer_count, _memory
from engine.deploy.structure import (ACT_DTYPE_BYTES, MTP_STACK, PHASES, Formulas, Options, Scenario, Structure, option_where,
                                     tokens_per_device)
from engine.deploy.replay import _LoggedMesh, _PhasePlacer, _ReplayPlacer
from engine.deploy.same_walk import placing_key


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


def place(ev: Evaluation, config: ParallelConfig, domain: int, options: Options, symbolic: bool,
          stack: str = "main") -> dict[str, tuple[Program, Placer]]:
    """Placement with communication, per phase, under one binding (no fusion), of one stack's rows
    (``main``, the served model; the model document also places its other stacks, e.g. ``mtp``,
    for their per-block bytes)."""
    owner = placing_key(ev, options.weight_format, _quant_context)
    key = (id(owner), config, domain, options.act_dtype, options.weight_format, options.mtp_tokens, symbolic, stack)
    # the stage placements it is made of (still those: a cleared or replaced one is placed again)
    stages = [_stage_key(owner, config, domain, options, symbolic, s, phase)
              for s in ((stack, MTP_STACK) if stack == "main" and options.mtp_tokens else (stack,)) for phase in PHASES]
    hit = _PLACED.get(key)
    if hit is not None and hit[0] is owner and all(h is not None and _STAGES.get(k) is h for k, h in zip(stages, hit[2])):
        return hit[1]
    analysis = ev.symbolic if symbolic else ev.numeric
    out = {}
    for phase in PHASES:
        program, placer = _placed_stage(ev, config, domain, options, symbolic, stack, phase)
        out[phase] = (_with_pipeline(program, placer), placer)
    if stack == "main" and options.mtp_tokens:
        drafts = place(ev, config, domain, replace(options, mtp_tokens=0), symbolic, MTP_STACK)
        out = with_mtp(out, drafts, analysis, options.mtp_tokens)
    if len(_PLACED) > 1024:          # the configs of a model or two
        _PLACED.clear()
    _PLACED[key] = (owner, out, tuple(_STAGES.get(k) for k in stages))
    return out


#: (id(owner), config, domain, act dtype, weight format, MTP tokens, symbolic, stack) -> (owner, the
#: placements :func:`place` returned, the :data:`_STAGES` entries they were made of): the pipelined programs are made once per owner of
#: placements (engine.deploy.same_walk.placing_key), so a fine-tune after its base gets the base's
#: program objects, and with them the fused and compiled programs and memory figures memoized on
#: them. Read-only: callers build new dicts and programs from it (with_mtp, the export's drafts).
_PLACED: dict[tuple, tuple] = {}


#: (id(owner), stage config, stage domain, act dtype, weight format, symbolic, stack, phase) ->
#: (owner, program, placer) of :func:`_placed_stage`; the owner is ``ev``, or the Evaluation of an
#: earlier model whose placements are equal (engine.deploy.same_walk.placing_key: a fine-tune's base).
_STAGES: dict[tuple, tuple] = {}


def _quant_context(ev: Evaluation, weight_format: str) -> tuple:
    """The quant context (in file order: patterns match first to last) ``ev``'s rows are stored
    under in ``weight_format``: all that placing reads of the spec (storage.leaf_storage)."""
    return tuple(weight_format_model(ev.model, ev.corpus, weight_format).quant.items())


#: [(owner, memo)]: :func:`fused_memo`'s memo, of the last placements' owner.
_FUSED_MEMOS: list = []


def fused_memo(ev: Evaluation) -> dict:
    """A memo for :func:`build_structure`'s fused and compiled programs (:func:`_fused`), one per
    owner of placements (:func:`engine.deploy.same_walk.placing_key`): a fine-tune after its base
    is handed the base's placed programs and so finds their fused and compiled forms here. Each
    entry is a function of the program object and the matches it is keyed by (whichever model
    asks); one owner's memo is kept at a time, so a model of another walk starts an empty one."""
    owner = placing_key(ev, checkpoints.OWN, _quant_context)
    if not (_FUSED_MEMOS and _FUSED_MEMOS[0][0] is owner):
        _FUSED_MEMOS[:] = [(owner, {})]
    return _FUSED_MEMOS[0][1]


def _stage_key(owner: Evaluation, config: ParallelConfig, domain: int, options: Options, symbolic: bool,
               stack: str, phase: str) -> tuple:
    """:data:`_STAGES`' key of a stage placement (what :func:`_placed_stage` reads; its doc)."""
    return (id(owner), replace(config, pp=1, dp=1, gpus_per_node=None), min(domain, config.tp * config.cp),
            options.act_dtype, options.weight_format, symbolic, stack, phase)


def _placed_stage(ev: Evaluation, config: ParallelConfig, domain: int, options: Options, symbolic: bool,
                  stack: str, phase: str) -> tuple[Program, Placer]:
    """One phase's placed program before pipeline stages, and its placer (with ``config``'s mesh).

    Placing an op reads the TP, EP, DP-attention and CP groups and whether a group's ranks fit in
    one scale-up domain; never the pipeline degree (``_with_pipeline`` adds the stage hops) nor
    data parallelism. Every group spans at most tp x cp consecutive ranks, so a domain of
    min(domain, tp x cp) takes every link decision alike. Configs that differ only in pp or dp
    (tp8, tp8-pp2 ... tp8-pp16: most of a large model's configs) therefore place once."""
    owner = placing_key(ev, options.weight_format, _quant_context)   # ev, or a fine-tune's base placed alike
    key = _stage_key(owner, config, domain, options, symbolic, stack, phase)
    stage = key[1]
    hit = _STAGES.get(key)
    if hit is None or hit[0] is not owner:
        if len(_STAGES) > 2048:      # the configs of one model at a time, roughly
            _STAGES.clear()
        analysis = ev.symbolic if symbolic else ev.numeric
        types = DeviceTypes(ACT_DTYPE_BYTES[options.act_dtype], KV_BYTES)
        # decode repeats the rows the prefill placement of this key placed alike (_PhasePlacer)
        prefill = _STAGES.get(key[:-1] + ("prefill",)) if phase == "decode" else None
        prefill = prefill[2] if prefill is not None and prefill[0] is owner and prefill[2].record else None
        mesh = prefill.mesh if prefill is not None else _LoggedMesh(stage, key[2], symbolic)
        placer = _PhasePlacer(analysis, mesh, phase, ev.corpus.dims, _weights_fn(ev, options), types,
                              _model_decider(ev), prefill=prefill,
                              library=_library(owner, stage, options, symbolic, stack, phase))
        if prefill is not None:      # split factors and local sizes: phase-free (as place_symbolic shares)
            placer._factors, placer._locals, placer._units = prefill._factors, prefill._locals, prefill._units
        hit = _STAGES[key] = (owner, placer.run(phase_rows(analysis, phase, stack)), placer)
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
    seq = 1 whatever the step's seq (:func:`engine.deploy.step_totals.step_totals`); without it (prefill,
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
    numeric, symbolic = placed or (place(ev, config, domain, options, False), None)
    programs, compiled, matches = {}, {}, {}
    a2a = fusion.a2a if fusion else None
    for phase in PHASES:
        num = numeric[phase][0]
        found = matches[phase] = match(num, fusion, gpu, config, phase, tokens.get(phase)) if fusion else []
        programs[phase], compiled[phase] = _fused(num, found, compile, memo, a2a)

    def formulas(symbolic=symbolic, options=options) -> tuple:
        # the symbolic side (structure.Formulas): the same matches on the symbolic placement;
        # without one (the numeric one stands in) the formulas are the programs
        symbolic = symbolic or place(ev, config, domain, options, True)
        fused = {p: programs[p] if symbolic[p][0] is numeric[p][0] else
                 _fused(symbolic[p][0], matches[p], False, memo, a2a)[0] for p in PHASES}
        return (fused, {p: transport(symbolic[p][0], a2a) for p in PHASES},
                _memory(ev, config, options, numeric, symbolic)[1])

    weights, _, kv_dev = _memory(ev, config, options, numeric, None)
    if not options.overlap:             # the framework's own schedule overlap (its table's default)
        options = replace(options, overlap=overlap_default(fusion))
    elif options.overlap != "none" and options.overlap not in ((fusion.overlap or {}) if fusion else {}):
        raise SpecError(option_where("--overlap"), f"framework {options.framework!r} declares no {options.overlap} overlap",
                        "leave out --overlap, or use a framework whose corpus/fusion table lists it (sglang)")
    # given placements (the grid's cache, which keeps them) make the formulas now; an estimate
    # (plan()) makes them only where they are read
    side = Formulas(*formulas()) if placed else Formulas(make=formulas)
    return Structure(ev, config, options, domain, programs, side,
                     # unfused: before kernel fusion, the framework's all-to-all library still applies
                     {p: transport(numeric[p][0], a2a) for p in PHASES},
                     compiled if compile else {}, weights, kv_dev, reserve_bytes(fusion, config),
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
