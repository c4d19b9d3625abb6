"""Module-path patterns: quant overrides by path, and the exclusion lists of quantized checkpoints.

Layer: engine.spec. One matching rule serves the spec's ``quant_context`` (a key that is a pattern
picks the scheme of every leaf whose module path it matches) and ``snapshot --meta`` (the modules a
checkpoint's ``quantization_config`` leaves unquantized), so the spec and its evidence read a
published exclusion list the same way.

A pattern is ``re:<regex>`` (compressed-tensors' ``ignore`` entries: ``re.match`` from the start of
the path) or a glob (ModelOpt's ``ignore`` / ``exclude_modules``, Hugging Face's
``modules_to_not_convert``: ``lm_head``, ``model.layers.*.self_attn``, ``*.mlp.gate*``) matching the
module path or one of its dotted parents (``vision_tower`` covers ``vision_tower.blocks.0.fc1``).
"""
from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from typing import Any, Iterable

#: quantization_config keys that list modules stored unquantized, by format: compressed-tensors and
#: ModelOpt (config.json) ``ignore``, ModelOpt (hf_quant_config.json) ``exclude_modules``, and the
#: Hugging Face quantizers' ``modules_to_not_convert`` (FP8, MXFP4).
EXCLUSION_KEYS = ("ignore", "exclude_modules", "modules_to_not_convert")

_GLOB = frozenset("*?[")


def is_pattern(key: str) -> bool:
    """Whether a quant_context key is a module-path pattern (not a role or ``role.leaf``)."""
    return key.startswith("re:") or not _GLOB.isdisjoint(key)


@lru_cache(maxsize=4096)
def _regexes(pattern: str) -> tuple[re.Pattern, ...]:
    if pattern.startswith("re:"):
        return (re.compile(pattern[3:]),)
    # the glob, or the glob followed by any dotted path below it
    return re.compile(fnmatch.translate(pattern)), re.compile(fnmatch.translate(pattern + ".*"))


def matches(pattern: str, module: str) -> bool:
    """Whether ``pattern`` (``re:<regex>`` or a glob) covers module path ``module``."""
    return any(r.match(module) for r in _regexes(pattern))


def exclusions(quantization_config: Any) -> list[str]:
    """Every pattern of a quantization_config's exclusion lists (:data:`EXCLUSION_KEYS`), in order."""
    if not isinstance(quantization_config, dict):
        return []
    out: list[str] = []
    for key in EXCLUSION_KEYS:
        value = quantization_config.get(key)
        if isinstance(value, list):
            out += [str(v) for v in value if isinstance(v, str)]
    return out


def first_match(patterns: Iterable[str], module: str) -> str | None:
    """The first of ``patterns`` that covers ``module``, or None."""
    return next((p for p in patterns if matches(p, module)), None)
