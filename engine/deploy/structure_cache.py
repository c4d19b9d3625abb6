"""One model's placements and compiled structures, shared by every evaluation of it in a process.

Layer: engine.deploy (on planner and fusion). The grid evaluation (:mod:`engine.batch.grid_eval`)
and plan's search (:func:`engine.serving.sizing.search`, the build's sizing step) compile the same
(config, domain, framework, fusion regime) structures of one model on the same GPUs; a
:class:`StructureCache` passed to both builds each once.

Keys (why two lookups give the same structure):

* a placement depends on the config, the scale-up domain *as placement sees it*
  (:func:`placement_domain`: every domain holding all the config's GPUs places alike) and the
  options that change placed programs (activation dtype, weight format, MTP drafts);
* a structure also on the framework's fusion table and on which of its rules can match: the grid
  keys it by the rules the GPU's arch admits (:func:`signature`) and, per phase, by how many of
  all the table's ``max_tokens`` limits the tokens per device exceed
  (:func:`engine.deploy.fusion_table.token_limits`); the search by, per phase, the rules whose
  token-free conditions hold for the GPU and config (:func:`engine.deploy.fusion_table.live_rules`) and
  how many of *their* limits the tokens exceed (the live regime). A rule that is not live never
  matches whatever the tokens, and a live rule matches at a token count exactly when it matches
  at its regime's representative count; so a grid structure and the live key its representative
  token counts fall in fuse exactly the same rules, and every structure is also filed under its
  live key, the one the search asks for (GPUs of different archs whose live rules agree, e.g.
  every arch-bound rule needing TP >= 2 at TP 1, share it).

Invariant: a structure returned for a key is one :func:`engine.deploy.planner.build_structure` built
for tokens in the key's regimes, from placements of the key's config and domain class; the numeric
programs, weights and KV are the same whichever caller built it first. Structures built without
formulas (the search prints none: the numeric placement stands in for the symbolic one) are never
handed to a caller asking for formulas (it gets them rebuilt with the symbolic placement). The
search's structures whose every field is the same object (or equal number) are one object
(:meth:`StructureCache._one_of`).
"""
from __future__ import annotations

import copy
from dataclasses import replace

from engine.language.api import Evaluation
from engine.deploy.step_functions import KV_BYTES
from engine.deploy.fusion_table import FusionTable, live_rules, live_token_limits, representative_tokens, token_limits
from engine.deploy.planner import build_structure, fused_memo, place, with_mtp
from engine.deploy.stage_memory import _memory
# regime: defined beside tokens_per_device (what it counts); read here by its importers
from engine.deploy.structure import LENGTH, MTP_STACK, PHASES, Options, Structure, regime  # noqa: F401


def placement_domain(config, domain: int) -> int:
    """The scale-up domain as placement sees it: a domain holding every GPU of the config (an
    8-GPU config in an 8- or a 72-GPU domain) puts every collective on the scale-up link in one
    node (:meth:`engine.deploy.parallel.Mesh.link`, ``extent``: a group spans at most the config's
    GPUs), so all such domains give the same programs and share one placement and compilation."""
    return min(domain, config.n_gpus)


def signature(table: FusionTable | None, gpu) -> tuple:
    """The enabled rules whose arch condition admits this GPU (GPUs with equal signatures fuse alike)."""
    if table is None:
        return ()
    return tuple(r.name for r in table.rules if r.enabled and ("arch" not in r.when or gpu.arch in r.when["arch"]))


def placed_options(options: Options) -> tuple:
    """The options a placement and a structure's numbers depend on (besides framework): the rest
    (KV dtype, HBM fraction, prefill budget) are arguments of the evaluation, not of the programs."""
    return (options.act_dtype, options.weight_format, options.mtp_tokens, options.mtp_acceptance)


class StructureCache:
    """Placements and structures of one model (``ev``) under the fusion ``tables`` (framework ->
    table), built on first request. Not thread-safe; one per model evaluation."""

    def __init__(self, ev: Evaluation, tables: dict[str, FusionTable]):
        self.ev, self.tables = ev, tables
        self._placements: dict[tuple, tuple] = {}   # (config, wide, options) -> (numeric, symbolic | None)
        # (structure, built with formulas?) per wide-domain key (full regimes), and per the grid's key
        # (this GPU's domain as the label)
        self._shared: dict[tuple, tuple[Structure, bool]] = {}
        self._by_domain: dict[tuple, tuple[Structure, bool]] = {}
        self._live: dict[tuple, Structure] = {}       # the search's key (live regimes)
        self._rules: dict[tuple, tuple] = {}         # (framework, arch, config) -> live rule names per phase
        # build_structure's fused and compiled programs: the owner's of the placements (fused_memo),
        # taken on the first structure built
        self._fused_memo: dict[tuple, tuple] | None = None
        self._drafting: dict[tuple, Structure] = {}   # the deploy page's MTP draft structures
        self._kv: dict[tuple, float] = {}             # (KV expression, length, kv bytes) -> bytes
        self._same: dict[tuple, Structure] = {}       # the search's structures by content (_one_of)
        self.built = 0                                # structures compiled (for measurements)

    # -- placements -------------------------------------------------------------------------------
    def placements(self, config, domain: int, options: Options, formulas: bool) -> tuple:
        """(numeric, symbolic) placements; without ``formulas`` the numeric one stands in for both."""
        opt = placed_options(options)
        pkey = (config, placement_domain(config, domain), opt)
        found = self._placements.get(pkey)
        base = Options(act_dtype=options.act_dtype, weight_format=options.weight_format,
                       mtp_tokens=options.mtp_tokens, mtp_acceptance=options.mtp_acceptance)
        if found is None:
            numeric = place(self.ev, config, domain, base, False)
            found = self._placements[pkey] = (numeric, place(self.ev, config, domain, base, True) if formulas else None)
        elif formulas and found[1] is None:
            found = self._placements[pkey] = (found[0], place(self.ev, config, domain, base, True))
        return found if found[1] is not None else (found[0], found[0])

    def memory(self, config, domain: int, options: Options) -> tuple:
        """(weights per GPU, KV bytes per request per GPU as an expression in ``length`` and
        ``kv_bytes``) of the config's placements: the figures every structure of them carries
        (:func:`engine.deploy.planner.build_structure` takes them from the same function), without
        fusing or compiling anything."""
        numeric, symbolic = self.placements(config, domain, options, False)
        weights, _, kv_dev = _memory(self.ev, config, options, numeric, symbolic)
        return weights, kv_dev

    def kv_at(self, kv_dev, length: int, kv_bytes: float) -> float:
        """``kv_dev`` (:meth:`memory`'s KV expression) at ``length`` and ``kv_bytes``, by sympy's
        ``subs`` (exact, then one rounding to float), once per expression and values: the search asks it per GPU type and
        framework, and every GPU type of a domain class shares the placement's expression (equal
        expressions give equal values)."""
        key = (kv_dev, length, kv_bytes)
        found = self._kv.get(key)
        if found is None:
            found = self._kv[key] = float(kv_dev.subs({LENGTH: length, KV_BYTES: kv_bytes}))
        return found

    def _build(self, config, domain: int, framework: str, gpu, tokens: dict, options: Options,
               formulas: bool) -> Structure:
        self.built += 1
        table = self.tables.get(framework)
        return build_structure(self.ev, config, replace(options, framework=framework), domain, table, gpu, tokens,
                               self.placements(config, domain, options, formulas), self._fused())

    def _fused(self) -> dict:
        """build_structure's memo of fused and compiled programs: shared with a fine-tune's base
        (:func:`engine.deploy.planner.fused_memo`), taken when the first structure is built."""
        if self._fused_memo is None:
            self._fused_memo = fused_memo(self.ev)
        return self._fused_memo

    # -- the grid's lookup --------------------------------------------------------------------------
    def structure(self, config, domain: int, framework: str, gpu, regimes: tuple,
                  options: Options = Options(), formulas: bool = True) -> Structure:
        """The structure of ``regimes`` (per phase, how many of :func:`token_limits` of the
        framework's table the tokens per device exceed), labelled with ``domain``."""
        table = self.tables.get(framework)
        sig, opt = signature(table, gpu), placed_options(options)
        key = (config, domain, framework, sig, regimes, opt)
        found = self._by_domain.get(key)
        if found is not None and (found[1] or not formulas):
            return found[0]
        wide = placement_domain(config, domain)
        skey = (config, wide, framework, sig, regimes, opt)
        shared = self._shared.get(skey)
        if shared is None or (formulas and not shared[1]):
            limits = token_limits(table)
            tokens = {p: representative_tokens(limits, r) for p, r in zip(PHASES, regimes)}
            shared = self._shared[skey] = (self._build(config, domain, framework, gpu, tokens, options, formulas),
                                           formulas)
            self._file_live(shared[0], config, domain, framework, options, gpu, tokens)
        s = _labelled(shared[0], domain)
        self._by_domain[key] = (s, shared[1])
        return s

    # -- the deploy page's MTP drafts --------------------------------------------------------------
    def drafting(self, config, domain: int, framework: str, gpu, regimes: tuple, mtp: int) -> Structure:
        """The structure ``archledger deploy --mtp`` builds at the grid's ``regimes``, with only its
        draft steps in the programs (engine.deploy.planner.with_mtp over the main placements emptied
        of their steps: their layouts and stored weights stay, for the memory figures), fused
        alone and not compiled: the deploy page's export adds them to the main programs it has."""
        table = self.tables.get(framework)
        wide = placement_domain(config, domain)
        key = (config, wide, framework, signature(table, gpu), tuple(regimes), mtp)
        s = self._drafting.get(key)
        if s is None:
            pkey = (config, wide, ("drafts", mtp))
            if pkey not in self._placements:
                self._placements[pkey] = _drafts(self.ev, config, domain, self.placements(config, domain, Options(), True),
                                                 mtp)
            limits = token_limits(table)
            tokens = {p: representative_tokens(limits, r) for p, r in zip(PHASES, regimes)}
            s = self._drafting[key] = build_structure(
                self.ev, config, Options(framework=framework, mtp_tokens=mtp), domain, table, gpu, tokens,
                self._placements[pkey], self._fused(), compile=False)
        if s.domain != domain:            # relabelled once per domain, and kept (callers key on identity)
            s = self._drafting.setdefault(key + (domain,), _labelled(s, domain))
        return s

    # -- the search's lookup ----------------------------------------------------------------------
    def live_structure(self, config, domain: int, framework: str, gpu, regimes: tuple,
                       options: Options = Options()) -> Structure:
        """The structure of live ``regimes`` (per phase, how many of :func:`live_token_limits` the
        tokens per device exceed): any structure built for tokens in those regimes (module doc)."""
        table = self.tables.get(framework)
        key = self._live_key(config, domain, framework, gpu, regimes, options)
        s = self._live.get(key)
        if s is None:
            tokens = {p: representative_tokens(live_token_limits(table, gpu, config, p), r)
                      for p, r in zip(PHASES, regimes)}
            s = self._live[key] = self._one_of(self._build(config, domain, framework, gpu, tokens, options, False))
        return s

    def _one_of(self, s: Structure) -> Structure:
        """The first structure the search got whose every field is the same as ``s``'s (the same
        objects, equal numbers), or ``s``: live regimes that fuse alike build the same programs
        (planner._fused's memo hands back the very objects), and the search evaluates each
        structure object once over all its points (sizing._Evaluator.evaluate), so equal ones
        are one object. The kept structure holds every object its key names by id."""
        key = (s.config, s.domain, s.options, s.weight_bytes_per_gpu, id(s.weight_formula),
               id(s.kv_device_per_request), s.reserve_bytes_per_gpu, s.admission,
               *((id(s.programs[p]), id(s.formulas[p]), id(s.unfused[p]), id(s.unfused_formulas[p]),
                  id(s.compiled.get(p))) for p in PHASES), len(s.programs), len(s.compiled))
        return self._same.setdefault(key, s)

    def _live_key(self, config, domain: int, framework: str, gpu, regimes: tuple, options: Options) -> tuple:
        """Per phase, the names of the rules that can match (:func:`live_rules`) and the live regime:
        GPUs of different archs whose live rules agree (e.g. where every arch-bound rule needs TP >= 2
        and the config has TP 1) share the structure."""
        rkey = (framework, gpu.arch, config)
        rules = self._rules.get(rkey)
        if rules is None:
            table = self.tables.get(framework)
            rules = self._rules[rkey] = tuple(tuple(r.name for r in live_rules(table, gpu, config, p)) for p in PHASES)
        return (config, placement_domain(config, domain), framework, rules, tuple(regimes), placed_options(options))

    def _file_live(self, s: Structure, config, domain: int, framework: str, options: Options, gpu,
                   tokens: dict) -> None:
        """File a structure built for ``tokens`` under its live key too (first one wins: all equal)."""
        table = self.tables.get(framework)
        live = tuple(regime(live_token_limits(table, gpu, config, p), tokens[p]) for p in PHASES)
        key = self._live_key(config, domain, framework, gpu, live, options)
        if key not in self._live:
            self._live[key] = self._one_of(s)


#: (id(main numeric placements), id(main symbolic placements), k) -> (them, the draft placements):
#: see :func:`_drafts`.
_DRAFTS: dict[tuple, tuple] = {}


def _drafts(ev: Evaluation, config, domain: int, main: tuple, mtp: int) -> tuple:
    """(numeric, symbolic) placements of :meth:`StructureCache.drafting`: ``main``'s (the config's
    placements, emptied of their steps) with ``mtp`` draft tokens of the MTP stack's placements.
    Once per pair of main placement objects: a fine-tune after its base is handed the base's
    (engine.deploy.planner.place, keyed by the owner of placements), and so its draft programs,
    whose fused forms the shared memo then holds (engine.deploy.planner.fused_memo)."""
    key = (id(main[0]), id(main[1]), mtp)
    hit = _DRAFTS.get(key)
    if hit is not None and hit[0] is main[0] and hit[1] is main[1]:
        return hit[2]
    out = tuple(with_mtp({p: (replace(program, steps=()), placer) for p, (program, placer) in main[i].items()},
                         place(ev, config, domain, Options(framework="none"), symbolic, MTP_STACK),
                         ev.symbolic if symbolic else ev.numeric, mtp)
                for i, symbolic in enumerate((False, True)))
    if len(_DRAFTS) > 1024:          # the configs of a model or two
        _DRAFTS.clear()
    _DRAFTS[key] = (main[0], main[1], out)
    return out


def _labelled(s: Structure, domain: int) -> Structure:
    """``s`` itself, or a shallow copy labelled with this GPU's scale-up ``domain`` (the same
    programs: placement saw a domain holding the whole config either way)."""
    if s.domain == domain:
        return s
    s = copy.copy(s)
    s.domain = domain
    return s

