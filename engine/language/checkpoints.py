"""A spec's published checkpoints (``checkpoints:``): weight formats of one model.

Layer: engine.language. A spec describes one architecture and its own published storage (the weight
format ``checkpoint``); each ``checkpoints:`` entry is another published checkpoint of the same
model (``Qwen/Qwen3-32B-FP8`` of ``Qwen/Qwen3-32B``) with its own quant context and evidence.

Invariants:

* a checkpoint is the spec with another storage: :func:`variant` swaps the id, the quant context
  and the config snapshot, nothing else, so the spec's walk (which never reads the quant context)
  is the checkpoint's walk; :func:`differences` is the guard that makes this true (the config
  fields equal up to :data:`STORAGE_KEYS`), run by :mod:`engine.verify.validate`;
* a weight format is named ``checkpoint`` (the spec's own), a checkpoint's ``format`` or its Hub
  id (:func:`find`); every byte figure of a format comes from :func:`tensors` of that variant.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from engine.language import storage
from engine.language.ir import Checkpoint, ModelSpec

#: The spec's own published storage as a weight format.
OWN = "checkpoint"

#: Config fields that say how weights are stored or how the file was written, never what the
#: architecture is: the only fields a checkpoint's config may change from the spec's.
STORAGE_KEYS = frozenset({
    "quantization_config", "compression_config", "dtype", "torch_dtype", "transformers_version",
    "_name_or_path", "architectures", "auto_map", "kv_cache_scheme",
})


def find(model: ModelSpec, name: str) -> Checkpoint | None:
    """The checkpoint a weight-format ``name`` asks for (its ``format`` or its Hub id), or None."""
    return next((c for c in model.checkpoints if name in (c.format, c.model_id)), None)


def formats(model: ModelSpec) -> list[str]:
    """Every weight format of the model's published checkpoints: ``checkpoint`` first."""
    return [OWN] + [c.format for c in model.checkpoints]


def variant(model: ModelSpec, checkpoint: Checkpoint) -> ModelSpec:
    """The spec as the checkpoint: its id, quant context and config snapshot (evidence files are
    found by the snapshot's name), no checkpoints of its own."""
    return replace(model, model_id=checkpoint.model_id, quant=dict(checkpoint.quant),
                   snapshot=checkpoint.snapshot, checkpoints=())


def for_format(model: ModelSpec, name: str) -> ModelSpec:
    """The spec stored as weight format ``name`` (``checkpoint``: the spec itself)."""
    if name == OWN:
        return model
    found = find(model, name)
    if found is None:
        raise KeyError(name)
    return variant(model, found)


def differences(base: Mapping[str, Any], other: Mapping[str, Any], ignore=frozenset(), path: str = "") -> list[str]:
    """``field: base -> other`` for each config field (nested sections compared field by field)
    the two differ in, outside :data:`STORAGE_KEYS` and ``ignore`` (keys that say how a file was
    written, at any depth); empty when the architecture is the same."""
    out = []
    for key in sorted(set(base) | set(other), key=str):
        if key in STORAGE_KEYS or key in ignore:
            continue
        a, b = base.get(key, "<absent>"), other.get(key, "<absent>")
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += differences(a, b, ignore, f"{path}{key}.")
        elif a != b and not (a in _UNSET and b in _UNSET):   # absent and null both say "not set"
            out.append(f"{path}{key}: {_short(a)} -> {_short(b)}")
    return out


_UNSET = (None, "<absent>")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def tensors(analysis, model: ModelSpec, corpus, name: str = OWN) -> list[storage.TensorRow]:
    """Every stored tensor of weight format ``name`` (the spec's walk, that format's storage)."""
    return storage.checkpoint_tensors(analysis, for_format(model, name), corpus)


def format_compute(model: ModelSpec, name: str, corpus) -> set[str]:
    """The matmul operand classes (quant schemes' ``compute``) narrower than BF16 that weight
    format ``name`` stores weights in, e.g. ``{"fp8"}`` or ``{"fp4", "fp8"}``: the build gives a
    published checkpoint rows on the GPUs whose tensor cores run every one of them natively."""
    quant = for_format(model, name).quant
    return {corpus.schemes[s].compute for s in quant.values()} - {"bf16", "fp16", "f32", "fp32"}
