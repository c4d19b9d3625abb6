"""``archledger build``: every spec over the grid -> ``build/results/*.parquet``, incremental and atomic.

Layer: engine -> build/results. Reads like mkdocs' build(): load and validate everything first,
evaluate, then write to a staging folder that replaces ``results/`` only when complete, so a failed
or interrupted build leaves the previous results intact.

Results (schemas: :data:`MODELS_SCHEMA`, :data:`DEPLOYMENTS_SCHEMA`, :data:`OPS_SCHEMA`, documented
in docs/results.md): ``models.parquet``; ``models/<org--name>.json`` (the inspector's document);
``contracts.json`` (component variants under fixed contracts, always re-evaluated: it is small); ``deployments/model=<org--name>/part.parquet`` and
``ops/model=<org--name>/part.parquet`` (one hive partition per model, so
``pl.scan_parquet("build/results/deployments/**/*.parquet")`` reads the table); ``manifest.json``.

Incremental: a model's partitions carry a content hash of everything they depend on (its spec,
snapshot, the component library and its drafts, its quant schemes, the dims/roles tables, the GPU
files, the fusion tables, the grid, the engine's source). A partition whose hash is unchanged is
carried over from the previous results without evaluating anything; changed ones are recomputed,
models in parallel processes.

Verification: every changed spec is validated (:mod:`engine.validate`) before any grid work; a spec
with guard errors is skipped with one log line and left out of every table (``manifest.json``
lists it under ``skipped``). Published rows carry ``verified`` and the evidence they were checked
against; the guard table travels in ``models/<org--name>.json``.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from engine.api import Evaluation, evaluate_spec
from engine.corpus import Corpus, load_corpus
from engine.errors import SpecError
from engine.validate import validate

ENGINE = Path(__file__).resolve().parent
SCHEMA_VERSION = 1

#: models.parquet columns: name -> (polars dtype, doc). The schema test reads these tables.
MODELS_SCHEMA = {
    "model_id": (pl.String, "Hugging Face model id the spec describes."),
    "family": (pl.String, "Model family (Llama 3.1, Qwen3, DeepSeek-V3, ...)."),
    "model_type": (pl.String, "The config's model_type."),
    "spec_hash": (pl.String, "SHA-256 of everything the model's results depend on (the partition hash)."),
    "verified": (pl.Boolean, "The spec passed every verification guard (always true: unverified specs are not published)."),
    "verified_against": (pl.String, "Evidence the guards checked: 'checkpoint headers' or 'modeling code'."),
    "params_total": (pl.Int64, "Parameters of the main stack (buffers excluded)."),
    "params_active": (pl.Int64, "Parameters one token uses in the main stack (experts counted top_k times)."),
    "params_embedding": (pl.Int64, "Parameters of the input embedding table."),
    "params_extra_stacks": (pl.Int64, "Parameters outside the main stack (e.g. DeepSeek-V3's MTP module); 0 if none."),
    "checkpoint_bytes": (pl.Int64, "Bytes of all stored tensors in the published format, scales and extra stacks included."),
    "checkpoint_tensors": (pl.Int64, "Number of stored tensors."),
    "kv_bytes_per_token": (pl.Int64, "KV cache bytes per token of context that grow without bound: every-token caches, and compressed caches at one entry per `every` tokens (BF16 KV, main stack)."),
    "kv_fixed_bytes": (pl.Int64, "Per-request KV bytes of window-capped caches at full window and recurrent states (BF16)."),
    "max_context": (pl.Int64, "Longest context the config declares (tokens)."),
    "n_layers": (pl.Int64, "Layers of the main stack."),
    "attention_kinds": (pl.List(pl.String), "Attention components used, with '+window' when a window-capped cache is declared."),
}

_KEY = {
    "model_id": (pl.String, "Hugging Face model id."),
    "gpu": (pl.String, "GPU name (gpus/*.yaml `gpu:`)."),
    "n_gpus": (pl.Int64, "GPUs of the deployment (tp x pp x cp; no whole-model replicas in the grid)."),
    "gpus_per_node": (pl.Int64, "GPUs in one scale-up domain (NVLink / Infinity Fabric)."),
    "tp": (pl.Int64, "Tensor-parallel group size per pipeline stage."),
    "ep": (pl.Int64, "Expert-parallel degree inside the TP group."),
    "dp_attn": (pl.Int64, "Attention data-parallel replicas inside the TP group."),
    "pp": (pl.Int64, "Pipeline stages."),
    "cp": (pl.Int64, "Context-parallel degree."),
    "cp_kind": (pl.String, "ring or ulysses when cp > 1, else empty."),
    "config": (pl.String, "Short label of the parallel config, e.g. tp8-ep8-dp_attn8."),
    "framework": (pl.String, "Fusion table applied: vllm, sglang or none."),
    "weight_format": (pl.String, "checkpoint (the published storage) or a quant scheme."),
    "kv_dtype": (pl.String, "KV cache dtype (bf16, fp8)."),
    "phase": (pl.String, "prefill (the prompt, TTFT) or decode (one token per request, TPOT)."),
    "batch": (pl.Int64, "Concurrent requests per model replica."),
    "input_len": (pl.Int64, "Prompt tokens per request."),
    "output_len": (pl.Int64, "Generated tokens per request (decode runs at input_len + output_len)."),
}

#: deployments.parquet: one row per (deployment point, phase).
DEPLOYMENTS_SCHEMA = {
    **_KEY,
    "micro_batches": (pl.Int64, "Pipeline micro-batches in flight (min(pp, batch))."),
    "fits": (pl.Boolean, "Weights, every request's KV at the last position and one prompt's prefill working set fit in usable HBM."),
    "shortfall_bytes": (pl.Float64, "Bytes per GPU missing when it does not fit (0 when it fits)."),
    "hbm_bytes_per_gpu": (pl.Float64, "HBM capacity per GPU (bytes)."),
    "usable_bytes_per_gpu": (pl.Float64, "HBM the deployment may use: 0.9 x capacity (bytes)."),
    "weight_bytes_per_gpu": (pl.Float64, "Weights stored on the fullest GPU (bytes)."),
    "weight_bytes_per_gpu_formula": (pl.String, "Its formula over the spec's dims and the parallel degrees."),
    "kv_bytes_per_request": (pl.Float64, "KV cache of one request at input_len + output_len, all GPUs (bytes)."),
    "kv_bytes_per_request_per_gpu": (pl.Float64, "The share of one request's KV one GPU holds (bytes)."),
    "kv_budget_bytes_per_gpu": (pl.Float64, "Usable HBM minus weights (bytes)."),
    "kv_bytes_per_gpu": (pl.Float64, "KV held by the fullest GPU for this batch (bytes)."),
    "free_bytes_per_gpu": (pl.Float64, "Usable HBM left after weights and this batch's KV (bytes, 0 if none)."),
    "activation_bytes_per_gpu": (pl.Float64, "Largest prefill kernel working set held at once (bytes)."),
    "max_concurrent_requests": (pl.Int64, "Requests whose KV fits at this context (per replica)."),
    "max_prefill_batch": (pl.Int64, "Prompts that can be prefilled at once (KV + activations)."),
    "step_time_s": (pl.Float64, "SOL time of one step of this phase: the sum over ops of max(compute, memory, comm) (s)."),
    "compute_time_s": (pl.Float64, "Sum over ops of FLOPs / peak (s)."),
    "memory_time_s": (pl.Float64, "Sum over ops of HBM bytes / bandwidth (s)."),
    "comm_time_s": (pl.Float64, "Sum over ops of link bytes / link bandwidth (s)."),
    "flops": (pl.Float64, "FLOPs one GPU executes in the step."),
    "bytes": (pl.Float64, "HBM bytes one GPU moves in the step (weights included)."),
    "weight_bytes": (pl.Float64, "Weight bytes one GPU reads in the step."),
    "comm_bytes": (pl.Float64, "Bytes one GPU sends on links in the step."),
    "bound": (pl.String, "compute, memory or comm: the term bounding most of the step time."),
    "ttft_s": (pl.Float64, "Time to first token for the batch (s)."),
    "tpot_s": (pl.Float64, "Time per output token at the last position (s)."),
    "tokens_per_s_per_gpu": (pl.Float64, "Decode throughput per GPU: batch / tpot / GPUs."),
    "prefill_tokens_per_s_per_gpu": (pl.Float64, "Prefill throughput per GPU: batch x input_len / ttft / GPUs."),
    "extrapolated": (pl.Boolean, "input_len + output_len exceeds the model's max_context."),
}

#: ops.parquet: the per-op SOL table of the deployments the site shows.
OPS_SCHEMA = {
    **_KEY,
    "op_uid": (pl.String, "Spec node uid (e.g. main/layers[moe]/self_attn/q_b_proj); inserted collectives "
                          "append >op[group]; fused kernels are rule@first-member."),
    "op_name": (pl.String, "The node's name, the collective or the fusion rule."),
    "op": (pl.String, "Primitive op (linear, attention_score, ...), collective (all_reduce, ...) or fusion rule."),
    "component": (pl.String, "Component the op belongs to (gqa_attention, moe, ...)."),
    "role": (pl.String, "Role of the op (attention, experts, norm, ...)."),
    "kind": (pl.String, "compute, comm (an inserted collective) or fused (a kernel of several ops)."),
    "parts": (pl.List(pl.String), "For a fused kernel, the op_uids it replaces; empty otherwise."),
    "compute_dtype": (pl.String, "Dtype whose peak the op's FLOPs run at on this GPU (bf16, fp8, fp4)."),
    "flops": (pl.Float64, "FLOPs one GPU executes for this op in the step (all layers)."),
    "bytes": (pl.Float64, "HBM bytes one GPU moves for this op (weights included)."),
    "weight_bytes": (pl.Float64, "Weight bytes among them."),
    "comm_bytes": (pl.Float64, "Bytes one GPU sends on a link."),
    "intensity": (pl.Float64, "FLOPs per HBM byte."),
    "t_compute_s": (pl.Float64, "FLOPs / peak of the operand dtype (s)."),
    "t_memory_s": (pl.Float64, "Bytes / HBM bandwidth (s)."),
    "t_comm_s": (pl.Float64, "Link bytes / link bandwidth (s)."),
    "t_sol_s": (pl.Float64, "max of the three (s)."),
    "bound": (pl.String, "compute, memory or comm."),
    "link": (pl.String, "scale_up, scale_out, or empty for compute."),
    "group": (pl.String, "The GPUs a collective spans (tp, ep, dp_attn, cp, pp, ...); empty for compute."),
    "flops_formula": (pl.String, "Formula of flops over the spec's dims and the parallel degrees."),
    "bytes_formula": (pl.String, "Formula of bytes (kv_bytes = bytes per cache element)."),
    "weight_bytes_formula": (pl.String, "Formula of weight_bytes."),
    "comm_bytes_formula": (pl.String, "Formula of comm_bytes."),
}


@dataclass
class Report:
    """What a build did: models recomputed and reused, rows written, seconds."""

    results: Path
    recomputed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)   # model -> its guard errors
    deployment_rows: int = 0
    op_rows: int = 0
    points: int = 0
    seconds: float = 0.0


# -- hashing --------------------------------------------------------------------------------------

def _digest(paths, extra: bytes = b"") -> str:
    """SHA-256 over file names and contents in the given order (where the files live is not part
    of the identity: a copied folder hashes the same)."""
    digest = hashlib.sha256(extra)
    for path in paths:
        digest.update(str(path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def shared_hash(corpus: Corpus, grid_path: Path, gpu_root: Path) -> str:
    """Everything every model's results depend on: tables, components, GPUs, fusion, grid, engine."""
    root = corpus.root
    files = [root / "dims.yaml", root / "roles.yaml", root / "verification.yaml", grid_path,
             *sorted(gpu_root.glob("*.yaml")), *sorted((root / "fusion").glob("*.yaml")),
             *sorted((root / "components" / "library").glob("*.yaml")),
             *sorted(ENGINE.glob("*.py")), *sorted((ENGINE / "guards").glob("*.py"))]
    return _digest(files, str(SCHEMA_VERSION).encode())


def model_hash(corpus: Corpus, model_id: str, shared: str) -> str:
    """A model's partition hash: its own files on top of the shared ones."""
    model = corpus.models[model_id]
    base = corpus.root.parent
    files = {base / model.where.file, base / model.snapshot.where.file}
    files.update(p for p in evidence_files(corpus, model) if p.exists())
    files.update(base / corpus.drafts[d].where.file for d in model.drafts if d in corpus.drafts)
    files.update(base / corpus.schemes[s].where.file for s in set(model.quant.values()))
    return _digest(sorted(files, key=lambda p: (p.parent.name, p.name)), shared.encode())


def evidence_files(corpus: Corpus, model) -> list[Path]:
    """The model's tensor manifest and source snapshot (part of its hash: new evidence re-validates)."""
    from engine.evidence import snapshot_name, source_path
    from engine.manifest import manifest_path
    name = snapshot_name(model)
    return [manifest_path(corpus.root, name), source_path(corpus.root, name)]


def slug(model_id: str) -> str:
    return model_id.replace("/", "--")


# -- one model (runs in a worker process) ----------------------------------------------------------

def attention_kinds(ev: Evaluation) -> list[str]:
    kinds = set()
    windowed = {c.node_uid.rsplit("/", 1)[0] for c in ev.numeric.caches if c.growth == "window"}
    for uid, row in ev.numeric.components.items():
        if row.role == "attention" and row.stack == "main":
            kinds.add(row.component + ("+window" if uid in windowed else ""))
    return sorted(kinds)


def model_row(ev: Evaluation, spec_hash: str = "", verification: dict | None = None) -> dict:
    """One models.parquet row, read from the same overview ``archledger show`` prints."""
    overview = ev.overview()
    value = {key: int(q.value) for key, q in overview.items() if not isinstance(q, dict)}
    extra = sum(value[f"params_{stack}"] for stack in ev.numeric.stacks if stack != "main")
    return {
        "model_id": ev.model.model_id, "family": ev.model.family, "model_type": ev.model.model_type,
        "spec_hash": spec_hash, "verified": bool(verification and verification["verified"]),
        "verified_against": (verification or {}).get("evidence", ""),
        "params_total": value["params_total"], "params_active": value["params_active"],
        "params_embedding": value["params_embedding"], "params_extra_stacks": extra,
        "checkpoint_bytes": value["checkpoint_bytes"], "checkpoint_tensors": value["checkpoint_tensors"],
        "kv_bytes_per_token": value["kv_bytes_per_token_growing"], "kv_fixed_bytes": value["kv_fixed_bytes"],
        "max_context": value["max_context"], "n_layers": value["n_layers"],
        "attention_kinds": attention_kinds(ev),
    }


def _frame(columns: dict, schema: dict) -> pl.DataFrame:
    return pl.DataFrame({k: columns[k] for k in schema}, schema={k: v[0] for k, v in schema.items()})


def build_model(corpus_root: str | None, model_id: str, grid_path: str | None, gpu_root: str | None,
                staging: str, spec_hash: str, verification: dict | None = None) -> dict:
    """Evaluate one model over the grid; write its partitions under ``staging``. Returns counts."""
    from engine import grid_eval
    started = time.perf_counter()
    corpus = load_corpus(corpus_root)
    ev = evaluate_spec(corpus, corpus.models[model_id])
    deployments, ops, points = grid_eval.evaluate_model(ev, grid_path, gpu_root)
    for table, columns, schema in (("deployments", deployments, DEPLOYMENTS_SCHEMA), ("ops", ops, OPS_SCHEMA)):
        folder = Path(staging) / table / f"model={slug(model_id)}"
        folder.mkdir(parents=True, exist_ok=True)
        _frame(columns, schema).write_parquet(folder / "part.parquet", statistics=True)
    from engine.export import model_document
    (Path(staging) / "models").mkdir(exist_ok=True)
    (Path(staging) / "models" / f"{slug(model_id)}.json").write_text(
        json.dumps(model_document(ev, verification), separators=(",", ":")))
    return {"model_id": model_id, "deployments": len(deployments["model_id"]),
            "ops": len(ops["model_id"]), "points": points, "seconds": round(time.perf_counter() - started, 3)}


# -- the build ----------------------------------------------------------------------------------------

def _previous(final: Path) -> dict:
    try:
        return json.loads((final / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def _model_files(root: Path, model_id: str) -> list[Path]:
    """A model's files under a results folder (partitions and its inspector document)."""
    name = slug(model_id)
    return [root / t / f"model={name}" / "part.parquet" for t in ("deployments", "ops")] + \
        [root / "models" / f"{name}.json"]


def _carry(previous: Path, staging: Path, model_id: str) -> bool:
    """Hard-link (or copy) a model's files from the previous results; False if incomplete."""
    sources = _model_files(previous, model_id)
    if not all(p.exists() for p in sources):
        return False
    for src, dst in zip(sources, _model_files(staging, model_id)):
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    return True


def build(corpus: Corpus, out: Path, models: list[str] | None = None, grid_path: Path | None = None,
          gpu_root: Path | None = None, jobs: int | None = None, progress=None, log=None) -> Report:
    """Evaluate (or carry over) every model's partitions, then swap ``out/results`` in atomically."""
    from engine.grid import DEFAULT, load_grid
    from engine.hardware import DEFAULT_ROOT as GPU_ROOT, load_gpus
    from engine.fusion import load_tables
    started = time.perf_counter()
    grid_path = Path(grid_path) if grid_path else DEFAULT
    gpu_root = Path(gpu_root) if gpu_root else GPU_ROOT
    load_grid(grid_path), load_gpus(gpu_root), load_tables()          # fail early, before any work
    specs = [corpus.find_model(m) for m in models] if models else list(corpus.models.values())
    shared = shared_hash(corpus, grid_path, gpu_root)
    hashes = {m.model_id: model_hash(corpus, m.model_id, shared) for m in specs}
    out.mkdir(parents=True, exist_ok=True)
    final = out / "results"
    previous = _previous(final).get("models", {})
    old_rows = {}
    if (final / "models.parquet").exists():
        old_rows = {r["model_id"]: r for r in pl.read_parquet(final / "models.parquet").to_dicts()}
    staging = Path(tempfile.mkdtemp(prefix=".results-", dir=out))
    report = Report(final)
    try:
        rows, entries, todo = {}, {}, []
        for spec in specs:
            mid, h = spec.model_id, hashes[spec.model_id]
            if previous.get(mid, {}).get("hash") == h and mid in old_rows and _carry(final, staging, mid):
                rows[mid], entries[mid] = old_rows[mid], previous[mid]
                report.reused.append(mid)
            else:
                todo.append(mid)
        # every changed spec is walked here first: a broken one fails the build before any work
        # (one line, nothing written), and its models.parquet row comes from this evaluation
        checks = {}
        for mid in list(todo):
            ev = evaluate_spec(corpus, corpus.models[mid])
            verdict = validate(corpus, corpus.models[mid], ev)
            if not verdict.verified:
                report.skipped[mid] = [f.one_line() for f in verdict.errors]
                todo.remove(mid)
                if log:
                    log(f"skip {mid}: not verified ({len(verdict.errors)} guard errors; "
                        f"run `archledger validate {mid}`)")
                continue
            checks[mid] = verdict.as_dict()
            rows[mid] = model_row(ev, hashes[mid], checks[mid])
        specs = [s for s in specs if s.model_id not in report.skipped]
        # the slowest models first (as last time; else the largest), so the pool's tail is short
        todo.sort(key=lambda m: (-previous.get(m, {}).get("seconds", 0.0), -rows[m]["params_total"]))
        corpus_root = str(corpus.root)
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
        done = len(report.reused)
        if progress:
            progress(done, len(specs), 0, "")
        results = []
        if jobs == 1:
            for mid in todo:
                results.append(build_model(corpus_root, mid, str(grid_path), str(gpu_root), str(staging), hashes[mid],
                                           checks[mid]))
                done += 1
                if progress:
                    progress(done, len(specs), sum(r["points"] for r in results), mid)
        else:
            # spawn, not fork: a forked child inherits polars' thread pool mid-state and can hang
            with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = [pool.submit(build_model, corpus_root, mid, str(grid_path), str(gpu_root), str(staging),
                                       hashes[mid], checks[mid]) for mid in todo]
                for future in as_completed(futures):
                    results.append(future.result())
                    done += 1
                    if progress:
                        progress(done, len(specs), sum(r["points"] for r in results), results[-1]["model_id"])
        for r in results:
            mid = r["model_id"]
            entries[mid] = {"hash": hashes[mid], "deployments": r["deployments"], "ops": r["ops"],
                            "points": r["points"], "seconds": r["seconds"], "partition": slug(mid)}
            report.recomputed.append(mid)
            report.points += r["points"]
        from engine.contract import evaluate_contracts
        (staging / "contracts.json").write_text(json.dumps(evaluate_contracts(corpus), indent=1))
        ordered = [rows[s.model_id] for s in specs]
        _frame({k: [r[k] for r in ordered] for k in MODELS_SCHEMA}, MODELS_SCHEMA).write_parquet(
            staging / "models.parquet")
        manifest = {"schema_version": SCHEMA_VERSION, "shared_hash": shared, "grid": str(grid_path),
                    "models": {s.model_id: entries[s.model_id] for s in specs}, "skipped": report.skipped}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        report.deployment_rows = sum(e["deployments"] for e in entries.values())
        report.op_rows = sum(e["ops"] for e in entries.values())
        swap_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    report.seconds = time.perf_counter() - started
    return report


def swap_into_place(staging: Path, final: Path) -> None:
    """Replace the folder ``final`` by ``staging`` with two renames (the old tree is removed
    afterwards), so readers see the old tree or the new one, never a half-written one."""
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=".old-", dir=final.parent))
        final.rename(old / final.name)
        staging.rename(final)
        shutil.rmtree(old)
    else:
        staging.rename(final)


def _progress_printer(stream=sys.stderr):
    def show(done: int, total: int, points: int, model: str) -> None:
        width = 24
        filled = int(width * done / max(total, 1))
        line = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} models, {points:,} points"
        stream.write(line + (f"  {model[:40]}" if model else "") + " " * 8)
        if done == total:
            stream.write("\n")
        stream.flush()
    return show


def run(args) -> int:
    try:
        corpus = load_corpus(args.corpus)
        report = build(corpus, Path(args.out), args.models, getattr(args, "grid", None), None,
                       getattr(args, "jobs", None), None if getattr(args, "quiet", False) else _progress_printer(),
                       log=lambda line: print(line, file=sys.stderr))
    except SpecError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    print(f"wrote {report.results}: {len(report.recomputed)} models evaluated, {len(report.reused)} reused; "
          f"{report.deployment_rows:,} deployment rows, {report.op_rows:,} op rows, "
          f"{report.points:,} new grid points in {report.seconds:.1f} s")
    return 0
