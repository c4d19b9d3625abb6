"""``archledger build``: every spec over the grid -> ``build/results/*.parquet`` (+ the site), incremental and atomic.

Layer: engine.build -> build/results. Reads like mkdocs' build(): load and validate everything first,
evaluate, then write to a staging folder; the site (a callable from the layer above) is rendered
from that staging folder into another, and both replace ``results/`` and ``site/`` together only
when complete (:mod:`engine.build.publish`: one lock per output folder, a journal for the two renames), so
a failed, interrupted or killed build leaves the previous results and site intact and matching.

Results (schemas: :data:`MODELS_SCHEMA`, :data:`DEPLOYMENTS_SCHEMA`, :data:`OPS_SCHEMA`, documented
in docs/results.md): ``models.parquet``; ``models/<org--name>.json`` (the inspector's document);
``formulas/<org--name>.json`` (the deploy page's formula trees, :mod:`engine.build.deploy_export`);
``contracts.json`` (component variants under fixed contracts, always re-evaluated: it is small); ``deployments/model=<org--name>/part.parquet`` and
``ops/model=<org--name>/part.parquet`` (one hive partition per model, so
``pl.scan_parquet("build/results/deployments/**/*.parquet")`` reads the table); ``fronts/`` and
``sizing/`` partitions alike (:mod:`engine.serving.fronts`: plan's search for the grid's ``sizing:``
block); ``manifest.json``
(per model: its input hash, row counts and the size and SHA-256 of each of its files; the grid; the
skipped specs; the size and SHA-256 of models.parquet and contracts.json).

Incremental: a model's partitions carry a content hash of everything they depend on (its spec,
snapshot, the component library and its drafts, its quant schemes, the dims/roles tables, the GPU
files, the fusion tables, the grid, the engine's source and the installed versions of the
libraries it computes with: :mod:`engine.build.dependencies`). A partition whose hash is unchanged and
whose files match their recorded size and SHA-256 is carried over from the previous results without
evaluating anything; changed or damaged ones are recomputed, models in parallel processes (which
die with the build process). A subset build (``models``) merges: what it does not name is kept
(:func:`run` states the rules).

Verification: every changed spec is validated (:mod:`engine.verify.validate`) before any grid work; a spec
with guard errors (a missing evidence file included) is skipped with one log line and left out of
every table (``manifest.json`` lists it under ``skipped``); ``--strict`` (CI and the deploy) fails
the build on such a spec instead, before any grid work and with nothing published. A spec that declares
``unverified: <why>`` (transformers lacks its architecture) is neither: it is listed with that reason
(``manifest.json`` ``unverified``, the gallery's note) and never checked or published. Published rows carry ``verified`` and
the evidence they were checked against; the guard table travels in ``models/<org--name>.json``.
"""
from __future__ import annotations

import contextlib
import errno
import gc
import io
import json
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from engine.build import collector, landscape, lifeline, publish, workers
from engine.build.built import MODELS_JSON  # models.parquet's rows as JSON: what commands read without polars
from engine.build.hashing import (  # re-exported: the build's hashes live in one light module
    ENGINE, SCHEMA_VERSION, _digest, _engine_identity, corpus_digest, engine_sources, evidence_files, model_hash,
    shared_hash)
from engine.build.export import KV_LENGTHS, compact_json
from engine.project import PACKAGE_ROOT
from engine.spec import kv
from engine.spec.api import Evaluation, evaluate_spec
from engine.spec.corpus import Corpus, load_corpus
from engine.spec.errors import SpecError
from engine.verify.validate import validate


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
    "attention_kinds": (pl.List(pl.String), "Attention components used, with '+window' for sliding-window instances (every cache they keep window-capped; attention_label's 'sliding')."),
    "attention_label": (pl.String, "The mixers the layer plans use, as the gallery lists them: the attention-role components' `label`s joined by ' + ', recurrent-state mixers first, then attention whose cache grows with context, then 'sliding' for layers whose caches are all window-capped (e.g. 'gdn + gqa', 'mla', 'gqa + sliding')."),
    "kv_state_bytes": (pl.Int64, "Per-request bytes of the recurrent states (`growth: state` cache entries) in their own dtype (BF16 for any without one): the flat part of a request's cache, the same at every context; 0 for a model without recurrent mixers (main stack)."),
    "kv_context_lengths": (pl.List(pl.Int64), "Context lengths (tokens) at which kv_growing_bytes_per_request is given."),
    "kv_growing_bytes_per_request": (pl.List(pl.Int64), "Per-request bytes of the caches that grow with context (every-token and compressed caches; window-capped caches up to their window), BF16 KV, at each of kv_context_lengths (main stack). A request's whole cache at length L is kv_state_bytes + this."),
    "traits": (pl.List(pl.String), "Architecture traits read from the evaluated graph (engine/build/landscape.py TRAITS): moe, mla, sparse, sliding, compressed, linear, hybrid, mtp."),
    "lineage": (pl.String, "The lab's line of families the model belongs to (corpus/lineage.yaml; an unlisted family is its own)."),
    "generation": (pl.Int64, "Position of the model's family in its lineage, oldest first (0-based)."),
    "release_position": (pl.Int64, "Position of the model in its family's release list (corpus/lineage.yaml; 1000 when not listed)."),
    "weight_formats": (pl.List(pl.String), "The model's published weight formats: 'checkpoint' (the spec's own storage) first, then each published checkpoint of the same architecture the spec lists (`checkpoints:`, e.g. 'fp8', 'nvfp4'); deployments and ops rows carry these names in weight_format."),
    "weight_format_models": (pl.List(pl.String), "The Hugging Face id of each of weight_formats, in the same order (the first is model_id)."),
    "weight_format_bytes": (pl.List(pl.Int64), "Exact bytes of every stored tensor of each of weight_formats (all stacks, scales included; the first equals checkpoint_bytes), checked against that checkpoint's own evidence."),
    "weight_format_tensors": (pl.List(pl.Int64), "Number of stored tensors of each of weight_formats."),
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
    "weight_format": (pl.String, "checkpoint (the storage of the checkpoint the spec is named after), or the `format` of another published checkpoint the spec lists (models.parquet weight_formats; its own storage, on the grid's `checkpoints:` GPUs where the format is native), or a quant scheme."),
    "kv_dtype": (pl.String, "KV cache dtype (bf16, fp8)."),
    "phase": (pl.String, "prefill (the prompt, TTFT) or decode (one token per request, TPOT)."),
    "batch": (pl.Int64, "Concurrent requests per model replica."),
    "input_len": (pl.Int64, "Prompt tokens per request."),
    "output_len": (pl.Int64, "Generated tokens per request (decode runs at input_len + output_len)."),
}

#: deployments.parquet: one row per (deployment point, phase).
DEPLOYMENTS_SCHEMA = {
    **_KEY,
    "micro_batches": (pl.Int64, "Decode micro-batches in flight through the pipeline (min(pp, batch))."),
    "prefill_steps": (pl.Int64, "Chunked-prefill steps of the fullest replica: max(micro_batches, ceil(ceil(batch / dp_attn) x input_len / 8192)); with pp = 1, TTFT = prefill_steps x step_time_s (one step at the mean size; with pp > 1 the pipeline fills with the largest step)."),
    "fits": (pl.Boolean, "Worst case: batch <= max_concurrent_requests: weights, the prefill step's working set and every request's KV at the last position fit in usable HBM. The grid also keeps batches past it up to max_concurrent_requests_steady (fits false, fits_steady true): the fronts serve by the steady state."),
    "shortfall_bytes": (pl.Float64, "Bytes per GPU missing when it does not fit (0 when it fits)."),
    "hbm_bytes_per_gpu": (pl.Float64, "HBM capacity per GPU (bytes)."),
    "usable_bytes_per_gpu": (pl.Float64, "HBM the deployment may use: 0.9 x capacity (bytes)."),
    "weight_bytes_per_gpu": (pl.Float64, "Weights stored on the fullest GPU (bytes)."),
    "weight_bytes_per_gpu_formula": (pl.String, "Its formula over the spec's dims and the parallel degrees."),
    "kv_bytes_per_request": (pl.Float64, "KV cache of one request at input_len + output_len, all GPUs (bytes)."),
    "kv_state_bytes_per_request": (pl.Float64, "The flat part of kv_bytes_per_request: recurrent states (`growth: state` cache entries, e.g. Gated DeltaNet / Mamba2 SSM and convolution states, DeepSeek-V4 compressor buffers), in their own dtype; the same at every context (bytes)."),
    "kv_growing_bytes_per_request": (pl.Float64, "The part of kv_bytes_per_request that grows with context: every-token and compressed caches, and window-capped caches up to their window (bytes). kv_state_bytes_per_request + kv_growing_bytes_per_request = kv_bytes_per_request."),
    "kv_bytes_per_request_per_gpu": (pl.Float64, "The share of one request's KV one GPU holds (bytes)."),
    "kv_budget_bytes_per_gpu": (pl.Float64, "What the KV cache gets: usable HBM minus weights, the framework's runtime reserve and the prefill working set (bytes)."),
    "kv_bytes_per_gpu": (pl.Float64, "KV held by the fullest GPU for this batch (bytes)."),
    "free_bytes_per_gpu": (pl.Float64, "Usable HBM left after weights, the prefill working set and this batch's KV (bytes, 0 if none)."),
    "activation_bytes_per_gpu": (pl.Float64, "Prefill working set reserved per GPU: the largest kernel's activations in a step of 8192 prompt tokens per replica (bytes)."),
    "reserve_bytes_per_gpu": (pl.Float64, "The framework's runtime reserve per GPU (corpus/fusion/<framework>.yaml runtime_reserve, each figure with its source; 0 for framework none) (bytes)."),
    "max_concurrent_requests": (pl.Int64, "Worst-case capacity: dp_attn x the requests per attention replica whose KV at the last position fits next to the weights and the prefill working set (per model replica)."),
    "kv_steady_tokens_per_request": (pl.Float64, "Steady state under continuous batching with paged KV: the cache tokens one request holds averaged over its output (token j of O emitted at context input_len + j - 1, in whole pages of the framework's kv_admission page_tokens) plus the admission reservation (reserve_ratio x its remaining output, clipped); docs/deployment.md \"Steady-state capacity\"."),
    "kv_bytes_per_request_steady_per_gpu": (pl.Float64, "The share of one request's KV one GPU holds at kv_steady_tokens_per_request tokens (bytes)."),
    "max_concurrent_requests_steady": (pl.Int64, "Steady-state capacity: dp_attn x the requests per attention replica whose steady KV (kv_bytes_per_request_steady_per_gpu) fits in (1 - free_fraction) x the KV budget (per model replica). Usually well above max_concurrent_requests; it can fall below it for very short outputs, whose page rounding and reservation the unpaged worst case does not count."),
    "fits_steady": (pl.Boolean, "Steady state: ceil(batch / dp_attn) <= max_concurrent_requests_steady / dp_attn."),
    "tpot_mean_s": (pl.Float64, "Steady state: time per output token averaged over the output, the decode step at the mean context input_len + (output_len - 1) / 2 (exact for costs linear in the context, an upper bound for window-capped ones) (s)."),
    "max_prefill_batch": (pl.Int64, "Whole prompts one chunked-prefill step holds: dp_attn x min(max(1, floor(8192 / input_len)), capacity per replica)."),
    "step_time_s": (pl.Float64, "Schedule estimate of one step of this phase (prefill: one chunked-prefill step of the batch's prompts) under the overlap policy `overlap`: none = the sum over ops of max(compute, memory, comm), one kernel after another (s). Null on a decode row, where it is tpot_s (DECODE_COPIES: one token per request per step)."),
    "step_bound_s": (pl.Float64, "Lower bound of the same step, what no schedule beats: max(sum over ops of compute time, sum of memory time, per link class the sum of its comm time), every resource overlapped with the others (s). Null on a decode row, where it is tpot_bound_s."),
    "step_expected_s": (pl.Float64, "Expected time of the same step from measured kernels (gpus/measured/, docs/deployment.md \"Expected time from measured kernels\"): the sum over ops of their t_expected_s (ops.parquet), one kernel after another, at least step_bound_s (s). Null on a decode row, where it is tpot_expected_s."),
    "compute_time_s": (pl.Float64, "Sum over ops of FLOPs / peak (s)."),
    "memory_time_s": (pl.Float64, "Sum over ops of HBM bytes / bandwidth (s)."),
    "comm_time_s": (pl.Float64, "Sum over ops of link bytes / link bandwidth (s)."),
    "flops": (pl.Float64, "FLOPs one GPU executes in the step."),
    "bytes": (pl.Float64, "HBM bytes one GPU moves in the step (weights included)."),
    "weight_bytes": (pl.Float64, "Weight bytes one GPU reads in the step."),
    "comm_bytes": (pl.Float64, "Bytes one GPU sends on links in the step."),
    "bound": (pl.String, "compute, memory or comm: the term bounding most of the step time."),
    "ttft_s": (pl.Float64, "Time to first token of the batch's last request, its prompts prefilled in prefill_steps steps: the schedule estimate, made of step_time_s (s)."),
    "tpot_s": (pl.Float64, "Worst case: time per output token at the last position: the schedule estimate, made of step_time_s (s)."),
    "ttft_bound_s": (pl.Float64, "Lower bound of ttft_s: the same composition of the prefill steps' step_bound_s (s)."),
    "tpot_bound_s": (pl.Float64, "Lower bound of tpot_s: the decode step's step_bound_s (per token with MTP) (s)."),
    "tpot_mean_bound_s": (pl.Float64, "Lower bound of tpot_mean_s: the decode step's step_bound_s at the output's mean context (per token with MTP) (s)."),
    "ttft_expected_s": (pl.Float64, "Expected time to first token from measured kernels: the composition of ttft_s with the prefill steps' step_expected_s; at least ttft_bound_s (s). The same number as `archledger deploy --json` at this point."),
    "tpot_expected_s": (pl.Float64, "Expected time per output token at the last position from measured kernels: the decode step's step_expected_s (per token with MTP); at least tpot_bound_s (s)."),
    "tpot_mean_expected_s": (pl.Float64, "The same at the output's mean decode context; at least tpot_mean_bound_s (s)."),
    "overlap": (pl.String, "The schedule estimate's overlap policy: none (one kernel after another) or two_batch (two half-batches, one's collectives hidden behind the other's kernels)."),
    "tokens_per_s_per_gpu": (pl.Float64, "Worst-case decode throughput per GPU: batch / tpot / GPUs (schedule estimate)."),
    "extrapolated": (pl.Boolean, "input_len + output_len exceeds the model's max_context."),
    "on_front": (pl.Boolean, "Decode rows: on the Pareto front of the steady state of continuous batching, steady tokens/s per GPU (batch / tpot_mean_s / n_gpus) vs tokens/s per user (1 / tpot_mean_s), of this GPU type, framework, KV dtype, input_len and output_len, over every GPU count, config and batch the steady state serves (fits_steady; of exact duplicates, the first row): the schedule estimate, not the lower bound, and not the worst case (fits, tpot_s). False on prefill rows and rows fits_steady excludes."),
}

#: Deployment columns computed from the table itself once its rows are in order (not by the grid).
DERIVED = ("on_front",)

#: What ``archledger deploy`` reports beside the stored columns but deployments.parquet does not
#: store, each a division of stored columns (docs/results.md): name -> doc. The site shows these
#: docs as the definitions of the deploy page's numbers, as it shows the stored columns' docs.
UNSTORED = {
    "tokens_per_s_per_gpu_steady": "Steady-state decode throughput per GPU: batch / tpot_mean_s / GPUs (at batch = max_concurrent_requests_steady: the throughput at capacity).",
    "prefill_tokens_per_s_per_gpu": "Prefill throughput per GPU: batch x input_len / ttft / GPUs.",
}

#: Deployment columns a decode row would only repeat: a decode step emits one token per request,
#: so its step_time_s and step_bound_s are the row's tpot_s and tpot_bound_s (MTP's several tokens
#: per step would make them differ; such a value stays). Stored null where they are that copy:
#: zstd finds repeats inside a column, not across two, so the copies cost 12% of the downloads.
DECODE_COPIES = {"step_time_s": "tpot_s", "step_bound_s": "tpot_bound_s", "step_expected_s": "tpot_expected_s"}


def without_copies(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each :data:`DECODE_COPIES` column null on the decode rows where it equals
    the column it copies (the reader's ``pl.coalesce(copy, original)`` gives the value back)."""
    decode = pl.col("phase") == "decode"
    return frame.with_columns(pl.when(decode & (pl.col(name) == pl.col(original))).then(None)
                              .otherwise(pl.col(name)).alias(name) for name, original in DECODE_COPIES.items())


#: ops.parquet: the per-op SOL table of the deployments the site shows. An op's SOL time (the largest
#: of its three times, the one ``bound`` names) and its intensity (flops / bytes) are not stored:
#: copies and divisions of stored columns cost bytes zstd cannot find (docs/results.md).
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
    "t_compute_s": (pl.Float64, "FLOPs / peak of the operand dtype (s)."),
    "t_memory_s": (pl.Float64, "Bytes / HBM bandwidth (s)."),
    "t_comm_s": (pl.Float64, "Link bytes / link bandwidth (s)."),
    "bound": (pl.String, "compute, memory or comm: the largest of the three, the op's SOL time (t_sol_s = max of the three, not stored)."),
    "t_expected_s": (pl.Float64, "Expected time of the op's calls in the step (s): the measured table's time at the op's shape (interpolated in log space) x calls, never below its SOL time; where no table covers the op, its SOL time / 0.7 (docs/deployment.md \"Expected time from measured kernels\")."),
    "measured": (pl.Boolean, "Whether a measured table gave t_expected_s (false: the SOL time / the default efficiency 0.7)."),
    "expected_src": (pl.String, "Where t_expected_s comes from: the table's kernel class and variant, framework and version, source package and the op's point on the table's axes (`, extrapolated` outside the measured range), e.g. `gemm-bf16 vllm 0.24.0 (aiconfigurator-core 0.12.0) at m=64 n=4096 k=4096`; `bound / 0.7` without a table."),
    "expected_table": (pl.String, "The measured table's file (gpus/measured/<gpu>/<framework>-<version>/<kernel>-<variant>.yaml); empty without a table."),
    "expected_nearest": (pl.String, "The measured points around the op's point, per axis the grid value it sits on or the two it lies between (at the edge it continues from, outside the range), e.g. `m 32..64 n 4096 k 4096`; empty without a table."),
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
    unverified: dict[str, str] = field(default_factory=dict)      # model -> why it cannot be verified (its spec's `unverified:`)
    stale: list[str] = field(default_factory=list)     # kept by a subset build although their inputs changed
    site: Path | None = None                            # the published site, when one was rendered
    deployment_rows: int = 0
    op_rows: int = 0
    points: int = 0
    seconds: float = 0.0


# -- hashing --------------------------------------------------------------------------------------

_ENGINE_DIGEST: list[str] = []


def engine_digest() -> str:
    """SHA-256 of the engine's sources and library versions as this process sees them (once per
    process): a Dask worker compares it with the client's before working (:mod:`engine.build.executor`)."""
    if not _ENGINE_DIGEST:
        _ENGINE_DIGEST.append(_digest(engine_sources(), _engine_identity()))
    return _ENGINE_DIGEST[0]


def slug(model_id: str) -> str:
    return model_id.replace("/", "--")


# -- one model (runs in a worker process) ----------------------------------------------------------

def attention_kinds(ev: Evaluation) -> list[str]:
    """The main stack's attention components, ``+window`` for sliding-window instances (one rule with
    :func:`attention_label`'s ``sliding``: engine.build.landscape.all_windowed)."""
    return landscape.attention_kinds(ev)


def attention_label(ev: Evaluation) -> str:
    """The mixers of the main stack's layer plans, as one label ("gdn + gqa", "mla", "gqa + sliding").

    Each attention-role component instance (one per layer template) contributes its component's
    ``label`` (corpus YAML), or ``sliding`` when every cache it keeps is window-capped. Order:
    instances with a recurrent state first, then those whose cache grows with context, then the
    sliding ones, each by first layer; a label appears once."""
    model, num = ev.model, ev.numeric
    found: dict[str, tuple] = {}
    for uid, row in num.components.items():
        if row.role != "attention" or row.stack != "main":
            continue
        mine = [c for c in num.caches if c.node_uid.startswith(uid + "/")]
        if any(kv.is_recurrent(c, num) for c in mine):
            rank, label = 0, None
        elif landscape.all_windowed(ev, uid):
            rank, label = 2, "sliding"
        else:
            rank, label = 1, None
        if label is None:
            label = ev.corpus.component_for(model, row.component, model.where).label
        key = (rank, _first_layer(num, uid))
        found[label] = min(found.get(label, key), key)
    return " + ".join(sorted(found, key=lambda k: found[k]))


def _first_layer(num, uid: str) -> int:
    """The first layer index of the layer template a component instance sits in (0 outside one)."""
    while uid:
        row = num.components.get(uid)
        if row is not None and row.layers:
            return min(row.layers)
        uid = uid.rpartition("/")[0]
    return 0


def kv_split(ev: Evaluation, lengths) -> dict:
    """The two parts of a request's cache (BF16 KV): the flat state bytes, and the growing part at
    each length. Exact integers from the spec's formulas (:func:`engine.spec.kv.bytes_per_request`)."""
    state = kv.bytes_per_request(ev.numeric, 1, part="state")      # a state holds no context term
    growing = [int(kv.bytes_per_request(ev.numeric, int(n), part="growing")) for n in lengths]
    return {"kv_state_bytes": int(state), "kv_context_lengths": [int(n) for n in lengths],
            "kv_growing_bytes_per_request": growing}


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
        "attention_kinds": attention_kinds(ev), "attention_label": attention_label(ev),
        **kv_split(ev, KV_LENGTHS),     # the lengths of the model page's curve (engine.build.export)
        "traits": landscape.traits(ev),
        **weight_format_columns(ev),
        **landscape.lineage_columns(ev.model.model_id, ev.model.family, landscape.load_lineage(ev.corpus.root)),
    }


def _with_formats(row: dict) -> dict:
    """A models.parquet row as this build writes it: one written before the weight_format* columns
    (a subset build carries such rows, stale) had one published format, its own storage."""
    if "weight_formats" in row:
        return row
    return {**row, "weight_formats": ["checkpoint"], "weight_format_models": [row["model_id"]],
            "weight_format_bytes": [row["checkpoint_bytes"]], "weight_format_tensors": [row["checkpoint_tensors"]]}


def weight_format_columns(ev: Evaluation) -> dict:
    """models.parquet's weight_format* columns: each published format's name, id, bytes, tensors."""
    formats = ev.weight_formats()
    return {"weight_formats": [f["format"] for f in formats], "weight_format_models": [f["model_id"] for f in formats],
            "weight_format_bytes": [int(f["bytes"].value) for f in formats],
            "weight_format_tensors": [int(f["tensors"].value) for f in formats]}


#: variants.parquet: one row per what-if variant (corpus/variants/): models.parquet's columns
#: (``verified`` always false, ``verified_against`` "what-if") and these.
VARIANTS_SCHEMA = {
    **MODELS_SCHEMA,
    "variant_of": (pl.String, "The corpus model the variant swaps a module of (its base)."),
    "label": (pl.String, "Always 'what-if': a variant is an unpublished design, never a verified model."),
    "swaps": (pl.List(pl.String), "The swaps, in `archledger edit --swap` form."),
}


def write_contracts(corpus: Corpus, final: Path, staging: Path, shared: str, gpu_root: Path) -> str:
    """``contracts.json`` (engine.build.contract): carried from the previous results when its inputs
    (the shared hash, which covers the components, GPUs, fusion tables and engine, and the contract
    folders) are unchanged and the file still matches its manifest record, else evaluated. Returns
    the inputs' digest (the manifest's ``contracts_hash``)."""
    from engine.build.contract import evaluate_contracts
    files = sorted((corpus.root / "contracts").rglob("*.yaml"))
    # the folders are the slots: their relative paths are part of the identity too
    digest = _digest(files, "|".join([shared, *(p.relative_to(corpus.root).as_posix() for p in files)]).encode())
    if not _carried(final, staging, ("contracts.json",), lambda manifest: manifest.get("contracts_hash") == digest):
        (staging / "contracts.json").write_text(json.dumps(evaluate_contracts(corpus, gpu_root), indent=1))
    return digest


def _carried(final: Path, staging: Path, names: tuple[str, ...], same_inputs) -> bool:
    """Copy the previous results' corpus-wide files ``names`` into ``staging`` when
    ``same_inputs(previous manifest)`` holds and every file still matches its manifest record;
    False (nothing copied) otherwise, or when there are no readable previous results."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        kept = same_inputs(manifest) and all(publish.matches(final / n, manifest["files"].get(n)) for n in names)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        kept = False
    if kept:
        for name in names:
            shutil.copy2(final / name, staging / name)
    return kept


def _corpus_wide_in_worker(name: str, root: str, final: str, staging: str, shared: str, gpu_root: str, *extra):
    """In a --jobs worker: :func:`write_contracts` or :func:`write_variants` (by name) on the
    worker's copy of the corpus."""
    fn = {"write_contracts": write_contracts, "write_variants": write_variants}[name]
    return fn(cached_corpus(root), Path(final), Path(staging), shared, Path(gpu_root), *extra)


def write_variants(corpus: Corpus, final: Path, staging: Path, shared: str, gpu_root: Path,
                   models: list[str]) -> None:
    """``variants.json`` (the playground's data: engine.playground.whatif.playground_document) and
    ``variants.parquet`` (:data:`VARIANTS_SCHEMA`) for the variants whose base is among the published
    ``models`` (a variant follows its base), carried from the previous results when their inputs
    (the shared hash, the variants, slots and every model spec and snapshot) are unchanged."""
    from engine.playground import whatif
    from engine.deploy.hardware import load_gpus
    from engine.spec import variants as variant_rules
    root, base = corpus.root, corpus.root.parent
    files = [p for p in (root / "slots.yaml",) if p.exists()] + sorted((root / "variants").glob("*.yaml"))
    files += sorted({base / m.where.file for m in corpus.models.values()} |
                    {base / m.snapshot.where.file for m in corpus.models.values()}, key=str)
    chosen = [v for v in corpus.variants.values() if v.base in models]
    digest = _digest(files, (shared + "|" + ",".join(v.name for v in chosen)).encode())
    if _carried(final, staging, ("variants.json", "variants.parquet"),
                lambda _: json.loads((final / "variants.json").read_text()).get("hash") == digest):
        return
    evaluations: dict = {}
    doc = {"hash": digest, **whatif.playground_document(corpus, load_gpus(gpu_root), chosen, evaluations)}
    rows = []
    for v in chosen:
        row = model_row(evaluations[v.name], digest)
        row.update({"verified": False, "verified_against": variant_rules.LABEL, "variant_of": v.base,
                    "label": variant_rules.LABEL, "swaps": [whatif.swap_text(s) for s in v.swaps]})
        rows.append(row)
    (staging / "variants.json").write_text(json.dumps(doc, separators=(",", ":")))
    write_parquet(_frame({k: [r[k] for r in rows] for k in VARIANTS_SCHEMA}, VARIANTS_SCHEMA),
                  staging / "variants.parquet")


def _frame(columns: dict, schema: dict) -> pl.DataFrame:
    return pl.DataFrame([_series(k, columns[k], v[0]) for k, v in schema.items()])


def _series(name: str, values, dtype) -> pl.Series:
    """One column. A list column (an op's fused ``parts``) is built from its distinct values and
    gathered: polars converts nested Python lists at ~6 s per million rows, and a table of a
    million op rows holds a few hundred distinct ones. So is a column of long texts (a deployment's
    weight formula, about a kilobyte, repeated on every row of its config): polars copies each
    string it converts, ~0.6 s per million rows per kilobyte, and the gathered column shares the
    few distinct ones (the same values: the Parquet bytes are the same)."""
    nested = isinstance(dtype, pl.List)
    if isinstance(values, list) and (nested or (dtype == pl.String and _long_texts(values))):
        distinct: dict = {}
        index = [distinct.setdefault(tuple(v) if nested else v, len(distinct)) for v in values]
        firsts = [list(v) for v in distinct] if nested else list(distinct)
        return pl.Series(name, firsts, dtype=dtype).gather(pl.Series(index, dtype=pl.UInt32))
    return pl.Series(name, values, dtype=dtype)


#: Mean length from which a text column is gathered from its distinct values (:func:`_series`):
#: below it, hashing every value costs more than polars' copy of it (short labels: 2-3x more).
LONG_TEXT = 256


def _long_texts(values: list) -> bool:
    """Whether the first rows of a text column are long texts on average (a cheap sample: the
    choice changes the time :func:`_series` takes, never the values)."""
    head = [v for v in values[:64] if isinstance(v, str)]
    return bool(head) and sum(map(len, head)) >= LONG_TEXT * len(head)


def write_parquet(frame: pl.DataFrame, path: Path, **options) -> None:
    """Write a Parquet file through Python's file API: polars reports a full disk as a ComputeError
    that may not carry the errno ("Invalid thrift: transport error"), this raises OSError(ENOSPC)."""
    buffer = io.BytesIO()
    frame.write_parquet(buffer, **options)
    Path(path).write_bytes(buffer.getbuffer())


#: Row order of a deployments or ops partition (a stable sort: an ops point keeps its ops in step
#: order). Rows of one deployment sit together, so Parquet's dictionary and run-length encodings
#: see long runs; with zstd level :data:`ZSTD_LEVEL` the partitions are about 22% smaller than in
#: evaluation order at polars' default level (DeepSeek-V4-Pro: 1.46 -> 1.14 MB of deployments).
#: ``phase`` comes last: a point's prefill and decode rows sit side by side, and the columns they
#: share (memory, capacity, TTFT, TPOT) repeat within zstd's reach: 1.8% fewer bytes over the
#: 51 models' deployments and ops (75.14 -> 73.75 MB), the decode rows' own order unchanged (so
#: ``on_front``'s tie-break, which reads them in table order, too). Level 12 would save 1.2% more
#: for half again the write time; 15 and above cost 2-6x the time for 1-3% less. The rest is the
#: float64 values themselves: a column costs 5-9 bytes per distinct value (benchmarks/downloads.py).
#: The site publishes these files as its downloads (hard links), so this is the downloads' size too.
PARTITION_ORDER = ["gpu", "n_gpus", "config", "framework", "kv_dtype", "input_len", "output_len", "batch", "phase"]
ZSTD_LEVEL = 9


_CORPORA: dict[tuple[str, str], Corpus] = {}


def cached_corpus(root: str | None) -> Corpus:
    """:func:`load_corpus`, once per process and corpus content: a --jobs worker evaluates many models
    and parsing the YAML (about 2.5 s) dominated a small model's work. Keyed on the files' content,
    so an edited corpus is read again (a process running several builds never sees a stale one)."""
    path = Path(root) if root else None
    from engine.spec.corpus import DEFAULT_ROOT
    path = (path or DEFAULT_ROOT).resolve()
    key = (str(path), corpus_digest(path))
    if key not in _CORPORA:
        _CORPORA.clear()                 # one corpus per process at a time: a build uses one
        _CORPORA[key] = load_corpus(path)
    return _CORPORA[key]


#: The two halves of a model's work (:func:`build_model`'s ``part``): the grid (deployments, ops and
#: the deploy page's formulas) and the rest (fronts and sizing, the model document, the playground
#: picks). They write disjoint files; a build with fewer models to evaluate than workers runs the
#: halves of each model the previous build timed at :data:`SPLIT_SECONDS` or more in parallel (each
#: walks the spec and compiles its own structures), else a model is one task (the sizing step then
#: reuses the grid's structures).
PARTS = ("grid", "extras")
#: A model worth two tasks: starting a worker process (imports, the corpus) costs one to two seconds,
#: so a model that evaluates in a few seconds finishes sooner in the build's own process.
SPLIT_SECONDS = 4.0


def _split(todo: list[str], previous: "Previous", jobs: int | None) -> set[str]:
    """The models of ``todo`` evaluated as two tasks (:data:`PARTS`): none unless there are fewer
    models than workers; then those the previous build timed at :data:`SPLIT_SECONDS` or more."""
    if len(todo) >= (jobs or workers.default_workers()):
        return set()
    return {m for m in todo if previous.models.get(m, {}).get("seconds", 0.0) >= SPLIT_SECONDS}


def build_model(corpus_root: str | None, model_id: str, grid_path: str | None, gpu_root: str | None,
                staging: str, spec_hash: str, verification: dict | None = None,
                corpus: Corpus | None = None, part: str = "all") -> dict:
    """Evaluate one model over the grid; write its partitions under ``staging``. Returns counts.
    ``corpus``: the loaded corpus when the caller has it (in-process builds), else it is read once
    per process (:func:`cached_corpus`). ``part``: ``all``, or one of :data:`PARTS` (the counts of
    the other half are absent; :func:`merge_parts` joins two halves' counts)."""
    with collector.model_heap():
        return _build_model(corpus_root, model_id, grid_path, gpu_root, staging, spec_hash, verification,
                            corpus, part)


def _build_model(corpus_root: str | None, model_id: str, grid_path: str | None, gpu_root: str | None,
                 staging: str, spec_hash: str, verification: dict | None, corpus: Corpus | None,
                 part: str) -> dict:
    """:func:`build_model`'s work."""
    from engine.build import grid_eval
    from engine.spec import finite
    from engine.deploy.fusion import load_tables
    from engine.deploy.structure_cache import StructureCache
    started = time.perf_counter()
    corpus = corpus if corpus is not None else cached_corpus(corpus_root)
    from engine.playground.whatif import evaluate_with_sites, model_playground
    from engine.deploy.hardware import load_gpus
    ev, sites = evaluate_with_sites(corpus, corpus.models[model_id])   # evaluate_spec's walks; its slot sites for the playground
    # one cache of placements and structures for the grid and the sizing step (the same configs)
    cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    name = slug(model_id)
    counts: dict = {"model_id": model_id}
    from engine.serving import fronts
    # every bound on the model's work (its grid points, its sizing pairs) before any of it starts
    grid_eval.check_work(ev, grid_path, gpu_root)
    fronts.check_work(ev, grid_path, gpu_root)
    if part in ("all", "grid"):
        formulas: dict = {}        # the deploy page's formula trees (engine.build.deploy_export)
        deployments, ops, points = grid_eval.evaluate_model(ev, grid_path, gpu_root, formulas, cache)
        finite.check_tables(ev.model, {"deployments": deployments, "ops": ops})   # nothing NaN or negative is written
        for table, columns, schema in (("deployments", deployments, DEPLOYMENTS_SCHEMA), ("ops", ops, OPS_SCHEMA)):
            folder = Path(staging) / table / f"model={name}"
            folder.mkdir(parents=True, exist_ok=True)
            derived = DERIVED if table == "deployments" else ()
            frame = _frame(columns, {k: v for k, v in schema.items() if k not in derived}).sort(PARTITION_ORDER,
                                                                                             maintain_order=True)
            if table == "deployments":
                frame = without_copies(frame)
            if derived:          # each front's rows, in the published row order (its tie-break)
                from engine.serving.fronts import grid_front
                frame = frame.with_columns(grid_front(frame))
            write_parquet(frame, folder / "part.parquet", statistics=True, compression="zstd",
                          compression_level=ZSTD_LEVEL)
        (Path(staging) / "formulas").mkdir(exist_ok=True)
        from engine.build.deploy_export import document_json     # compact_json's text, each step row encoded once
        (Path(staging) / "formulas" / f"{name}.json").write_text(document_json(formulas))
        counts.update(deployments=len(deployments["model_id"]), ops=len(ops["model_id"]), points=points)
    if part in ("all", "extras"):      # plan's search per sizing scenario: fronts/ and sizing/ (docs/results.md)
        counts.update(fronts.write_model(ev, grid_path, gpu_root, Path(staging), name,
                                         lambda columns, schema, path: write_parquet(_frame(columns, schema), path,
                                                                                     compression="zstd",
                                                                                     compression_level=ZSTD_LEVEL),
                                         cache))
        del cache
        from engine.build.export import model_document
        (Path(staging) / "models").mkdir(exist_ok=True)
        (Path(staging) / "models" / f"{name}.json").write_text(
            compact_json(model_document(ev, verification)))
        (Path(staging) / "playground").mkdir(exist_ok=True)      # the playground's live picks (docs/results.md)
        (Path(staging) / "playground" / f"{name}.json").write_text(
            compact_json(model_playground(ev, sites=sites, gpus=load_gpus(gpu_root))))
    counts["seconds"] = round(time.perf_counter() - started, 3)
    return counts


def merge_parts(halves: list[dict]) -> dict:
    """One model's counts from its :data:`PARTS` (``seconds``: their sum, the work the next build
    orders models by)."""
    merged = {k: v for half in halves for k, v in half.items()}
    merged["seconds"] = round(sum(half["seconds"] for half in halves), 3)
    return merged


# -- the build ----------------------------------------------------------------------------------------

class BuildError(Exception):
    """The build cannot run as asked (e.g. another grid than ``--out``'s results): one line, exit 2."""


#: errno values that mean "the output cannot be written" (reported in one line, exit 2).
WRITE_ERRORS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM}
_IN_WORKER: int | None = None          # the parent's pid inside a --jobs worker, else None


@dataclass
class Previous:
    """The published results as far as they can be trusted: a manifest that is not one, or a
    models.parquet that does not match its record, counts as absent."""

    root: Path
    grid: str | None = None
    models: dict[str, dict] = field(default_factory=dict)       # model -> manifest entry
    rows: dict[str, dict] = field(default_factory=dict)         # model -> models.parquet row
    skipped: dict[str, list[str]] = field(default_factory=dict)


def _read_previous(final: Path, log) -> Previous:
    previous = Previous(final)
    path = final / "manifest.json"
    if not path.exists():
        if (final / "models.parquet").exists():
            log(f"{path} is missing: treating the previous results as absent, rebuilding every model")
        return previous
    try:
        manifest = json.loads(path.read_text())
        problem = "" if isinstance(manifest, dict) else f"a JSON {type(manifest).__name__}, not an object"
    except (OSError, ValueError) as exc:
        manifest, problem = None, f"not JSON: {' '.join(str(exc).split())}"
    if not problem and not isinstance(manifest.get("models"), dict):
        problem = "no models table"
    if problem:
        log(f"{path} is not a results manifest ({problem}): treating the previous results as absent, "
            f"rebuilding every model")
        return previous
    previous.grid = manifest.get("grid") if isinstance(manifest.get("grid"), str) else None
    previous.models = {mid: e for mid, e in manifest["models"].items()
                       if isinstance(e, dict) and isinstance(e.get("hash"), str) and isinstance(e.get("files"), dict)}
    skipped = manifest.get("skipped")
    previous.skipped = {k: v for k, v in skipped.items() if isinstance(v, list)} if isinstance(skipped, dict) else {}
    record = (manifest.get("files") or {}).get("models.parquet") if isinstance(manifest.get("files"), dict) else None
    try:
        if record is not None and not publish.matches(final / "models.parquet", record):
            raise ValueError("its size or SHA-256 differs from the manifest's record")
        previous.rows = {r["model_id"]: _with_formats(r) for r in pl.read_parquet(final / "models.parquet").to_dicts()}
    except Exception as exc:      # polars raises its own errors on garbage; every one means "damaged"
        if previous.models:
            log(f"{final / 'models.parquet'} is damaged ({' '.join(str(exc).split())[:120]}): "
                f"rebuilding every model it listed")
        previous.rows = {}
    return previous


def _model_files(root: Path, model_id: str) -> list[Path]:
    """A model's files under a results folder (partitions and its inspector document)."""
    name = slug(model_id)
    return [root / t / f"model={name}" / "part.parquet" for t in ("deployments", "ops", "fronts", "sizing", "disagg")] + \
        [root / "models" / f"{name}.json", root / "formulas" / f"{name}.json", root / "playground" / f"{name}.json"]


def _file_records(root: Path, model_id: str) -> dict[str, dict]:
    return {p.relative_to(root).as_posix(): publish.file_digest(p) for p in _model_files(root, model_id)}


def _intact(previous: Previous, model_id: str) -> tuple[bool, str]:
    """Can the model's previous files be carried over? (ok, why not: '' when already reported)."""
    entry, row = previous.models[model_id], previous.rows.get(model_id)
    if row is None or row.get("spec_hash") != entry["hash"]:
        return False, ""                              # models.parquet damaged: said once already
    for path in _model_files(previous.root, model_id):
        rel = path.relative_to(previous.root).as_posix()
        record = entry["files"].get(rel)
        if not publish.matches(path, record):
            expected = record.get("size") if isinstance(record, dict) else None
            if not path.exists():
                state = "missing"
            elif path.stat().st_size != expected:
                state = f"{path.stat().st_size:,} bytes, recorded {expected}"
            else:
                state = "content differs from its recorded SHA-256"
            return False, f"{path} does not match the results manifest ({state})"
    return True, ""


def _carry(previous: Path, staging: Path, model_id: str) -> None:
    """Hard-link (or copy) a model's verified files from the previous results."""
    for src, dst in zip(_model_files(previous, model_id), _model_files(staging, model_id)):
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def grid_id(grid_path: Path) -> str:
    """Which grid a results tree was built over: the grid file's path relative to this checkout when
    inside it (a moved checkout keeps its results), else absolute. Editing that file is an input
    change (every model's hash changes), not another grid."""
    path = Path(grid_path).resolve()
    try:
        return path.relative_to(PACKAGE_ROOT).as_posix()
    except ValueError:
        return str(path)


def _grid_of(recorded: str) -> str:
    """A manifest's grid entry in :func:`grid_id`'s form (relative entries are relative to the checkout)."""
    return grid_id(Path(recorded)) if Path(recorded).is_absolute() else Path(recorded).as_posix()


def _skip_line(corpus: Corpus, model_id: str, errors: list) -> str:
    base = corpus.root.parent
    missing = [p for p in evidence_files(corpus, corpus.models[model_id]) if not p.exists()]
    if missing:
        names = ", ".join(str(p.relative_to(base)) if p.is_relative_to(base) else str(p) for p in missing)
        return (f"skip {model_id}: evidence {names} missing — skipped as unverified "
                f"(record it: archledger snapshot {model_id})")
    return f"skip {model_id}: not verified ({len(errors)} guard errors; run `archledger validate {model_id}`)"


def unverified_listed(corpus: Corpus, unverified: dict[str, str]) -> dict[str, dict]:
    """What ``archledger list`` prints of each declared-unverified spec (engine.cli.show.LIST_COLUMNS:
    family, model_type, parameters from a numeric walk, lineage columns), kept in the manifest so
    that ``list`` on a built checkout answers without loading the corpus or importing sympy (such a
    spec is never published, so models.parquet has no row for it)."""
    from engine.spec import quantities
    from engine.spec.evaluate import Binding, walk_model
    table = landscape.load_lineage(corpus.root)
    out = {}
    for mid in sorted(unverified):
        model = corpus.models[mid]
        params = int(quantities.params_total(walk_model(corpus, model, Binding("numeric", {}))))
        out[mid] = {"family": model.family, "model_type": model.model_type, "params_total": params,
                    **landscape.lineage_columns(mid, model.family, table)}
    return out


def refuse_unverified(skipped: dict[str, list[str]], log) -> None:
    """``--strict``: one line per spec that failed its guards (its first error), then the
    :class:`BuildError` that stops the build before anything is published. A deploy built this way
    cannot silently drop a model that a merge broke: the deploy fails instead."""
    for mid, errors in sorted(skipped.items()):
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        first = errors[0] if errors else "its evidence is missing"
        log(f"unverified {mid}: {first}{more}")
    raise BuildError(f"--strict: {len(skipped)} spec(s) failed their guards and would be left out of the "
                     f"results and site: {', '.join(sorted(skipped))}; nothing was published — fix them "
                     f"(archledger validate MODEL) or build without --strict to skip them")


def build(corpus: Corpus, out: Path, models: list[str] | None = None, grid_path: Path | None = None,
          gpu_root: Path | None = None, jobs: int | None = None, progress=None, log=None, site=None,
          site_progress=None, lock_timeout: float | None = None, command: str = "archledger build",
          executor: str | None = None, strict: bool = False) -> Report:
    """Evaluate (or carry over) the models' partitions into a staged results tree, render the staged
    site from it when ``site`` is given, then publish both together (:mod:`engine.build.publish`).

    Invariants: ``out`` is absent, empty or an ArchLedger output (:func:`engine.build.publish.claim`,
    else one line and nothing touched); nothing under ``out/results`` or ``out/site`` changes until
    the publication commits;
    a results tree holds one grid; a model is carried over only if its files match the sizes and
    SHA-256 its manifest records; a subset (``models``) never discards a model it did not rebuild
    (the rules are in :func:`run`). ``site(results_dir, site_dir, progress)`` renders into the empty
    ``site_dir`` and is published with the results; without it (``--no-site``) only the results are
    published and the site is left as it was, its ``pin.json`` naming the results it shows (one log
    line says so when they differ). ``executor``: where models are evaluated (``--executor``:
    local, local-cluster[:N], or a Dask scheduler address; :mod:`engine.build.executor`).
    ``strict`` (``--strict``, what CI and the deploy run): a spec that fails its guards is not
    skipped but fails the build before any grid work, nothing published (:func:`refuse_unverified`)."""
    from engine.build import executor as executors
    from engine.build import inputs
    from engine.build.grid import grid_file
    from engine.deploy.hardware import DEFAULT_ROOT as GPU_ROOT, load_gpus
    started = time.perf_counter()
    log = log or (lambda line: None)
    publish.claim(out)                     # a user's folder is refused before anything is read or written
    if lock_timeout is None:
        lock_timeout = publish.lock_timeout()
    grid_path = grid_file(corpus.root, grid_path)
    gpu_root = Path(gpu_root) if gpu_root else GPU_ROOT
    shared = shared_hash(corpus, grid_path, gpu_root)
    if not _checked_before(Path(out) / "results", shared, corpus.root):
        inputs.check_all(corpus, grid_path, gpu_root)   # fail early, before any work
    where = executors.parse(executor)
    if where.kind != "local":
        executors.distributed_module()         # the optional extra, checked before any work
    named = list(dict.fromkeys(corpus.find_model(m).model_id for m in models)) if models else list(corpus.models)
    hashes = {mid: model_hash(corpus, mid, shared) for mid in corpus.models}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with publish.lock(out, command, lock_timeout, log), contextlib.ExitStack() as stack:
        publish.recover(out, log)
        final = out / "results"
        previous = _read_previous(final, log)
        grid = grid_id(grid_path)
        if previous.models and previous.grid is not None and _grid_of(previous.grid) != grid:
            raise BuildError(f"{final}/ holds results over the grid {previous.grid}, not {grid}: use another --out "
                             f"for another grid (one results tree mixing grids would mix incomparable rows)")
        staging = stack.enter_context(publish.staged(out, "results"))
        report = Report(final)

        # -- what to build: named models are rebuilt unless unchanged; the rest of the tree is kept
        targets = list(corpus.models) if not models else \
            [m for m in corpus.models if m in named or m in previous.models] + \
            sorted(m for m in previous.models if m not in corpus.models)
        rows, entries, todo = {}, {}, []
        for mid in targets:
            entry, current = previous.models.get(mid), hashes.get(mid)
            ok, why = _intact(previous, mid) if entry else (False, "")
            if why:
                log(f"{why}: " + (f"rebuilding {mid}" if current else f"dropping {mid} (no longer in the corpus)"))
            if ok and (current == entry["hash"] or mid not in named):
                _carry(final, staging, mid)
                rows[mid] = previous.rows[mid]
                entries[mid] = {k: v for k, v in entry.items() if k != "stale"}
                if current == entry["hash"]:
                    report.reused.append(mid)
                else:
                    entries[mid]["stale"] = "inputs changed since it was built" if current else "no longer in the corpus"
                    report.stale.append(mid)
            elif current is not None:
                todo.append(mid)
        if models:       # a subset keeps the verdicts of models it did not look at
            report.skipped.update({m: e for m, e in previous.skipped.items() if m not in named and m in corpus.models})
        # a spec declaring why no evidence can verify it (transformers lacks its architecture) is
        # listed with that reason, never checked, evaluated or published, and --strict accepts it
        report.unverified = {m: spec.unverified for m, spec in corpus.models.items() if spec.unverified}
        for mid in [m for m in todo if m in report.unverified]:
            todo.remove(mid)
            log(f"unverified {mid}: {report.unverified[mid]} (declared in its spec; not published)")
        if report.stale:
            log(f"kept {len(report.stale)} model(s) not named as they were, marked stale in manifest.json: "
                + ", ".join(f"{m} ({entries[m]['stale']})" for m in report.stale)
                + " — rebuild them with --models or a full build")

        # every changed spec is walked and verified here first: a broken one fails the build before any
        # work (one line, nothing written); an unverified one is skipped; its row comes from this walk
        # (in the --jobs workers when there are several: the guards of 30 specs take seconds each)
        # (a lone model's halves run in two workers: PARTS); the contracts table is handed to the
        # pool first, so a worker starts while this process walks the specs
        split = _split(todo, previous, jobs) if where.kind == "local" else set()
        pool = _pool(stack, jobs, len(todo) + len(split), corpus) if where.kind == "local" else None
        early = [pool.submit(_corpus_wide_in_worker, "write_contracts", str(corpus.root), str(final), str(staging),
                             shared, str(gpu_root))] if pool is not None else []
        checks = {}
        for found in _check_all(corpus, list(todo), hashes, pool if len(todo) > 1 else None):
            mid = found["model_id"]
            if "errors" in found:
                report.skipped[mid] = found["errors"]
                todo.remove(mid)
                if not strict:      # (strict: refuse_unverified says it, below)
                    log(found["skip"])
                continue
            checks[mid] = found["check"]
            rows[mid] = found["row"]
        if strict and report.skipped:
            refuse_unverified(report.skipped, log)
        targets = [m for m in targets if m in rows]

        # -- evaluate: the slowest models first (as last time; else the largest), so the pool's tail is short
        todo.sort(key=lambda m: (-previous.models.get(m, {}).get("seconds", 0.0), -rows[m]["params_total"]))
        for table in ("deployments", "ops", "models", "fronts", "sizing", "disagg"):    # present even when empty: readers glob them
            (staging / table).mkdir(exist_ok=True)
        # the corpus-wide tables depend on no model's results: with a pool they are written by its
        # workers while the models evaluate (else here, after them)
        corpus_wide = [(write_contracts, ()), (write_variants, (targets,))]

        def variants_to_pool() -> None:      # queued behind the models' tasks (the longest path)
            early.append(pool.submit(_corpus_wide_in_worker, "write_variants", str(corpus.root), str(final),
                                     str(staging), shared, str(gpu_root), targets))
        results = _evaluate(corpus, todo, grid_path, gpu_root, staging, hashes, checks, jobs,
                            progress, len(targets), len(targets) - len(todo), where, pool,
                            variants_to_pool if pool is not None else None, split,
                            {m: e.get("seconds", 0.0) for m, e in previous.models.items()})
        if pool is not None:
            for future in early:        # (their errors are raised where their results are read)
                future.exception()
            pool.shutdown(wait=False)   # idle now: they exit (and free their memory) while the site renders
        for r in results:
            mid = r["model_id"]
            entries[mid] = {"hash": hashes[mid], "deployments": r["deployments"], "ops": r["ops"],
                            "points": r["points"], "seconds": r["seconds"], "partition": slug(mid),
                            "fronts": r["fronts"], "sizing": r["sizing"], "disagg": r["disagg"],
                            "sizing_seconds": r["sizing_seconds"],
                            "files": _file_records(staging, mid)}
            report.recomputed.append(mid)
            report.points += r["points"]

        # -- write the tables; every file's size and hash goes into the manifest
        contracts_digest, _ = [f.result() for f in early] if early else \
            [fn(corpus, final, staging, shared, gpu_root, *extra) for fn, extra in corpus_wide]
        ordered = [rows[m] for m in targets]
        write_parquet(_frame({k: [r[k] for r in ordered] for k in MODELS_SCHEMA}, MODELS_SCHEMA),
                      staging / "models.parquet")
        # the same rows as JSON (exact: integers, strings, lists, booleans): a command reads them
        # without importing polars (engine.build.built; `list` answers in a fifth of the time)
        (staging / MODELS_JSON).write_text(compact_json([{k: r[k] for k in MODELS_SCHEMA} for r in ordered]))
        facts = {m: json.loads((staging / "models" / f"{slug(m)}.json").read_text())["landscape"] for m in targets}
        (staging / "landscape.json").write_text(json.dumps(
            landscape.tables(facts, rows, load_gpus(gpu_root)), separators=(",", ":")))
        manifest = {"schema_version": SCHEMA_VERSION, "shared_hash": shared, "grid": grid,
                    "contracts_hash": contracts_digest,
                    # the corpus as this build read it: a command finds an unchanged corpus (so
                    # unchanged model hashes) without loading it (engine.build.built)
                    "corpus": {"digest": corpus_digest(corpus.root), "models": sorted(corpus.models)},
                    "models": {m: entries[m] for m in targets}, "skipped": report.skipped,
                    "unverified": report.unverified,
                    "unverified_listed": unverified_listed(corpus, report.unverified),
                    "files": {name: publish.file_digest(staging / name)
                              for name in ("models.parquet", MODELS_JSON, "contracts.json", "landscape.json",
                                           "variants.json", "variants.parquet")}}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        report.deployment_rows = sum(entries[m]["deployments"] for m in targets)
        report.op_rows = sum(entries[m]["ops"] for m in targets)

        # -- the site, from the staged results; then both are published in one journaled step
        publication = [("results", staging)]
        if site is not None:
            site_dir = stack.enter_context(publish.staged(out, "site"))
            site(staging, site_dir, site_progress)
            publish.pin_site(site_dir, staging)
            publication.append(("site", site_dir))
            report.site = out / "site"
        elif (out / "site").exists() and publish.site_pin(out / "site") != publish.results_digest(staging):
            # asked for no site: the site is left as it is, and its pin.json tells what it shows
            log(f"{out / 'site'}/ still shows the previous results (no site asked for): "
                f"`archledger site` renders it from the new ones")
        publish.publish(out, publication)
    report.seconds = time.perf_counter() - started
    return report


def _checked_before(final: Path, shared: str, corpus_root: Path) -> bool:
    """Whether the published results were built from exactly these inputs: their manifest records
    this shared hash (the grid, the GPU files and measured tables, the fusion tables, the engine's
    sources and libraries) and this corpus digest (every file under the corpus). Such a build ran
    :func:`engine.build.inputs.check_all` on the same bytes with the same code and passed, so the
    check would pass again: a build with nothing changed skips it (parsing the measured tables was
    half of its time). Anything unreadable or different: False, and the files are checked."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        return (manifest["shared_hash"] == shared
                and manifest["corpus"]["digest"] == corpus_digest(corpus_root))
    except Exception:       # noqa: BLE001 — absent, damaged or older: check the inputs
        return False


def check_model(corpus_root: str | None, model_id: str, spec_hash: str, corpus: Corpus | None = None) -> dict:
    """Walk and verify one changed spec: ``{model_id, check, row}`` (its verdict and models.parquet
    row) when verified, else ``{model_id, errors, skip}`` (the guard errors and the log line). A
    spec that does not evaluate raises its SpecError (the build stops before any grid work)."""
    corpus = corpus if corpus is not None else cached_corpus(corpus_root)
    model = corpus.models[model_id]
    ev = evaluate_spec(corpus, model)
    verdict = validate(corpus, model, ev)
    if not verdict.verified:
        return {"model_id": model_id, "errors": [f.one_line() for f in verdict.errors],
                "skip": _skip_line(corpus, model_id, verdict.errors)}
    check = verdict.as_dict()
    return {"model_id": model_id, "check": check, "row": model_row(ev, spec_hash, check)}


def _check_all(corpus: Corpus, todo: list[str], hashes: dict, pool) -> list[dict]:
    """:func:`check_model` for each model, in ``todo``'s order (in the pool's workers if given)."""
    if pool is None:
        return [check_model(str(corpus.root), mid, hashes[mid], corpus) for mid in todo]
    futures = [pool.submit(check_model, str(corpus.root), mid, hashes[mid]) for mid in todo]
    try:
        return [future.result() for future in futures]
    except BaseException:
        for future in futures:          # a spec that does not evaluate stops the build at once
            future.cancel()
        raise


def _pool(stack: contextlib.ExitStack, jobs: int | None, tasks: int, corpus: Corpus | None = None):
    """The --jobs worker processes (None when one is enough), closed with ``stack``. Spawned, not
    forked: a forked child inherits polars' thread pool mid-state and can hang. Workers die with
    this process (see worker_init), so a killed build leaves no orphan evaluating on. Each worker
    starts with the build's loaded ``corpus`` (unpickling it is ~40x faster than parsing the YAML),
    filed under the content digest :func:`cached_corpus` looks it up by. The pickle goes through a
    file, not the start-up pipe: a worker reads that pipe only after importing the engine, so half
    a megabyte in it held this process for as long at every worker start."""
    jobs = max(1, min(jobs or workers.default_workers(), tasks or 1))
    if jobs == 1:
        return None
    seed = None
    if corpus is not None:
        root = Path(corpus.root).resolve()
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="archledger-corpus-")))
        from engine.deploy import measured
        # with the measured kernel tables this process parsed (inputs.check_all): a worker would
        # parse them again, about a second of its start (each keeps its file's bytes: measured.adopt_tables)
        (folder / "corpus.pickle").write_bytes(pickle.dumps((corpus, measured.parsed_tables()),
                                                            protocol=pickle.HIGHEST_PROTOCOL))
        seed = ((str(root), corpus_digest(root)), str(folder / "corpus.pickle"))
    return stack.enter_context(ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                                   initializer=worker_init, initargs=(os.getpid(), seed)))


def _evaluate(corpus: Corpus, todo: list[str], grid_path: Path, gpu_root: Path, staging: Path, hashes: dict,
              checks: dict, jobs: int | None, progress, total: int, done: int, where=None, pool=None,
              submitted=None, split: set[str] = frozenset(), previous_seconds: dict | None = None) -> list[dict]:
    """Run :func:`build_model` for each model: in this process, in the ``pool`` of --jobs worker
    processes, or on a Dask cluster (``where``, an :class:`engine.build.executor.Executor`); the
    same files either way. ``submitted()``: called once the models' tasks are in the pool's queue;
    ``split``: the models run as two tasks in the pool (:func:`_split`); ``previous_seconds``: each
    model's seconds in the previous build (the chains' order, :mod:`engine.build.families`)."""
    from engine.build import executor as executors, families
    previous_seconds = previous_seconds or {}
    args = [(str(corpus.root), mid, str(grid_path), str(gpu_root), str(staging), hashes[mid], checks[mid])
            for mid in todo]
    results: list[dict] = []
    if progress:
        progress(done, total, 0, "")
    # each model of `split` runs as its two halves (PARTS) in the pool, the others as one task
    parts = {m: PARTS if pool is not None and m in split else ("all",) for m in todo}
    halves: dict[str, list[dict]] = defaultdict(list)

    def finished(result: dict) -> None:
        halves[result["model_id"]].append(result)
        if len(halves[result["model_id"]]) < len(parts[result["model_id"]]):
            return
        result = merge_parts(halves.pop(result["model_id"]))
        results.append(result)
        publish.fault("evaluate")
        if progress:
            progress(done + len(results), total, sum(r["points"] for r in results), result["model_id"])

    if where is not None and where.kind != "local":
        if todo:
            bundle = executors.make_bundle(corpus.root, gpu_root, grid_path, engine_digest())
            executors.run_dask(where, jobs, bundle, build_model, [(mid, (hashes[mid], checks[mid])) for mid in todo],
                               staging, engine_digest, finished)
        return results
    # a family's models one after the other in one process: what it keeps from the first answers
    # for the next (engine.build.families); a model run as halves is two tasks of its own
    by_id = {a[1]: a for a in args}
    chained = families.chains([m for m in todo if parts[m] == ("all",)], lambda m: corpus.models[m].family,
                              lambda m: previous_seconds.get(m, 0.0))
    if pool is None:
        for chain in chained:
            for mid in chain:
                finished(build_model(*by_id[mid], corpus=corpus))
        return results
    futures = ([pool.submit(_build_model_in_worker, *by_id[m], part=part) for m in todo if parts[m] != ("all",)
                for part in parts[m]]
               + [pool.submit(_build_chain_in_worker, [by_id[m] for m in chain]) for chain in chained])
    if submitted is not None:
        submitted()
    try:
        for future in as_completed(futures):
            done_now = future.result()        # a chain's results, or one half's
            for result in done_now if isinstance(done_now, list) else [done_now]:
                finished(result)
    except BaseException:
        for future in futures:          # a failure stops the build: do not finish the others first
            future.cancel()
        raise
    return results


def worker_init(parent: int, seed: tuple | None = None) -> None:
    """In each --jobs worker: die when the build process dies, however it dies
    (:func:`engine.build.lifeline.die_with`); collect rarely; skip the interpreter's teardown."""
    global _IN_WORKER
    _IN_WORKER = parent
    if seed is not None:             # (key, the pickled corpus's file: _pool)
        from engine.deploy import measured
        _CORPORA[seed[0]], parsed = pickle.loads(Path(seed[1]).read_bytes())
        measured.adopt_tables(parsed)
    gc.freeze()                      # the modules and the corpus live as long as the worker (each model's
                                     # evaluation freezes the heap again: collector.model_heap)
    collector.tune()                 # (already so when spawned by the archledger command: site_builder.cli)
    lifeline.die_with(parent)
    # When the pool stops a worker its heap is garbage: skip the interpreter's teardown, which
    # frees every cached sympy object one by one (about 9 s per build worker after the whole
    # corpus, while the site renders beside it). multiprocessing's exit finalizers (queue
    # flushes) run first: this one has the lowest priority, so it runs last.
    import multiprocessing.util
    multiprocessing.util.Finalize(None, _end_worker, exitpriority=-1000)


def _end_worker() -> None:
    """A pool worker's last step (see :func:`worker_init`): flush what it printed, then exit 0
    without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _build_chain_in_worker(chain: list[tuple]) -> list[dict]:
    """:func:`build_model` of each model of a family chain (:func:`engine.build.families.chains`),
    in order, in this worker."""
    return [_build_model_in_worker(*args) for args in chain]


def _build_model_in_worker(*args, part: str = "all") -> dict:
    if os.environ.get(publish.FAULT_ENV) == "worker" and _IN_WORKER == os.getppid():
        os.kill(_IN_WORKER, signal.SIGKILL)     # test hook: the build dies while this worker evaluates on
        time.sleep(60)
    return build_model(*args, part=part)


def progress_printer(what: str, stream=sys.stderr):
    """``show(done, total, label)``: a one-line progress bar on a terminal, a line per 10% otherwise
    (the build's models and the site's page groups both report through it)."""
    shown = {"step": -1}

    def show(done: int, total: int, label: str = "") -> None:
        if stream.isatty():
            width = 24
            filled = int(width * done / max(total, 1))
            stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what}  {label[:48]:48s}")
            if done >= total:
                stream.write("\n")
        else:
            step = int(10 * done / max(total, 1))
            if step != shown["step"] or done >= total:
                shown["step"] = step
                stream.write(f"{what}: {done}/{total} {label}\n")
        stream.flush()
    return show


def _model_progress(stream=sys.stderr):
    """The build's progress: models done, grid points so far, the model just finished."""
    bar = progress_printer("models", stream)
    return lambda done, total, points, model: bar(done, total, f"{points:,} points  {model}")


def write_error(exc: BaseException) -> int | None:
    """The errno of an error that means "cannot write the output" (polars reports I/O errors as
    ``... (os error 28)`` in its own exception types), else None."""
    if isinstance(exc, shutil.Error):     # copytree collects its errors as text
        found = re.search(r"\[Errno (\d+)\]", str(exc))
        return int(found[1]) if found and int(found[1]) in WRITE_ERRORS else None
    if isinstance(exc, OSError):
        return exc.errno if exc.errno in WRITE_ERRORS else None
    if type(exc).__module__.startswith("polars"):
        found = re.search(r"os error (\d+)", str(exc))
        if found and int(found[1]) in WRITE_ERRORS:
            return int(found[1])
    return None


def run(args, site=None) -> int:
    """``archledger build``: evaluate the specs over a grid into OUT/results, render OUT/site from them
    (when ``site`` is given), and publish both together. Exit 0, or 2 after one line on stderr.

    Rules:

    * Without --models, every model of the corpus is built; a model whose inputs (spec, evidence,
      components, quant schemes, GPUs, fusion tables, grid, engine) did not change is carried over
      without re-evaluation; models no longer in the corpus are dropped.
    * --models A B rebuilds A and B (if changed) and keeps every other model of OUT/results as it
      was: carried over unchanged; one whose inputs changed since is kept and marked stale in
      manifest.json. A subset never discards what it did not rebuild.
    * OUT/results holds one grid: --grid naming another grid file than the one OUT/results was built
      over is an error (use another --out) unless OUT/results holds no model.
    * A spec that fails verification (or whose evidence file is missing) is skipped with one line and
      published nowhere; with --strict (CI and the deploy) it fails the build instead: one line per
      such spec, exit 2, nothing published.
    * Previous results are carried only if their files match the size and SHA-256 the manifest
      records; a damaged model is rebuilt (one line), a garbage manifest counts as no results.
    * Results and site are published together and only when complete: a failed, killed or full-disk
      build leaves the previous ones as they were; the next command on OUT finishes or discards what
      an interrupted one left. Two commands on one OUT take turns (OUT/.lock): the second waits,
      saying for whom, up to ARCHLEDGER_LOCK_TIMEOUT seconds (default 1800).
    * OUT must be absent, empty or an ArchLedger output, and a results/ or site/ in it absent, empty
      or carrying ArchLedger's manifest: publishing replaces them whole, so a folder holding a user's
      files is refused (one line) and left as it was.

    ``args``: out, models, grid, jobs, quiet, corpus (and optionally lock_timeout, seconds, and
    executor, ``--executor``). ``site``:
    None (``--no-site``: results only, the site is left as it was), or ``site(results_dir, site_dir,
    progress)`` rendering the whole site from ``results_dir`` into the empty ``site_dir`` (e.g.
    :func:`site_builder.render.render_pages`); it is called with ``progress=None`` and shows its own.
    """
    out = Path(args.out)
    quiet = getattr(args, "quiet", False)
    try:
        from engine.build.executor import parse
        parse(getattr(args, "executor", None))          # a bad --executor is one line before any reading
        publish.claim(out)                              # so are a user's folder and a bad lock timeout
        lock_timeout = getattr(args, "lock_timeout", None)
        lock_timeout = publish.lock_timeout() if lock_timeout is None else lock_timeout
        corpus = load_corpus(args.corpus)
        report = build(corpus, out, args.models, getattr(args, "grid", None), getattr(args, "gpus_root", None),
                       getattr(args, "jobs", None),
                       None if quiet else _model_progress(), log=lambda line: print(line, file=sys.stderr),
                       site=site, lock_timeout=lock_timeout,
                       executor=getattr(args, "executor", None), strict=getattr(args, "strict", False))
    except SpecError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except (BuildError, publish.PublishError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except Exception as exc:
        code = write_error(exc)
        where = getattr(exc, "filename", None)
        if code is None or (where and not Path(where).resolve().is_relative_to(out.resolve())):
            raise
        print(f"error: {str(args.out).rstrip('/')}/: cannot write ({os.strerror(code)}) — the previous results "
              f"and site are unchanged; free space or choose another --out", file=sys.stderr)
        return 2
    stale = f", {len(report.stale)} kept stale" if report.stale else ""
    print(f"wrote {report.results}: {len(report.recomputed)} models evaluated, {len(report.reused)} reused{stale}; "
          f"{report.deployment_rows:,} deployment rows, {report.op_rows:,} op rows, "
          f"{report.points:,} new grid points in {report.seconds:.1f} s")
    if report.site is not None:
        print(f"wrote {report.site} ({sum(1 for _ in report.site.rglob('index.html'))} pages)")
    return 0
