"""Component contracts: variants of one slot evaluated under the same fixed dims, GPU and scenario.

Layer: engine.batch -> build/results. A contract is a folder under ``corpus/contracts/<slot>/``: a
``contract.yaml`` (doc, GPU, batch, lengths) and one small model spec per variant whose dims are
literal numbers and whose only stack feeds ``x [batch, seq, hidden]`` through the slot. Each
variant is walked like any model (same engine, same formulas) and deployed on one GPU; the results
(``build/results/contracts.json``) give the components page like-for-like numbers: parameters,
KV per token, the fixed part per request (window caches, recurrent states) and the whole per
request over the lengths, prefill and decode speed of light over the lengths and prefill at the
contract's ``prefill_at`` length (the table's column), one decode step's HBM bytes at batch 1 (bytes
per generated token) over the lengths and at the ``decode_at`` lengths, and the crossing points: for
every pair of variants, each context length between the smallest and the largest where their KV +
state per request cross (:func:`crossings`).
"""
from __future__ import annotations

from fractions import Fraction
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import sympy

from engine.language import file_schemas, kv, quantities, symbols
from engine.language.api import evaluate_spec
from engine.language.corpus import Corpus
from engine.language.model_load import load_model
from engine.language.names import shown_value
from engine.language.reader import Reader
from engine.deploy import Options, plan
from engine.language.errors import SpecError
from engine.language.quantities import quantity as _q
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.sol import summarize

#: Bytes per KV element under the contract (BF16 KV; recurrent states keep their own dtype).
KV_BYTES = 2


def folders(corpus: Corpus) -> list[Path]:
    """The contract folders under corpus/contracts/, in order."""
    return sorted(p for p in (corpus.root / "contracts").glob("*") if p.is_dir())


def load_contract(folder: Path, corpus: Corpus, gpus: dict) -> dict[str, Any]:
    """One contract (schema: engine.language.file_schemas.CONTRACT), its variants loaded; its GPU must
    be a key of ``gpus``."""
    reader = Reader(folder / "contract.yaml", corpus.root, file_schemas.CONTRACT)
    data = reader.data
    if data["gpu"] not in gpus:
        raise SpecError(reader.where(data, "gpu", "gpu"), f"unknown GPU {shown_value(data['gpu'])}",
                        "write a `gpu:` name of gpus/*.yaml: " + ", ".join(sorted(gpus)))
    files = {p.stem: p for p in sorted(folder.glob("*.yaml")) if p.name != "contract.yaml"}
    if not files:
        raise SpecError(reader.where(data), "a contract without variants", "add one model spec per variant beside it")
    # the table's row order: `order` (variant file names) first, the rest by name
    order = list(data.get("order") or [])
    unknown = [name for name in order if name not in files]
    if unknown:
        raise SpecError(reader.where(data, "order", "order"), f"order names no variant file {unknown[0]!r}",
                        "list file names beside contract.yaml (without .yaml): " + ", ".join(files))
    names = order + [name for name in files if name not in order]
    variants = [load_model(files[name], corpus.root, corpus.roles, corpus.schemes) for name in names]
    lengths = list(data["lengths"])
    if data["prefill_at"] not in lengths:
        raise SpecError(reader.where(data, "prefill_at", "prefill_at"),
                        f"prefill_at {data['prefill_at']!r} is not one of the lengths",
                        "write one of: " + ", ".join(map(str, lengths)))
    # the table's decode-bytes columns: the contract's `decode_at` lengths (default: prefill_at and the longest)
    decode_at = data.get("decode_at") or [data["prefill_at"], max(lengths)]
    if any(n not in lengths for n in decode_at):
        raise SpecError(reader.where(data, "decode_at", "decode_at"),
                        f"decode_at {decode_at!r} is not a list of the lengths",
                        "write a list of some of: " + ", ".join(map(str, lengths)))
    return {"slot": folder.name, "doc": data["doc"], "gpu": data["gpu"], "batch": data["batch"],
            "lengths": lengths, "prefill_at": data["prefill_at"], "decode_at": list(decode_at),
            "variants": variants}


class Curve:
    """One variant's KV + state bytes per request as a function of the context length L: the
    engine's per-request expression (:func:`engine.language.kv.request_terms`: every cache's tokens
    kept by its growth law, L, min(L, window), floor(L / every) or 1, times its bytes per token),
    compiled for whole-token grids and kept exact for the solve. ``period`` is the widest step of
    its compressed caches (1 when it has none): the span within which its staircase can ripple."""

    def __init__(self, analysis) -> None:
        elements, own = kv.request_terms(analysis)
        self.expr = elements * KV_BYTES + own
        self.length = symbols.dim(symbols.LENGTH)
        self.grid = lambda lengths: kv.request_bytes_fn(analysis)(lengths, KV_BYTES)
        self.period = max([int(c.every) for c in kv.caches(analysis) if c.growth == "compressed"] + [1])

    def exact(self, length: Fraction) -> Fraction:
        """Bytes at a (rational) length, in exact arithmetic."""
        value = self.expr.subs(self.length, sympy.Rational(length.numerator, length.denominator))
        return Fraction(int(sympy.numer(value)), int(sympy.denom(value)))


def crossings(curves: dict[str, Curve], lo: int, hi: int) -> list[dict[str, Any]]:
    """Every length in (lo, hi] where two variants' bytes per request cross, for every pair.

    Each curve is piecewise linear in L between whole tokens (windows and compressed steps change
    only there), so the difference d(L) = bytes_a(L) - bytes_b(L) is evaluated exactly at every whole
    token from lo to hi (integers held exactly in float64), and each change of its sign is solved on
    its unit interval [n, n + 1): the linear piece's root, where d is zero, is the crossing
    (``kind: "equal"``, ``length`` as a fraction); where no root lies in it, a compressed cache's
    step at n + 1 jumps over the other curve (``kind: "step"``: the length is n + 1, the first whole
    token at which the order has flipped). Where d is zero over whole tokens the curves meet there:
    the first of them is the crossing. Flips closer together than the pair's widest compressed step
    are one staircase's ripple around a line: the cluster counts once, at its first flip, and only
    if the order after it is not the order before it. Curves that only touch (equal, then apart on
    the same side) do not cross. ``bytes`` is the smaller side there: both sides where they meet."""
    grid = np.arange(lo, hi + 1, dtype=float)
    values = {name: np.asarray(c.grid(grid), dtype=float) for name, c in curves.items()}
    out = []
    for a, b in combinations(curves, 2):
        d = values[a] - values[b]
        if not d.min() < 0 < d.max():         # one side throughout (or equal): no flip. Most pairs, at a
            continue                           # fraction of the passes below over a million whole tokens
        sign = np.sign(d)
        nonzero = np.flatnonzero(sign)
        signs = sign[nonzero]                  # the signs with the zeros left out, in order
        flips = np.flatnonzero(signs[1:] != signs[:-1])
        period = max(curves[a].period, curves[b].period)
        k = 0
        while k < flips.size:
            first = last = k                                   # one cluster of flips: a staircase's ripple
            while last + 1 < flips.size and nonzero[flips[last + 1] + 1] - nonzero[flips[last] + 1] < period:
                last += 1
            k = last + 1
            before, after = sign[nonzero[flips[first]]], sign[nonzero[flips[last] + 1]]
            if before == after:
                continue
            i, j = nonzero[flips[first]], nonzero[flips[first] + 1]
            n = lo + int(i)
            if j > i + 1:                                      # equal over whole tokens: they meet there
                length, kind = Fraction(n + 1), "equal"
            else:
                d0 = curves[a].exact(Fraction(n)) - curves[b].exact(Fraction(n))
                half = curves[a].exact(Fraction(2 * n + 1, 2)) - curves[b].exact(Fraction(2 * n + 1, 2))
                slope = 2 * (half - d0)
                root = n - d0 / slope if slope else None
                if root is not None and n < root < n + 1:
                    length, kind = root, "equal"
                else:
                    length, kind = Fraction(n + 1), "step"
            at_a, at_b = curves[a].exact(length), curves[b].exact(length)
            out.append({"a": a, "b": b, "length": float(length), "length_exact": str(length), "kind": kind,
                        "bytes": float(min(at_a, at_b)), "bytes_a": float(at_a), "bytes_b": float(at_b),
                        # the variant holding more past the crossing
                        "above_after": a if after > 0 else b})
    return sorted(out, key=lambda c: (c["length"], c["a"], c["b"]))


def evaluate_contracts(corpus: Corpus, gpu_root=None) -> dict[str, Any]:
    """Every contract under corpus/contracts/, evaluated (see the module doc)."""
    gpus, tables = load_gpus(gpu_root), load_tables(corpus.root / "fusion")
    out = {}
    for folder in folders(corpus):
        contract = load_contract(folder, corpus, gpus)
        gpu = gpus[contract["gpu"]]
        lengths = np.array(contract["lengths"], dtype=float)
        at = contract["lengths"].index(contract["prefill_at"])
        rows, curves = [], {}
        for model in contract["variants"]:
            ev = evaluate_spec(corpus, model)
            built = plan(ev, gpu, ParallelConfig(), Options(framework="vllm"), tables["vllm"])
            # the contract compares whole prompts across lengths (an architecture's cost, not a serving
            # schedule): a token budget that holds the batch's longest prompts prefills them in one step
            whole = int(contract["batch"] * lengths.max())
            s = summarize(built.structure, [gpu], 0, KV_BYTES, contract["batch"], lengths, 1, prefill_tokens=whole)
            request_bytes = kv.request_bytes_fn(ev.numeric)(lengths, KV_BYTES)
            component = next(c.component for c in ev.numeric.components.values() if c.role == contract["slot"])
            decode_bytes = np.asarray(s["phases"]["decode"]["bytes"], dtype=float)
            curves[model.model_id.split("/")[-1]] = Curve(ev.numeric)
            rows.append({
                "id": model.model_id.split("/")[-1], "name": model.display_name, "notes": model.notes,
                "component": component, "spec_file": model.where.file,
                "params": _q(quantities.params_total(ev.numeric), quantities.params_total(ev.symbolic)),
                "kv_bytes_per_token": _q(kv.growing_bytes_per_token(ev.numeric), kv.growing_bytes_per_token(ev.symbolic)),
                "kv_fixed_bytes": _q(kv.fixed_bytes_per_request(ev.numeric), kv.fixed_bytes_per_request(ev.symbolic)),
                "kv_bytes_per_request": np.broadcast_to(request_bytes, lengths.shape).astype(float).tolist(),
                "prefill_s": np.asarray(s["phases"]["prefill"]["step_time_s"], dtype=float).tolist(),
                "prefill_at_s": float(np.asarray(s["phases"]["prefill"]["step_time_s"], dtype=float)[at]),
                "decode_s": np.asarray(s["phases"]["decode"]["step_time_s"], dtype=float).tolist(),
                "prefill_flops": np.asarray(s["phases"]["prefill"]["flops"], dtype=float).tolist(),
                # one decode step at batch 1 (one token) at each context: weights + caches + activations read and written
                "decode_bytes": decode_bytes.tolist(),
                "decode_bytes_at": [float(decode_bytes[contract["lengths"].index(n)]) for n in contract["decode_at"]],
            })
        names = {r["id"]: r["name"] for r in rows}
        cross = crossings(curves, min(contract["lengths"]), max(contract["lengths"]))
        for c in cross:
            c.update(a_name=names[c["a"]], b_name=names[c["b"]], above_name=names[c["above_after"]])
        out[contract["slot"]] = {"doc": contract["doc"], "gpu": contract["gpu"], "batch": contract["batch"],
                                 "lengths": contract["lengths"], "prefill_at": contract["prefill_at"],
                                 "decode_at": contract["decode_at"], "variants": rows, "crossings": cross}
    return out
