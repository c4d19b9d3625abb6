"""Steady-state KV per request under continuous batching with paged KV, and the decode context
averaged over a request's output: the framework's paging and admission policy as data.

Layer: engine.deploy (numbers only; the policy is read from corpus/fusion/<framework>.yaml
``kv_admission:`` by engine.deploy.fusion). docs/deployment.md "Steady-state capacity" derives
both rules; their arithmetic is engine.deploy.rules.ADMISSION (the one definition, which the deploy page
evaluates too).

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

from engine.language.formula_tree import run_arrays
import engine.deploy.rules as rules


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


def _admission(input_len, output_len, page_tokens: int = 1, ratio: float = 0.0, clip: int = 0,
               want: tuple = ("steady_tokens",)) -> dict:
    """:data:`engine.deploy.rules.ADMISSION` (the rules' one definition) at these points, as floats."""
    env = {"input_len": np.asarray(input_len, dtype=float), "output_len": np.asarray(output_len, dtype=float),
           "page_tokens": page_tokens, "reserve_ratio": ratio, "reserve_clip_tokens": clip}
    return run_arrays(rules.ADMISSION, env, only=want)


def mean_paged_tokens(input_len, output_len, page_tokens: int) -> np.ndarray:
    """Tokens of whole pages one request holds, averaged over its output tokens (module doc)."""
    return _admission(input_len, output_len, page_tokens, want=("paged_tokens",))["paged_tokens"]


def steady_tokens(admission: Admission, input_len, output_len) -> np.ndarray:
    """The tokens of cache one request holds on average in a steady continuous batch: its mean
    paged tokens plus the admission reservation, ratio x mean over j = 1..O of min(O - j, clip)
    (clip 0: none; module doc)."""
    return _admission(input_len, output_len, admission.page_tokens, admission.reserve_ratio,
                      admission.reserve_clip_tokens)["steady_tokens"]


def mean_context(input_len, output_len) -> np.ndarray:
    """The decode context averaged over the output tokens: I + (O - 1) / 2 (I with O <= 1)."""
    return _admission(input_len, output_len, want=("mean_context",))["mean_context"]
