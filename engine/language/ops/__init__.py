"""The primitive ops: each is a name, a doc line, and small pure rules (shape + axis map, FLOPs, weights).

Layer: engine.language. One module per op family, as vLLM's ``model_executor/layers``: :mod:`.dense`
(matmuls), :mod:`.elementwise` (norms, activations, arithmetic), :mod:`.views` (layout),
:mod:`.attention` (caches, scores, sparse selection, the compressor), :mod:`.moe` (routing,
dispatch, combine), :mod:`.streams` (stream history, hyper-connections) and :mod:`.recurrent`
(conv1d, delta rules, Mamba2); what they share is :mod:`.base`. Each op is written once, in its
family's ``OPS``; :data:`OPS` here is the whole registry, assembled in the fixed order
:data:`ORDER` (nothing registers itself on import), so every walk visits the ops as before.
Parameters are never declared separately: an op declares its weight *leaves* (name, axes,
parameter or buffer) and the parameter count is the sum of the parameter leaves' element counts.
Bytes moved are derived from shapes elsewhere, never declared.

FLOPs conventions (documented on the methodology page): a multiply-add is 2 FLOPs; elementwise
costs per element are the constants in :mod:`.elementwise`; attention counts only unmasked
(query, key) pairs.
"""
from __future__ import annotations

from engine.language.ops import attention, dense, elementwise, moe, recurrent, streams, views
from engine.language.ops.attention import GROWTHS, MASKS
from engine.language.ops.base import Leaf, Op, OpCall
from engine.language.ops.elementwise import ACTIVATION_FLOPS

__all__ = ["ACTIVATION_FLOPS", "GROWTHS", "MASKS", "OPS", "ORDER", "Leaf", "Op", "OpCall"]

#: The registry's order (the order the ops were first written in; docs and tables list them so).
ORDER = (
    "embedding", "linear", "head_linear", "rmsnorm", "layernorm", "rope", "activation", "glu",
    "scale", "add", "mul", "split_heads", "merge_heads", "slice", "concat", "expand", "kv_cache",
    "attention_score", "softmax", "attention_apply", "topk", "weighted_head_sum", "token_topk",
    "block_topk", "token_gather", "moe_dispatch", "stream_read", "depth_weighted_sum",
    "hc_weights", "hc_collapse", "hc_expand", "hc_head", "compress_pool", "grouped_linear",
    "hash_route", "conv1d", "parameter", "gated_delta_rule", "kda", "mamba2_ssd", "moe_combine",
)

_FAMILIES = (dense.OPS, elementwise.OPS, views.OPS, attention.OPS, moe.OPS, streams.OPS, recurrent.OPS)
_BY_NAME = {name: op for family in _FAMILIES for name, op in family.items()}
assert sorted(_BY_NAME) == sorted(ORDER) and sum(map(len, _FAMILIES)) == len(ORDER), \
    "every op is written in exactly one family and listed once in ORDER"

#: Every primitive op by name, in :data:`ORDER`.
OPS: dict[str, Op] = {name: _BY_NAME[name] for name in ORDER}
