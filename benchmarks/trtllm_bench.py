"""What a ``trtllm-bench throughput`` run does besides the kernels: its batch limits, CUDA-graph padding and request waves.

Used by benchmarks/published.py for the points whose data row says ``harness: trtllm-bench`` (the
TensorRT-LLM perf-overview rows); pure arithmetic, no engine import. Each rule is a port of the
TensorRT-LLM source it names (NVIDIA/TensorRT-LLM; the commits are recorded with the harness's
settings in benchmarks/data/published.yaml, ``harness:``):

* **Batch limits** (:func:`engine_setting`): with no ``--max_batch_size`` / ``--max_num_tokens``
  trtllm-bench sets both from its own KV estimate (``tensorrt_llm/bench/benchmark/utils/general.py``
  ``get_settings`` -> ``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting``): the GPUs'
  total memory as NVML reports it (GiB) less the checkpoint's parameters at their bytes per element,
  times the KV fraction, over the KV bytes of one request of the dataset's mean ISL + OSL, with at
  least one KV head per tensor-parallel rank (``max(tp, kv heads)``); then ``finetune_setting``
  rounds it up (:func:`finetune_setting`). The estimate covers the whole tp x pp group, but under
  attention DP each attention rank runs its own executor with that ``max_batch_size``, so there the
  limit is per rank and does not bind.
* **CUDA-graph padding** (:func:`captured`, :func:`padded`): the recipe's ``cuda_graph_config``
  (``enable_padding: true`` and its ``batch_sizes``) is filtered to the sizes at or below
  ``min(max_batch_size, max_num_tokens)``, plus that cap itself where a listed size lies above it
  (``tensorrt_llm/_torch/pyexecutor/model_engine.py`` ``_filter_cuda_graph_batch_sizes``); a
  generation-only step is padded with dummy requests to the smallest captured size at or above its
  batch (under attention DP the largest batch over the ranks), and one above every captured size
  runs eagerly at its own batch. A dummy request runs every token-proportional kernel; its
  attention reads one KV block (negligible).
* **Waves** (:func:`waves`): the run queues ``num_requests`` requests at once (the perf-overview's
  table per ISL/OSL); all requests have the same ISL and OSL, so the running batch fills to the
  limit, the requests admitted together finish together, and the next ones fill the freed room: a
  run is full waves of the limit and a last wave of the rest (fewer requests than the limit: one
  wave of all of them).
"""
from __future__ import annotations

import bisect
import math

#: Bytes per element of the checkpoint and of the KV cache, by trtllm-bench's quant algorithm
#: (tuning.py BYTES_PER_ELEM: NO_QUANT 2, FP8 1, FP8_BLOCK_SCALES 1, NVFP4 0.5).
BYTES_PER_ELEM = {"bf16": 2.0, "fp8": 1.0, "fp8_block128": 1.0, "nvfp4": 0.5}
GIB = 1024 ** 3


def finetune_setting(kv_cache_max_requests: float, input_len: int, output_len: int,
                     pp: int = 1) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) from the KV estimate of requests (tuning.py
    ``finetune_setting``, optimistic tuning): the requests capped at 4,096 per pipeline stage, the
    batch rounded up to 32 (at least 64) below 256, to 128 below 1,024, else to 256; the tokens
    batch x (1 + ISL / OSL) capped at 32,768, rounded up to 256 (at least 2,048) below 4,096, to 512
    below 8,192, else to 1,024."""
    raw_bs = min(kv_cache_max_requests, 4096) / pp
    raw_token = min(raw_bs * (1 + input_len / output_len), 32768)
    max_bs = max(64, _ceil_to(raw_bs, 32)) if raw_bs < 256 else _ceil_to(raw_bs, 128 if raw_bs < 1024 else 256)
    max_token = (max(2048, _ceil_to(raw_token, 256)) if raw_token < 4096
                 else _ceil_to(raw_token, 512 if raw_token < 8192 else 1024))
    return max_bs, max_token


def _ceil_to(value: float, step: int) -> int:
    """``value`` rounded up to a multiple of ``step``."""
    return step * math.ceil(value / step)


def engine_setting(*, params: int, n_layers: int, n_kv_heads: int, d_head: int, tp: int, pp: int,
                   hbm_mib: float, input_len: int, output_len: int, kv_fraction: float,
                   weight_bytes: float, kv_bytes: float) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as trtllm-bench sets them (tuning.py
    ``calc_engine_setting``): the KV bytes per token 2 x layers x max(tp, KV heads) x head size x
    KV bytes, the memory NVML's total of each of the tp x pp GPUs less the parameters at their
    bytes, times ``kv_fraction``, over one request's KV at ISL + OSL tokens, then
    :func:`finetune_setting`."""
    per_token = 2 * n_layers * max(tp, n_kv_heads) * d_head * kv_bytes / GIB
    total = hbm_mib / 1024 * tp * pp
    available = total - params * weight_bytes / GIB
    requests = available * kv_fraction / (per_token * (input_len + output_len))
    return finetune_setting(requests, input_len, output_len, pp)


def captured(batch_sizes, max_batch_size: int, max_num_tokens: int, draft_tokens: int = 0) -> tuple[int, ...]:
    """The CUDA-graph batch sizes an executor captures with padding on (model_engine.py
    ``_filter_cuda_graph_batch_sizes``): the listed sizes (ascending) at or below the cap
    min(max_batch_size, max_num_tokens / (1 + draft tokens)), then the cap itself where a listed
    size lies above it and the last kept one is below it."""
    cap = min(max_batch_size, int(max_num_tokens / (1 + draft_tokens)))
    out: list[int] = []
    for bs in sorted(batch_sizes):
        if bs <= cap:
            out.append(bs)
        else:
            if not out or out[-1] != cap:
                out.append(cap)
            break
    return tuple(out)


def padded(batch: int, sizes: tuple[int, ...]) -> int:
    """The batch a generation-only step runs at: the smallest captured size at or above ``batch``,
    or ``batch`` itself above every captured size (that step runs eagerly, unpadded)."""
    i = bisect.bisect_left(sizes, batch)
    return sizes[i] if i < len(sizes) else batch


def waves(requests: int, limit: int) -> list[int]:
    """The running batch of each wave of an offline run of ``requests`` equal requests under a
    running-batch limit of ``limit``: full waves, then the rest."""
    if requests < 1 or limit < 1:
        raise ValueError(f"requests {requests} and limit {limit} must be positive")
    full, rest = divmod(requests, limit)
    return [limit] * full + ([rest] if rest else [])
