"""Memoized walks of formula trees: free names, JSON text, binding, folding and the sums the
playground's SOL export builds its trees with.

Layer: engine.playground (on engine.language.formula_tree's node types). A pick's trees share their
sub-trees by object: the bound step formulas (_BOUND), the base's steps, a template's delta in
each of the pick's subsets. Nothing mutates a tree (:func:`bind_tree` and :func:`_fold` build new
ones), so a walk's result can be kept per list object; each memo holds the tree it is keyed by
(its id is not reused while the entry lives) and is emptied when it grows large
(:func:`engine.playground.playground_sol.forget` after each model).
"""
from __future__ import annotations

import json
from typing import Any
import sympy
from engine.language import formula_tree


_NAMES: dict[int, tuple] = {}     # id(list) -> (the list, its free names)


_TEXTS: dict[int, tuple] = {}     # id(list) -> (the list, its JSON text)


_NO_NAMES: frozenset = frozenset()


def free_names(tree: Any) -> frozenset:
    """:func:`engine.language.formula_tree.free_names` (the same set), memoized per list object."""
    kind = type(tree)
    if kind is str:
        return frozenset((tree,))
    if kind is not list:
        return _NO_NAMES
    hit = _NAMES.get(id(tree))
    if hit is not None and hit[0] is tree:
        return hit[1]
    found: set = set()
    for a in ([x for pair in tree[1:] for x in pair] if tree and tree[0] == "pw" else tree[1:]):
        kind = type(a)
        if kind is list:
            found |= free_names(a)
        elif kind is str:
            found.add(a)
    names = frozenset(found) if found else _NO_NAMES
    if len(_NAMES) > 400_000:
        _NAMES.clear()
    _NAMES[id(tree)] = (tree, names)
    return names


def tree_text(tree: Any) -> str:
    """``json.dumps(tree, separators=(",", ":"))`` of a formula tree, memoized per list object (json's
    C encoder writes a new tree faster than a walk reusing its sub-trees' texts): a key that tells
    distinct trees apart."""
    if type(tree) is not list:          # a leaf: rare, not memoized
        return json.dumps(tree, separators=(",", ":"))
    hit = _TEXTS.get(id(tree))
    if hit is not None and hit[0] is tree:
        return hit[1]
    text = json.dumps(tree, separators=(",", ":"))
    if len(_TEXTS) > 400_000:
        _TEXTS.clear()
    _TEXTS[id(tree)] = (tree, text)
    return text


_NUMBER = (int, float)


def bind_tree(tree: Any, env: dict[str, Any]) -> Any:
    """``tree`` with the symbols of ``env`` put in and the numbers of each sum and product folded
    (exact for integers), so a tree over the base's dims becomes one over the pick's dims only."""
    kind = type(tree)
    if kind is str:
        return env.get(tree, tree)
    if kind is not list:
        return tree
    return _fold(tree[0], [a if type(a) in _NUMBER else bind_tree(a, env) for a in tree[1:]])


def _fold(op: str, args: list) -> Any:
    """``[op, *args]`` with ``args`` already bound (:func:`bind_tree`'s last step, which binding a
    bound tree again leaves alone): a sum or product of sums or products flattened one level, its
    numbers folded."""
    if op == "pw":
        return [op, *args]
    if op in ("+", "*"):
        flat, numbers = [], []
        for a in args:
            if type(a) is list and a[0] == op:
                for x in a[1:]:
                    (numbers if type(x) in _NUMBER else flat).append(x)
            else:
                (numbers if type(a) in _NUMBER else flat).append(a)
        rest = flat
        if len(numbers) > 1:
            value = numbers[0]
            for n in numbers[1:]:
                value = value + n if op == "+" else value * n
            numbers = [value]
        if numbers and numbers[0] == (0 if op == "+" else 1) and rest:
            numbers = []
        if op == "*" and numbers and numbers[0] == 0:
            return 0
        args = numbers + rest
        if not args:
            return 0 if op == "+" else 1
        return args[0] if len(args) == 1 else [op, *args]
    for a in args:
        if not isinstance(a, _NUMBER):
            return [op, *args]
    # every argument a number: the number (an exact quotient of integers stays an integer)
    if op == "/":
        if all(isinstance(a, int) for a in args) and args[1] and args[0] % args[1] == 0:
            return args[0] // args[1]
        return [op, *args]
    return formula_tree.evaluate([op, *args], {}) if args else [op]


def _folded(tree: Any) -> Any:
    """``tree`` with every sub-tree that reads no symbol replaced by its value (what
    :func:`engine.language.formula_tree.evaluate` gives it at any binding: the value is the same, the
    tree shorter), the numbers of each sum and product folded (:func:`_fold`). A stored-bytes
    delta's constant parts (ceil(a / b) of numbers) go, so a pick's subsets' sums of them stay small."""
    if type(tree) is not list:
        return tree
    if tree[0] == "pw":
        return ["pw", *([_folded(v), _folded(c)] for v, c in tree[1:])]
    args = [_folded(a) for a in tree[1:]]
    if all(type(a) in _NUMBER for a in args):
        return formula_tree.evaluate([tree[0], *args], {})
    return _fold(tree[0], args)


def _collected(trees: list) -> Any:
    """The sum of ``trees`` with like terms collected (c1 x t + c2 x t = (c1 + c2) x t, the numbers
    added): the templates' stored-bytes deltas of a subset, which repeat one filler's terms."""
    terms: dict[str, list] = {}
    for tree in trees:
        for key, coef, rest in _terms(tree):
            if key in terms:
                terms[key][0] += coef
            else:
                terms[key] = [coef, rest]
    return _fold("+", [0, *(_fold("*", [coef, *rest]) if rest else coef for coef, rest in terms.values())])


_TERMS: dict[int, tuple] = {}     # id(list) -> (the list, its _terms): a template's delta is in many subsets


def _terms(tree: Any) -> list[tuple[str, Any, list]]:
    """The terms of a sum ``tree`` (one term if it is not a sum) as (the key of the term's
    non-number factors, its number factor, those factors) for :func:`_collected`."""
    if type(tree) is list:
        hit = _TERMS.get(id(tree))
        if hit is not None and hit[0] is tree:
            return hit[1]
    out = []
    for arg in (tree[1:] if type(tree) is list and tree[0] == "+" else [tree]):
        if type(arg) in _NUMBER:
            coef, rest = arg, []
        elif type(arg) is list and arg[0] == "*" and type(arg[1]) in _NUMBER:
            coef, rest = arg[1], arg[2:]
        else:
            coef, rest = 1, [arg]
        out.append(("[" + ",".join([tree_text(x) for x in rest]) + "]", coef, rest))    # tree_text(rest): rest is new
    if type(tree) is list:
        if len(_TERMS) > 50_000:
            _TERMS.clear()
        _TERMS[id(tree)] = (tree, out)
    return out


_BOUND: dict = {}     # (id(tree), id(env)) -> (tree, env, the tree bound by env): both kept, so no id is reused


_TREES: dict = {}     # sympy expression -> its formula tree: the same step formulas recur across picks and models


def _tree(expr) -> Any:
    """:func:`engine.language.formula_tree.to_tree`, once per expression per process (the tree is shared:
    nothing mutates a tree; :func:`bind_tree` builds new ones)."""
    if not isinstance(expr, sympy.Basic):
        return formula_tree.to_tree(expr)
    found = _TREES.get(expr)
    if found is None:
        if len(_TREES) > 200_000:
            _TREES.clear()
        found = _TREES[expr] = formula_tree.to_tree(expr)
    return found
