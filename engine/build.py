"""``archledger build``: evaluate every spec and write ``build/results/`` atomically.

Layer: engine -> build/results. Reads like mkdocs' build(): load and validate everything first,
evaluate, then write to a temporary folder that replaces ``results/`` only when complete, so a
failed or interrupted build leaves the previous results intact. This first cut writes
``models.parquet`` (one row per model); the deployment grid and the site come with later issues.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

import polars as pl

from engine.api import Evaluation, evaluate_spec
from engine.corpus import Corpus, load_corpus
from engine.errors import SpecError

ENGINE_VERSION = "0.1.0"

#: models.parquet columns: name -> (polars dtype, doc). The schema test reads this table.
MODELS_SCHEMA = {
    "model_id": (pl.String, "Hugging Face model id the spec describes."),
    "family": (pl.String, "Model family (Llama 3.1, Qwen3, DeepSeek-V3, ...)."),
    "model_type": (pl.String, "The config's model_type."),
    "spec_hash": (pl.String, "SHA-256 of every corpus file the evaluation read (spec, components, snapshot, schemes) and the engine version."),
    "params_total": (pl.Int64, "Parameters of the main stack (buffers excluded)."),
    "params_active": (pl.Int64, "Parameters one token uses in the main stack (experts counted top_k times)."),
    "params_embedding": (pl.Int64, "Parameters of the input embedding table."),
    "params_extra_stacks": (pl.Int64, "Parameters outside the main stack (e.g. DeepSeek-V3's MTP module); 0 if none."),
    "checkpoint_bytes": (pl.Int64, "Bytes of all stored tensors in the published format, scales and extra stacks included."),
    "checkpoint_tensors": (pl.Int64, "Number of stored tensors."),
    "kv_bytes_per_token": (pl.Int64, "KV cache bytes per token of context that grow without bound (BF16 KV, main stack)."),
    "kv_fixed_bytes": (pl.Int64, "Per-request KV bytes of window-capped caches at full window and recurrent states (BF16)."),
    "max_context": (pl.Int64, "Longest context the config declares (tokens)."),
    "n_layers": (pl.Int64, "Layers of the main stack."),
    "attention_kinds": (pl.List(pl.String), "Attention components used, with '+window' when a window-capped cache is declared."),
}


def spec_hash(ev: Evaluation) -> str:
    """Hash of the files this evaluation depends on (plus the engine version)."""
    corpus, model = ev.corpus, ev.model
    files = {model.where.file, model.snapshot.where.file}
    for row in ev.numeric.components.values():
        if not row.component.startswith("stack:"):
            files.add(corpus.component_for(model, row.component, model.where).where.file)
    files.update(corpus.schemes[name].where.file for name in set(model.quant.values()))
    digest = hashlib.sha256(ENGINE_VERSION.encode())
    base = corpus.root.parent
    for name in sorted(files):
        digest.update(name.encode())
        digest.update((base / name).read_bytes())
    return digest.hexdigest()


def attention_kinds(ev: Evaluation) -> list[str]:
    kinds = set()
    windowed = {c.node_uid.rsplit("/", 1)[0] for c in ev.numeric.caches if c.growth == "window"}
    for uid, row in ev.numeric.components.items():
        if row.role == "attention" and row.stack == "main":
            kinds.add(row.component + ("+window" if uid in windowed else ""))
    return sorted(kinds)


def model_row(ev: Evaluation) -> dict:
    """One models.parquet row, read from the same overview ``archledger show`` prints."""
    overview = ev.overview()
    value = {key: int(q.value) for key, q in overview.items() if not isinstance(q, dict)}
    extra = sum(value[f"params_{stack}"] for stack in ev.numeric.stacks if stack != "main")
    return {
        "model_id": ev.model.model_id, "family": ev.model.family, "model_type": ev.model.model_type,
        "spec_hash": spec_hash(ev),
        "params_total": value["params_total"], "params_active": value["params_active"],
        "params_embedding": value["params_embedding"], "params_extra_stacks": extra,
        "checkpoint_bytes": value["checkpoint_bytes"], "checkpoint_tensors": value["checkpoint_tensors"],
        "kv_bytes_per_token": value["kv_bytes_per_token_growing"], "kv_fixed_bytes": value["kv_fixed_bytes"],
        "max_context": value["max_context"], "n_layers": value["n_layers"],
        "attention_kinds": attention_kinds(ev),
    }


def build(corpus: Corpus, out: Path, models: list[str] | None = None) -> Path:
    """Evaluate, then write ``out/results`` atomically. Returns the results folder."""
    specs = [corpus.find_model(m) for m in models] if models else list(corpus.models.values())
    rows = [model_row(evaluate_spec(corpus, spec)) for spec in specs]
    frame = pl.DataFrame(rows, schema={k: v[0] for k, v in MODELS_SCHEMA.items()})
    out.mkdir(parents=True, exist_ok=True)
    final = out / "results"
    staging = Path(tempfile.mkdtemp(prefix=".results-", dir=out))
    try:
        frame.write_parquet(staging / "models.parquet")
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=".old-", dir=out))
            final.rename(old / "results")
            staging.rename(final)
            shutil.rmtree(old)
        else:
            staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def run(args) -> int:
    corpus = load_corpus(args.corpus)
    try:
        final = build(corpus, Path(args.out), args.models)
    except SpecError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    print(f"wrote {final}/models.parquet ({len(args.models or corpus.models)} models)")
    return 0
