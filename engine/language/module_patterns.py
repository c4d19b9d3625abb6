"""Module-path patterns: quant overrides by path, and the exclusion lists of quantized checkpoints.

Layer: engine.language. One matching rule serves the spec's ``quant_context`` (a key that is a pattern
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
from typing import Any, Callable, Iterable

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


#: A per-layer entry of an exclusion list: the layer index after ``layers.`` (``...layers.12.mlp*``).
_LAYER = re.compile(r"(?<=layers\.)(\d+)(?=\.|\*|$)")


def collapse_layers(patterns: Iterable[str], n_layers: int,
                    layers_of: Callable[[str], set[int]] | None = None) -> tuple[list[str], list[str]]:
    """A published exclusion list as spec overrides: entries that differ only in their layer index
    and name every layer ``0 .. n_layers - 1`` become one pattern with ``*`` for the index
    (Gemma-4-26B-A4B-NVFP4 lists ``layers.0.self_attn*`` .. ``layers.29.self_attn*``); an entry
    without an index is kept as it is. ``layers_of(pattern)``, when given, says which layers have a
    module the ``*`` pattern can match (a hybrid's ``linear_attn`` exists in its linear layers
    only): naming all of those is naming every layer. Returns (patterns a spec can use, entries
    naming only some layers: a spec needs those layers in a template of their own, so they are
    listed for a person).

    An entry naming a whole layer (``...layers.0*`` or ``...layers.0``: Kimi-K2.6-NVFP4 keeps its
    dense first layer whole) covers that layer's modules of every shape: it counts towards each
    shape with the same prefix, and is itself kept only where it names every layer."""
    by_shape: dict[str, set[int]] = {}
    whole: dict[str, set[int]] = {}   # the text before "layers.<i>" -> layers named whole
    kept: list[str] = []
    for pattern in patterns:
        if pattern.startswith("re:") or not _LAYER.search(pattern):
            kept.append(pattern)
            continue
        found = _LAYER.search(pattern)
        shape = _LAYER.sub("*", pattern, count=1)
        if pattern[found.end():] in ("", "*"):
            whole.setdefault(pattern[:found.start()], set()).add(int(found[1]))
        by_shape.setdefault(shape, set()).add(int(found[1]))
    for shape, layers in by_shape.items():
        head, _, tail = shape.partition("layers.*")
        if tail not in ("", "*"):
            layers |= whole.get(head + "layers.", set())
    partial = []
    for shape, layers in by_shape.items():
        # an index past the main stack's layers (an MTP module stored as layer N) names no main-stack layer
        main = {i for i in layers if i < n_layers} if n_layers else layers
        if main == (layers_of(shape) if layers_of else set(range(n_layers))):
            kept.append(shape)
        else:
            partial += [shape.replace("layers.*", f"layers.{i}", 1) for i in sorted(layers)]
    return kept, partial


def canonical(path: str, prefixes: Iterable[tuple[str, str]]) -> str:
    """``path`` (a module path, or a glob's literal start) with the first matching ``(from, to)``
    prefix rewritten (the verification registry's canonical prefixes: ``model.language_model.`` ->
    ``model.``), so a checkpoint's multimodal path and the spec's path name one module."""
    for old, new in prefixes:
        if path.startswith(old):
            return new + path[len(old):]
    return path
