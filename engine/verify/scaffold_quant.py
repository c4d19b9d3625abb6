"""``archledger new``: the quant context of a new spec (or checkpoint) from its quantization_config.

Layer: engine.verify (called by :mod:`engine.verify.scaffold_text` and
:mod:`engine.verify.add_checkpoint`). The scheme ``snapshot --meta`` matches (the same rule,
:func:`engine.verify.modeling_code.scheme_for_config`), the config's exclusion lists as
module-path overrides, a MIXED_PRECISION ``quantized_layers`` map as one override per module kind.
Invariant: what cannot be written mechanically is one line in ``todo``; the lines are edited in place.
"""
from __future__ import annotations

import json
import re
from typing import Any

from engine.language.corpus import Corpus
from engine.verify.scaffold_lines import _block, _scalar, text_fields


#: Schemes that keep a tensor unquantized: a base's override naming one says "stored as is", true of
#: any checkpoint of the family (DeepSeek's router in BF16, its routing bias in F32).
_UNQUANTIZED = frozenset({"bf16", "f16", "f32", "i64"})


def _quant(lines: list[str], config: dict, base_config: dict, corpus: Corpus, todo: list[str],
           prefixes: tuple[tuple[str, str], ...] = ()) -> None:
    """The quant context: the base's when the quantization_config is the same; bf16 for an
    unquantized checkpoint of a quantized base; the scheme ``snapshot --meta`` matches otherwise
    (the same rule, :func:`modeling_code.scheme_for_config`), with the base's unquantized overrides
    and the config's exclusion lists (its text stack's) as module-path overrides (``bf16``), or, for
    a checkpoint naming a scheme per module (ModelOpt MIXED_PRECISION ``quantized_layers``), bf16
    with one module-path override per module kind (:func:`_module_overrides`)."""
    from engine.language import module_patterns
    from engine.verify import modeling_code
    qc, base_qc = modeling_code.quantization_config(config), modeling_code.quantization_config(base_config)
    if qc == base_qc:
        return
    span = _block(lines, "quant_context")
    old = lines[span[0]:span[1]] if span else []
    if not qc:
        new = ["quant_context:", "  default: bf16"]
        kept = [line for line in old if re.match(r"^    \S+: (f32|i64)\b", line)]
        new += ["  overrides:"] + kept if kept else []
    else:
        try:
            scheme = modeling_code.scheme_for_config(config, corpus.schemes)
            per_module = modeling_code.layer_schemes(config, corpus.schemes)
        except modeling_code.ModelingCodeError as exc:
            # whole: the error bounds its own quoted config (modeling_code._short), and its advice is the end
            todo.append(f"quantization_config: {' '.join(str(exc).split())}; then set quant_context")
            return
        if per_module:
            overrides = _module_overrides(per_module, prefixes, todo)
            if overrides is None:
                return
            new = ["quant_context:", "  default: bf16", "  overrides:"] + [f"    {json.dumps(p)}: {n}" for p, n in overrides]
        elif scheme is None:
            keys = {k: v for k, v in qc.items() if not isinstance(v, (list, dict))}
            todo.append(f"quantization_config {json.dumps(keys)[:120]}: no corpus quant scheme has matching hf: keys "
                        "— add one (CONTRIBUTING.md, \"Add a quant scheme\") and set quant_context")
            return
        else:
            # transformers' quantizer leaves the input embedding and the output head unquantized; a
            # head tied to the embedding stores nothing of its own, so it has no override
            overrides = {"embedding": "bf16"}
            if not config.get("tie_word_embeddings"):
                overrides["lm_head"] = "bf16"
            for line in old:   # the base's roles kept as they are (its module paths are its checkpoint's list)
                found = re.match(r"^    ([\w.]+): (\w+)\s*$", line)
                if found and found[2] in _UNQUANTIZED:
                    overrides.setdefault(found[1], found[2])
            n_layers = text_fields(config).get("num_hidden_layers")
            # a multimodal checkpoint's paths (language_model.model.layers...) as the spec names them;
            # another tower's modules (vision_tower*, mm_projector*) are not the text stack's
            from engine.verify.evidence import registry
            reg = registry(corpus.root)
            excluded = [p if p.startswith("re:") else module_patterns.canonical(p, reg.prefixes)
                        for p in module_patterns.exclusions(qc)]
            # quantizers convert linear layers only (transformers' FP8 and compressed-tensors
            # integrations replace nn.Linear; compressed-tensors targets "Linear"): an entry naming
            # no linear (GLM-5-FP8's norms, its router `mlp.gate`, a parameter `k_norm.bias`)
            # changes no storage, and as a bf16 override it would clobber the router's F32 bias
            linears = _linear_modules(config, reg.prefixes)
            if linears is not None:
                excluded = [p for p in excluded if any(module_patterns.matches(p, m) for m in linears)]
            patterns, partial = module_patterns.collapse_layers(excluded, n_layers or 0, _layers_having(config, reg.prefixes))
            for pattern in patterns:
                if not _text_stack(pattern, reg.other_modalities):
                    continue
                if module_patterns.is_pattern(pattern):
                    overrides.setdefault(pattern, "bf16")
                elif pattern.rsplit(".", 1)[-1] not in ("lm_head", "embed_tokens"):   # role overrides above
                    todo.append(f"quant_context: {pattern!r} is kept unquantized — add an override for its role or a "
                                "module-path pattern (bf16)")
            if partial:
                todo.append(f"quant_context: {len(partial)} module(s) kept unquantized in some layers only, e.g. "
                            f"{partial[0]} — give those layers a template of their own with a bf16 override")
            new = ["quant_context:", f"  default: {scheme.name}", "  overrides:"]
            new += [f"    {_scalar(k) if not module_patterns.is_pattern(k) else json.dumps(k)}: {v}" for k, v in overrides.items()]
    if span:
        lines[span[0]:span[1]] = new
    else:
        lines.extend(new)


def _linear_modules(config: dict, prefixes) -> set[str] | None:
    """The canonical paths of the text stack's linear modules (transformers' own, on the meta
    device), or None when transformers cannot build the config."""
    from engine.language import module_patterns
    from engine.verify import modeling_code
    try:
        stack = modeling_code.build_meta_model(config)
        import torch
    except (modeling_code.ModelingCodeError, ImportError, KeyError, ValueError, TypeError):
        return None
    return {module_patterns.canonical(n, prefixes) for n, m in stack.model.named_modules()
            if isinstance(m, torch.nn.Linear)}


def _layers_having(config: dict, prefixes):
    """``layers_of`` for :func:`module_patterns.collapse_layers`: the layers whose modules or
    parameters (transformers' own, on the meta device, canonical paths) a ``layers.*`` pattern
    matches (an MoE router exists in the MoE layers only: naming all of those is naming every
    layer that has one); None when transformers cannot build the config."""
    import fnmatch
    from engine.language import module_patterns
    from engine.verify import modeling_code
    try:
        stack = modeling_code.build_meta_model(config)
    except (modeling_code.ModelingCodeError, ImportError, KeyError, ValueError, TypeError):
        return None
    names = {module_patterns.canonical(n, prefixes) for n, _ in stack.model.named_modules()}
    names |= {module_patterns.canonical(n, prefixes) for n, _ in stack.model.named_parameters()}

    def layers_of(shape: str) -> set[int]:
        head, _, tail = shape.partition("layers.*")
        found = set()
        for name in names:
            if name.startswith(head + "layers."):
                index, _, rest = name[len(head) + 7:].partition(".")
                if index.isdigit() and fnmatch.fnmatchcase("." + rest if rest else "", tail or ""):
                    found.add(int(index))
        return found
    return layers_of


#: The layer index of a module path (``model.layers.12.mlp.down_proj``).
_LAYER_INDEX = re.compile(r"(?<=\.layers\.)\d+(?=\.)")


def _module_overrides(per_module: dict[str, Any], prefixes: tuple[tuple[str, str], ...],
                      todo: list[str]) -> list[tuple[str, str]] | None:
    """``quantized_layers`` (module path -> scheme) as spec overrides: each module with its layer
    index made ``*`` and its checkpoint prefix made canonical (``model.language_model.layers.3.
    self_attn.q_proj`` -> ``model.layers.*.self_attn.q_proj``: a glob of the main stack only, so an
    MTP module the checkpoint keeps in BF16 stays so). One kind of module stored two ways (FP8 in
    some layers, NVFP4 in others) needs a template of its own: a to-do line, and None. Whether every
    layer of a template holds its pattern is the packing and weight guards' to say."""
    from engine.language import module_patterns
    chosen: dict[str, set[str]] = {}
    for module, scheme in per_module.items():
        pattern = _LAYER_INDEX.sub("*", module_patterns.canonical(module, prefixes), count=1)
        chosen.setdefault(pattern, set()).add(scheme.name)
    mixed = sorted(p for p, names in chosen.items() if len(names) > 1)
    if mixed:
        todo.append(f"quantized_layers store {', '.join(mixed)[:120]} in more than one scheme across layers — "
                    "give those layers a template of their own and write their overrides by hand")
        return None
    return sorted((p, next(iter(names))) for p, names in chosen.items())


def _text_stack(pattern: str, other_modalities) -> bool:
    """Whether an exclusion pattern (canonical) can name a module of the text stack: a regex, a
    leading wildcard, or a path under ``model.`` / ``lm_head`` that is no other modality's."""
    if pattern.startswith(("re:", "*", "?", "[")):
        return True
    return pattern.startswith(("model.", "lm_head")) and not pattern.startswith(tuple(o.rstrip(".") for o in other_modalities))
