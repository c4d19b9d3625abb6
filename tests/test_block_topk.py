"""The ``block_topk`` op (MiniMax-M3's block-sparse indexer) against an enumeration.

The enumeration replays transformers' ``MiniMaxM3VLIndexer.forward`` (5.25.0) on random scores in
numpy, one query and one group at a time: future keys masked to -inf, the keys padded to whole
blocks of ``block`` and max-pooled per block, the ``local`` blocks ending at the query's own block
boosted to +inf, then the top ``k`` blocks (slots left at -inf dropped). It counts the work as the
op's formula is defined: 1 FLOP per unmasked score pooled, 1 per visible (not -inf) block score
ranked. It also counts the (query, key) pairs the block-sparse main attention then computes (keys
of the selected blocks, causal) and checks them against ``attention_score`` with ``mask: topk``
and ``block``: equal while every visible block is selected, an upper bound after.
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy

from engine.language import symbols
from engine.language.ops import OPS
from tests.test_ops import run, tensor

I = sympy.Integer


def _enumerate(seq: int, ctx: int, block: int, k: int, local: int = 1, seed: int = 0):
    """(pooled scores, ranked block scores, attended pairs) of one group for the ``seq`` queries
    ending at ``ctx``, by running the selection on random scores."""
    rng = np.random.default_rng(seed)
    n_blocks = -(-ctx // block)
    pooled = ranked = pairs = 0
    for p in range(ctx - seq, ctx):
        scores = rng.standard_normal(n_blocks * block)
        keys = np.arange(n_blocks * block)
        scores[keys > p] = -np.inf                  # token_future, and the pad past ctx
        pooled += int(np.isfinite(scores).sum())
        block_scores = scores.reshape(n_blocks, block).max(axis=-1)
        q_block = p // block
        for j in range(local):                      # local blocks always win
            block_scores[max(q_block - j, 0)] = np.inf
        ranked += int((block_scores > -np.inf).sum())
        order = np.argsort(-block_scores, kind="stable")[:min(k, n_blocks)]
        chosen = [int(b) for b in order if block_scores[b] > -np.inf]
        pairs += sum(1 for t in range(ctx) if t <= p and t // block in chosen)
    return pooled, ranked, pairs


def _scenario(seq, ctx):
    return {symbols.SEQ: I(seq), symbols.CTX: I(ctx), symbols.BATCH: I(1)}


def _op_flops(seq: int, ctx: int, block: int, k: int, groups: int = 2) -> int:
    """block_topk FLOPs per group, fed by a causal indexer score over ``groups`` heads."""
    q = tensor(I(1), I(seq), I(groups), I(8))
    key = tensor(I(1), I(ctx), I(1), I(8))
    _, scores, _ = run("attention_score", [q, key], {}, {"mask": "causal"}, scenario=_scenario(seq, ctx))
    c, out, _ = run("block_topk", [scores], {"block": I(block), "k": I(k)}, scenario=_scenario(seq, ctx))
    assert out.sizes == (1, groups, seq, k)
    flops = OPS["block_topk"].flops(c, out)
    assert flops % groups == 0
    return int(flops) // groups


def _attended_pairs(seq: int, ctx: int, block: int, k: int) -> int:
    """Main attention pairs per head with the block selection as the top-k mask's third input."""
    q = tensor(I(1), I(seq), I(4), I(8))
    key = tensor(I(1), I(ctx), I(1), I(8))
    sel = tensor(I(1), I(1), I(seq), I(k))
    _, out, _ = run("attention_score", [q, key, sel], {"block": I(block)}, {"mask": "topk"},
                    scenario=_scenario(seq, ctx))
    return int(out.computed) // 4


@pytest.mark.parametrize("block,k", [(4, 2), (8, 3), (3, 1)])
@pytest.mark.parametrize("seq,ctx", [(1, 1), (5, 5), (17, 17), (40, 40), (1, 33), (6, 29), (9, 64)])
def test_block_topk_flops_equal_the_enumerated_selection(seq, ctx, block, k):
    pooled, ranked, _ = _enumerate(seq, ctx, block, k)
    assert _op_flops(seq, ctx, block, k) == pooled + ranked


@pytest.mark.parametrize("block,k", [(4, 2), (8, 3), (3, 1)])
@pytest.mark.parametrize("seq,ctx", [(5, 5), (17, 17), (40, 40), (1, 33), (6, 29)])
def test_block_sparse_attention_pairs_are_bounded_by_k_blocks(seq, ctx, block, k):
    _, _, pairs = _enumerate(seq, ctx, block, k)
    bound = _attended_pairs(seq, ctx, block, k)
    assert pairs <= bound
    if ctx <= k * block:        # every visible block selected: the causal pairs, exactly
        assert pairs == bound == sum(p + 1 for p in range(ctx - seq, ctx))


def test_minimax_m3_prefill_at_128k_by_hand():
    """MiniMax-M3's indexer (block 128, 16 blocks): a 131,072-token prompt pools every causal
    score, S(S+1)/2, and ranks sum_{i<=S} ceil(i / 128) = 128 q(q+1)/2 block scores, q = 1024."""
    s = 131072
    assert _op_flops(s, s, 128, 16, groups=1) == s * (s + 1) // 2 + 128 * 1024 * 1025 // 2
