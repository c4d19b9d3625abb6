"""The shapes ``archledger kernelbench`` measures, derived from the corpus's models' dims.

Layer: engine.deploy (reads engine.language; no torch). A kernel bench measures the kernels the
lookup (engine.deploy.measured) will read, so its GEMM grid is the (n, k) of the corpus's dense
matmuls, not a hard-coded model.

Invariants:

* **The GEMMs of one model** (:func:`model_gemms`), from its bound dims alone, per GPU of a
  tensor-parallel group of ``tp``: queries (n = n_heads x d_head / tp, k = hidden), keys and
  values (n = max(1, n_kv_heads / tp) x d_head, k = hidden: a group wider than the KV heads keeps
  one per GPU), the fused QKV (the three n together: the lookup's n of a fused step is its
  members' output features together), the output projection (n = hidden, k = n_heads x d_head /
  tp: row-parallel), gate and up (n = d_ff / tp, k = hidden), the fused gate-up (2 d_ff / tp),
  down (n = hidden, k = d_ff / tp), the same four for a shared expert's ``d_ff_shared``, and the
  LM head (n = vocab / tp, k = hidden). A model without a dim has none of the GEMMs that read it
  (MLA's latent projections and the routed experts, priced by their own kernel classes, are not
  GEMMs here).
* **The grid** (:func:`spread`): a table is a complete grid, so the n and k axes are the sorted
  distinct values of the pairs, thinned to at most ``limit`` values nearest to log-evenly spaced
  targets (both ends always kept: interpolation covers the inside, the range stays the corpus's);
  an axis holds at least two values (the loader interpolates between two), so a single value v
  gains 2v.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

#: Tokens (GEMM m) of a full bench and of ``--quick``: decode batches to prefill chunks.
TOKENS = [1 << i for i in range(14)]                 # 1 .. 8192
QUICK_TOKENS = [1, 16]
#: Tensor-parallel sizes whose per-GPU shapes a full bench covers (``--quick``: one GPU).
TP = (1, 2, 4, 8)
#: The most values an n or k axis holds (a full bench; ``--quick``: two).
AXIS_LIMIT = 24


def model_gemms(dims: Mapping[str, int], tp: int = 1) -> list[tuple[str, int, int]]:
    """(name, n, k) of the model's dense GEMMs on one GPU of a TP group of ``tp`` (the module's rule)."""
    d = {k: int(v) for k, v in dims.items()}
    out: list[tuple[str, int, int]] = []
    hidden = d.get("hidden")
    if not hidden:
        return out
    if "n_heads" in d and "d_head" in d:
        q = d["n_heads"] * d["d_head"] // tp
        kv = max(1, d.get("n_kv_heads", d["n_heads"]) // tp) * d["d_head"]
        out += [("q", q, hidden), ("k", kv, hidden), ("v", kv, hidden), ("qkv", q + 2 * kv, hidden),
                ("o", hidden, q)]
    for prefix, dim in (("", "d_ff"), ("shared_", "d_ff_shared")):
        if dim in d:
            ff = d[dim] // tp
            out += [(prefix + "gate", ff, hidden), (prefix + "up", ff, hidden), (prefix + "gate_up", 2 * ff, hidden),
                    (prefix + "down", hidden, ff)]
    if "vocab" in d:
        out.append(("lm_head", d["vocab"] // tp, hidden))
    return [(name, n, k) for name, n, k in out if n > 0 and k > 0]


def corpus_dims(corpus, model_ids: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
    """Model id -> its bound dims (numbers from its config; no walk of its graph: a few ms for the
    corpus), for ``model_ids`` (HF ids or unique suffixes) or every model of the corpus."""
    from engine.language.evaluate import Binding, Walker
    models = [corpus.find_model(m) for m in model_ids] if model_ids else list(corpus.models.values())
    return {m.model_id: {k: int(v) for k, v in Walker(corpus, m, Binding("numeric")).model_dims().items()}
            for m in models}


def gemm_pairs(dims_by_model: Mapping[str, Mapping[str, int]], tps: Iterable[int] = (1,)) -> set[tuple[int, int]]:
    """Every distinct (n, k) of the models' GEMMs under each TP size of ``tps``."""
    return {(n, k) for dims in dims_by_model.values() for tp in tps for _, n, k in model_gemms(dims, tp)}


def head_dims(dims_by_model: Mapping[str, Mapping[str, int]]) -> list[int]:
    """The distinct head sizes of the models with plain (GQA/MHA) attention dims."""
    return sorted({int(d["d_head"]) for d in dims_by_model.values() if "n_heads" in d and "d_head" in d})


def spread(values: Iterable[float], limit: int) -> list:
    """The sorted distinct ``values`` thinned to at most ``limit`` (>= 2) log-evenly spread ones,
    both ends kept; one value v becomes [v, 2v] (the module's rule)."""
    v = sorted(set(values))
    if not v:
        return []
    if len(v) == 1:
        return [v[0], 2 * v[0]]
    if len(v) <= limit:
        return v
    lo, hi = math.log(v[0]), math.log(v[-1])
    picks = set()
    for i in range(limit):
        target = lo + (hi - lo) * i / (limit - 1)
        picks.add(min(v, key=lambda x: abs(math.log(x) - target)))
    return sorted(picks)


def gemm_axes(pairs: Iterable[tuple[int, int]], limit: int) -> tuple[list[int], list[int]]:
    """(n values, k values) of the grid over ``pairs`` (:func:`spread` of each side)."""
    pairs = list(pairs)
    return spread((n for n, _ in pairs), limit), spread((k for _, k in pairs), limit)
