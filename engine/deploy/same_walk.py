"""Models whose placements are the same: a family's fine-tunes (DeepSeek-R1 of DeepSeek-V3, GLM-5.1
of GLM-5) walk to the same tables under both bindings, but for the model's name and the source
lines the rows cite.

Layer: engine.deploy (on engine.language). The planner keys its placements of one model
(:func:`engine.deploy.planner.place` and ``_placed_stage``, and the rows a stage placement may
repeat, ``_library``) by :func:`placing_key`: the first recent owner of placements whose
placements are equal to this one's, else this one. A build runs a family's models back to back in
one worker (engine/batch/families.py), so the second model is handed the first one's placed
programs, and with them what every memo keyed by those objects holds (fused and compiled programs,
memory figures, the measured lookups, the export's and the search's tables): each is a function of
the objects it is keyed by, whichever model asks.

Invariant: two Evaluations share a key only where everything placing reads is equal: the numeric
and symbolic Analysis field by field (every ``where``, a spec's source line that only error
messages print, ``Analysis.model_id`` and ``Analysis.max_context`` left out: :data:`UNPLACED`;
everything else kept), the corpus object (its dims table), and the quant context the weight
format stores the rows under (``storage.leaf_storage`` reads the spec's quant alone). Placing is
a function of those, its mesh and its decisions (themselves functions of the numeric values), so
the placed programs are equal (tests/test_struct_speed8.py builds a fine-tune after its base and
placed afresh and compares every file; the whole corpus's files are the same, docs/scaling.md).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

#: The Analysis fields placing never reads. ``model_id`` is a name. ``max_context`` is read by no
#: placement, fusion, compilation or memo keyed by their objects (engine.deploy reads it only as
#: ``Structure.max_context``, from the structure's own Evaluation, which
#: ``StructureCache``/``build_structure`` take from the model asking, never from the placements'
#: owner); the grid, the sizing and the export read it from their own Evaluation
#: (tests/test_struct_tenth_pass.py: MiniMax-M2.7, M2.5 but for it, after M2.5 writes what it writes alone).
UNPLACED = frozenset({"model_id", "max_context"})

#: The owners of placements seen lately (Evaluations keyed by themselves), the latest last: a
#: worker's family chain runs back to back, so the last one is the one to compare with (a few kept:
#: the playground places other analyses).
_OWNERS: list = []
_KEPT = 3

#: (id(ev), weight format) -> (ev, the Evaluation its placements are keyed by)
_KEYS: dict[tuple, tuple] = {}


def placing_key(ev, weight_format: str, quant_of):
    """The Evaluation whose placements under ``weight_format`` are ``ev``'s (see the module doc):
    an earlier owner of :data:`_OWNERS` with equal walks and quant, else ``ev``. ``quant_of(ev,
    weight_format)``: the quant context the format stores ``ev``'s rows under (a SpecError for a
    format ``ev`` does not publish propagates: the caller places nothing)."""
    hit = _KEYS.get((id(ev), weight_format))
    if hit is not None and hit[0] is ev:
        return hit[1]
    mine = quant_of(ev, weight_format)
    found = next((other for other in _OWNERS if other is not ev and other.corpus is ev.corpus
                  and _quant(quant_of, other, weight_format) == mine and _same_placing(other, ev)), ev)
    if found is ev and not any(other is ev for other in _OWNERS):
        _OWNERS.append(ev)           # only owners are compared with: a family's third model finds the first
        del _OWNERS[:-_KEPT]
    if len(_KEYS) > 64:
        _KEYS.clear()
    _KEYS[(id(ev), weight_format)] = (ev, found)
    return found


def _quant(quant_of, ev, weight_format: str):
    """``quant_of`` of another model's, or None where it does not publish the format."""
    from engine.language.errors import SpecError
    try:
        return quant_of(ev, weight_format)
    except SpecError:
        return None


def _same_placing(a, b) -> bool:
    """Whether two Evaluations' walks are equal under both bindings but for names and source lines."""
    return all(same_walk(getattr(a, binding), getattr(b, binding)) for binding in ("numeric", "symbolic"))


def same_walk(a, b) -> bool:
    """Two Analyses equal field by field, but for :data:`UNPLACED` and every record's ``where``."""
    return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name))
                                      for f in dataclasses.fields(a) if f.name not in UNPLACED)


def _same(x, y) -> bool:
    """``x == y`` with every dataclass inside compared without its ``where`` field."""
    if x is y:
        return True
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return type(x) is type(y) and all(_same(getattr(x, f.name), getattr(y, f.name))
                                          for f in dataclasses.fields(x) if f.name != "where")
    if isinstance(x, Mapping):
        # in the same order too: placing walks the rows in their table's order
        return isinstance(y, Mapping) and list(x) == list(y) and all(_same(v, y[k]) for k, v in x.items())
    if isinstance(x, (tuple, list)):
        return type(x) is type(y) and len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y))
    return x == y
