"""Python API: ``evaluate(model_id)`` returns both bindings of one model and the overview.

Layer: engine.language. This is the entry point for the CLI, the grid build and notebooks (public as
:mod:`engine.api`; engine's own packages import it from here)::

    from engine.api import evaluate
    ev = evaluate("deepseek-ai/DeepSeek-V3")
    ev.numeric.rows[...]            # tables keyed by node uid (numbers)
    ev.symbolic.rows[...]           # the same tables as formulas
    ev.overview()["params_total"]   # Quantity(value=..., formula=...)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import sympy

from engine.language import checkpoints, kv, quantities, storage
from engine.language.corpus import Corpus, load_corpus, load_shared
from engine.language.evaluate import Analysis, Binding, walk_model
from engine.language.model_index import corpus_for_model
from engine.language.ir import ModelSpec
from engine.language.variants import VARIANT_ORG


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number and the formula it came from (formula over dim symbols; ``bound`` their values)."""

    value: sympy.Expr
    formula: sympy.Expr


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One model evaluated under the numeric and the symbolic binding (same walk, same uids)."""

    model: ModelSpec
    corpus: Corpus
    numeric: Analysis
    symbolic: Analysis

    @property
    def bound(self) -> dict[str, sympy.Expr]:
        """Numeric value of every dim symbol (the numeric binding's values)."""
        return dict(self.numeric.values)

    def quantity(self, fn: Callable[[Analysis], Any]) -> Quantity:
        """Apply ``fn`` to both bindings: the number and its formula."""
        return Quantity(fn(self.numeric), fn(self.symbolic))

    def tensors(self, binding: str = "numeric") -> list[storage.TensorRow]:
        analysis = self.numeric if binding == "numeric" else self.symbolic
        return storage.checkpoint_tensors(analysis, self.model, self.corpus)

    def weight_formats(self) -> list[dict[str, Any]]:
        """Every published weight format of the model (``checkpoint``, then each ``checkpoints:``
        entry, engine.language.checkpoints): its name, Hub id, and exact stored bytes (all stacks, scales
        included), bytes by dtype and tensor count, each a :class:`Quantity` (number and formula)."""
        out = []
        for name in checkpoints.formats(self.model):
            stored = checkpoints.for_format(self.model, name)
            num_t = storage.checkpoint_tensors(self.numeric, stored, self.corpus)
            sym_t = storage.checkpoint_tensors(self.symbolic, stored, self.corpus)
            by_num, by_sym = storage.bytes_by_dtype(num_t), storage.bytes_by_dtype(sym_t)
            out.append({"format": name, "model_id": stored.model_id,
                        "tensors": Quantity(storage.tensor_count(num_t), storage.tensor_count(sym_t)),
                        "bytes": Quantity(sympy.Add(*(t.total_bytes for t in num_t)),
                                          sympy.Add(*(t.total_bytes for t in sym_t))),
                        "bytes_by_dtype": {k: Quantity(by_num[k], by_sym[k]) for k in by_num}})
        return out

    def overview(self, kv_dtype: str = "bf16") -> dict[str, Any]:
        """What ``archledger show`` prints: params, checkpoint bytes by dtype, KV per token by kind."""
        q = self.quantity
        num_t, sym_t = self.tensors("numeric"), self.tensors("symbolic")
        out: dict[str, Any] = {
            "params_total": q(quantities.params_total),
            "params_active": q(quantities.params_active),
            "params_embedding": q(quantities.params_embedding),
            "n_layers": q(quantities.n_layers),
            "max_context": Quantity(self.numeric.max_context, self.symbolic.max_context),
            "checkpoint_tensors": Quantity(storage.tensor_count(num_t), storage.tensor_count(sym_t)),
            "checkpoint_bytes": Quantity(sympy.Add(*(t.total_bytes for t in num_t)),
                                         sympy.Add(*(t.total_bytes for t in sym_t))),
        }
        by_num, by_sym = storage.bytes_by_dtype(num_t), storage.bytes_by_dtype(sym_t)
        out["checkpoint_bytes_by_dtype"] = {k: Quantity(by_num[k], by_sym[k]) for k in by_num}
        kv_num = kv.bytes_per_token(self.numeric, kv_dtype)
        kv_sym = kv.bytes_per_token(self.symbolic, kv_dtype)
        out["kv_bytes_per_token"] = {k: Quantity(kv_num[k], kv_sym[k]) for k in kv_num}
        out["kv_bytes_per_token_growing"] = q(lambda a: kv.growing_bytes_per_token(a, kv_dtype))
        out["kv_fixed_bytes"] = q(lambda a: kv.fixed_bytes_per_request(a, kv_dtype))
        for stack in self.numeric.stacks:
            if stack != "main":
                out[f"params_{stack}"] = q(lambda a, s=stack: quantities.params_total(a, s))
        return out


def evaluate_spec(corpus: Corpus, model: ModelSpec, scenario: dict[str, int] | None = None) -> Evaluation:
    """Walk ``model`` under both bindings. ``scenario`` binds batch/seq/ctx in the numeric one."""
    bound = {k: sympy.Integer(v) for k, v in (scenario or {}).items()}
    numeric = walk_model(corpus, model, Binding("numeric", bound))
    symbolic = walk_model(corpus, model, Binding("symbolic"))
    return Evaluation(model, corpus, numeric, symbolic)


@lru_cache(maxsize=4)
def _corpus(root: str | None) -> Corpus:
    _loaded_roots.add(root)
    return load_corpus(Path(root) if root else None)


_loaded_roots: set = set()     # roots whose whole corpus _corpus has loaded (evaluate_one then reuses it)


def evaluate_one(model_id: str, corpus_root: str | Path | None = None,
                 scenario: dict[str, int] | None = None) -> Evaluation:
    """:func:`evaluate` for a command that evaluates this one model in its process (``deploy``,
    ``plan``, ``disagg``): it reads the model's own spec and the shared tables and components, not
    the other specs (:mod:`engine.language.model_index`), unless the full corpus is already loaded or the
    index cannot tell which file holds the model (then as :func:`evaluate`). Same evaluation either
    way: the walk reads only the model, its components and the shared tables."""
    key = str(corpus_root) if corpus_root else None
    if not model_id.startswith(VARIANT_ORG + "/") and key not in _loaded_roots:
        corpus = _model_corpus(model_id, key)
        if corpus is not None:
            return evaluate_spec(corpus, next(iter(corpus.models.values())), scenario)
    return evaluate(model_id, corpus_root, scenario)


@lru_cache(maxsize=16)
def _model_corpus(model_id: str, root: str | None) -> Corpus | None:
    # cached per root as _corpus is (a process re-reads neither after an edit)
    return corpus_for_model(model_id, Path(root) if root else None, _shared)


@lru_cache(maxsize=4)
def _shared(root: Path) -> Corpus:
    return load_shared(root)


def evaluate(model_id: str, corpus_root: str | Path | None = None,
             scenario: dict[str, int] | None = None) -> Evaluation:
    """Load the corpus (cached per root) and evaluate one model by HF id or a unique suffix, or a
    what-if variant by ``what-if/<name>`` (corpus/variants/; ``show``, ``deploy`` and ``plan`` take it)."""
    corpus = _corpus(str(corpus_root) if corpus_root else None)
    if model_id.startswith(VARIANT_ORG + "/"):
        return evaluate_spec(corpus, corpus.find_variant(model_id).spec, scenario)
    return evaluate_spec(corpus, corpus.find_model(model_id), scenario)
