"""``archledger new``: the new spec's text from its base's, and the snapshots README and lineage rows.

Layer: engine.verify (called by :mod:`engine.verify.scaffold`). :func:`spec_text` rewrites the
base's text for the new config: id, name, notes, aliases, layer plans and switches
(:mod:`engine.verify.scaffold_plan`), dims the config lacks (a per-layer list's length or the
transformers config class's default), the quant context (:mod:`engine.verify.scaffold_quant`) and a
tied head; :func:`readme_text` and :func:`lineage_text` the two shared files' new rows. Nothing
here writes files: the caller writes what these return.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from engine.language.corpus import Corpus, slug
from engine.language.ir import ModelSpec
from engine.verify.config_keys import UNSHAPING_KEYS
from engine.verify import scaffold_plan as plan
from engine.verify.scaffold_lines import _CONFIG_READ, _block, _scalar, _short, _text_view, text_fields
from engine.verify.scaffold_quant import _quant


#: Config sections transformers 5 renamed: a spec reading the old name reads the new one where a
#: config has only that (Kimi-K2.7-Code's text_config: rope_parameters, with the same yarn factor).
_RENAMED = {"rope_scaling": "rope_parameters"}


#: A size token of a repo name (``8B``, ``0.6B``, ``A3B``, ``16E``, ``8K``); any other token is a word.
_SIZE_TOKEN = re.compile(r"A?\d+(\.\d+)?[BMKE]", re.IGNORECASE)


def _token_kind(token: str) -> str:
    return "size" if _SIZE_TOKEN.fullmatch(token) else "word"


def display_name(base: ModelSpec, model_id: str) -> str:
    """The base's naming habit applied to the new repo name; else the repo name.

    The habit is read from the base: its display name must be its repo name with each hyphen kept
    or made a space, and the choice must depend only on the kinds of the two tokens it joins
    (word or size). ``Qwen3-8B`` is "Qwen3 8B", so ``Qwen3-0.6B`` is "Qwen3 0.6B";
    ``Qwen3-VL-8B-Instruct`` is "Qwen3-VL 8B Instruct", so ``Qwen3-VL-30B-A3B-Instruct`` is
    "Qwen3-VL 30B-A3B Instruct" (a pair of kinds the base never joins keeps its hyphen)."""
    repo, base_repo = model_id.split("/")[1], base.model_id.split("/")[1]
    shown = base.display_name
    if len(shown) != len(base_repo) or any(a != b and not (a == "-" and b == " ") for a, b in zip(base_repo, shown)):
        return repo
    tokens = base_repo.split("-")
    seps = [shown[i] for i, ch in enumerate(base_repo) if ch == "-"]
    habit: dict[tuple[str, str], str] = {}
    for a, b, sep in zip(tokens, tokens[1:], seps):
        if habit.setdefault((_token_kind(a), _token_kind(b)), sep) != sep:
            return repo   # the base joins the same kinds both ways: no habit to follow
    new = repo.split("-")
    return new[0] + "".join(habit.get((_token_kind(a), _token_kind(b)), "-") + b for a, b in zip(new, new[1:]))


#: A storage format a spec's notes may quote ("Published in FP8 with ..."): a checkpoint stored
#: another way makes such notes wrong; notes that name no format stay (Qwen3.5-27B's for Qwen3.6).
_STORAGE_WORD = re.compile(r"\b(BF16|FP8|FP4|NVFP4|MXFP4|INT4|W4A16|quantiz\w*)\b", re.IGNORECASE)


def notes_outdated(base: ModelSpec, config: dict[str, Any], base_config: dict[str, Any], model_id: str) -> bool:
    """Whether the base's notes describe the base's sizes, not this checkpoint's: they quote a
    value this config changes (numbers compared without thousands separators: "5,000,000") or a
    size token of the base's repo name this one lacks ("Qwen3 8B's ...")."""
    view, base_view = _text_view(config), _text_view(base_config)
    notes = re.sub(r"(?<=\d),(?=\d{3})", "", base.notes)
    for key in set(view) | set(base_view):
        if key in UNSHAPING_KEYS or view.get(key) == base_view.get(key) or key not in base_view:
            continue
        if re.search(rf"(?<![\w.]){re.escape(str(base_view[key]))}(?![\w.])", notes):
            return True
    repo = set(model_id.split("/")[1].split("-"))
    sizes = [t for t in base.model_id.split("/")[1].split("-") if _token_kind(t) == "size" and t not in repo]
    return any(re.search(rf"(?<![\w.]){re.escape(t)}(?![\w.])", base.notes) for t in sizes)


def _unread(config: dict[str, Any], keys: set[str]) -> set[str]:
    """The ``keys`` transformers' code for this config never reads (none when it cannot tell)."""
    if not keys:
        return set()
    from engine.verify import modeling_code
    return modeling_code.unread_fields(config, keys) or set()


def _dims_lines(lines: list[str]) -> dict[str, int]:
    """``dim -> line index`` of the ``dims:`` block's ``  dim: config.field`` lines."""
    span = _block(lines, "dims")
    out = {}
    if span:
        for i in range(span[0] + 1, span[1]):
            found = re.match(r"^  ([A-Za-z_]\w*): *config\.([A-Za-z_]\w*) *$", lines[i])
            if found:
                out[found[2]] = i
    return out


def _class_default(config: dict[str, Any], key: str) -> tuple[Any, str] | None:
    """(value, src) of ``key`` in the transformers config class built from ``config``, or None."""
    from engine.verify import modeling_code
    try:
        cfg = modeling_code.hf_config(config)
        import transformers
    except (modeling_code.ModelingCodeError, ImportError, TypeError, ValueError):
        return None
    value = getattr(cfg, key, None)
    if value is None or not isinstance(value, (int, float, str, bool, list)):
        return None
    return value, f"transformers {transformers.__version__} {type(cfg).__name__}.{key}: the class's value when config.json omits it"


def _class_values(config: dict[str, Any]) -> dict[str, Any]:
    """Every attribute of the transformers config class built from ``config`` (its text stack's
    for a multimodal one), or {} when transformers cannot build it."""
    from engine.verify import modeling_code
    try:
        cfg = modeling_code.hf_config(config)
    except (modeling_code.ModelingCodeError, ImportError, TypeError, ValueError):
        return {}
    cfg = getattr(cfg, "text_config", None) or cfg if isinstance(config.get("text_config"), dict) else cfg
    return dict(vars(cfg))


def _layer_list(config: dict[str, Any], registry_fields: set[str]) -> str | None:
    """A per-layer list the config holds (one entry per layer), named by the verification registry."""
    return next((k for k in sorted(registry_fields) if isinstance(config.get(k), list) and config[k]), None)


def spec_text(base_text: str, base: ModelSpec, model_id: str, config: dict[str, Any],
              base_config: dict[str, Any], corpus: Corpus, registry_fields: set[str],
              plan_fields: set[str], prefixes: tuple[tuple[str, str], ...] = (),
              notes: list[str] | None = None) -> tuple[str, list[str]]:
    """The new spec's text from the base's, and the to-do lines it could not settle (module doc).

    ``registry_fields``: the top-level config fields the verification registry reads (a field new
    in this config and read by neither the spec nor the registry is a to-do line);
    ``plan_fields``: its per-layer plan fields (a layer count may be the length of one);
    ``prefixes``: its canonical prefixes (a quantization_config names modules by the checkpoint's paths);
    ``notes`` hears what is worth saying but needs no hand (a new field transformers never reads)."""
    todo: list[str] = []
    notes = [] if notes is None else notes
    lines = base_text.splitlines()
    span = _block(lines, "checkpoints")
    if span:   # the base's other published checkpoints are the base's, never the new model's
        del lines[span[0]:span[1]]
    for i, line in enumerate(lines):
        if line.startswith("model:"):
            lines[i] = f"model: {model_id}"
        elif line.startswith("model_type:") and config["model_type"] != base.model_type:
            # --like a spec of another model_type (Qwen3-VL-30B-A3B like Qwen3-30B-A3B): the config's
            # own type; the family is the one the corpus already files that type under (Kimi-K2.5's
            # kimi_k25 under Kimi K2 once it is there), else for a person to confirm
            lines[i] = f"model_type: {_scalar(config['model_type'])}"
            families = {m.family for m in corpus.models.values() if m.model_type == config["model_type"]}
            if families != {base.family}:
                todo.append(f"family: {base.family} is {base.model_id}'s (model_type {base.model_type}); this config "
                            f"is {config['model_type']} — keep it or write the family this checkpoint belongs to")
        elif line.startswith("name:"):
            lines[i] = f"name: {_scalar(display_name(base, model_id))}"
    from engine.verify.modeling_code import quantization_config
    if (notes_outdated(base, config, base_config, model_id)
            or (quantization_config(config) != quantization_config(base_config)
                and _STORAGE_WORD.search(base.notes))):
        # the base's notes quote a size (or a storage format) this checkpoint changes
        span = _block(lines, "notes")
        if span:
            note = f"{base.display_name}'s architecture ({base.model_id}) at this checkpoint's sizes (archledger new)."
            lines[span[0]:span[1]] = [f"notes: {json.dumps(note)}"]
    view = _text_view(config)
    # a field the base reads under the name its config class gives it, this config under another
    lines = plan.apply_aliases(lines, set(_CONFIG_READ.findall(base_text)), view,
                               plan.aliases(text_fields(config), text_fields(base_config)), notes)
    reads = set(_CONFIG_READ.findall("\n".join(lines)))
    # per-layer plans that name their layers' mixer, then the switches that set component options
    from engine.verify.evidence import registry
    reg = registry(corpus.root)
    lines, settled = plan.plan_templates(lines, view, reads, reg.layer_plans, corpus, model_id, todo, notes)
    settled |= plan.apply_switches(lines, view, reg.switches, corpus.components, _slot_names(corpus.root),
                                   todo, notes)
    reads = set(_CONFIG_READ.findall("\n".join(lines))) | settled
    # new fields of the text stack (a multimodal wrapper's own keys describe the other towers)
    ours, theirs = text_fields(config), text_fields(base_config)
    base_class = _class_values(base_config)
    new_keys = {k for k in set(ours) - set(theirs) - UNSHAPING_KEYS - reads - registry_fields
                - {"tie_word_embeddings", "text_config"}
                # the base already has this value: its config class's default where its file omits it
                if not (k in base_class and base_class[k] == ours[k])}
    unread = _unread(config, new_keys)
    for key in sorted(new_keys & unread):
        notes.append(f"config.{key} = {_short(ours[key])}: new in this config; the transformers code it is "
                     "verified against never reads it (the spec follows that code)")
    for key in sorted(new_keys - unread):
        todo.append(f"config.{key} = {_short(ours[key])}: new in this config ({base.model_id}'s has no such field) and "
                    "nothing reads it — bind it in the spec if it shapes the model, or name it in corpus/verification.yaml")
    if not _class_values(config):
        # no transformers count will catch it (the spec stays unverified): a field the base also
        # has, with another value, that the spec never reads may shape the model (MiMo-7B's
        # attention_bias: true against Qwen3's false)
        changed = {k for k in set(ours) & set(theirs) - UNSHAPING_KEYS - reads - registry_fields
                   - {"tie_word_embeddings", "text_config", "model_type"}
                   if ours[k] != theirs[k] and not k.endswith("_eps")}   # a norm epsilon shapes nothing
        for key in sorted(changed):
            todo.append(f"config.{key} = {_short(ours[key])} ({base.model_id}'s: {_short(theirs[key])}): nothing in "
                        "the spec reads it and transformers cannot count this model — bind it in the spec if it "
                        "shapes the model, or name it in corpus/verification.yaml")
    # transformers 5's layout carries the RoPE base inside rope_parameters; where a config declares
    # it there the structural guard wants the rope op to read it from there (values are equal)
    params = view.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params and "rope_theta" in reads:
        lines = [re.sub(r"\bconfig\.rope_theta\b", "config.rope_parameters.rope_theta", line) for line in lines]
        reads = set(_CONFIG_READ.findall("\n".join(lines)))
    # dims (and any other reads) of config keys this config lacks
    defaults: dict[str, tuple[Any, str]] = {}
    declared = set(base.config_defaults)
    rebound = _dims_lines(lines)
    for key in sorted(reads):
        if key in view or key in declared:
            continue
        renamed = _RENAMED.get(key)
        if renamed in view:   # the same settings under transformers 5's name
            lines = [re.sub(rf"\bconfig\.{key}\b", f"config.{renamed}", line) for line in lines]
            continue
        listed = _layer_list(view, plan_fields) if key == "num_hidden_layers" else None
        if listed and key in rebound:
            i = rebound[key]
            lines[i] = lines[i].split(":")[0] + f": len(config.{listed})"
            continue
        found = _class_default(config, key)
        if found is None:
            todo.append(f"config.{key}: the spec reads it but this config has no such field and transformers gives "
                        f"no default — bind the dim to this config's field or declare it under config_defaults")
            continue
        defaults[key] = found
    if defaults:
        entries = [f"  {k}: {{value: {json.dumps(v)}, src: {json.dumps(src)}}}" for k, (v, src) in defaults.items()]
        span = _block(lines, "config_defaults")
        if span:
            lines[span[0] + 1:span[0] + 1] = entries
        else:
            at = _block(lines, "dims")[0]
            lines[at:at] = ["config_defaults:"] + entries
    _quant(lines, config, base_config, corpus, todo, prefixes)
    _tied(lines, config, base_config, todo)
    return "\n".join(lines) + "\n", todo


def _slot_names(corpus_root: Path) -> set[str]:
    """The slot names of ``corpus/slots.yaml`` (a fill's key in a spec)."""
    path = Path(corpus_root) / "slots.yaml"
    return set(yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else set()


def _tied(lines: list[str], config: dict, base_config: dict, todo: list[str]) -> None:
    """A head tied to the embedding stores no weights of its own (``shares:`` the embedding node)."""
    tied, base_tied = bool(config.get("tie_word_embeddings")), bool(base_config.get("tie_word_embeddings"))
    if tied == base_tied:
        return
    head = next((i for i, line in enumerate(lines) if "role: lm_head" in line and line.rstrip().endswith("}")), None)
    embed = next((re.match(r"^\s+(\w+): \{op: embedding", line) for line in lines
                  if re.match(r"^\s+\w+: \{op: embedding", line)), None)
    if head is None or embed is None:
        todo.append(f"tie_word_embeddings is {tied} here, {base_tied} in the base: "
                    + ("add `shares: <embedding node>` to the lm_head node" if tied else "drop the lm_head's `shares:`"))
        return
    if tied:
        lines[head] = lines[head].rstrip()[:-1].rstrip() + f", shares: {embed[1]}}}"
    else:
        lines[head] = re.sub(r",\s*shares: \w+", "", lines[head])


def readme_text(text: str, model_id: str, sha256: str) -> str:
    """``corpus/snapshots/README.md`` with this config's row: replaced where it is (a re-recorded
    config keeps its place, so an unchanged one leaves the file as it was), else after the last row."""
    name = f"{slug(model_id)}.config.json"
    row = f"| `{name}` | https://huggingface.co/{model_id}/blob/main/config.json | `{sha256}` |"
    lines = text.splitlines()
    mine = [i for i, line in enumerate(lines) if line.startswith(f"| `{name}` |")]
    if mine:
        lines = [row if i == mine[0] else line for i, line in enumerate(lines) if i not in mine[1:]]
    else:
        last = max(i for i, line in enumerate(lines) if line.startswith("| `"))
        lines.insert(last + 1, row)
    return "\n".join(lines) + "\n"


def lineage_text(text: str, family: str, model_id: str, base_id: str) -> str | None:
    """``corpus/lineage.yaml`` with ``model_id`` appended to its family's release list (an entry at
    the end continuing the family's lineage; the base first when the family lists no models yet),
    or None when nothing changes (the family is not listed, or the model already is)."""
    data = yaml.safe_load(text) or {}
    lineage, release = None, []
    for entry in data.get("lineages") or []:
        for item in entry.get("families") or []:
            name, listed = next(iter(item.items())) if isinstance(item, dict) else (item, [])
            if name == family:
                lineage = entry["lineage"]
                release += listed or []
    if lineage is None or model_id in release:
        return None
    if not release and base_id != model_id:
        model_id = f"{base_id}, {model_id}"   # the family's order starts with the model it was like
    lines = text.rstrip("\n").splitlines()
    last = re.fullmatch(r"      - (.+): \[(.*)\]", lines[-1]) if len(lines) >= 3 else None
    if last and last[1] == _scalar(family) and lines[-3] == f"  - lineage: {_scalar(lineage)}":
        lines[-1] = f"      - {last[1]}: [{last[2]}, {model_id}]"   # the last entry continues this family
        return "\n".join(lines) + "\n"
    return text.rstrip("\n") + (f"\n  - lineage: {_scalar(lineage)}\n    families:\n"
                                f"      - {_scalar(family)}: [{model_id}]\n")
