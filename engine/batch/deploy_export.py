"""The deploy page's formulas: every structure the grid evaluates, as formula trees the browser evaluates.

Layer: engine.batch (on engine.deploy and engine.language.formula_tree). The deploy page answers at any
prompt length, output length and batch, not only at grid points: it evaluates the selected
structure's own compiled step expressions (:func:`engine.deploy.step_totals.step_totals` of the numeric
programs, in ``batch``, ``seq``, ``ctx`` and ``kv_bytes``) with ``static/js/formula.js`` and
combines them by the rules of :func:`engine.deploy.sol.summarize`, which ``static/js/deploy.js``
mirrors line by line. Nothing here evaluates a point: it exports expressions and rates.

Document (``results/formulas/<org--name>.json``, one per model):

* ``trees``: every distinct tree of the model (steps of different structures repeat most
  expressions; programs refer to them by index), ``strings``: op uids and formula texts by index;
* ``configs``: per (parallel config, scale-up domain): degrees, weights per GPU (bytes and formula),
  ``kv_dev`` (tree of KV bytes per request per GPU in ``length`` and ``kv_bytes``);
* ``programs``: distinct step lists; a step is ``[flops, bytes, comm_bytes, weight_bytes, calls,
  repeat, dtype, link, coll, kind, view, uid, f_flops, f_bytes, f_comm, name, op, component, role,
  group, parts, f_weight]`` (tree / string / table indices, ``parts`` a list of string indices;
  ``calls`` = the collective's calls per step, ``coll`` its (op, ranks, nodes) or -1; the labels
  from ``name`` on are those of ``archledger deploy --json``'s op rows, engine.deploy.op_rows);
* ``kv_terms``: per stack (``main``, ``mtp``) and part (``all``, engine.language.kv.PARTS) the trees
  of a request's cache elements and own-dtype bytes in ``length``, in their compiled order;
* ``evaluation_order``: true when every step column's tree, every ``kv_dev`` and ``kv_terms`` tree is written in
  the order its compiled function evaluates (engine.deploy.printed_tree: evaluated with numpy they
  give the compile path's floats, bit for bit); false when one had no such tree (to_tree's form);
* ``options``: per (GPU, config, framework) the KV dtypes, the fusion token ``limits`` and per
  phase one program per token regime (regime r: tokens per device exceed r of the limits, as
  :func:`engine.deploy.structure_cache.regime` and :func:`engine.deploy.structure.tokens_per_device`);
* ``gpus``: per GPU its HBM bytes and bytes/s, link bytes/s, the peak FLOP/s of each operand
  class ``dtypes`` names and the per-call latency of each collective of ``colls``;
* ``kv_request``: a request's cache bytes (all GPUs; and its state and growing parts) as trees;
  ``kv_bytes``: bytes per element of each KV dtype; ``budget`` and ``hbm_fraction``: the options the
  grid ran with; ``batches``: the grid's batches (a config's rows are those up to the larger of its
  worst-case and steady-state capacities, plus that capacity below the largest:
  :func:`engine.batch.grid_eval.grid_batches`; the deploy page's batch chart and fronts take the same points).
* speculative decoding with the model's MTP modules (docs/deployment.md), for models with an
  ``mtp`` stack (``mtp_modules`` > 0; absent otherwise): per option ``mtp`` = per phase one program
  per token regime holding the *draft steps* of the structure ``archledger deploy --mtp 1`` builds
  (:func:`engine.deploy.planner.with_drafts`: its programs are the main stack's steps, unchanged,
  followed by these); per config ``mtp`` = that structure's weights per GPU (bytes, formula text by
  its index in ``strings``) and
  ``kv_dev`` (the whole MTP stack on the last stage); ``kv_request_mtp`` the MTP stack's cache per
  request; ``tokens_per_step`` the text of E. With k drafts the browser runs the main program at
  seq = k + 1 plus k times the draft steps (a draft step's calls are linear in k: ``repeat x k /
  layers``), in the decode regime of k + 1 tokens per request; prefill adds the draft steps once.

* expected times from measured kernels (gpus/measured/, engine.deploy.measured): per option and
  KV dtype ``expected`` = per phase (and ``mtp``) one index per token regime into ``expected``, the
  lists of each program step's expected-time tree (:func:`engine.deploy.measured.expected_tree`: a
  tree of the point and the step's bound ``t_sol``, with ``["lookup", ref, ...]`` nodes reading
  ``lookups[ref]``, a measured table distilled to the part the step reads, with its roofline tree).

Invariant: the browser's summary at a point equals ``archledger deploy`` at that point (same
structure, same expressions, same rules) to float rounding; tests/test_site_offgrid.py checks it.
"""
from __future__ import annotations

from typing import Any, Callable

import sympy

from engine.batch.jsontext import compact_json
from engine.deploy.step_totals import step_totals
from engine.deploy.fusion_table import live_token_limits, token_limits
from engine.deploy.kernel_spec import DEFAULT_EFFICIENCY, Lookup, kernel_steps, kv_dtype_steps, step_spec
from engine.deploy.measured import member_ops
from engine.deploy.measured_tree import spec_tree
from engine.deploy.legality import mtp_modules
from engine.deploy.printed_tree import length_tree, step_tree
from engine.deploy.op_rows import formula_text, weight_text
from engine.deploy.structure import HBM_FRACTION, MAX_BATCH, MTP_STACK, PHASES, PREFILL_TOKENS, TOKENS_PER_STEP
from engine.language import kv, symbols
from engine.language.formula_tree import to_tree
from engine.language.memo import remembered_for

FORMAT = 1
LINKS = {"": 0, "scale_up": 1, "scale_out": 2}
KINDS = ("compute", "comm", "fused")


class _Table:
    """Distinct values by content, each with a stable index (first seen first)."""

    def __init__(self):
        self.items: list = []
        self.index: dict[str, int] = {}

    def add(self, value: Any, key=None) -> int:
        """``value``'s index; ``key`` (hashable, one kind per table) stands for its content, by
        default its JSON text."""
        key = key if key is not None else compact_json(value)
        found = self.index.get(key)        # (the key hashed once or twice, not three times)
        if found is None:
            found = self.index[key] = len(self.items)
            self.items.append(value)
        return found


def model_export(ev, cells, grid, gpus: dict, tables: dict, structure: Callable, fits: Callable,
                 measured: Callable | None = None) -> dict[str, Any]:
    """The document described in the module doc for one model.

    ``cells``: the (GPU, config) pairs of the grid; ``structure(config, domain, framework, gpu,
    regimes)`` the grid's structure cache (regimes of :func:`engine.deploy.fusion_table.token_limits`);
    ``fits(structure, gpu)`` whether the weights leave room (combinations without are not published);
    ``measured(gpu key, framework)``: the measured kernel tables the grid's expected times read
    (engine.deploy.measured.load_measured; None: none, every step at its bound / the default efficiency)."""
    trees, strings, programs, colls, dtypes = _Table(), _Table(), _Table(), _Table(), _Table()
    lookups, expected_lists = _Table(), _Table()
    expected_of: dict[tuple, tuple] = {}
    tree_of: dict = {}
    tree_by_id: dict[int, tuple] = {}

    unordered: list = []     # expressions with no tree in their evaluation order (to_tree's written)

    def tree(expr) -> int:
        """``expr``'s index among the trees: first by object (steps share their expression objects,
        and a lookup by value compares large formulas term by term), then by value. A step
        column's tree in its compiled function's order (printed_tree.step_tree)."""
        mine = tree_by_id.get(id(expr))
        if mine is not None and mine[0] is expr:
            return mine[1]
        found = tree_of.get(expr)
        if found is None:
            printed = step_tree(expr)
            if printed is None:
                unordered.append(expr)
            found = tree_of[expr] = trees.add(to_tree(expr) if printed is None else printed)
        tree_by_id[id(expr)] = (expr, found)
        return found

    kv_trees: dict = {}

    def kv_tree(expr) -> int:
        """A KV-per-GPU expression's tree index, in the order of the structure's compiled
        ``kv_device_fn`` (lambdify in ``length`` and ``kv_bytes``)."""
        found = kv_trees.get(expr)
        if found is None:
            printed = length_tree(expr, (symbols.dim(symbols.LENGTH), symbols.dim("kv_bytes")))
            if printed is None:
                unordered.append(expr)
            found = kv_trees[expr] = trees.add(to_tree(expr) if printed is None else printed)
        return found

    # (ids of a phase's numeric and symbolic programs) -> (those programs, program index): structures
    # of other regimes or domains often hold the very same fused programs (planner._fused's memo)
    exported: dict[tuple, tuple] = {}

    def string(text: str) -> int:        # a string is its own key (no JSON text to build)
        return strings.add(text, key=text)

    # id(numeric step) -> (numeric step, symbolic step, its row's number): programs of other structures
    # hold most of the same step objects
    step_rows: dict[int, tuple] = {}
    # a distinct row (its tuple) -> its number; row_lists[number]: the one list of it every program
    # holding it shares. Programs repeat few distinct rows (GLM-5.2: 45,866 rows, 1,455 distinct),
    # so a program's key is its rows' numbers (equal rows, equal numbers: programs are one exactly
    # when their rows are) and document_json encodes each row once
    distinct: dict[tuple, int] = {}
    row_lists: list[list] = []

    def step_row(st, sym, text: tuple[str, ...]) -> int:
        """The number of one step's row of the module doc among the distinct rows."""
        mine = step_rows.get(id(st))
        if mine is not None and mine[0] is st and mine[1] is sym:
            return mine[2]
        f, b, c, w = step_totals(st)
        calls = st.repeat if st.collective else sympy.Integer(0)
        coll = colls.add([st.collective, st.ranks, st.nodes], key=(st.collective, st.ranks, st.nodes)) \
            if st.collective else -1
        out = (tree(f), tree(b), tree(c), tree(w), tree(calls), float(st.repeat),
               dtypes.add(st.compute_dtype, key=st.compute_dtype), LINKS[st.link], coll, KINDS.index(st.kind),
               int(bool(st.view)), string(st.uid), string(text[0]), string(text[1]), string(text[2]),
               string(st.name), string(st.op), string(st.component), string(st.role), string(st.group),
               tuple(string(p) for p in st.parts), string(text[3]))
        number = distinct.get(out)
        if number is None:
            number = distinct[out] = len(row_lists)
            row_lists.append(list(out))
        step_rows[id(st)] = (st, sym, number)
        return number

    def program(s, phase: str) -> int:
        numeric, symbolic = s.programs[phase], s.formulas[phase]
        key = (id(numeric), id(symbolic))
        found = exported.get(key)
        if found is not None and found[0] is numeric and found[1] is symbolic:   # (a freed object's id can recur)
            return found[2]
        text = formula_text(s, phase)
        rows = tuple([step_row(st, sym, text[i]) for i, (st, sym) in enumerate(zip(numeric.steps, symbolic.steps))])
        index = programs.index.get(rows)
        if index is None:       # (the rows' lists only for a new program)
            index = programs.add([row_lists[n] for n in rows], key=rows)
        exported[key] = (numeric, symbolic, index)
        return index

    def drafts(main, drafting, phase: str) -> int:
        """The draft steps of ``drafting`` (the --mtp 1 structure of ``main``'s cell and regime, whose
        programs hold only them, fused alone: engine.batch.grid_eval). ``archledger deploy --mtp``
        fuses them after the main stack's steps in one program; the two agree because no draft step
        reads a main-stack step (no rule can join them), checked here."""
        pair = (main.unfused[phase], drafting.unfused[phase])
        key = (id(pair[0]), id(pair[1]))     # once per placed pair (other regimes and frameworks share it)
        if key not in checked:
            mine = {s.uid for s in pair[0].steps}
            if any(i in mine for s in pair[1].steps for i in s.inputs):
                raise ValueError(f"{ev.model.model_id} {phase}: an MTP step reads a main-stack step, so a fusion "
                                 "may join the two stacks; the deploy page cannot add the drafts to the main program")
            checked[key] = pair
        return program(drafting, phase)

    refs: dict[int, tuple] = {}

    def lookup_ref(entry: dict) -> int:
        """A lookup table's index among ``lookups``: by object first (the measured module hands out
        one JSON object per distilled table), then by its JSON text."""
        found = refs.get(id(entry))
        if found is None or found[0] is not entry:
            found = refs[id(entry)] = (entry, lookups.add(entry))
        return found[1]

    # (id(spec), calls) -> (spec, its tree's index): a step's expected-time tree is a function of its
    # Spec and calls alone (measured.spec_tree), and steps of other programs, configs, GPUs and KV
    # dtypes repeat both (spec objects are memoized; the held spec keeps its id its own)
    spec_trees: dict[tuple, tuple] = {}
    step_trees: dict[tuple, tuple] = {}     # (id(step), id(spec)) -> (them, the index): no float again

    def spec_tree_index(spec, st) -> int:
        mine = step_trees.get((id(st), id(spec)))
        if mine is not None and mine[0] is st and mine[1] is spec:
            return mine[2]
        repeat = float(st.repeat) if spec is not None else 0.0
        found = spec_trees.get((id(spec), repeat))
        if found is None or found[0] is not spec:
            found = spec_trees[(id(spec), repeat)] = (spec, trees.add(spec_tree(spec, repeat, lookup_ref)))
        step_trees[(id(st), id(spec))] = (st, spec, found[1])
        return found[1]

    # (id(program), GPU key, framework, config, phase) -> (program, (the first KV dtype asked, its
    # rows)): another KV dtype's rows differ only where a step's kernel class reads the KV dtype
    # (_with_kv_steps). The key names all a step's Spec reads but the KV dtype: the structures of one
    # program, framework and config share the model's dims, the framework's MoE routing and the member
    # ops (one map per unfused program, of which this fused program is made: planner._fused)
    other_dtype: dict[tuple, tuple] = {}

    def expected(s, phase: str, gpu, framework: str, kv_dtype: str) -> int:
        """The index (among ``expected``) of the list of the phase program's per-step expected-time
        trees (engine.deploy.measured.expected_tree) on ``gpu`` under ``framework`` with ``kv_dtype``."""
        program = s.programs[phase]
        key = (id(program), gpu.key, framework, kv_dtype, s.config, phase)
        found = expected_of.get(key)
        if found is not None and found[0] is program:
            return found[1]
        kernels = measured(gpu.key, framework) if measured else {}
        if not kernels:
            # no table of this GPU and framework (most GPU types): no step has a spec (step_spec
            # finds no table), every step's tree is the fallback, its index taken at the first step
            steps = program.steps
            rows = [spec_tree_index(None, steps[0])] * len(steps) if steps else []
            index = expected_lists.add(rows, key=tuple(rows))
            expected_of[key] = (program, index)
            return index
        lookup = Lookup(gpu, framework, phase, kernels, kv_dtype, s.config, s.ev.bound, s.moe_routing)
        members = member_ops(s, phase)
        first = remembered_for(other_dtype, program, lambda: (kv_dtype, _step_rows(program, members, phase, lookup,
                                                                                spec_tree_index)),
                               1 << 20, key=key[:3] + key[4:])
        rows = first[1] if first[0] == kv_dtype else \
            _with_kv_steps(first[1], program, members, phase, lookup, spec_tree_index)
        index = expected_lists.add(rows, key=tuple(rows))
        expected_of[key] = (program, index)
        return index

    modules = mtp_modules(ev)
    # (ids of) placed main and draft programs found apart -> them (held: an id stays theirs)
    checked: dict[tuple, tuple] = {}

    configs: dict[tuple, int] = {}
    config_rows: list[dict] = []
    options: list[dict] = []
    for gpu, config in cells:
        domain = gpu.scale_up_domain
        for framework in grid.frameworks:
            limits = token_limits(tables.get(framework))
            base = structure(config, domain, framework, gpu, (len(limits), 0))
            if not fits(base, gpu):
                continue
            key = (config, domain)
            if key not in configs:
                configs[key] = len(config_rows)
                config_rows.append({
                    "key": f"{config.n_gpus}-{config.label()}-d{domain}", "n_gpus": config.n_gpus,
                    "config": config.label(), "tp": config.tp, "ep": config.ep, "dp_attn": config.dp_attn,
                    "pp": config.pp, "cp": config.cp, "domain": domain,
                    "weight_bytes_per_gpu": float(base.weight_bytes_per_gpu),
                    "weight_formula": weight_text(base.weight_formula), "kv_dev": kv_tree(base.kv_device_per_request)})
            # one structure per regime that can differ: regimes whose representative token count
            # passes the same live limits fuse alike (the other rules never match this GPU and config)
            table = tables.get(framework)
            classes = {p: _classes(limits, live_token_limits(table, gpu, config, p)) for p in PHASES}
            firsts = {p: sorted({c: r for r, c in reversed(list(enumerate(classes[p])))}.values()) for p in PHASES}
            count = max(len(firsts[p]) for p in PHASES)
            built = [structure(config, domain, framework, gpu,
                               tuple(firsts[p][min(k, len(firsts[p]) - 1)] for p in PHASES)) for k in range(count)]
            by_phase = {p: [program(built[c], p) for c in classes[p]] for p in PHASES}
            if modules:     # the --mtp 1 structure of each of those regimes: its draft steps, its memory
                drafting = [structure(config, domain, framework, gpu, tuple(firsts[p][min(k, len(firsts[p]) - 1)]
                                                                            for p in PHASES), mtp=1)
                            for k in range(count)]
                by_phase["mtp"] = {p: [drafts(built[c], drafting[c], p) for c in classes[p]] for p in PHASES}
                row = config_rows[configs[key]]
                if "mtp" not in row:
                    row["mtp"] = {"weight_bytes_per_gpu": float(drafting[0].weight_bytes_per_gpu),
                                  "weight_formula": strings.add(weight_text(drafting[0].weight_formula)),
                                  "kv_dev": kv_tree(drafting[0].kv_device_per_request)}
            # each step's expected time from measured kernels (a tree per step, per KV dtype: the
            # attention tables are the KV dtype's), the programs' regimes as by_phase's
            by_phase["expected"] = {kv_dtype: {p: [expected(built[c], p, gpu, framework, kv_dtype) for c in classes[p]]
                                               for p in PHASES} for kv_dtype in grid.kv_dtypes}
            if modules:
                for kv_dtype in grid.kv_dtypes:
                    by_phase["expected"][kv_dtype]["mtp"] = {
                        p: [expected(drafting[c], p, gpu, framework, kv_dtype) for c in classes[p]] for p in PHASES}
            options.append({"gpu": gpu.key, "config": configs[key], "framework": framework,
                            "kv_dtypes": list(grid.kv_dtypes), "limits": list(limits),
                            "reserve": float(base.reserve_bytes_per_gpu), "overlap": base.options.overlap or "none",
                            # the steady-state capacity's paging and admission (engine.deploy.admission)
                            "admission": _admission(base.admission), **by_phase})
    kv_symbol = symbols.dim("kv_bytes")
    length = symbols.dim(symbols.LENGTH)

    def kv_terms(stack: str) -> dict:
        """Per part, the trees of a request's cache elements and own-dtype bytes in ``length``, each
        in the order of its compiled function (engine.language.kv.elements_per_request_fn and
        own_dtype_bytes_per_request_fn lambdify the same terms)."""
        out = {}
        for name, part in (("all", None), *((p, p) for p in kv.PARTS)):
            pair = []
            for term in kv.request_terms(ev.numeric, stack, part):
                printed = length_tree(term, length)
                if printed is None:
                    unordered.append(term)
                pair.append(to_tree(term) if printed is None else printed)
            out[name] = pair
        return out
    stored_kv = {"main": kv_terms("main"), **({MTP_STACK: kv_terms(MTP_STACK)} if modules else {})}
    kv_request = {}
    for name, part in (("all", None), *((p, p) for p in kv.PARTS)):
        elements, own = kv.request_terms(ev.numeric, part=part)
        kv_request[name] = to_tree(elements * kv_symbol + own)
    mtp = {}
    if modules:
        mtp = {"mtp_modules": modules, "tokens_per_step": str(TOKENS_PER_STEP), "kv_request_mtp": {}}
        for name, part in (("all", None), *((p, p) for p in kv.PARTS)):
            elements, own = kv.request_terms(ev.numeric, MTP_STACK, part)
            mtp["kv_request_mtp"][name] = to_tree(elements * kv_symbol + own)
    used = sorted({o["gpu"] for o in options})
    gpu_rows = {}
    for key in used:
        g = gpus[key]
        gpu_rows[key] = {"hbm_bytes": g.hbm_bytes, "hbm_bytes_per_s": g.hbm_bytes_per_s,
                         "scale_up": g.scale_up_bytes_per_s, "scale_out": g.scale_out_bytes_per_s,
                         "peaks": [g.peak_flops(d) for d in dtypes.items],
                         "alpha": [g.collective_latency(op, ranks, nodes) for op, ranks, nodes in colls.items]}
    return {"format": FORMAT, "model_id": ev.model.model_id, "max_context": int(ev.numeric.max_context),
            "budget": PREFILL_TOKENS, "hbm_fraction": HBM_FRACTION, "max_batch": MAX_BATCH, "batches": list(grid.batches),
            "kv_bytes": {d: kv.KV_DTYPE_BYTES[d] for d in grid.kv_dtypes}, "kv_request": kv_request, **mtp,
            "dtypes": dtypes.items, "colls": colls.items, "gpus": gpu_rows, "configs": config_rows,
            "options": options, "programs": programs.items, "trees": trees.items, "strings": strings.items,
            "expected": expected_lists.items, "lookups": lookups.items,
            "default_efficiency": DEFAULT_EFFICIENCY, "kv_terms": stored_kv, "evaluation_order": not unordered}


def document_json(doc: dict[str, Any]) -> str:
    """``json.dumps(doc, separators=(",", ":"))``'s text for :func:`model_export`'s document, each
    distinct step row encoded once: the programs are most of the text (DeepSeek-V3: 0.77 of its
    1.1 MB) and repeat few rows, which the document holds as one shared list each
    (:func:`model_export`; any other document is encoded row by row, the same text). Without an
    indent a nested value's text does not depend on where it sits, so the document's text is its
    parts' texts joined as the encoder joins them."""
    texts: dict[int, str] = {}      # id(row) -> its text (the document holds every row alive)

    def row_text(row) -> str:
        text = texts.get(id(row))
        if text is None:
            text = texts[id(row)] = compact_json(row)
        return text

    def value_text(key: str, value) -> str:
        if key != "programs" or not isinstance(value, list):
            return compact_json(value)
        return "[" + ",".join("[" + ",".join(map(row_text, steps)) + "]" if isinstance(steps, (list, tuple))
                              else compact_json(steps) for steps in value) + "]"

    if not all(isinstance(k, str) for k in doc):      # (keys the encoder converts: its own text)
        return compact_json(doc)
    return "{" + ",".join(compact_json(k) + ":" + value_text(k, v) for k, v in doc.items()) + "}"


def _step_rows(program, members: dict, phase: str, lookup: Lookup, tree_index: Callable) -> list[int]:
    """Per step of ``program``, the index of its expected-time tree under ``lookup``
    (``tree_index(spec, step)``). A step without a kernel class has no spec under any lookup: the
    fallback tree, its index taken where the first such step meets it (the trees keep their order)."""
    rows, fallback = [], None
    for st, kernel in zip(program.steps, kernel_steps(program, members, phase)):
        if kernel:
            rows.append(tree_index(step_spec(st, lookup, members), st))
        else:
            if fallback is None:
                fallback = tree_index(None, st)
            rows.append(fallback)
    return rows


def _with_kv_steps(rows: list[int], program, members: dict, phase: str, lookup: Lookup,
                   tree_index: Callable) -> list[int]:
    """:func:`_step_rows` under ``lookup`` from ``rows``, the same program's rows under the same
    lookup with another KV dtype: only the steps whose kernel class reads the KV dtype
    (engine.deploy.kernel_spec.reads_kv_dtype) are asked again; every other step's Spec is the same
    value under both, so its tree is the one ``rows`` holds. The trees this adds are added in the
    order :func:`_step_rows` would add them (the others are in the table already)."""
    out = list(rows)
    steps = program.steps
    for i in kv_dtype_steps(program, members, phase):
        out[i] = tree_index(step_spec(steps[i], lookup, members), steps[i])
    return out


def _classes(limits: list[int], live: list[int]) -> list[int]:
    """Per regime of ``limits`` (engine.batch.grid_eval's: tokens exceed r of them; its representative
    token count is limits[r], or past the last), how many ``live`` limits that count exceeds."""
    reps = list(limits) + [limits[-1] + 1] if limits else [0]
    return [sum(1 for m in live if m < t) for t in reps]


def _admission(a) -> dict:
    """A framework's KV paging and admission policy as the deploy page reads it (the inputs of
    engine.deploy.rules.ADMISSION, which deploy_eval.js runs)."""
    return {"page_tokens": a.page_tokens, "free_fraction": a.free_fraction, "reserve_ratio": a.reserve_ratio,
            "reserve_clip_tokens": a.reserve_clip_tokens}
