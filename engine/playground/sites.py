"""Where a slot is walked: the sites of a base model's slots (their rows, caches and outputs under
a placeholder binding), and a new filler walked only there, shared between sites and models with
the same scope; :func:`changed_parts` (the variant's whole walk cut to what differs) is the
reference and the fallback where a layer stream crosses the sites.

Layer: engine.playground (on :mod:`engine.playground.catalog`'s formulas).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any
import sympy
from engine.language import formula_tree, storage, symbols
from engine.language import variants as variant_rules
from engine.language.api import Evaluation
from engine.language.corpus import Corpus
from engine.language.errors import Where
from engine.language.evaluate import Analysis, Binding, Walker
from engine.language.ir import Fill, ModelSpec
from engine.playground.catalog import RECOMPUTED, analysis_formulas


#: The value each dim a pick needs is bound to for its symbolic walk: the exported formulas keep
#: the dim free (the page binds the reader's value), so no number shown depends on it.
PLACEHOLDER = 64


_PAGE = Where("<playground>")


def changed_parts(old: Analysis, new: Analysis) -> tuple[Analysis, Analysis]:
    """Both analyses cut to what differs between them: the rows and cache entries one has and the
    other has not, or has unequal. Every number of :func:`analysis_formulas` is a sum over rows and
    caches, so new = old - (old's cut) + (new's cut) exactly."""
    rows_old = {u: r for u, r in old.rows.items() if new.rows.get(u) != r}
    rows_new = {u: r for u, r in new.rows.items() if old.rows.get(u) != r}
    caches_old = tuple(c for c in old.caches if c not in new.caches)
    caches_new = tuple(c for c in new.caches if c not in old.caches)
    return (replace(old, rows=rows_old, caches=caches_old), replace(new, rows=rows_new, caches=caches_new))


_CHUNK = 8     # rows per running sum: short enough that re-sorting its partial sums stays cheap


def _sum_of_parts(a: Analysis, model: ModelSpec, corpus: Corpus, kv_dtype: str) -> dict[str, sympy.Expr]:
    """:func:`analysis_formulas` of ``a`` as one sympy sum of those of its rows and cache entries in
    chunks (the same definitions; a running sum over all rows re-sorts every partial Add, which on
    a large model costs seconds)."""
    rows, caches = list(a.rows.items()), list(a.caches)
    parts = [replace(a, rows=dict(rows[i:i + _CHUNK]), caches=()) for i in range(0, len(rows), _CHUNK)]
    parts += [replace(a, rows={}, caches=tuple(caches[i:i + _CHUNK])) for i in range(0, len(caches), _CHUNK)]
    each = [analysis_formulas(part, model, corpus, kv_dtype, decode_seq=None) for part in parts]
    out = {k: sympy.Add(*(f[k] for f in each)) for k in RECOMPUTED}
    out["decode_flops"] = out["decode_flops"].subs(symbols.dim(symbols.SEQ), 1)
    return out


class _Sites(Walker):
    """The base's symbolic walk, recording each slot node it walks inside a layer template: the
    place a swap walks its new filler instead (node, inputs, scope, layer, template)."""

    def __init__(self, corpus: Corpus, model: ModelSpec):
        super().__init__(corpus, model, Binding("symbolic"))
        self.sites: dict[str, dict[str, tuple]] = {}
        self.template: str | None = None

    def _walk_layers(self, node, inputs, scope, uid, template, tag, layers, count_sym, whole, offset):
        outer, self.template = self.template, template
        try:
            return super()._walk_layers(node, inputs, scope, uid, template, tag, layers, count_sym, whole, offset)
        finally:
            self.template = outer

    def walk_node(self, node, inputs, scope, uid):
        if node.kind == "slot" and self.template is not None:   # a group walked again (it waited for a stream) overwrites
            self.sites.setdefault(node.target, {})[uid] = (node, inputs, scope, self.layer_index, self.template)
        return super().walk_node(node, inputs, scope, uid)


class _Streams(Exception):
    """The new filler publishes or reads a layer stream: only the whole walk can place it."""


class _NoStreams:
    """A site walk's stand-in for the layer stack's streams: any use sends the pick to the whole walk."""

    def publish(self, node, value):
        raise _Streams()

    def spec(self, node):
        raise _Streams()


def _under(uid: str, site: str) -> bool:
    return uid == site or uid.startswith(site + "/")


def _under_any(sites: list[str]):
    """``uid -> any(_under(uid, s) for s in sites)``, by one set lookup and one ``startswith``."""
    exact, prefixes = set(sites), tuple(s + "/" for s in sites)
    return lambda uid: uid in exact or uid.startswith(prefixes)


#: The layer count a site is walked at (substituted by each site's own: every number is linear in it).
_REPEAT = sympy.Symbol("site_repeat", positive=True, integer=True)


#: Site walks shared by every pick of a process (key -> [(config values read, rows, caches, quant
#: -> formula trees)]): the same component in the same scope, at the same module path, walks to the
#: same rows whichever model the scope is in, and with the same quant schemes to the same formulas.
#: One corpus at a time (:data:`_SITE_CORPUS`): a key names components and schemes, not their text.
_SITE_CACHE: dict[tuple, list[tuple[dict, dict, tuple, dict]]] = {}
_SITE_CORPUS: list = []      # [the corpus _SITE_CACHE's walks were made with]: kept, so no id is reused


#: (key, index) of :data:`_SITE_CACHE` -> the site uid, input uids and outputs it was walked with
#: (:func:`site_walk` relabels the rows for another site sharing the walk).
_SITE_WALKS: dict[tuple, tuple] = {}


def site_walk(key: tuple, index: int, uid: str, site: tuple) -> tuple[dict, list, list]:
    """The rows, caches and output uids of a cached site walk as walked at ``site`` (uid ``uid``):
    the uids under the walked site moved under ``uid``, its inputs' producers replaced by this
    site's, the layer count :data:`_REPEAT` by the site's own."""
    _, rows, caches, _ = _SITE_CACHE[key][index]
    uid0, inputs0, outputs = _SITE_WALKS[(key, index)]
    inputs = dict(zip(inputs0, [u for _, u in site[1]]))
    count = site[2].repeat

    def move(u: str) -> str:
        return uid + u[len(uid0):] if u == uid0 or u.startswith(uid0 + "/") else inputs.get(u, u)

    same = uid == uid0 and all(k == v for k, v in inputs.items())
    out_rows = {}
    for r in rows.values():
        r = replace(r, repeat=_at_repeat(r.repeat, count)) if same else \
            replace(r, uid=move(r.uid), inputs=tuple(move(i) for i in r.inputs), component_uid=move(r.component_uid),
                    repeat=_at_repeat(r.repeat, count))
        out_rows[r.uid] = r
    out_caches = [replace(c, uid=move(c.uid), node_uid=move(c.node_uid), repeat=_at_repeat(c.repeat, count))
                  for c in caches]
    return out_rows, out_caches, [move(u) for _, u in _flat_outputs(outputs)]


def site_bytes(ev: Evaluation, key: tuple, index: int, site: tuple) -> sympy.Expr:
    """Stored bytes (every stack) of a cached site walk's rows at ``site``'s layer count; computed
    once per walk and quant scheme (the walk's rows hold :data:`_REPEAT`)."""
    _, rows, _, trees = _SITE_CACHE[key][index]
    tag = ("bytes", _quant_key(ev.model))
    if tag not in trees:
        part = replace(ev.symbolic, rows=rows, caches=())
        trees[tag] = sympy.Add(*(t.total_bytes for t in storage.checkpoint_tensors(part, ev.model, ev.corpus)))
    at = (tag, site[2].repeat)        # the same walk at the same layer count: in many models
    if at not in trees:
        trees[at] = _subs(trees[tag], {_REPEAT: site[2].repeat})
    return trees[at]


def _quant_key(model: ModelSpec) -> str:
    """What a walk's stored bytes read of ``model``: its ``quant_context`` in file order (the first
    module-path pattern covering a leaf wins, so two orders of the same patterns may differ)."""
    return repr(list(model.quant.items()))


def _subs(value, mapping: dict):
    return value.xreplace(mapping) if isinstance(value, sympy.Basic) else value


_AT_REPEAT: dict[tuple, tuple] = {}     # (id(value), id(count)) -> (value, count, value at count): both kept


def _at_repeat(value, count):
    """``value`` with :data:`_REPEAT` put to ``count``, once per (value, count) object pair: a cached
    walk's rows are relabelled for every pick and site with the site's same count object."""
    if not isinstance(value, sympy.Basic):
        return value
    key = (id(value), id(count))
    hit = _AT_REPEAT.get(key)
    if hit is None or hit[0] is not value or hit[1] is not count:
        if len(_AT_REPEAT) > 100_000:
            _AT_REPEAT.clear()
        hit = _AT_REPEAT[key] = (value, count, value.xreplace({_REPEAT: count}))
    return hit[2]


def _flat_outputs(value) -> list:
    """The (tensor, uid) pairs of a walked value (a pair, or a dict of them)."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in _flat_outputs(v)]
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        return [value]
    return []


def _has_slots(corpus: Corpus, name: str, seen: frozenset = frozenset()) -> bool:
    spec = corpus.components.get(name)
    if spec is None or name in seen:
        return spec is None
    return any(n.kind == "slot" or (n.kind == "component" and _has_slots(corpus, n.target, seen | {name}))
               for n in spec.graph.values())


def _site_key(model: ModelSpec, corpus: Corpus, component: str, fill: Fill, node, inputs, scope, layer,
              kv_dtype: str) -> tuple:
    """Everything a site walk of ``fill`` reads besides config values (checked separately) and
    uids (:func:`site_walk` relabels them): a model dim bound to its own symbol is left out, since a
    dim the component reads is that symbol whether the base binds it or the page does.

    The module path (``scope.module``, with the fill's and node's ``module``/``modules`` and the
    scope's renames) is in the key although it is a label: it makes the rows' weight-leaf keys,
    and a model that stores layers by module-path pattern (``quant_context`` overrides such as
    ``model.layers.*.self_attn.q_proj``) weighs a leaf by its key (engine.language.storage.scheme_for).
    Without it an MTP layer at ``mtp.layers.{layer}.self_attn`` shared the walk another model made at
    ``model.layers.{layer}.self_attn``, and the playground's bytes depended on which model walked
    first (tests/test_family_chains.py)."""
    dims = tuple(sorted((k, str(v)) for k, v in scope.dims.items() if v != symbols.dim(k)))
    slots = repr(sorted(scope.slots.items())) if _has_slots(corpus, component) else ""
    per_layer = layer if any("layer" in str(t) for t in node.dims.values()) else None
    return (component, kv_dtype, repr(replace(fill, where=None)), scope.module, repr(node),
            repr([v for v, _ in inputs]), dims,
            repr(sorted(scope.options.items())), slots, str(scope.instances), str(scope.active), scope.stacked,
            repr(sorted(scope.renames.items())), scope.role, scope.component, scope.stack,
            tuple(sorted(scope.phases)), per_layer, tuple(sorted(model.drafts)))


def _config_matches(walker: Walker, values: dict) -> bool:
    try:
        return all(walker.config(path) == value for path, value in values.items())
    except KeyError:
        return False


def _site_formulas(ev: Evaluation, walker: Walker, component: str, site: tuple, uid: str, needs: list[str],
                   kv_dtype: str, counted: bool = True) -> tuple[tuple, dict[str, Any]] | None:
    """The new filler's numbers at one site as formula trees, with the site's layer count left as
    :data:`_REPEAT`: (the site's key, the trees), shared through :data:`_SITE_CACHE`. ``counted``
    False: the walk only (a site outside the main stack: nothing to count, but the filler must
    still walk there, as in the whole walk); no trees."""
    corpus = ev.corpus
    node, inputs, scope, layer, _ = site
    fill = variant_rules.inherit(Fill(component, _PAGE, {}), corpus.components[component], scope.slots[node.target])
    dims = {**{d: symbols.dim(d) for d in needs}, **scope.dims}      # a dim the base's scope binds stays the base's
    key = _site_key(ev.model, corpus, component, fill, node, inputs, scope, layer, kv_dtype)
    if not _SITE_CORPUS or _SITE_CORPUS[0] is not corpus:     # another corpus: its components may differ
        _SITE_CACHE.clear()
        _SITE_WALKS.clear()
        _SITE_CORPUS[:] = [corpus]
    entries = _SITE_CACHE.setdefault(key, [])
    for i, (values, rows, caches, trees) in enumerate(entries):
        if _config_matches(walker, values):
            break
    else:
        walker.rows, walker.caches, walker.components, walker.config_reads = {}, [], {}, set()
        walker.layer_index = layer
        outputs = walker.walk_component(node, fill, inputs, replace(scope, dims=dims, repeat=_REPEAT), uid)
        entries.append(({path: walker.config(path) for path in walker.config_reads}, dict(walker.rows),
                         tuple(walker.caches), {}))
        i, (_, rows, caches, trees) = len(entries) - 1, entries[-1]
        _SITE_WALKS[(key, i)] = (uid, [u for _, u in inputs], outputs)
    if not counted:
        return (key, i, None), None
    quant = _quant_key(ev.model)      # how the weights are stored: the weight bytes only
    if quant not in trees:
        part = replace(ev.symbolic, rows=rows, caches=caches)
        trees[quant] = {k: formula_tree.to_tree(f) for k, f in _sum_of_parts(part, ev.model, corpus, kv_dtype).items()}
    return (key, i, quant), trees[quant]


def _old_at_sites(ev: Evaluation, sites: dict[str, tuple], kv_dtype: str) -> dict[str, Any] | None:
    """The base's numbers of the rows under the sites, per layer template (``templates``: template
    -> trees), and whether the reader may swap some templates only (``tickable``: no layer stream
    touches the sites). None when a stream published inside the sites is read outside them (a
    swap would change the reader's rows too; a reader inside reading a producer outside is fine:
    the producer's rows do not depend on its readers)."""
    a = ev.symbolic

    def inside(uid: str) -> bool:
        return any(_under(uid, site) for site in sites)
    touched = False
    for stream in a.streams:
        readers = [*(r for _, r in stream.readers), *(p[-1] for p in stream.pairs)]
        produced_inside = any(inside(u) for _, u in stream.producers)
        if produced_inside and not all(inside(u) for u in readers):
            return None
        touched = touched or produced_inside or any(inside(u) for u in readers)
    out: dict[str, Any] = {}
    for template in dict.fromkeys(site[4] for site in sites.values()):
        mine = [u for u, site in sites.items() if site[4] == template]
        under = _under_any(mine)
        part = replace(a, rows={u: r for u, r in a.rows.items() if under(u)},
                       caches=tuple(c for c in a.caches if under(c.node_uid)))
        out[template] = {k: formula_tree.to_tree(f) for k, f in _sum_of_parts(part, ev.model, ev.corpus, kv_dtype).items()}
    return {"templates": out, "tickable": not touched}
