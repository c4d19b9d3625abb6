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
   tensors, except the input embedding, the output head and ``modules_to_not_convert``.
   A 3-D expert tensor that survives the revert is laid out ``[experts, in, out]`` (the ``x @ W``
   convention of gpt-oss's checkpoint); a scheme's ``rows`` are its out features.

The result covers the main stack only (``scope: [main]``): multi-token-prediction modules are
not part of transformers' causal-LM classes.
"""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

from engine.spec.ir import QuantScheme
from engine.verify.manifest import Manifest, ManifestTensor

_STRIP_KEYS = ("quantization_config", "auto_map")
_TORCH_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64",
                 "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "uint8": "U8",
                 "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "bool": "BOOL"}


class ModelingCodeError(RuntimeError):
    """transformers is missing or cannot build this config; the message says what to do."""


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def hf_config(data: dict[str, Any]):
    """A transformers config object from config.json data (quantization and remote code stripped).

    A checkpoint that ships its own code under a new ``model_type`` (Kimi-K2's ``kimi_k2``) but
    declares a built-in architecture (``DeepseekV3ForCausalLM``) gets that architecture's config.
    """
    _offline()
    try:
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        raise ModelingCodeError("transformers is not installed — pip install -e '.[oracle]'") from None
    data = {k: v for k, v in data.items() if k not in _STRIP_KEYS}
    model_type = data.pop("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        by_class = {cls: mt for mt, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
        known = [by_class[a] for a in data.get("architectures", []) if a in by_class]
        if not known:
            raise ModelingCodeError(f"transformers knows neither model_type {model_type!r} nor its "
                                    "architectures — snapshot from the Hub or a local checkpoint instead")
        model_type = known[0]
    return AutoConfig.for_model(model_type, **data)


def build_meta_model(config: dict[str, Any]):
    """The causal-LM module tree on the meta device, in the config's dtype."""
    import torch
    from transformers import AutoModelForCausalLM
    cfg = hf_config(config)
    dtype = getattr(torch, str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, dtype=dtype)


def _scheme_for(config: dict[str, Any], schemes: dict[str, QuantScheme]) -> QuantScheme | None:
    qc = config.get("quantization_config")
    if not qc:
        return None
    for scheme in schemes.values():
        if scheme.hf and all(qc.get(k) == v for k, v in scheme.hf.items()):
            return scheme
    raise ModelingCodeError(f"no corpus quant scheme matches quantization_config {qc} — add `hf:` "
                            "keys to the scheme in corpus/quant/ that stores this format")


def _stored(name: str, shape: tuple[int, ...], scheme: QuantScheme) -> list[ManifestTensor]:
    """A quantized matrix as the scheme stores it (payload and scales): the spec's storage rule."""
    from engine.spec.storage import scheme_tensors
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


def meta_manifest(config: dict[str, Any], schemes: dict[str, QuantScheme], source: str) -> Manifest:
    """The checkpoint manifest the modeling code implies for ``config`` (see module docstring)."""
    try:
        import torch
        import transformers
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:
        raise ModelingCodeError("torch and transformers are needed — pip install -e '.[oracle]'") from None
    model = build_meta_model(config)
    linear = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    experts = {name for name, m in model.named_modules() if type(m).__name__.endswith("Experts")}
    skip = set()
    for getter in (model.get_input_embeddings, model.get_output_embeddings):
        module = getter()
        if module is not None:
            skip.update(n for n, m in model.named_modules() if m is module)
    buffers = {name for name, _ in model.named_buffers()}
    hf_state = model.state_dict()
    hf_name = {id(t): n for n, t in hf_state.items()}   # a renamed tensor keeps its identity
    state = revert_weight_conversion(model, hf_state)
    param_dtype = _TORCH_DTYPES[str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")]
    tied = getattr(model.config, "tie_word_embeddings", False)
    scheme = _scheme_for(config, schemes)
    expert_scheme = _expert_scheme(config, schemes) or scheme
    not_convert = list((config.get("quantization_config") or {}).get("modules_to_not_convert") or [])
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
        excluded = module in skip or any(
            fnmatch.fnmatch(module, pat) or fnmatch.fnmatch(module, pat + ".*") for pat in not_convert) or any(
            module == u or module.endswith("." + u) for u in unquantized)
        chosen = expert_scheme if in_experts else scheme
        if chosen is not None and quantizable and not excluded and len(shape) >= 2:
            tensors.extend(_stored(name, shape, chosen))
        else:
            tensors.append(ManifestTensor(name, dtype, shape))
    tensors.sort(key=lambda t: t.name)
    quantization = "none"
    if scheme:
        quantization = (f"{scheme.name} (corpus/quant) for quantization_config "
                        f"{config['quantization_config'].get('quant_method')}")
        if expert_scheme is not scheme:
            quantization += f"; experts {expert_scheme.name} for expert_dtype {config['expert_dtype']}"
    provenance = {"kind": "modeling-code", "tool": f"transformers {transformers.__version__}",
                  "class": type(model).__name__, "quantization": quantization}
    return Manifest(source, provenance, sum(t.nbytes for t in tensors), tuple(tensors), ("main",))


def _input_name(model) -> str:
    module = model.get_input_embeddings()
    return next(n for n, m in model.named_modules() if m is module)


def modeling_source(config: dict[str, Any]) -> tuple[str, str]:
    """(label, text) of the transformers modeling file that implements ``config``'s class."""
    import inspect
    model_cls = _causal_lm_class(config)
    path = Path(inspect.getsourcefile(model_cls))
    import transformers
    rel = path.relative_to(Path(transformers.__file__).parent.parent)
    return f"transformers {transformers.__version__} {rel.as_posix()}", path.read_text(encoding="utf-8")


def _causal_lm_class(config: dict[str, Any]):
    from transformers import AutoModelForCausalLM
    cfg = hf_config(config)
    return AutoModelForCausalLM._model_mapping[type(cfg)]
