"""Storage dtypes (safetensors names) and their element sizes: one table for loader and storage.

Layer: engine.spec.
"""
from __future__ import annotations

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


def stored_bytes(dtype: str, numel: int) -> int:
    """Bytes of ``numel`` elements as safetensors stores them (packed formats round up)."""
    return -(-numel * DTYPE_BITS[dtype] // 8)
