"""Consistency of one walk's two bindings: every formula, evaluated at the numeric binding, equals
the number.

For every node of every model: FLOPs, parameters, counts, output shape and weight leaves; for
every cache entry its per-token size; and the model-level overview quantities. These are
consistency tests (the engine against itself): a wrong rule gives a wrong formula and the same
wrong number, and passes here. Correctness is checked against hand derivations and external facts
elsewhere (tests/test_models.py, tests/test_hf_oracle.py, tests/test_hand_*.py).
"""
from __future__ import annotations

import pytest
import sympy

from engine.language import symbols
from tests.conftest import EVERY_MODEL, MODEL_IDS

pytestmark = EVERY_MODEL      # every model's evaluation, on one worker


def _same(formula, number, bound) -> bool:
    """The formula at the binding minus the number is zero. Most formulas are a number once every dim
    is bound (sympy evaluates Max, ceiling, rationals on construction): their difference is a number,
    which expand returns unchanged, so only a difference that still holds symbols is expanded."""
    difference = formula.xreplace(bound) - number
    if difference.is_Number:
        return difference == 0
    return sympy.expand(sympy.expand(formula.xreplace(bound)) - number) == 0


@pytest.fixture(scope="module")
def bound_of():
    def make(ev):
        return {symbols.dim(k): v for k, v in ev.numeric.values.items()}
    return make


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_node_formula_equals_number(model_id, evaluation, bound_of):
    """Consistency: each node's symbolic FLOPs, params, counts, shapes and leaves at the numeric binding."""
    ev = evaluation(model_id)
    bound = bound_of(ev)
    assert ev.numeric.rows.keys() == ev.symbolic.rows.keys()
    for uid, number in ev.numeric.rows.items():
        formula = ev.symbolic.rows[uid]
        for field in ("flops", "params", "repeat", "instances", "active"):
            assert _same(getattr(formula, field), getattr(number, field), bound), (uid, field)
        assert formula.out.names() == number.out.names(), uid
        for f_axis, n_axis in zip(formula.out.axes, number.out.axes):
            assert _same(f_axis.size, n_axis.size, bound), (uid, f_axis.name)
        assert [leaf.key for leaf in formula.leaves] == [leaf.key for leaf in number.leaves]
        for f_leaf, n_leaf in zip(formula.leaves, number.leaves):
            assert _same(f_leaf.numel, n_leaf.numel, bound), (uid, f_leaf.key)
        assert formula.phases == number.phases and formula.axis_map == number.axis_map


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_cache_and_overview_formula_equals_number(model_id, evaluation, bound_of):
    """Consistency: cache entries and overview quantities, formula at the binding vs number."""
    ev = evaluation(model_id)
    bound = bound_of(ev)
    for f_cache, n_cache in zip(ev.symbolic.caches, ev.numeric.caches):
        assert f_cache.uid == n_cache.uid
        assert _same(f_cache.per_token, n_cache.per_token, bound)
        assert _same(f_cache.repeat, n_cache.repeat, bound)
    for key, quantity in ev.overview().items():
        items = quantity.items() if isinstance(quantity, dict) else [(key, quantity)]
        for name, q in items:
            assert _same(q.formula, q.value, bound), name
            assert not (q.value.free_symbols - {symbols.dim(d) for d in symbols.SCENARIO_DIMS}), name


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_formulas_are_in_dim_names(model_id, evaluation):
    """Consistency: symbolic params mention only the spec's dims (no stray numbers standing in for dims)."""
    ev = evaluation(model_id)
    q = ev.overview()["params_total"]
    names = {s.name for s in q.formula.free_symbols}
    assert names <= set(ev.numeric.values), names - set(ev.numeric.values)
    assert "hidden" in names
