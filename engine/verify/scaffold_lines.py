"""``archledger new``: reading and writing a spec's lines (shared by the steps that edit its text).

Layer: engine.verify. Helpers of :mod:`engine.verify.scaffold_text` (the spec text),
:mod:`engine.verify.scaffold_quant` (its quant context) and :mod:`engine.verify.add_checkpoint`:
a top-level block's span, a YAML scalar, the config fields a spec reads, a multimodal config's text
stack. Nothing here reads or writes files.
"""
from __future__ import annotations

import json
import re
from typing import Any


#: A spec's reads of the config, ``config.<field>`` (multimodal text settings read the same way).
_CONFIG_READ = re.compile(r"\bconfig\.(?!json\b)([A-Za-z_]\w*)")
_TOP_KEY = re.compile(r"^([A-Za-z_]\w*):")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][\w .()+-]*")


def _block(lines: list[str], key: str) -> tuple[int, int] | None:
    """[start, end) of the top-level ``key:`` block in a spec's lines, or None."""
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
    if start is None:
        return None
    end = start + 1
    while end < len(lines) and not _TOP_KEY.match(lines[end]):
        end += 1
    return start, end


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar(text: str) -> str:
    return text if _PLAIN_NAME.fullmatch(text) and ": " not in text else json.dumps(text)


def text_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The fields that describe the text stack: a multimodal config's ``text_config`` (its wrapper's
    own keys describe the other towers and the prompt format, which the spec leaves out), else the
    whole config."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _text_view(config: dict[str, Any]) -> dict[str, Any]:
    """The fields a spec reads as ``config.<field>``: a multimodal checkpoint's ``text_config``
    under its top-level fields (the sections themselves are not fields of the text stack)."""
    view = {**(config.get("text_config") or {}), **config}
    return {k: v for k, v in view.items() if k not in ("text_config", "vision_config")}
