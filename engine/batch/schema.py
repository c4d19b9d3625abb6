"""The published tables' schemas: models.parquet, deployments, ops and variants.parquet.

Layer: engine.batch. Each schema maps a column name to its polars dtype and the sentence
docs/results.md documents it with (the schema test reads both). :func:`without_copies` is the
one place the decode rows' copied columns are dropped before writing; :func:`stored_time` the one
place a time is rounded to the float32 its column stores (:func:`stored_times`, at the write).
"""
from __future__ import annotations

import copy

import numpy as np
import polars as pl

#: The sentence each float32 time column's doc ends with (docs/results.md "Precision").
_NEAREST = " Stored as float32: the engine's float64 value rounded to the nearest (docs/results.md \"Precision\")."
_DOWN = (" Stored as float32 rounded down: the largest float32 not above the engine's float64 value, so it stays"
         " a lower bound (docs/results.md \"Precision\").")


def _time(doc: str) -> tuple:
    """A time column stored at float32 precision, rounded to the nearest (:func:`stored_time`)."""
    return pl.Float32, doc + _NEAREST


def _bound(doc: str) -> tuple:
    """A lower bound stored at float32 precision, rounded down (:func:`stored_time`)."""
    return pl.Float32, doc + _DOWN

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
    "traits": (pl.List(pl.String), "Architecture traits read from the evaluated graph (engine/batch/landscape.py TRAITS): moe, mla, sparse, sliding, compressed, linear, hybrid, mtp."),
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
    "tpot_mean_s": _time("Steady state: time per output token averaged over the output, the decode step at the mean context input_len + (output_len - 1) / 2 (exact for costs linear in the context, an upper bound for window-capped ones) (s)."),
    "max_prefill_batch": (pl.Int64, "Whole prompts one chunked-prefill step holds: dp_attn x min(max(1, floor(8192 / input_len)), capacity per replica)."),
    "step_time_s": _time("Schedule estimate of one step of this phase (prefill: one chunked-prefill step of the batch's prompts) under the overlap policy `overlap`: none = the sum over ops of max(compute, memory, comm), one kernel after another (s). Null on a decode row, where it is tpot_s (DECODE_COPIES: one token per request per step)."),
    "step_bound_s": _bound("Lower bound of the same step, what no schedule beats: max(sum over ops of compute time, sum of memory time, per link class the sum of its comm time), every resource overlapped with the others (s). Null on a decode row, where it is tpot_bound_s."),
    "step_expected_s": _time("Expected time of the same step from measured kernels (gpus/measured/, docs/deployment.md \"Expected time from measured kernels\"): the sum over ops of their t_expected_s (ops.parquet), one kernel after another, at least step_bound_s (s). Null on a decode row, where it is tpot_expected_s."),
    "compute_time_s": _time("Sum over ops of FLOPs / peak (s)."),
    "memory_time_s": _time("Sum over ops of HBM bytes / bandwidth (s)."),
    "comm_time_s": _time("Sum over ops of link bytes / link bandwidth (s)."),
    "flops": (pl.Float64, "FLOPs one GPU executes in the step."),
    "bytes": (pl.Float64, "HBM bytes one GPU moves in the step (weights included)."),
    "weight_bytes": (pl.Float64, "Weight bytes one GPU reads in the step."),
    "comm_bytes": (pl.Float64, "Bytes one GPU sends on links in the step."),
    "bound": (pl.String, "compute, memory or comm: the term bounding most of the step time."),
    "ttft_s": _time("Time to first token of the batch's last request, its prompts prefilled in prefill_steps steps: the schedule estimate, made of step_time_s (s)."),
    "tpot_s": _time("Worst case: time per output token at the last position: the schedule estimate, made of step_time_s (s)."),
    "ttft_bound_s": _bound("Lower bound of ttft_s: the same composition of the prefill steps' step_bound_s (s)."),
    "tpot_bound_s": _bound("Lower bound of tpot_s: the decode step's step_bound_s (per token with MTP) (s)."),
    "tpot_mean_bound_s": _bound("Lower bound of tpot_mean_s: the decode step's step_bound_s at the output's mean context (per token with MTP) (s)."),
    "ttft_expected_s": _time("Expected time to first token from measured kernels: the composition of ttft_s with the prefill steps' step_expected_s; at least ttft_bound_s (s). The same number as `archledger deploy --json` at this point, rounded to float32."),
    "tpot_expected_s": _time("Expected time per output token at the last position from measured kernels: the decode step's step_expected_s (per token with MTP); at least tpot_bound_s (s)."),
    "tpot_mean_expected_s": _time("The same at the output's mean decode context; at least tpot_mean_bound_s (s)."),
    "overlap": (pl.String, "The schedule estimate's overlap policy: none (one kernel after another) or two_batch (two half-batches, one's collectives hidden behind the other's kernels)."),
    "extrapolated": (pl.Boolean, "input_len + output_len exceeds the model's max_context."),
    "on_front": (pl.Boolean, "Decode rows: on the Pareto front of the steady state of continuous batching, steady tokens/s per GPU (batch / tpot_mean_s / n_gpus) vs tokens/s per user (1 / tpot_mean_s), of this GPU type, framework, KV dtype, input_len and output_len, over every GPU count, config and batch the steady state serves (fits_steady; of exact duplicates, the first row): the schedule estimate, not the lower bound, and not the worst case (fits, tpot_s). False on prefill rows and rows fits_steady excludes."),
}

#: Deployment columns computed from the table itself once its rows are in order (not by the grid).
DERIVED = ("on_front",)

#: What ``archledger deploy`` reports beside the stored columns but deployments.parquet does not
#: store, each a division of stored columns (docs/results.md): name -> doc. The site shows these
#: docs as the definitions of the deploy page's numbers, as it shows the stored columns' docs.
UNSTORED = {
    "tokens_per_s_per_gpu": "Worst-case decode throughput per GPU: batch / tpot_s / GPUs (schedule estimate).",
    "tokens_per_s_per_gpu_steady": "Steady-state decode throughput per GPU: batch / tpot_mean_s / GPUs (at batch = max_concurrent_requests_steady: the throughput at capacity).",
    "prefill_tokens_per_s_per_gpu": "Prefill throughput per GPU: batch x input_len / ttft / GPUs.",
}

#: Deployment columns a decode row would only repeat: a decode step emits one token per request,
#: so its step_time_s and step_bound_s are the row's tpot_s and tpot_bound_s (MTP's several tokens
#: per step would make them differ; such a value stays). Stored null where they are that copy:
#: zstd finds repeats inside a column, not across two, so the copies cost 12% of the downloads.
DECODE_COPIES = {"step_time_s": "tpot_s", "step_bound_s": "tpot_bound_s", "step_expected_s": "tpot_expected_s"}


#: The float32 columns that are lower bounds (their docs say so: :func:`_bound`), rounded down.
LOWER_BOUNDS = frozenset(name for name, (_, doc) in DEPLOYMENTS_SCHEMA.items() if doc.endswith(_DOWN))


def stored_time(name: str, values):
    """The float32 a float64 time (a scalar or an array) is stored as in column ``name`` (a
    :data:`LOWER_BOUNDS` column: rounded down, the largest float32 not above it; any other: to the
    nearest, ties to even). The engine computes in float64; the tables store this, and every
    comparison of a stored time with the engine's number goes through it.

    Why float32 is enough: its relative precision is 2^-24 (6e-8), far below what any estimate
    here means, and half the bytes of the downloads' largest columns (docs/results.md "Precision").
    Invariants: a stored bound is still a bound (never above the float64 value); and an order
    between two times holds after rounding (expected >= bound, estimate >= bound): both roundings
    are monotone and down(y) <= y is a float32, so x >= y gives nearest(x) >= nearest(y) >=
    nearest(down(y)) = down(y). Zero stays zero; a value that is a float32 is stored unchanged."""
    x = np.asarray(values, dtype=np.float64)
    stored = x.astype(np.float32)
    if name in LOWER_BOUNDS:
        stored = np.where(stored.astype(np.float64) > x, np.nextafter(stored, np.float32(-np.inf)), stored)
    return stored if stored.ndim else stored[()]


def stored_times(columns: dict, schema: dict) -> dict:
    """``columns`` (name -> evaluated float64 values) with every float32 column of ``schema`` as
    :func:`stored_time` rounds it: the one rounding, at the write (parquet_writer._frame); the
    other columns as they are (a copy of the mapping, of its kind)."""
    out = copy.copy(columns)
    for name, (dtype, _) in schema.items():
        if dtype == pl.Float32 and name in columns:
            out[name] = stored_time(name, columns[name])
    return out


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
    "t_compute_s": _time("FLOPs / peak of the operand dtype (s)."),
    "t_memory_s": _time("Bytes / HBM bandwidth (s)."),
    "t_comm_s": _time("Link bytes / link bandwidth (s)."),
    "bound": (pl.String, "compute, memory or comm: the largest of the three, the op's SOL time (t_sol_s = max of the three, not stored)."),
    "t_expected_s": _time("Expected time of the op's calls in the step (s): the measured table's time at the op's shape (interpolated in log space) x calls, never below its SOL time; where no table covers the op, its SOL time / 0.7 (docs/deployment.md \"Expected time from measured kernels\")."),
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


#: variants.parquet: one row per what-if variant (corpus/variants/): models.parquet's columns
#: (``verified`` always false, ``verified_against`` "what-if") and these.
VARIANTS_SCHEMA = {
    **MODELS_SCHEMA,
    "variant_of": (pl.String, "The corpus model the variant swaps a module of (its base)."),
    "label": (pl.String, "Always 'what-if': a variant is an unpublished design, never a verified model."),
    "swaps": (pl.List(pl.String), "The swaps, in `archledger edit --swap` form."),
}
