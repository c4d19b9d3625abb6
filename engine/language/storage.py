"""Checkpoint storage: which tensors a spec's weights become on disk, their dtypes, shapes and bytes.

Layer: engine.language. :func:`checkpoint_tensors` is the one place weight bytes are computed, from the
walk's weight leaves (geometry) and the model's ``quant_context`` (format). Architecture never
mentions dtypes; a quant scheme (``corpus/quant/*.yaml``) says what a matrix leaf becomes (a
packed payload plus scale tensors) and which dtype vectors keep.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache, reduce
import operator

import sympy

from engine.language import expr, module_patterns
from engine.language.corpus import Corpus
from engine.language.dtypes import DTYPE_BYTES
from engine.language.errors import SpecError
from engine.language.evaluate import Analysis, LeafRow, NodeRow
from engine.language.ir import ModelSpec, QuantScheme



@dataclass(frozen=True, slots=True)
class TensorRow:
    """One stored tensor (``count`` identical ones: one per layer and, unless stacked, per expert)."""

    key: str
    dtype: str
    shape: tuple[sympy.Expr, ...]
    count: sympy.Expr
    uid: str
    leaf: str
    role: str
    scheme: str
    stack: str

    @property
    def numel(self) -> sympy.Expr:
        return reduce(operator.mul, self.shape, sympy.Integer(1))

    @property
    def bytes(self) -> sympy.Expr:
        """Bytes of one tensor."""
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def total_bytes(self) -> sympy.Expr:
        return self.bytes * self.count


def scheme_for(model: ModelSpec, corpus: Corpus, leaf: LeafRow) -> QuantScheme:
    """The quant scheme of a leaf: the first module-path pattern override that covers its module
    path, then its ``role.leaf`` override, then ``role``, then the default.

    A pattern is matched against the module path as the spec keys it, per-layer and per-expert
    indices as written (``model.layers.{layer}.self_attn.indexer.weights_proj``): it covers a
    leaf in every layer of its template or in none (a layer stored unlike its neighbours needs a
    template of its own; the packing guard reports a pattern that stores no checkpoint tensor)."""
    patterns = model.quant_patterns
    if patterns:
        module = leaf.key.rsplit(".", 1)[0]
        found = module_patterns.first_match(patterns, module)
        if found is not None:
            return corpus.schemes[model.quant[found]]
    for key in (f"{leaf.role}.{leaf.name}", leaf.role, "*"):
        if key in model.quant:
            return corpus.schemes[model.quant[key]]
    raise AssertionError("quant_context always has a default")  # loader guarantees "*"


def scheme_tensors(key: str, lead: tuple, rows, cols, scheme: QuantScheme,
                   where=None) -> list[tuple[str, str, tuple]]:
    """What ``scheme`` stores for one matrix ``key`` of ``rows x cols`` (after ``lead`` axes):
    (key, dtype, shape) per stored tensor. Used by the spec's storage and by ``snapshot --meta``.
    With ``where`` (numeric binding) a non-integer axis is a :class:`SpecError`."""
    module = key[: -len(".weight")] if key.endswith(".weight") else key
    out = []
    for j, tensor in enumerate(scheme.matrix):
        name = tensor.key.format(weight=key, module=module)
        shape = []
        for i, text in enumerate(tensor.shape):
            try:   # checked symbolically at load; numeric rows/cols can still exceed expr's bounds
                value = _axis(text, rows, cols)
            except expr.ExprError as exc:   # the scheme's shape is at fault: point at it
                raise SpecError(scheme.where.at(f"matrix[{j}].shape"), f"{exc} (storing {name}, "
                                f"rows={rows}, cols={cols})", exc.hint) from None
            if where is not None and not (value.is_integer or (value.is_number and value == int(value))):
                raise SpecError(where, f"{scheme.name} cannot store {key}: axis {i} of {name} "
                                f"= {text} = {value} (rows={rows}, cols={cols}) is not an integer",
                                "this scheme cannot store this matrix; pick another in quant_context")
            shape.append(value)
        out.append((name, tensor.dtype, tuple(lead) + tuple(shape)))
    return out


@lru_cache(maxsize=4096, typed=True)
def _axis(text: str, rows, cols):
    """A scheme's axis ``text`` over ``rows`` and ``cols``, once per (text, rows, cols) per process:
    the same matrices recur in every layer and every part of an analysis the playground sums
    (expr.evaluate checks the bounds of every number in a symbolic result, a walk of the whole
    expression). A pure function of its arguments (immutable sympy values); an error is not kept."""
    return expr.evaluate(text, expr.Scope({"rows": rows, "cols": cols}))


def _stored(row: NodeRow, leaf: LeafRow, scheme: QuantScheme, numeric: bool) -> list[tuple[str, str, tuple]]:
    sizes = tuple(a.size for a in leaf.axes)
    lead = (row.instances,) if row.stacked else ()
    if not leaf.matrix:
        return [(leaf.key, scheme.vector_dtype, lead + sizes)]
    *batch, rows, cols = sizes
    return scheme_tensors(leaf.key, lead + tuple(batch), rows, cols, scheme, row.where if numeric else None)


def checkpoint_tensors(analysis: Analysis, model: ModelSpec, corpus: Corpus) -> list[TensorRow]:
    """Every stored tensor of the model (all stacks), from the canonical (prefill) graph's leaves."""
    numeric = analysis.mode == "numeric"
    rows = []
    for row in analysis.rows.values():
        if "prefill" not in row.phases or row.shares:
            continue
        count = row.repeat * (sympy.Integer(1) if row.stacked else row.instances)
        for leaf in row.leaves:
            scheme = scheme_for(model, corpus, leaf)
            for key, dtype, shape in _stored(row, leaf, scheme, numeric):
                rows.append(TensorRow(key, dtype, shape, count, row.uid, leaf.name, leaf.role,
                                      scheme.name, row.stack))
    return rows


def bytes_by_dtype(tensors: list[TensorRow], stack: str | None = None) -> dict[str, sympy.Expr]:
    """Checkpoint bytes per dtype (optionally for one stack)."""
    terms: dict[str, list] = defaultdict(list)
    for t in tensors:
        if stack is None or t.stack == stack:
            terms[t.dtype].append(t.total_bytes)
    # one Add per dtype: adding term by term re-flattens a growing formula (quadratic); the sum is the same
    return {dtype: sympy.Add(*terms[dtype]) for dtype in sorted(terms)}


def tensor_count(tensors: list[TensorRow], stack: str | None = None) -> sympy.Expr:
    """Number of stored tensors (optionally for one stack)."""
    return sympy.Add(*(t.count for t in tensors if stack is None or t.stack == stack))


def leaf_storage(row: NodeRow, leaf: LeafRow, model: ModelSpec, corpus: Corpus,
                 numeric: bool) -> tuple[sympy.Expr, str]:
    """Bytes of one instance of a leaf as stored (payload plus scale tensors), and the compute
    class its matmuls run in. A stacked leaf's bytes are divided back to one expert's share."""
    scheme = scheme_for(model, corpus, leaf)
    total = sum((reduce(operator.mul, shape, sympy.Integer(1)) * DTYPE_BYTES[dtype]
                 for _, dtype, shape in _stored(row, leaf, scheme, numeric)), sympy.Integer(0))
    if row.stacked:
        total = total / row.instances
    return total, scheme.operands if leaf.matrix else "bf16"
