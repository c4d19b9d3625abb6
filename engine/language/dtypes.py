"""Storage dtypes (safetensors names) and their element sizes: one table for loader and storage.

Layer: engine.language.
"""
from __future__ import annotations

import sympy

#: Bytes per element of safetensors dtypes.
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
               "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

#: Bits per element of every safetensors dtype: the storage table plus the dtypes a checkpoint
#: may hold but the cost model never stores (unsigned ints, complex, scale and packed formats).
DTYPE_BITS = {**{dtype: 8 * width for dtype, width in DTYPE_BYTES.items()},
              "U16": 16, "U32": 32, "U64": 64, "C64": 64,
              "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
              "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


#: Bytes per element of a cache entry that declares its own `dtype:` (a recurrent state kept in
#: float32 whatever the deployment's KV dtype); entries without one take the KV dtype.
CACHE_DTYPE_BYTES = {"f32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

#: torch dtype names a config.json gives a cache dtype in (``mamba_ssm_cache_dtype: "float32"``).
CACHE_DTYPE_ALIASES = {"float32": "f32", "bfloat16": "bf16", "float16": "fp16"}


def cache_entry_bytes(dtype: str, scale: tuple[str, int] | None = None):
    """Bytes per element of a cache entry stored in ``dtype`` with, optionally, one ``scale =
    (scale dtype, block)`` value per ``block`` elements (vLLM's FP8 indexer key cache: fp8 values
    plus one f32 scale per 128, 132 B per 128-element key): ``bytes(dtype) + bytes(scale) / block``,
    exact (a sympy Rational) when the entry's elements per token are a multiple of ``block``."""
    own = sympy.Integer(CACHE_DTYPE_BYTES[dtype])
    if scale is None:
        return own
    return own + sympy.Rational(CACHE_DTYPE_BYTES[scale[0]], int(scale[1]))


def stored_bytes(dtype: str, numel: int) -> int:
    """Bytes of ``numel`` elements as safetensors stores them (packed formats round up)."""
    return -(-numel * DTYPE_BITS[dtype] // 8)
