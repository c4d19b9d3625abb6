"""Steady-state KV per request under continuous batching with paged KV, and the decode context
averaged over a request's output: the framework's paging and admission policy as data.

Layer: engine.deploy (numbers only; the policy is read from corpus/fusion/<framework>.yaml
``kv_admission:`` by engine.deploy.fusion). docs/deployment.md "Steady-state capacity" derives
both rules; the deploy page mirrors them (static/js/deploy_eval.js ``steadyTokens``).

A request of prompt I and output O emits output token j (j = 1..O) with the cache of
c_j = I + j - 1 tokens: the prompt and the j - 1 outputs before it (token 1 comes from prefill,
token j > 1 from the decode step that writes token j - 1's K and V). Under continuous batching
the running requests stand at every stage of their output, so the batch's cache is, on
average, that of one request averaged over its O tokens:

* paged KV holds whole pages of ``page_tokens`` P: ceil(c / P) pages at context c, so the mean
  tokens held are P x (S(I + O - 1) - S(I - 1)) / O with S(n) = sum_{t=1..n} ceil(t / P)
  = P q (q + 1) / 2 + r (q + 1), q = floor(n / P), r = n - q P (the t-th token opens page
  ceil(t / P); P = 1 gives I + (O - 1) / 2);
* an admission headroom: a scheduler that admits a request only while it can reserve
  ``reserve_ratio`` x the remaining output (clipped at ``reserve_clip_tokens``; SGLang's
  new_token_ratio x min(max_new_tokens - generated, CLIP_MAX_NEW_TOKENS_ESTIMATION)) holds that
  many more tokens per request: mean over j of min(O - j, clip) x ratio; and a scheduler that
  keeps ``free_fraction`` of the pages free (vLLM V0's watermark) sizes the cache at
  (1 - free_fraction) x the room.

With O = 0 a request holds its prompt, paged: P x ceil(I / P). The worst case (every request at
its last position, I + O tokens, no paging) stays the engine's ``max_concurrent_requests``.
The decode step of a steady batch reads each request's cache at its own context; for a cost
linear in the context the step equals the step with every request at the mean context
I + (O - 1) / 2 (exact), for a cost concave in it (a window cap) that is an upper bound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Admission:
    """A framework's KV paging and admission policy (``kv_admission:`` of its fusion table);
    the default (no table, framework none) is token-granular paging with no headroom."""

    page_tokens: int = 1
    free_fraction: float = 0.0
    reserve_ratio: float = 0.0
    reserve_clip_tokens: int = 0          # 0: no clip
    src: str = ""


NO_ADMISSION = Admission()


def _ceil_sum(n, page: int) -> np.ndarray:
    """S(n) = sum_{t=1..n} ceil(t / page) for whole n >= 0 (float arrays)."""
    n = np.maximum(np.asarray(n, dtype=float), 0.0)
    q = np.floor(n / page)
    r = n - q * page
    return page * q * (q + 1) / 2 + r * (q + 1)


def mean_paged_tokens(input_len, output_len, page_tokens: int) -> np.ndarray:
    """Tokens of whole pages one request holds, averaged over its output tokens (module doc)."""
    inp, out = np.asarray(input_len, dtype=float), np.asarray(output_len, dtype=float)
    p = float(page_tokens)
    held = p * (_ceil_sum(inp + out - 1, page_tokens) - _ceil_sum(inp - 1, page_tokens)) / np.maximum(out, 1.0)
    return np.where(out > 0, held, p * np.ceil(inp / p))


def mean_reserved_tokens(output_len, ratio: float, clip: int) -> np.ndarray:
    """ratio x mean over j = 1..O of min(O - j, clip) (clip 0: none): the remaining output a
    scheduler reserves per running request, averaged over the request's output."""
    out = np.asarray(output_len, dtype=float)
    if not ratio:
        return np.zeros_like(out)
    k = np.maximum(out - 1, 0.0)                   # remaining after token j: O - j in 0..O - 1
    if clip:
        c = float(clip)
        total = np.where(k <= c, k * (k + 1) / 2, c * (c + 1) / 2 + (k - c) * c)
    else:
        total = k * (k + 1) / 2
    return ratio * total / np.maximum(out, 1.0)


def steady_tokens(admission: Admission, input_len, output_len) -> np.ndarray:
    """The tokens of cache one request holds on average in a steady continuous batch: its mean
    paged tokens plus the admission reservation (module doc)."""
    return (mean_paged_tokens(input_len, output_len, admission.page_tokens)
            + mean_reserved_tokens(output_len, admission.reserve_ratio, admission.reserve_clip_tokens))


def mean_context(input_len, output_len) -> np.ndarray:
    """The decode context averaged over the output tokens: I + (O - 1) / 2 (I with O <= 1)."""
    inp, out = np.asarray(input_len, dtype=float), np.asarray(output_len, dtype=float)
    return inp + np.maximum(out - 1, 0.0) / 2
