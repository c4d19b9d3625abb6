"""Component contracts: variants of one slot evaluated under the same fixed dims, GPU and scenario.

Layer: engine.build -> build/results. A contract is a folder under ``corpus/contracts/<slot>/``: a
``contract.yaml`` (doc, GPU, batch, lengths) and one small model spec per variant whose dims are
literal numbers and whose only stack feeds ``x [batch, seq, hidden]`` through the slot. Each
variant is walked like any model (same engine, same formulas) and deployed on one GPU; the results
(``build/results/contracts.json``) give the components page like-for-like numbers: parameters,
KV per token, the fixed part per request (window caches, recurrent states) and the whole per
request over the lengths, prefill and decode speed of light over the lengths and prefill at the
contract's ``prefill_at`` length (the table's column).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from engine.spec import kv, quantities
from engine.spec.api import evaluate_spec
from engine.spec.corpus import Corpus, load_model, Reader
from engine.deploy import Options, plan
from engine.spec.errors import SpecError
from engine.spec.quantities import quantity as _q
from engine.deploy.fusion import load_tables
from engine.deploy.hardware import load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.sol import summarize


def load_contract(folder: Path, corpus: Corpus) -> dict[str, Any]:
    reader = Reader(folder / "contract.yaml", corpus.root)
    data = reader.mapping(reader.data, "")
    fields = ("doc", "gpu", "batch", "lengths", "prefill_at")
    reader.keys(data, "", fields + ("order",), fields)
    files = {p.stem: p for p in sorted(folder.glob("*.yaml")) if p.name != "contract.yaml"}
    if not files:
        raise SpecError(reader.where(data), "a contract without variants", "add one model spec per variant beside it")
    # the table's row order: `order` (variant file names) first, the rest by name
    order = [str(name) for name in data.get("order") or []]
    unknown = [name for name in order if name not in files]
    if unknown:
        raise SpecError(reader.where(data, "order", "order"), f"order names no variant file {unknown[0]!r}",
                        "list file names beside contract.yaml (without .yaml): " + ", ".join(files))
    names = order + [name for name in files if name not in order]
    variants = [load_model(files[name], corpus.root, corpus.roles, corpus.schemes) for name in names]
    lengths = [int(n) for n in data["lengths"]]
    if data["prefill_at"] not in lengths:
        raise SpecError(reader.where(data, "prefill_at", "prefill_at"),
                        f"prefill_at {data['prefill_at']!r} is not one of the lengths",
                        "write one of: " + ", ".join(map(str, lengths)))
    return {"slot": folder.name, "doc": str(data["doc"]), "gpu": str(data["gpu"]), "batch": int(data["batch"]),
            "lengths": lengths, "prefill_at": int(data["prefill_at"]), "variants": variants}


def evaluate_contracts(corpus: Corpus, gpu_root=None) -> dict[str, Any]:
    """Every contract under corpus/contracts/, evaluated (see the module doc)."""
    gpus, tables = load_gpus(gpu_root), load_tables(corpus.root / "fusion")
    out = {}
    for folder in sorted(p for p in (corpus.root / "contracts").glob("*") if p.is_dir()):
        contract = load_contract(folder, corpus)
        gpu = gpus[contract["gpu"]]
        lengths = np.array(contract["lengths"], dtype=float)
        at = contract["lengths"].index(contract["prefill_at"])
        rows = []
        for model in contract["variants"]:
            ev = evaluate_spec(corpus, model)
            built = plan(ev, gpu, ParallelConfig(), Options(framework="vllm"), tables["vllm"])
            # the contract compares whole prompts across lengths (an architecture's cost, not a serving
            # schedule): a token budget that holds the batch's longest prompts prefills them in one step
            whole = int(contract["batch"] * lengths.max())
            s = summarize(built.structure, [gpu], 0, 2, contract["batch"], lengths, 1, prefill_tokens=whole)
            request_bytes = kv.request_bytes_fn(ev.numeric)(lengths, 2)
            component = next(c.component for c in ev.numeric.components.values() if c.role == contract["slot"])
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
            })
        out[contract["slot"]] = {"doc": contract["doc"], "gpu": contract["gpu"], "batch": contract["batch"],
                                 "lengths": contract["lengths"], "prefill_at": contract["prefill_at"], "variants": rows}
    return out
