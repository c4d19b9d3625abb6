"""``archledger new``: the spec of a published checkpoint of a family the corpus already knows.

Layer: engine.verify (it records evidence and validates, like ``snapshot``). Given a model id and
its published config.json, :func:`scaffold`

1. reads the config (JSON object with a ``model_type``) and the id (a Hub id ``org/name``);
2. picks the base spec: ``--like MODEL``, else the corpus model of the same ``model_type`` (or
   the same ``architectures``) whose published config has the most keys in common, then the
   fewest differing values;
3. writes the spec from the base's text: id, name, the dims whose config key is absent rebound
   (``len(config.<per-layer list>)`` for the layer count) or defaulted from the transformers config
   class (``config_defaults`` with that class as ``src``), the quant context from
   ``quantization_config`` where a corpus scheme's ``hf:`` keys match (per module kind for a
   MIXED_PRECISION ``quantized_layers``), a tied head sharing the embedding's weights when
   ``tie_word_embeddings`` says so; fields compared on the text stack's view (``text_config``
   under the top level); a new field transformers never reads is a note, not a to-do;
4. copies config.json byte for byte into ``corpus/snapshots/`` with its source and sha256 row, and
   appends the model to its family's lineage at the end of ``corpus/lineage.yaml``;
5. records the evidence as ``archledger snapshot --config --meta`` does, validates, and compares
   ArchLedger's parameter count with transformers' meta-device count.

Invariants: everything is built in a copy of the corpus and moved into place only when all of it
was made; a refusal (:class:`SpecError`: unreadable config, no ``model_type``, unknown family, not a
Hub id, an existing spec without ``force``) writes nothing. What could not be made mechanically is
one line each in :attr:`Result.todo`; an empty list, a passing validation and equal counts are
what "verified with no hand edit" means.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from engine.language.corpus import TEXT_CONFIG, Corpus, check_model_id, load_corpus, load_model, slug
from engine.language.errors import SpecError, Where
from engine.language.ir import ModelSpec
from engine.language.yamlio import loads_json

from engine.verify.config_keys import UNSHAPING_KEYS  # noqa: E402  (the guards share it)
from engine.verify import scaffold_plan as plan

#: Config sections transformers 5 renamed: a spec reading the old name reads the new one where a
#: config has only that (Kimi-K2.7-Code's text_config: rope_parameters, with the same yarn factor).
_RENAMED = {"rope_scaling": "rope_parameters"}

#: Schemes that keep a tensor unquantized: a base's override naming one says "stored as is", true of
#: any checkpoint of the family (DeepSeek's router in BF16, its routing bias in F32).
_UNQUANTIZED = frozenset({"bf16", "f16", "f32", "i64"})

#: A spec's reads of the config, ``config.<field>`` (multimodal text settings read the same way).
_CONFIG_READ = re.compile(r"\bconfig\.(?!json\b)([A-Za-z_]\w*)")
_TOP_KEY = re.compile(r"^([A-Za-z_]\w*):")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][\w .()+-]*")


@dataclass
class Result:
    """What ``archledger new`` made: the files it wrote, the counts, and what is left to a person."""

    model_id: str
    base: str
    files: list[Path] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # said, but nothing to add by hand
    ours: int | None = None
    theirs: int | None = None
    verified: bool = False

    @property
    def done(self) -> bool:
        return self.verified and not self.todo and self.ours is not None and self.ours == self.theirs


# -- inputs ---------------------------------------------------------------------------------------

def read_config(path: Path) -> tuple[bytes, dict[str, Any]]:
    """(bytes, parsed) of a config.json; one-line errors for a file that is not a usable config."""
    where = Where(str(path))
    try:
        raw = Path(path).read_bytes()
        data = loads_json(raw.decode("utf-8"))
    except OSError as exc:
        raise SpecError(where, f"cannot read the config: {exc.strerror or exc}", "pass --config path/to/config.json") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(where, f"not JSON: {exc}", "pass the model's published config.json") from None
    if not isinstance(data, dict):
        raise SpecError(where, f"a config.json is a JSON object, this is a {type(data).__name__}",
                        "pass the model's published config.json")
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise SpecError(where.at("model_type"), "no model_type", "pass a transformers config.json (it names its model_type)")
    return raw, data


def published_config(corpus_root: Path, model: ModelSpec) -> dict[str, Any]:
    """The base's published config.json (kept beside its snapshot), else its recorded fields."""
    path = Path(corpus_root) / "snapshots" / f"{slug(model.model_id)}.config.json"
    if path.exists():
        return json.loads(path.read_text())
    return dict(model.snapshot.fields)


def match_family(corpus: Corpus, config: dict[str, Any], like: str | None, where: Where,
                 model_id: str = "") -> ModelSpec:
    """The base spec: ``like``, else the closest corpus model of the config's family other than
    ``model_id`` itself (module doc)."""
    if like:
        return corpus.find_model(like)
    archs = set(config.get("architectures") or ())
    scored = []
    for model in corpus.models.values():
        if model.model_id == model_id:   # --force: the spec being rewritten is no base of itself
            continue
        theirs = published_config(corpus.root, model)
        same_type = theirs.get("model_type", model.model_type) == config["model_type"]
        same_arch = bool(archs) and archs == set(theirs.get("architectures") or ())
        if not (same_type or same_arch):
            continue
        keys = set(config) | set(theirs)
        common = len(set(config) & set(theirs)) / len(keys)
        differ = sum(config.get(k) != theirs.get(k) for k in keys if k not in UNSHAPING_KEYS)
        scored.append((-common, differ, model.model_id, model))
    if not scored:
        types = sorted({m.model_type for m in corpus.models.values()})
        raise SpecError(where.at("model_type"), f"no corpus family has model_type {config['model_type']!r} "
                        f"or architectures {sorted(archs)}",
                        "pass --like MODEL to start from a corpus spec of the same architecture, or write the spec "
                        f"by hand (CONTRIBUTING.md); known model_types: {', '.join(types)}")
    return min(scored, key=lambda s: s[:3])[3]


# -- the spec text --------------------------------------------------------------------------------

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


#: A size token of a repo name (``8B``, ``0.6B``, ``A3B``, ``16E``, ``8K``); any other token is a word.
_SIZE_TOKEN = re.compile(r"A?\d+(\.\d+)?[BMKE]", re.IGNORECASE)


def _token_kind(token: str) -> str:
    return "size" if _SIZE_TOKEN.fullmatch(token) else "word"


def text_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The fields that describe the text stack: a multimodal config's ``text_config`` (its wrapper's
    own keys describe the other towers and the prompt format, which the spec leaves out), else the
    whole config."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


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


def _text_view(config: dict[str, Any]) -> dict[str, Any]:
    """The fields a spec reads as ``config.<field>``: a multimodal checkpoint's ``text_config``
    under its top-level fields (the sections themselves are not fields of the text stack)."""
    view = {**(config.get("text_config") or {}), **config}
    return {k: v for k, v in view.items() if k not in ("text_config", "vision_config")}


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


# -- the other files ------------------------------------------------------------------------------

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


# -- the whole step -------------------------------------------------------------------------------

def scaffold(corpus_root: Path, model_id: str, config_path: Path, like: str | None = None,
             force: bool = False, progress=None) -> Result:
    """Make, check and move into place every file of a new model (module doc); ``progress(line)``
    hears each step."""
    say = progress or (lambda line: None)
    root = Path(corpus_root)
    check_model_id(model_id, Where("<command line>", 0, "HF_ID"))
    raw, config = read_config(config_path)
    name = slug(model_id)
    spec_path = root / "models" / f"{name}.yaml"
    if spec_path.exists() and not force:
        raise SpecError(Where(f"corpus/models/{name}.yaml"), "the spec exists — nothing was written",
                        "pass --force to write it again from the config")
    corpus = load_corpus(root, missing_snapshots_ok=True)
    base = match_family(corpus, config, like, Where(str(config_path)), model_id)
    if base.model_id == model_id:
        raise SpecError(Where("<command line>", 0, "--like"), f"{model_id} cannot be its own base",
                        "pass --like another model of the family")
    result = Result(model_id, base.model_id)
    say(f"base: {base.model_id} ({base.family})")
    from engine.verify.evidence import registry
    reg = registry(root)
    plan_fields = {p.field for p in reg.layer_plans}
    base_text = (root / "models" / f"{slug(base.model_id)}.yaml").read_text(encoding="utf-8")
    text, todo = spec_text(base_text, base, model_id, config, published_config(root, base), corpus,
                           reg.top_level_fields(), plan_fields, reg.prefixes, result.notes)
    result.todo += todo
    readme = root / "snapshots" / "README.md"
    lineage = root / "lineage.yaml"
    files: dict[Path, str | bytes] = {spec_path: text, root / "snapshots" / f"{name}.config.json": raw,
                                      readme: readme_text(readme.read_text(encoding="utf-8"), model_id,
                                                          hashlib.sha256(raw).hexdigest())}
    new_lineage = (lineage_text(lineage.read_text(encoding="utf-8"), base.family, model_id, base.model_id)
                   if lineage.exists() else None)
    if new_lineage is not None:
        files[lineage] = new_lineage
    with tempfile.TemporaryDirectory(prefix=".archledger-new-", dir=root.parent) as tmp:
        work = Path(tmp) / root.name
        shutil.copytree(root, work)
        for path, content in files.items():
            target = work / path.relative_to(root)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        for stale in ("yaml", "tensors.yaml", "source.yaml"):   # --force: evidence of the old spec goes
            (work / "snapshots" / f"{name}.{stale}").unlink(missing_ok=True)
        files.update(_evidence(work, root, model_id, config, result, say))
        _check(work, model_id, config, result, say)
    _move(files)
    result.files = sorted(files)
    return result


def meta_evidence(config: dict, schemes, model_id: str, prefixes, say):
    """(tensor manifest, (source label, provenance, forward excerpts)) of ``config`` on the meta
    device, as ``snapshot --meta`` records them; raises ModelingCodeError / ImportError / KeyError."""
    from engine.verify import modeling_code
    from engine.verify.evidence import forward_excerpts
    # the registry's canonical prefixes, as `snapshot --meta` passes them: a quantization_config
    # naming modules by the checkpoint's paths (model.language_model.layers...) meets the modules
    manifest = modeling_code.meta_manifest(config, schemes, f"hf:{model_id}", prefixes)
    # the release and the file's sha256 with it, as `snapshot --meta` records them (the source guard reads them)
    label, provenance, text = modeling_code.source_evidence(config)
    say(f"evidence: {manifest.provenance.get('class')} on the meta device ({manifest.provenance.get('tool')})")
    return manifest, (label, provenance, forward_excerpts(text))


def _evidence(work: Path, root: Path, model_id: str, config: dict, result: Result, say) -> dict[Path, str]:
    """The three evidence files (``snapshot --config --meta``) made in ``work``; to-dos if not."""
    from engine.verify import modeling_code
    from engine.verify.evidence import registry
    from engine.verify.snapshot import snapshot_files
    corpus = load_corpus(work, missing_snapshots_ok=True)
    model = load_model(work / "models" / f"{slug(model_id)}.yaml", work, corpus.roles, corpus.schemes, True)
    corpus = replace(corpus, models={**corpus.models, model_id: model})
    source_label = f"hf:{model_id} config.json"
    manifest = source = None
    try:
        manifest, source = meta_evidence(config, corpus.schemes, model_id, registry(work).prefixes, say)
    except (modeling_code.ModelingCodeError, ImportError, KeyError) as exc:
        result.todo.append(f"evidence: {' '.join(str(exc).split())[:200]} — record it with `archledger snapshot "
                           f"{model_id}` (Hub or --checkpoint)")
        if isinstance(exc, modeling_code.ArchitectureMissing):
            # nothing installed can count it: the spec says so (the build lists it with this reason
            # instead of failing --strict, the gallery says why it is absent)
            spec_path = work / "models" / f"{slug(model_id)}.yaml"
            why = (f"{str(exc).split(' — ')[0]}: no meta-device count checks this spec; a networked "
                   f"`archledger snapshot {model_id}` (the checkpoint's safetensors headers) is the way in")
            spec_path.write_text(declare_unverified(spec_path.read_text(encoding="utf-8"), why), encoding="utf-8")
            model = load_model(spec_path, work, corpus.roles, corpus.schemes, True)
            corpus = replace(corpus, models={**corpus.models, model_id: model})
    try:
        made = snapshot_files(corpus, model, config, source_label, manifest, source)
    except SpecError as exc:   # the spec does not walk: keep the fields it names, say why
        result.todo.append(f"the spec does not evaluate: {exc.one_line()}")
        keys = set(_CONFIG_READ.findall((work / "models" / f"{slug(model_id)}.yaml").read_text())) | {"model_type"}
        header = "# Config fields this spec names (it does not evaluate yet). Refresh with: archledger snapshot MODEL\n"
        made = {work / "snapshots" / f"{slug(model_id)}.yaml": header + yaml.safe_dump(
            {"source": source_label, "fields": named_fields(config, keys)},
            sort_keys=False, default_flow_style=None, width=100)}
    out = {}
    if model.unverified:
        spec_path = work / "models" / f"{slug(model_id)}.yaml"
        out[root / spec_path.relative_to(work)] = spec_path.read_text(encoding="utf-8")
    for path, text in made.items():
        path.write_text(text, encoding="utf-8")
        out[root / path.relative_to(work)] = text
    return out


def named_fields(config: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """The fields of ``config`` among ``keys``, with a multimodal config's ``text_config`` recorded
    whole where a key lives only there (as ``snapshot`` records it: the spec reads the text stack's
    settings through it, so a snapshot without it binds nothing)."""
    nested = config.get(TEXT_CONFIG) if isinstance(config.get(TEXT_CONFIG), dict) else {}
    if any(key not in config and key in nested for key in keys):
        keys = keys | {TEXT_CONFIG}
    return {k: config[k] for k in sorted(keys) if k in config}


def declare_unverified(text: str, why: str) -> str:
    """The spec ``text`` with ``unverified: <why>`` in place of any earlier declaration, after
    ``name:`` (or ``family:``)."""
    lines = [line for line in text.splitlines() if not line.startswith("unverified:")]
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("name:")),
              next(i + 1 for i, line in enumerate(lines) if line.startswith("family:")))
    lines.insert(at, f"unverified: {json.dumps(why)}")
    return "\n".join(lines) + "\n"


def validated(work: Path, model_id: str, result: Result):
    """(corpus, model, validate's report) of ``model_id`` in the corpus copy ``work``; None, with
    the one-line reason added to ``result.todo``, where the spec does not load."""
    from engine.verify.validate import validate
    try:
        corpus = load_corpus(work)
        model = corpus.models[model_id]
        return corpus, model, validate(corpus, model)
    except SpecError as exc:
        result.todo.append(f"the spec does not load: {exc.one_line()}")
        return None


def _check(work: Path, model_id: str, config: dict, result: Result, say) -> None:
    """Validate the new spec in ``work`` and compare its parameter count with transformers'."""
    from engine.language import quantities
    from engine.language.evaluate import Binding, walk_model
    found = validated(work, model_id, result)
    if found is None:
        return
    corpus, model, report = found
    result.verified = report.verified
    for finding in report.errors:
        result.todo.append(f"validate: {finding.one_line()}")
    try:
        result.ours = int(quantities.params_total(walk_model(corpus, model, Binding("numeric"))))
    except SpecError:
        pass
    result.theirs = meta_param_count(config)
    if result.ours is not None and result.theirs is not None and result.ours != result.theirs:
        result.todo.append(f"parameters: ArchLedger counts {result.ours:,}, transformers {result.theirs:,} "
                           f"(differ by {result.ours - result.theirs:+,}) — find the module the spec sizes differently")


def meta_param_count(config: dict[str, Any]) -> int | None:
    """transformers' parameter count of the text stack built from ``config`` on the meta device
    (:func:`engine.verify.modeling_code.build_meta_model`: its own class; tied tensors once), or
    None when transformers cannot build it."""
    from engine.verify import modeling_code
    try:
        stack = modeling_code.build_meta_model(config)
    except (modeling_code.ModelingCodeError, ImportError, KeyError, ValueError, TypeError):
        return None
    return int(sum(p.numel() for name, p in stack.model.named_parameters() if stack.kept(name)))


def _move(files: dict[Path, str | bytes]) -> None:
    """Write every file to a temp name beside it, then rename them all into place."""
    temps = {}
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".new-tmp")
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content, encoding="utf-8")
        temps[tmp] = path
    for tmp, path in temps.items():
        tmp.replace(path)
