"""Storage dtypes (safetensors names) and their element sizes: one table for loader and storage.

Layer: engine.
"""
from __future__ import annotations

#: Bytes per element of safetensors dtypes.
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
               "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
