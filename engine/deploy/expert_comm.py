"""The expert all-to-all as DeepEP runs it: copies per token on each link, and bytes per copy.

Layer: engine.deploy. Placement prices the dispatch and combine of expert parallelism as a plain
all-to-all (every token once per selected expert, at the activation dtype, on the group's slowest
link) and records on each such step what the routing is (:class:`Routing`). A framework that runs
the all-to-all with DeepEP says so in its table (``expert_all_to_all:`` in ``corpus/fusion/*.yaml``,
read into :class:`A2APolicy`), and :func:`transport` then re-prices those steps as DeepEP's kernels
move the data (``docs/legacy.md`` of github.com/deepseek-ai/DeepEP):

* **normal kernels** (training, prefill): "asymmetric-domain bandwidth forwarding": a token goes
  over RDMA once to each *destination node* (to the GPU of the sender's local rank there), which
  forwards it over NVLink to each destination GPU of that node; a GPU receives a token once
  however many of its experts the token selected (``is_token_in_rank``, ``num_tokens_per_rdma_rank``
  of ``Buffer.get_dispatch_layout``). Combine reverses the path: reduced inside the node over
  NVLink, then one RDMA copy back per node. Inside one node (the EP group in one NVLink domain)
  the intranode kernels send each token once per destination GPU over NVLink.
* **low-latency kernels** (decode): "pure RDMA", one message per (token, selected expert), no
  forwarding and no deduplication; same-node peers over NVLink ("Support NVLink protocol for
  intranode low-latency kernels").

A framework may instead exchange the tokens by **all-gather and reduce-scatter** (kernel
``allgather``; TensorRT-LLM's CutlassFusedMoE under attention DP without multi-node NVLink): the
dispatch all-gathers every attention rank's tokens to every rank of the EP group, each rank runs
its experts over all of them, and the combine reduce-scatters the partial outputs back to the
tokens' ranks. Routing does not decide who receives a token: every other rank does, once.

Expected copies under uniform routing (every token picks ``k`` of ``E`` experts uniformly; experts
lie in contiguous blocks, ``E / R`` per GPU of the ``R``-GPU group, ``E / N`` per node of ``N``):
a *unit* (node or GPU) holding ``E / u`` experts receives a token with probability

    p(u) = 1 - C(E - E/u, k) / C(E, k)          (none of the k experts is among its E/u)

and with **node-limited routing** (DeepSeek-V3's ``n_group`` groups of ``E / n_group`` contiguous
experts, a token choosing ``topk_group`` groups first, then its k experts inside them; the
config's ``n_group`` / ``topk_group``, read from the model's dims of those names):

* a unit holding ``g = n_group / u`` whole groups is reached iff one of its groups is chosen,
  ``p = 1 - C(n_group - g, topk_group) / C(n_group, topk_group)`` (a chosen group is counted as
  receiving the token: DeepSeek-V3 scores a group by its two best experts, so a chosen group
  holds top experts);
* a unit inside one group (``u`` a multiple of ``n_group``) is reached iff its group is chosen and
  one of the k experts, uniform over the ``M = topk_group * E / n_group`` experts of the chosen
  groups, is its own: ``p = topk_group / n_group * (1 - C(M - E/u, k) / C(M, k))``;
* any other layout is priced without the node limit (the uniform ``p(u)``: more copies, never fewer).

Per token of a sender (the bytes of each link are symmetric over the group's devices, so what one
device sends is what the group sends over its devices):

* normal, N > 1: RDMA ``(N - 1) p(N)`` copies (destination nodes but the sender's own),
  NVLink ``(R - N) p(R)`` (destination GPUs but the one forwarder per node; in the sender's own
  node the sender itself);  N = 1: NVLink ``(R - 1) p(R)``;
* low-latency: RDMA ``k (N - 1) / N`` (experts on other nodes), NVLink ``k (1/N - 1/R)`` (experts
  on other GPUs of the sender's node);
* allgather: every other rank once, RDMA ``R - R/N`` (the ranks of other nodes), NVLink
  ``R/N - 1`` (the other ranks of the sender's node); the combine's reduce-scatter sends the
  same copies of the output back.

A copy is one token's hidden vector: ``hidden`` bytes in FP8 plus one fp32 scale per 128 elements
(``hidden * (1 + 4/128)``) when the framework dispatches FP8, else the activation dtype; combine is
BF16 (DeepEP's combine takes BF16 only). Routing metadata (top-k ids and weights, a few bytes per
token) is not counted.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import comb

import sympy

#: Bytes per element of the dtypes a policy may name for an all-to-all payload.
PAYLOAD_BYTES = {"fp8": 1, "bf16": 2}
KERNELS = ("normal", "low_latency", "allgather")
#: The collective each direction of the ``allgather`` kernel runs (what the measured tables key).
ALLGATHER_COLLECTIVES = {"dispatch": "all_gather", "combine": "reduce_scatter"}


@dataclass(frozen=True, slots=True)
class Routing:
    """What an expert all-to-all step carries, recorded by placement: ``direction`` (dispatch or
    combine), the tokens a device routes per call and their width (expressions), ``k`` of
    ``experts`` per token, the node-limited routing (``n_group`` groups, ``topk_group`` chosen; 1
    and 1 without), and the EP group: ``ranks`` GPUs over ``nodes`` scale-up domains."""

    direction: str
    tokens: sympy.Expr
    hidden: sympy.Expr
    k: int
    experts: int
    n_group: int
    topk_group: int
    ranks: int
    nodes: int


@dataclass(frozen=True, slots=True)
class A2APolicy:
    """A framework's expert all-to-all (``expert_all_to_all:`` of its fusion table): the library,
    the kernels per phase, the dispatch payload (``fp8`` with a ``scale_bytes`` scale per
    ``scale_block`` elements, or ``bf16``), whether FP8 dispatch needs block-FP8 experts, the
    combine payload, and where each was read."""

    library: str
    kernels: tuple[tuple[str, str], ...]      # (phase, normal | low_latency | allgather)
    dispatch: str
    scale_block: int
    scale_bytes: int
    fp8_needs_block_experts: bool
    combine: str
    doc: str
    src: tuple[str, ...]

    def kernel(self, phase: str) -> str:
        return dict(self.kernels).get(phase, "normal")

    def bytes_per_element(self, direction: str, fp8_experts: bool) -> sympy.Expr:
        """Bytes per hidden element of one copy (FP8 dispatch carries its scales)."""
        if direction == "combine":
            return sympy.Integer(PAYLOAD_BYTES[self.combine])
        if self.dispatch == "fp8" and (fp8_experts or not self.fp8_needs_block_experts):
            return 1 + sympy.Rational(self.scale_bytes, self.scale_block)
        return sympy.Integer(PAYLOAD_BYTES["bf16"])


def p_reached(experts: int, k: int, units: int, n_group: int = 1, topk_group: int = 1) -> sympy.Rational:
    """Probability that one of ``units`` equal contiguous blocks of ``experts`` receives a token
    routed to ``k`` experts (the module docstring derives each case). Exact rational."""
    if units <= 1:
        return sympy.Integer(1)
    per = experts // units
    if n_group > 1 and topk_group < n_group:
        if n_group % units == 0:
            g = n_group // units
            return 1 - sympy.Rational(comb(n_group - g, topk_group), comb(n_group, topk_group))
        if units % n_group == 0:
            m = topk_group * experts // n_group
            return sympy.Rational(topk_group, n_group) * (1 - sympy.Rational(comb(m - per, k), comb(m, k)))
    return 1 - sympy.Rational(comb(experts - per, k), comb(experts, k))


def copies(r: Routing, kernel: str) -> dict[str, sympy.Expr]:
    """Expected copies of one token a device sends per call, by link (``scale_out`` = RDMA,
    ``scale_up`` = NVLink)."""
    R, N, k = r.ranks, r.nodes, r.k
    if kernel == "allgather":
        return {"scale_out": sympy.Integer(R - R // max(N, 1)), "scale_up": sympy.Integer(R // max(N, 1) - 1)}
    if kernel == "low_latency":
        return {"scale_out": sympy.Rational(k * (N - 1), N),
                "scale_up": k * (sympy.Rational(1, N) - sympy.Rational(1, R))}
    p_gpu = p_reached(r.experts, k, R, r.n_group, r.topk_group)
    if N <= 1:
        return {"scale_out": sympy.Integer(0), "scale_up": (R - 1) * p_gpu}
    p_node = p_reached(r.experts, k, N, r.n_group, r.topk_group)
    return {"scale_out": (N - 1) * p_node, "scale_up": (R - N) * p_gpu}


def link_bytes(r: Routing, policy: A2APolicy, phase: str, fp8_experts: bool) -> dict[str, sympy.Expr]:
    """Bytes a device sends per call on each link: tokens x copies x hidden x bytes per element."""
    per_copy = r.tokens * r.hidden * policy.bytes_per_element(r.direction, fp8_experts)
    return {link: n * per_copy for link, n in copies(r, policy.kernel(phase)).items()}
