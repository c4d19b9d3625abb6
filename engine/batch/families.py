"""Chains of models for the build's workers: a family's models run one after the other in one process.

Layer: engine.batch. Models of one family (the spec's ``family``: Qwen3 8B/32B/0.6B/1.7B,
GLM-5/5.1/5.2, DeepSeek-V3/R1, ...) walk, place, fuse and compile largely the same expressions:
fine-tunes of one base have the very same dims, sizes of one design the same symbolic program.
What a worker process keeps between models (sympy's expression cache, the compiled-expression
memo of :mod:`engine.deploy.cost`, the fusion memos, the loaders' file memos) then answers for the
second model what the first one built, so a follower costs about a quarter less CPU than alone
(docs/scaling.md: DeepSeek-R1 after DeepSeek-V3, GLM-5.1 after GLM-5). A pool that hands models
out one at a time puts a family's models on different workers about half the time; a chain sends
them together.

Invariant: chaining decides only *where and in which order* models run, never what a model's
files hold (every memo those caches hold is keyed by the exact objects or expressions it
answers for; tests/test_family_chains.py checks a chain's files against each model evaluated
alone in a fresh process). Every model of ``todo`` is in exactly one chain.
"""
from __future__ import annotations

from typing import Callable, Hashable


def chains(todo: list[str], family: Callable[[str], Hashable], cost: Callable[[str], float]) -> list[list[str]]:
    """``todo``'s models grouped by ``family`` into chains, each in ``todo``'s order; chains ordered
    by their total ``cost`` (the previous build's seconds, 0 when unknown), largest first, ties by
    where the chain's first model stands in ``todo`` (the build's order: slowest, else largest,
    first), so a pool that starts the longest work first keeps its tail short."""
    grouped: dict[Hashable, list[str]] = {}
    for model in todo:
        grouped.setdefault(family(model), []).append(model)
    first = {model: i for i, model in enumerate(todo)}
    return sorted(grouped.values(), key=lambda chain: (-sum(cost(m) for m in chain), first[chain[0]]))
