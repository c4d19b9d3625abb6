"""Evidence from the transformers modeling code: a tensor manifest built on the ``meta`` device.

Layer: engine.verify. Used by ``archledger snapshot --meta`` when neither the Hub nor a local checkpoint
is reachable. Needs the optional ``oracle`` extra (torch + transformers); it is imported lazily.

How the manifest is made, and why each step is independent of the spec being checked:

1. transformers builds the causal-LM class for the config on ``meta`` (no memory, no download).
   Quantization settings are stripped first, so the module tree is the unquantized one.
2. ``revert_weight_conversion`` (what ``save_pretrained`` uses) maps transformers' in-memory
   tensors back to checkpoint names and shapes: fused 3-D expert tensors become the per-expert
   tensors of the published checkpoint where the checkpoint format has them.
3. Parameters are stored in the config's ``torch_dtype`` (transformers upcasts some in memory
   through ``_keep_in_fp32_modules``: a load-time choice, not the file's); buffers keep the dtype
   the code creates them with (DeepSeek's float32 routing bias).
4. If the config carries a ``quantization_config``, the corpus quant scheme whose ``hf:`` match is
   contained in it says what a quantized matrix becomes (payload plus scale tensors). Which
   tensors are quantized follows transformers' rule: weights of ``nn.Linear`` modules and expert
   tensors, except the input embedding, the output head and the modules the quantization_config
   lists as unquantized: compressed-tensors' and ModelOpt's ``ignore``, ModelOpt's
   ``exclude_modules`` and Hugging Face's ``modules_to_not_convert`` (globs or ``re:`` regexes,
   :mod:`engine.language.module_patterns`, the rule the spec's quant_context uses). A ModelOpt
   MIXED_PRECISION checkpoint names each quantized module's algorithm (``quantized_layers``): the
   scheme whose ``hf_layer:`` matches it stores that module (the output head too, when listed),
   and an unlisted module stays unquantized.
   A 3-D expert tensor that survives the revert is laid out ``[experts, in, out]`` (the ``x @ W``
   convention of gpt-oss's checkpoint); a scheme's ``rows`` are its out features.

The result covers the main stack only (``scope: [main]``): multi-token-prediction modules are
not part of transformers' causal-LM classes.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.language import module_patterns
from engine.language.ir import QuantScheme
from engine.verify.manifest import Manifest, ManifestTensor

_STRIP_KEYS = ("quantization_config", "auto_map")
_TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64",
                 "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "uint8": "U8",
                 "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "bool": "BOOL"}


class ModelingCodeError(RuntimeError):
    """transformers is missing or cannot build this config; the message says what to do."""


class ArchitectureMissing(ModelingCodeError):
    """The installed transformers has no model for this config's model_type or architectures: no
    meta-device evidence can exist, and the spec is declared ``unverified:`` (``archledger new``)."""


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _mappings():
    try:
        import transformers
        from transformers.models.auto import configuration_auto, modeling_auto
    except ImportError:
        raise ModelingCodeError("transformers is not installed — pip install -e '.[oracle]'") from None
    transformers.logging.set_verbosity_error()   # its config warnings are not ours: one line on failure
    return transformers, configuration_auto.CONFIG_MAPPING_NAMES, modeling_auto


def hf_config(data: dict[str, Any]):
    """A transformers config object from config.json data (quantization and remote code stripped).

    A checkpoint that ships its own code under a new ``model_type`` (Kimi-K2's ``kimi_k2``) but
    declares a built-in architecture (``DeepseekV3ForCausalLM``) gets that architecture's config.
    A model_type transformers lacks, or a config its config class refuses, is a one-line
    :class:`ModelingCodeError`.
    """
    _offline()
    transformers, config_names, auto = _mappings()
    from transformers import AutoConfig
    # a deep copy: config classes edit nested sections in place (Kimi_K25Config rewrites its
    # text_config's model_type, rope validation adds rope_theta to rope_scaling), and the caller
    # records these same dicts as the published config afterwards
    data = copy.deepcopy({k: v for k, v in data.items() if k not in _STRIP_KEYS})
    model_type = data.pop("model_type", None)
    if not isinstance(model_type, str):
        raise ModelingCodeError("config.json has no model_type — pass the checkpoint's published config.json")
    if model_type not in config_names:
        by_class = {cls: mt for mt, cls in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
        known = [by_class[a] for a in data.get("architectures") or [] if a in by_class]
        if not known:
            raise ArchitectureMissing(f"transformers {transformers.__version__} knows neither model_type "
                                    f"{model_type!r} nor its architectures {_short(data.get('architectures'))} — "
                                    "the spec stays unverified: snapshot from the Hub or a local checkpoint instead")
        model_type = known[0]
    _refuse_flat_text_fields(transformers, auto, model_type, data)
    try:
        return AutoConfig.for_model(model_type, **data)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ModelingCodeError(f"transformers {transformers.__version__} cannot read this {model_type} config: "
                                f"{_short(exc)}") from None


def attribute_map(data: dict[str, Any]) -> dict[str, str]:
    """The ``attribute_map`` of the transformers config class of ``data`` (a config.json section):
    canonical attribute -> the name this family stores it under (Kimi Linear's
    ``num_experts_per_tok -> num_experts_per_token``). The class is found as :func:`hf_config` finds
    it (the model_type, else a built-in architecture it declares); {} when transformers has neither
    or is not installed. Nothing is built."""
    try:
        transformers, config_names, auto = _mappings()
        from transformers import CONFIG_MAPPING
    except (ModelingCodeError, ImportError):
        return {}
    model_type = data.get("model_type")
    if model_type not in config_names:
        by_class = {cls: mt for mt, cls in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
        model_type = next((by_class[a] for a in data.get("architectures") or [] if a in by_class), None)
    if model_type is None:
        return {}
    return {str(k): str(v) for k, v in (getattr(CONFIG_MAPPING[model_type], "attribute_map", None) or {}).items()}


def _short(value: Any, limit: int = 120) -> str:
    """One short line of ``value`` (a config section or an exception can be kilobytes)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class TextStack:
    """Which transformers class the evidence of a config is built from, and what of it counts.

    ``model`` is what transformers builds on ``meta``: the causal-LM class of the config's
    model_type, or, for a multimodal checkpoint whose causal-LM class is the whole
    vision-language model (or that has none: Qwen3-VL), that model's own image-text class.
    ``keep`` names the module prefixes that are the text stack inside it (the language model and
    the output head; empty: everything); ``class_name`` and ``model_type`` are the text stack's
    own (``Qwen3VLTextModel``, ``qwen3_vl_text``), never another model's.
    """

    model: Any
    class_name: str
    model_type: str
    keep: tuple[str, ...] = ()

    def kept(self, name: str) -> bool:
        """Whether tensor ``name`` belongs to the text stack."""
        return not self.keep or any(name.startswith(prefix) for prefix in self.keep)


def _dtype_name(config: dict[str, Any]) -> str:
    """The checkpoint's parameter dtype: config.json's ``torch_dtype`` / ``dtype``, top level first,
    then the text stack's (Qwen3-VL declares it only under ``text_config``); BF16 if none."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for section in (config, text):
        value = section.get("torch_dtype") or section.get("dtype")
        if value:
            return str(value)
    return "bfloat16"


def _refuse_flat_text_fields(transformers, auto, model_type: str, data: dict[str, Any]) -> None:
    """A flat text-only config whose ``model_type`` transformers files as a multimodal config with a
    ``text_config`` (Step-3.7-Flash's ``step3p7``, ``Step3p7FlashForCausalLM``) would build that
    class with a *default* text stack, the config's own fields ignored: evidence of another model.
    Refused as :class:`ArchitectureMissing` when none of the config's architectures is a class
    transformers has."""
    from transformers import AutoConfig
    archs = data.get("architectures") or []
    if not archs or "text_config" in data:
        return
    cls = AutoConfig.for_model(model_type).__class__
    if "text_config" not in (getattr(cls, "sub_configs", None) or {}):
        return
    classes = {name for mapping in (auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_MAPPING_NAMES,
                                    auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
               for names in mapping.values() for name in ((names,) if isinstance(names, str) else names)}
    if not any(a in classes for a in archs):
        raise ArchitectureMissing(
            f"transformers {transformers.__version__} has no {_short(archs)}: its {model_type!r} is the multimodal "
            f"{cls.__name__}, whose text stack reads text_config, and this flat config would build it from defaults "
            "— the spec stays unverified: snapshot from the Hub or a local checkpoint instead")


def _text_plan(cfg) -> tuple[str, str, Any]:
    """(kind, class name, text config): ``causal`` builds the config's causal-LM class,
    ``composite`` the image-text class of a multimodal config, keeping its language model."""
    transformers, _, auto = _mappings()
    causal = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(cfg.model_type)
    text = cfg.get_text_config()
    if causal and not causal.endswith("ForConditionalGeneration"):
        return "causal", causal, cfg
    composite = auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(cfg.model_type)
    if text is not cfg and composite:
        return "composite", composite, text
    raise ArchitectureMissing(f"transformers {transformers.__version__} has no causal-LM class for model_type "
                            f"{cfg.model_type!r} — the spec stays unverified: snapshot from the Hub or a local "
                            "checkpoint instead")


def build_meta_model(config: dict[str, Any]) -> TextStack:
    """The text stack's module tree on the meta device, in the config's dtype (see :class:`TextStack`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    cfg = hf_config(config)
    kind, _, text = _text_plan(cfg)
    dtype = getattr(torch, _dtype_name(config))
    with torch.device("meta"):
        if kind == "causal":
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
            return TextStack(model, type(model).__name__, cfg.model_type)
        model = AutoModelForImageTextToText.from_config(cfg, dtype=dtype)
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    keep = tuple(n + "." for n, m in model.named_modules() if m is decoder or (head is not None and m is head))
    return TextStack(model, type(decoder).__name__, text.model_type, keep)


def quantization_config(config: dict[str, Any]) -> dict[str, Any]:
    """config.json's ``quantization_config``, or its text stack's (Kimi-K2.5 declares it in both)."""
    qc = config.get("quantization_config")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    qc = qc or text.get("quantization_config")
    return qc if isinstance(qc, dict) else {}


def _contains(found: Any, wanted: Any) -> bool:
    """Whether ``found`` (a config value) has every key of ``wanted`` with an equal value, nested
    mappings compared the same way (a scheme's ``hf:`` names only the keys that identify it)."""
    if isinstance(wanted, dict):
        return isinstance(found, dict) and all(k in found and _contains(found[k], v) for k, v in wanted.items())
    return found == wanted


def scheme_for_config(config: dict[str, Any], schemes: dict[str, QuantScheme]) -> QuantScheme | None:
    """The corpus scheme whose ``hf:`` keys the config's quantization_config contains; None if the
    config has none, or if it names a scheme per module (ModelOpt's ``quantized_layers``)."""
    qc = quantization_config(config)
    if not qc or isinstance(qc.get("quantized_layers"), dict):
        return None
    for scheme in schemes.values():
        if scheme.hf and _contains(qc, dict(scheme.hf)):
            return scheme
    # the scalars that say what format this is, those first (ignore lists can be 60 KB, nulls say nothing)
    scalars = {k: v for k, v in qc.items() if not isinstance(v, (list, dict)) and v is not None}
    keys = {k: scalars[k] for k in sorted(scalars, key=lambda k: (k not in ("quant_method", "format"), k))}
    raise ModelingCodeError(f"no corpus quant scheme matches quantization_config {_short(keys)} — add `hf:` "
                            "keys to the scheme in corpus/quant/ that stores this format")


def layer_schemes(config: dict[str, Any], schemes: dict[str, QuantScheme]) -> dict[str, QuantScheme]:
    """Module path -> scheme for a MIXED_PRECISION checkpoint (ModelOpt's ``quantized_layers``:
    each quantized module names its own algorithm; a module it does not list stays unquantized)."""
    layers = quantization_config(config).get("quantized_layers")
    if not isinstance(layers, dict):
        return {}
    out = {}
    for module, entry in layers.items():
        match = next((s for s in schemes.values() if s.hf_layer and _contains(entry, dict(s.hf_layer))), None)
        if match is None:
            raise ModelingCodeError(f"no corpus quant scheme has `hf_layer:` matching quantized_layers entry "
                                    f"{_short(entry)} (module {module}) — add one to corpus/quant/")
        out[module] = match
    return out


def _listed(per_module: dict[str, QuantScheme], paths: set[str]) -> QuantScheme | None:
    """The scheme quantized_layers gives the module at one of ``paths`` or the nearest module
    above it: ModelOpt lists a fused experts module once (``...mlp.experts``), and the revert
    splits it into per-expert tensors (``...mlp.experts.7.gate_proj``)."""
    for path in paths:
        parts = path.split(".")
        for end in range(len(parts), 0, -1):
            scheme = per_module.get(".".join(parts[:end]))
            if scheme is not None:
                return scheme
    return None


def _stored(name: str, shape: tuple[int, ...], scheme: QuantScheme) -> list[ManifestTensor]:
    """A quantized matrix as the scheme stores it (payload and scales): the spec's storage rule."""
    from engine.language.storage import scheme_tensors
    if len(shape) >= 3:   # [experts, in, out] (see the module docstring)
        lead, rows, cols = shape[:-2], shape[-1], shape[-2]
    else:
        lead, rows, cols = (), shape[0], shape[1]
    return [ManifestTensor(key, dtype, tuple(int(d) for d in dims))
            for key, dtype, dims in scheme_tensors(name, lead, rows, cols, scheme)]


def _expert_scheme(config: dict[str, Any], schemes: dict[str, QuantScheme]) -> QuantScheme | None:
    """The scheme of routed experts when the config declares their own storage (``expert_dtype``)."""
    value = config.get("expert_dtype")
    if value is None:
        return None
    for scheme in schemes.values():
        if scheme.hf and dict(scheme.hf) == {"expert_dtype": value}:
            return scheme
    raise ModelingCodeError(f"no corpus quant scheme has `hf: {{expert_dtype: {value}}}` — add one to corpus/quant/")


def meta_manifest(config: dict[str, Any], schemes: dict[str, QuantScheme], source: str,
                  prefixes: tuple[tuple[str, str], ...] = ()) -> Manifest:
    """The checkpoint manifest the modeling code implies for ``config`` (see module docstring).
    ``prefixes`` (the verification registry's canonical prefixes) let a quantization_config that
    names modules by the checkpoint's paths (``model.language_model.layers.0...``) meet the
    modules transformers builds (``model.layers.0...``)."""
    try:
        import torch
        import transformers
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        raise ModelingCodeError("torch and transformers are needed — pip install -e '.[oracle]'") from None
    stack = build_meta_model(config)
    model = stack.model
    linear = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    experts = {name for name, m in model.named_modules() if type(m).__name__.endswith("Experts")}
    skip = set()
    for getter in (model.get_input_embeddings, model.get_output_embeddings):
        module = getter()
        if module is not None:
            skip.update(n for n, m in model.named_modules() if m is module)
    buffers = {name for name, _ in model.named_buffers()}
    # the text stack's tensors only (another modality's tower is not this evidence), chosen by
    # their in-memory names before the revert renames and splits them
    hf_state = {n: t for n, t in model.state_dict().items() if stack.kept(n)}
    hf_name = {id(t): n for n, t in hf_state.items()}   # a renamed tensor keeps its identity
    state = revert_weight_conversion(model, hf_state)
    param_dtype = _TORCH_DTYPES[_dtype_name(config)]
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = embed is not None and head is not None and head.weight is embed.weight
    scheme = scheme_for_config(config, schemes)
    expert_scheme = _expert_scheme(config, schemes) or scheme
    def canon(path: str) -> str:
        return module_patterns.canonical(path, prefixes)

    per_module = {canon(m): sc for m, sc in layer_schemes(config, schemes).items()}
    # ignore (compressed-tensors, ModelOpt), exclude_modules (ModelOpt), modules_to_not_convert (HF)
    exclusions = [p if p.startswith("re:") else canon(p) for p in module_patterns.exclusions(quantization_config(config))]
    # modules transformers' own quantizer leaves unquantized because the checkpoint ships them so
    unquantized = sorted(getattr(model, "_keep_in_fp32_modules", None) or ())
    tensors: list[ManifestTensor] = []
    for name, tensor in state.items():
        original = hf_name.get(id(tensor), name)
        module = original.rsplit(".", 1)[0]
        if tied and module in skip and module != _input_name(model):
            continue  # a tied head is not stored
        shape = tuple(int(d) for d in tensor.shape)
        dtype = _TORCH_DTYPES[str(tensor.dtype).removeprefix("torch.")]
        raw = not original.endswith((".weight", ".bias"))
        if original not in buffers and tensor.dtype.is_floating_point and not (raw and dtype == "F32"):
            dtype = param_dtype   # module weights in torch_dtype; raw float32 parameters stay F32
        # a tensor without an in-memory original was split off a fused tensor by the revert:
        # transformers fuses only expert weights that way (per-expert checkpoint tensors)
        in_experts = any(original.startswith(e + ".") for e in experts) or (id(tensor) not in hf_name and bool(experts))
        quantizable = ((module in linear and original.endswith(".weight"))
                       or (in_experts and (original.endswith(".weight") or len(shape) >= 3)))
        paths = {canon(module), canon(name.rsplit(".", 1)[0])}   # in memory and as the checkpoint names it
        # the embedding and the head stay unquantized unless a MIXED_PRECISION checkpoint names
        # them in quantized_layers (nvidia/Qwen3.6-27B-NVFP4 lists lm_head as W4A16_NVFP4)
        listed = _listed(per_module, paths)
        named = listed is not None
        excluded = (module in skip and not named) or any(module_patterns.first_match(exclusions, p) for p in paths) or any(
            module == u or module.endswith("." + u) for u in unquantized)
        chosen = expert_scheme if in_experts else scheme
        if per_module:
            chosen = listed
        if chosen is not None and quantizable and not excluded and len(shape) >= 2:
            tensors.extend(_stored(name, shape, chosen))
        else:
            tensors.append(ManifestTensor(name, dtype, shape))
    tensors.sort(key=lambda t: t.name)
    quantization = "none"
    if per_module:
        names = sorted({sc.name for sc in per_module.values()})
        quantization = f"{', '.join(names)} (corpus/quant) per module for quantization_config quantized_layers"
    if scheme:
        quantization = (f"{scheme.name} (corpus/quant) for quantization_config "
                        f"{quantization_config(config).get('quant_method') or quantization_config(config).get('quant_algo')}")
        if expert_scheme is not scheme:
            quantization += f"; experts {expert_scheme.name} for expert_dtype {config['expert_dtype']}"
    provenance = {"kind": "modeling-code", "tool": f"transformers {transformers.__version__}",
                  "source_sha256": source_evidence(config)[1]["sha256"], "class": stack.class_name, "model_type": stack.model_type, "quantization": quantization}
    if stack.keep:
        provenance["text_stack_of"] = f"{type(model).__name__} ({', '.join(p.rstrip('.') for p in stack.keep)})"
    return Manifest(source, provenance, sum(t.nbytes for t in tensors), tuple(tensors), ("main",))


def _input_name(model) -> str:
    module = model.get_input_embeddings()
    return next(n for n, m in model.named_modules() if m is module)


def source_evidence(config: dict[str, Any]) -> tuple[str, dict[str, str], str]:
    """(label, provenance, text) of the modeling source the evidence of ``config`` is checked
    against: the provenance names the transformers release and the sha256 of the whole file, so a
    re-record under another release shows whether the code changed (the source guard reads it)."""
    import hashlib
    import transformers
    label, text = modeling_source(config)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return label, {"kind": "modeling-code", "file": label, "transformers": transformers.__version__,
                   "sha256": digest}, text


def modeling_source(config: dict[str, Any]) -> tuple[str, str]:
    """(label, text) of the transformers modeling file that implements the text stack's class
    (:func:`build_meta_model`'s choice, looked up without building the model)."""
    import inspect
    transformers, _, auto = _mappings()
    cfg = hf_config(config)
    kind, name, text = _text_plan(cfg)
    if kind == "composite":   # the language model's class: Qwen3VLTextModel, Gemma4TextModel
        name = auto.MODEL_MAPPING_NAMES.get(text.model_type, name)
    path = Path(inspect.getsourcefile(getattr(transformers, name)))
    rel = path.relative_to(Path(transformers.__file__).parent.parent)
    return f"transformers {transformers.__version__} {rel.as_posix()}", path.read_text(encoding="utf-8")


def unread_fields(config: dict[str, Any], keys: set[str]) -> set[str] | None:
    """The ``keys`` that neither the modeling file of the config's text stack nor its configuration
    files (the composite's and the text config's) mention as a whole word: fields transformers
    stores and never reads, so they cannot shape what the evidence records. None when
    transformers cannot resolve the config."""
    import inspect
    import re
    try:
        _, text = modeling_source(config)
        cfg = hf_config(config)
        files = {inspect.getsourcefile(type(c)) for c in (cfg, cfg.get_text_config())}
    except (ModelingCodeError, ImportError, TypeError, ValueError, KeyError):
        return None
    text += "".join(Path(f).read_text(encoding="utf-8") for f in files if f)
    return {k for k in keys if not re.search(rf"\b{re.escape(k)}\b", text)}
