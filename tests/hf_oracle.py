"""Independent Hugging Face ``transformers`` oracle for parameter accounting.

This module is *not* a test file. Tests import it to cross-check ArchLedger's
own parameter/shape bookkeeping against what ``transformers`` actually builds.

Given a Hugging Face ``config.json`` it instantiates the model with
``AutoModelForCausalLM.from_config`` on the ``meta`` device (no memory is
allocated and no weights are ever downloaded) and reports:

* ``model_class``  - the concrete Python class transformers chose,
* ``total_params`` - ``sum(p.numel() for p in model.parameters())`` (of the text stack's own
  causal LM when the config's causal-LM class is a vision-language model, Gemma 4); torch
  deduplicates shared tensors, so tied embeddings are counted once,
* ``params``       - ``name -> shape`` for ``model.named_parameters()``
  (deduplicated the same way: a tied ``lm_head.weight`` does not appear),
* ``buffers``      - ``name -> shape`` for *persistent* buffers only, i.e.
  those that would appear in ``state_dict()`` (rotary ``inv_freq`` caches are
  non-persistent and are excluded),
* ``tied``         - whether the output embedding shares its weight tensor with
  the input embedding.

``quantization_config`` (and ``auto_map``) are stripped from the JSON before
building, so quantized checkpoints (FP8, MXFP4, NVFP4, ...) are reported in
their dequantized BF16 form.

Requires ``torch`` and ``transformers``; callers should ``pytest.importorskip``
them.  The network is never touched: ``HF_HUB_OFFLINE=1`` is set before
transformers is imported.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HFReport", "hf_meta_report", "load_hf_config"]

@dataclass(frozen=True)
class HFReport:
    """What transformers builds for one config.json (see module docstring)."""

    model_class: str
    total_params: int
    params: dict[str, tuple[int, ...]]
    buffers: dict[str, tuple[int, ...]]
    tied: bool


def _force_offline() -> None:
    """Make sure nothing below can reach the Hugging Face hub."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # If huggingface_hub was already imported, its constant was read at import
    # time; patch it too so the setting takes effect in this process.
    try:
        import huggingface_hub.constants as hub_constants

        hub_constants.HF_HUB_OFFLINE = True
    except Exception:  # pragma: no cover - hub not installed / layout changed
        pass


def load_hf_config(config_path: str | Path):
    """Read ``config_path`` and return a transformers ``PretrainedConfig``.

    The JSON is read directly (no ``from_pretrained``), ``quantization_config`` and ``auto_map``
    are dropped, and the config class is picked from ``model_type`` in transformers' built-in
    registry (never remote code); see :func:`engine.verify.modeling_code.hf_config`.
    """
    _force_offline()
    from engine.verify.modeling_code import hf_config
    return hf_config(json.loads(Path(config_path).read_text()))


@functools.lru_cache(maxsize=None)
def _report_cached(resolved_path: str) -> HFReport:
    _force_offline()
    import torch
    from transformers import AutoModelForCausalLM

    cfg = load_hf_config(resolved_path)
    # A multimodal checkpoint whose causal-LM class is the whole vision-language model (Gemma 4):
    # the corpus models its text stack, so build the text stack's own causal LM from text_config.
    # A text stack with no causal-LM class of its own (Qwen3-VL's qwen3_vl_text) is the language
    # model and the output head of the vision-language model, nothing else of it.
    # A wrapper with no causal-LM class at all (Kimi-K2.5's kimi_k25) whose text stack has one
    # (deepseek_v3: Kimi_K25Model builds it with AutoModel from text_config) is that text stack.
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    text = cfg.get_text_config()
    if text is not cfg and MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(cfg.model_type, "").endswith(
            "ForConditionalGeneration"):
        cfg = text
    elif text is not cfg and cfg.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES \
            and text.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        cfg = text
    if text is not cfg and text.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        from transformers import AutoModelForImageTextToText
        with torch.device("meta"):
            whole = AutoModelForImageTextToText.from_config(cfg, dtype=torch.bfloat16)
        model = torch.nn.Module()
        model.model, model.lm_head = whole.get_decoder(), whole.get_output_embeddings()
        model.get_input_embeddings = whole.get_input_embeddings
        model.get_output_embeddings = whole.get_output_embeddings
        model_class = f"{type(whole).__name__}.{type(model.model).__name__}"
    else:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model_class = type(model).__name__

    params = {name: tuple(p.shape) for name, p in model.named_parameters()}
    total = sum(p.numel() for p in model.parameters())

    buffers: dict[str, tuple[int, ...]] = {}
    for mod_name, module in model.named_modules():
        for buf_name, buf in module.named_buffers(recurse=False):
            if buf is None or buf_name in module._non_persistent_buffers_set:
                continue
            full = f"{mod_name}.{buf_name}" if mod_name else buf_name
            buffers[full] = tuple(buf.shape)

    tied = False
    out_emb = model.get_output_embeddings()
    in_emb = model.get_input_embeddings()
    if out_emb is not None and in_emb is not None:
        tied = out_emb.weight is in_emb.weight

    return HFReport(
        model_class=model_class,
        total_params=int(total),
        params=params,
        buffers=buffers,
        tied=tied,
    )


def hf_meta_report(config_path: str | Path) -> HFReport:
    """Build the causal-LM for ``config_path`` on ``meta`` and describe it.

    Results are cached per resolved path for the life of the process, since
    large MoE models take a while to instantiate even on ``meta``.  Treat the
    returned dicts as read-only (they are shared between callers).
    """
    return _report_cached(str(Path(config_path).resolve()))
