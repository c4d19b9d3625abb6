"""The playground's live picks (:func:`model_playground`, one file per corpus model) and its
document (:func:`playground_document`, results/variants.json).

Layer: engine.playground, the top of it (on :mod:`.variant`'s comparison, :mod:`.catalog`'s
slots and formulas and :mod:`.sites`' walks). Any slot x fitting library component of a base, its
change to the numbers exported as formula trees over the dims so the page recomputes it as the
reader binds them. The new filler is walked only where the base walks the slot (its recorded
sites), shared between sites and models with the same scope; the variant's whole walk
(:func:`engine.playground.sites.changed_parts`) is the reference and the fallback where a layer
stream crosses the sites. ``archledger edit`` (old -> new of one variant) is :mod:`.variant`.
"""
from __future__ import annotations

import json
import functools
from typing import Any

from engine.deploy.fusion_table import load_tables
from engine.language import formula_tree, symbols
from engine.language import variants as variant_rules
from engine.language.api import Evaluation
from engine.language.corpus import Corpus
from engine.language.errors import SpecError
from engine.language.evaluate import Binding, Walker, walk_model
from engine.language.ir import Fill, ModelSpec
from engine.playground.trees import free_names
from engine.playground.catalog import (PLAYGROUND, RECOMPUTED, catalog, component_dims, environment, model_slots,
                                       playground_entry)
from engine.playground.sites import (PLACEHOLDER, _PAGE, _REPEAT, _NoStreams, _Sites, _Streams, _old_at_sites,
                                     _site_formulas, _sum_of_parts, _under, changed_parts, site_bytes, site_walk)
from engine.playground.variant import swap_text  # noqa: F401  (engine/batch/corpus_tables.py writes each variant's swaps with it)


# -- the playground's data (results/variants.json) -------------------------------------------------


# -- any catalog pick, live: results/playground/<org--name>.json ----------------------------------


class Picks:
    """What the picks of one base model share: the base's slot sites (recorded by its symbolic walk,
    :class:`_Sites`), a walker of the base for the new fillers, the old fillers' numbers per slot
    (``old``) and the new fillers' numbers per distinct site (``blocks``: the page evaluates them)."""

    def __init__(self, ev: Evaluation, sites: dict[str, dict[str, tuple]]):
        self.ev, self.sites = ev, sites
        self.walker = Walker(ev.corpus, ev.model, Binding("symbolic"))
        self.walker.model_dims()
        self.walker.layer_ctx = _NoStreams()
        self.old: dict[str, Any] = {}
        self.blocks: list[dict] = []
        self._index: dict[tuple, int] = {}
        self.walks: dict[tuple, tuple] = {}    # (slot, component) -> (needs, its sites, their walks): the site route
        self.whole: dict[tuple, tuple] = {}    # (slot, component) -> (variant spec, its symbolic walk): the others
        self.walked: dict[tuple, dict] = {}    # (slot, component) -> site uid -> its site walk's rows, caches, outputs, bytes
        self.was: dict[tuple, dict] = {}       # (base row uids, ids of its caches, kv dtype) -> _sum_of_parts of them

    def block(self, key: tuple, trees: dict) -> int:
        if key not in self._index:
            self._index[key] = len(self.blocks)
            self.blocks.append(trees)
        return self._index[key]


def pick(ev: Evaluation, slot: str, component: str, kv_dtype: str = "bf16",
         shared: Picks | None = None) -> dict[str, Any]:
    """One catalog pick of the playground: ``component`` in ``slot`` of every layer template of
    ``ev``'s model reaching it (the variant ``archledger edit MODEL --swap 'layers[..].SLOT=COMPONENT'``
    makes). Returns the templates swapped, the dims the component needs that the base does not
    bind, and how each number of :data:`RECOMPUTED` changes (the new side is the base's number
    plus the change; formula trees over the base's dims, the needed dims and the scenario):

    * ``sites``: [[block, layer count tree, template], ...] (with ``shared``, when no layer
      stream crosses the slot's sites): at each place the base walks the slot, the new filler's
      numbers (``shared.blocks[block]`` at ``site_repeat`` = that count) replace the old filler's
      (``shared.old[slot]["templates"]``, per template); ``tickable``: no stream touches the
      sites, so the reader may swap some of the templates only (the sum over those);
    * else ``delta``: new - old from the variant's whole symbolic walk (the reference: the two
      agree on every pick of the corpus, tests/test_site_playground_any.py);

    or ``{"error": ...}`` when the swap does not resolve or walk (one line, as ``edit`` prints it)."""
    corpus, base = ev.corpus, ev.model
    swap = variant_rules.Swap(slot, (), Fill(component, _PAGE, {}), _PAGE)
    out: dict[str, Any] = {}
    try:
        needs = variant_rules.missing_dims(corpus, base, [swap])
        binds = [variant_rules.Bind(d, PLACEHOLDER, "placeholder", _PAGE) for d in needs]
        variant = variant_rules.resolve(corpus, "pick", base.model_id, [swap], binds, _PAGE)
        if shared is not None:
            mine = {u: site for u, site in shared.sites.get(slot, {}).items() if site[4] in variant.changed}
            if slot not in shared.old:
                shared.old[slot] = _old_at_sites(ev, mine, kv_dtype)
            if shared.old[slot] is not None:
                try:
                    # every number of RECOMPUTED is the main stack's: a site in another (MTP) is
                    # walked (the filler must fit there too) but counts nothing
                    walked = {}       # site uid -> its walk's (key, index) in _SITE_CACHE
                    for uid, site in mine.items():
                        if site[2].stack != "main":
                            walked[uid] = _site_formulas(ev, shared.walker, component, site, uid, needs, kv_dtype,
                                                         counted=False)[0][:2]
                    out["sites"] = []
                    for uid, site in mine.items():
                        if site[2].stack == "main":
                            ident, trees = _site_formulas(ev, shared.walker, component, site, uid, needs, kv_dtype)
                            walked[uid] = ident[:2]
                            out["sites"].append([shared.block(ident, trees), formula_tree.to_tree(site[2].repeat),
                                                 site[4]])
                    out["tickable"] = shared.old[slot]["tickable"]
                    shared.walks[(slot, component)] = (needs, mine, walked)      # the SOL's site route
                except _Streams:
                    out = {}
        if not out:
            whole = walk_model(corpus, variant.spec, Binding("symbolic"))
            if shared is not None:     # the SOL's whole route plans this walk
                shared.whole[(slot, component)] = (variant.spec, whole)
            old_part, new_part = changed_parts(ev.symbolic, whole)
            # the base's rows a whole walk changes: the same for most whole-walk picks of a slot
            key = (tuple(old_part.rows), tuple(id(c) for c in old_part.caches), kv_dtype)   # the base's own rows
            was = shared.was.get(key) if shared is not None else None
            if was is None:
                was = _sum_of_parts(old_part, base, corpus, kv_dtype)
                if shared is not None:
                    shared.was[key] = was
            now = _sum_of_parts(new_part, variant.spec, corpus, kv_dtype)
            out["delta"] = {k: formula_tree.to_tree(now[k] - was[k]) for k in RECOMPUTED}
    except SpecError as exc:
        return {"error": exc.problem}
    trees = list(out.get("delta", {}).values())
    for b, r, _ in out.get("sites", []):
        trees += [*shared.blocks[b].values(), r]
    free = set().union(*(free_names(t) for t in trees)) - {_REPEAT.name}     # memoized: a slot's picks share blocks
    known = set(ev.bound) | set(needs) | {symbols.BATCH, symbols.SEQ, symbols.CTX, symbols.LENGTH}
    if free - known:   # a symbol the page could not bind: say so rather than show a wrong number
        return {"error": f"the swapped model reads {', '.join(sorted(free - known))}, which the page cannot bind"}
    templates = list(variant.changed)
    return {"templates": templates, "needs": needs, "swap": f"layers[{','.join(templates)}].{slot}={component}", **out}


def pick_change(doc: dict, p: dict, env: dict[str, float], slot: str,
                templates: list[str] | None = None) -> dict[str, float]:
    """new - old of each number of a pick of :func:`model_playground`'s ``doc`` at ``env`` (the
    reader's dims and the scenario on top of ``doc["env"]``), the component swapped into
    ``templates`` only (default: all the pick's; a subset needs ``p["tickable"]``): in Python what
    static/js/playground.js computes, for the tests."""
    if "delta" in p:
        assert templates is None or set(templates) == set(p["templates"]), "a whole-walk pick swaps all its templates"
        return {k: formula_tree.evaluate(t, env) for k, t in p["delta"].items()}
    chosen = set(p["templates"] if templates is None else templates)
    assert chosen == set(p["templates"]) or p["tickable"], "a stream touches this slot: all templates or none"
    out = {k: 0.0 for k in RECOMPUTED}
    for template, trees in doc["old"][slot]["templates"].items():
        if template in chosen:
            for k, t in trees.items():
                out[k] -= formula_tree.evaluate(t, env)
    for block, repeat, template in p["sites"]:
        if template in chosen:
            at = {**env, _REPEAT.name: formula_tree.evaluate(repeat, env)}
            for k, t in doc["blocks"][block].items():
                out[k] += formula_tree.evaluate(t, at)
    return out


def sites_of(ev: Evaluation) -> dict[str, dict[str, tuple]]:
    """The base's slot sites, by another symbolic walk (the build has them: :func:`evaluate_with_sites`)."""
    recorder = _Sites(ev.corpus, ev.model)
    recorder.walk()
    return recorder.sites


def evaluate_with_sites(corpus: Corpus, model: ModelSpec) -> tuple[Evaluation, dict]:
    """:func:`engine.language.api.evaluate_spec` whose symbolic walk also records the slot sites (the
    same Walker, so the same analysis), and those sites."""
    recorder = _Sites(corpus, model)
    symbolic = recorder.walk()
    return Evaluation(model, corpus, walk_model(corpus, model, Binding("numeric")), symbolic), recorder.sites


@functools.lru_cache(maxsize=2)
def _tables(root):
    return load_tables(root)


@functools.lru_cache(maxsize=1)
def _default_gpus():
    from engine.deploy.hardware import load_gpus
    return load_gpus()


_USED: dict[int, tuple] = {}     # id(corpus) -> (corpus, component_dims): one per process


def prefill_values(corpus: Corpus, component: str, needs: list[str]) -> dict[str, int]:
    """The page's pre-fill of each dim a pick needs: the first corpus model's value using the same
    component (:func:`component_dims`), else :data:`PLACEHOLDER` (the page leaves it empty)."""
    if id(corpus) not in _USED or _USED[id(corpus)][0] is not corpus:
        _USED.clear()
        _USED[id(corpus)] = (corpus, component_dims(corpus))
    used = _USED[id(corpus)][1].get(component, {})
    return {d: used[d][0]["value"] if used.get(d) else PLACEHOLDER for d in needs}


def template_subsets(p: dict) -> list[tuple[str, ...]]:
    """The layer templates the page lets the reader swap pick ``p`` into: every non-empty subset of
    its templates where it may tick some only (``tickable``), else all of them; each in the pick's
    order (the page keys its SOL entry by them joined with commas), the whole set first."""
    templates = tuple(p["templates"])
    if not p.get("tickable") or len(templates) < 2:
        return [templates]
    chosen = [tuple(t for i, t in enumerate(templates) if mask >> i & 1) for mask in range(1, 1 << len(templates))]
    return sorted(chosen, key=lambda s: -len(s))


def _pick_sol(bases, slot: str, component: str, p: dict, shared: Picks | None = None) -> dict[str, Any]:
    """The SOL times of pick ``p`` (engine.playground.playground_sol) at its pre-filled binding, per subset
    of its layer templates the page lets the reader tick (:func:`template_subsets`; key: the subset
    joined with commas): each the variant ``edit --swap 'layers[SUBSET].SLOT=COMPONENT'`` makes,
    by the site route where the pick has one and it applies, else from the variant's whole plan."""
    from engine.playground import playground_sol
    corpus, base = bases.ev.corpus, bases.ev.model
    values = prefill_values(corpus, component, p["needs"])
    subsets = template_subsets(p)
    if shared is not None and (slot, component) in shared.walks:
        needs, sites, walked = shared.walks[(slot, component)]
        try:
            rows = {uid: (*site_walk(*walked[uid], uid, site), site_bytes(bases.ev, *walked[uid], site))
                    for uid, site in sites.items()}
            shared.walked[(slot, component)] = rows       # the graph diff's block (_pick_blocks)
            found = playground_sol.site_sol(bases, needs, sites, rows, values, subsets)
        except (SpecError, _Streams):
            found = None
        if found is not None:
            return {",".join(chosen): entry for chosen, entry in found.items()}
    out = {}
    for chosen in subsets:
        every = len(chosen) == len(p["templates"])
        try:
            if every and shared is not None and (slot, component) in shared.whole:
                spec, whole = shared.whole[(slot, component)]
            else:
                binds = [variant_rules.Bind(d, v, "pre-fill", _PAGE) for d, v in values.items()]
                swap = variant_rules.Swap(slot, () if every else chosen, Fill(component, _PAGE, {}), _PAGE)
                spec = variant_rules.resolve(corpus, "pick", base.model_id, [swap], binds, _PAGE).spec
                whole = walk_model(corpus, spec, Binding("symbolic"))
            found = playground_sol.whole_sol(bases, spec, whole, p["needs"], values)
            out[",".join(chosen)] = found if found is not None else \
                {"error": "a formula of this swap reads a symbol the page cannot bind"}
        except SpecError as exc:
            out[",".join(chosen)] = {"error": exc.problem}
    return out


def block_graph(rows: dict, uid: str) -> dict[str, Any]:
    """The new filler's block at site ``uid`` (``rows``: its rows there, from its site walk or the
    variant's whole walk) in the model document's form that site_builder.graphs.level_graph draws:
    its ops (uid, name, op, phases, inputs, output axes) and the sub-components they sit in (no
    badges: the walk is symbolic). The site draws the playground's graph diff from it (old: the
    base's document at ``uid``)."""
    ops = [{"uid": r.uid, "name": r.name, "op": r.op, "phases": sorted(r.phases), "inputs": list(r.inputs),
            "out_shape": [a.name for a in r.out.axes]} for r in rows.values() if _under(r.uid, uid)]
    inner = {r.component_uid: r.component for r in rows.values()
             if r.component_uid != uid and _under(r.component_uid, uid)}
    one = {"value": 1}
    return {"site": uid, "ops": ops, "caches": [],
            "components": [{"uid": u, "component": c, "template": "", "repeat": one, "instances": one, "active": one}
                           for u, c in sorted(inner.items())]}


def _pick_blocks(shared: Picks, slot: str, component: str, p: dict) -> list[dict]:
    """:func:`block_graph` of pick ``p`` at each of its main-stack sites (one per layer template:
    the old filler may differ between templates)."""
    if (slot, component) in shared.walks:
        _, sites, walked = shared.walks[(slot, component)]
        done = shared.walked.get((slot, component), {})
        return [block_graph(done[uid][0] if uid in done else site_walk(*walked[uid], uid, site)[0], uid)
                for uid, site in sites.items() if site[2].stack == "main"]
    if (slot, component) in shared.whole:
        whole = shared.whole[(slot, component)][1]
        return [block_graph(whole.rows, uid) for uid, site in shared.sites.get(slot, {}).items()
                if site[2].stack == "main" and site[4] in p["templates"]]
    return []


def model_playground(ev: Evaluation, context: int | None = None, sites: dict | None = None,
                     gpus: dict | None = None, only: set | None = None) -> dict[str, Any]:
    """``results/playground/<org--name>.json``: the base's :func:`formulas` as trees and their
    environment, :func:`pick` for every slot x fitting component of its catalog entry (a slot's
    only current filler excepted: nothing would change), the old fillers' numbers per slot
    (``old``) and the new fillers' per distinct site (``blocks``). Depends on the model's spec and
    snapshot, the component library, slots.yaml and the engine only (pre-fill values live in
    variants.json), so it is carried with the model's other results. ``sites``: the base's
    (:func:`evaluate_with_sites`), else recorded here; ``only``: just these (slot, component) picks
    (the tests'). Each pick also carries its SOL times (``sol``, engine.playground.playground_sol: one
    entry per subset of its layer templates the reader may tick, :func:`template_subsets`) on
    :data:`PLAYGROUND`'s GPU from ``gpus`` (default: gpus/), the base's in ``sol_base``."""
    context = context or PLAYGROUND["context"]
    slots = model_slots(ev.corpus, ev.model)
    shared = Picks(ev, sites if sites is not None else sites_of(ev))
    picks = {slot: {c: pick(ev, slot, c, PLAYGROUND["kv_dtype"], shared) for c in entry["fits"]
                    if entry["current"] != [c] and (only is None or (slot, c) in only)}
             for slot, entry in slots.items()}
    # the SOL times: the planner's programs at the page's setting (engine.playground.playground_sol)
    from engine.playground import playground_sol
    from engine.playground.playground_sol import Bases
    from engine.deploy.hardware import find_gpu
    gpu = find_gpu(gpus if gpus is not None else _default_gpus(), PLAYGROUND["gpu"])
    bases = Bases(ev, gpu, _tables(ev.corpus.root / "fusion").get(PLAYGROUND["framework"]), context,
                  PLAYGROUND["framework"], PLAYGROUND["kv_dtype"])
    for slot, chosen in picks.items():
        for component, p in chosen.items():
            if "error" not in p:
                p["sol"] = _pick_sol(bases, slot, component, p, shared)
    # the new filler's block as drawn in the graph diff (site_builder.playground_page._playground_diffs)
    graphs: list = []
    seen: dict[str, int] = {}
    for slot, chosen in picks.items():
        for component, p in chosen.items():
            for block in (_pick_blocks(shared, slot, component, p) if "error" not in p else []):
                text = json.dumps(block, sort_keys=True)
                if text not in seen:
                    seen[text] = len(graphs)
                    graphs.append(block)
                p.setdefault("graphs", []).append(seen[text])
    sol_trees = playground_sol.intern(picks)
    playground_sol.forget()
    return {"model_id": ev.model.model_id, "context": context,
            "formulas": {k: formula_tree.to_tree(f) for k, f in
                         _sum_of_parts(ev.symbolic, ev.model, ev.corpus, PLAYGROUND["kv_dtype"]).items()},
            "env": environment(ev, context), "picks": picks, "old": shared.old, "blocks": shared.blocks,
            "sol_base": bases.trees, "sol_trees": sol_trees,
            "sol_setting": {"gpu": PLAYGROUND["gpu"], "framework": PLAYGROUND["framework"], "context": context},
            "graphs": graphs,
            "repeat": _REPEAT.name, "recomputed": {k: list(v) for k, v in RECOMPUTED.items()}}


def playground_document(corpus: Corpus, gpus, chosen: list | None = None, evaluations: dict | None = None) -> dict[str, Any]:
    """``results/variants.json``: the variants' page data (``chosen``, default all) and the slot
    catalog; ``evaluations`` (if given) receives each variant's evaluation by name."""
    chosen = list(corpus.variants.values()) if chosen is None else chosen
    used = component_dims(corpus)
    return {"label": variant_rules.LABEL, "setting": PLAYGROUND,
            "variants": [playground_entry(corpus, v, gpus, used, evaluations) for v in chosen],
            "catalog": catalog(corpus), "used": used,
            "dims": {d: corpus.dims[d].doc for d in sorted({d for c in used.values() for d in c})},
            "contracts": {n: {"roles": list(c.roles), "doc": c.doc} for n, c in corpus.slot_contracts.items()}}
