"""``archledger new HF_ID --config PATH --like BASE --checkpoint``: a published checkpoint of a corpus
model (same architecture, another storage) added to the base spec's ``checkpoints:`` list.

Layer: engine.verify (it records evidence and validates, like :mod:`engine.verify.scaffold`, whose
pieces it reuses). Steps:

1. reads the id and config (one-line refusals as ``new``); picks the base (``--like``, else the
   family match); refuses a config whose ``model_type`` or any architecture field differs from
   the base's published config (:func:`engine.language.checkpoints.differences`, fields that say how a
   file was written ignored) and a config whose ``quantization_config`` is the base's (no storage
   of its own in the evidence);
2. derives the quant context from ``quantization_config`` and its ignore / exclude lists by the
   rule ``new`` uses for a spec (:func:`engine.verify.scaffold_quant._quant`);
3. appends ``{model, format, quant_context}`` to the base spec's ``checkpoints:`` (the base's
   text otherwise untouched), copies config.json into ``corpus/snapshots/`` with its sha256 row,
   records the checkpoint's evidence (config snapshot, tensor manifest on the meta device with its
   quantization_config, modeling source) and validates the base with the checkpoint.

Invariant: nothing is written unless the checkpoint is verified with no hand edit (the whole base
is published only when every checkpoint of it passes); otherwise :attr:`Result.todo` says why and
the corpus is as it was.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from engine.language import checkpoints
from engine.language.corpus import load_corpus
from engine.language.names import check_model_id, slug
from engine.language.errors import SpecError, Where
from engine.verify.config_keys import UNSHAPING_KEYS
from engine.verify import scaffold as sc
from engine.verify.scaffold_lines import _block
from engine.verify.scaffold_quant import _UNQUANTIZED, _quant
from engine.verify.scaffold_text import _class_values, readme_text


def default_format(model_id: str, base_id: str) -> str:
    """A weight-format name from the repo names: what the checkpoint's name adds to the base's
    (``Qwen3-32B-FP8`` of ``Qwen3-32B``: ``fp8``), else its last hyphen token (``nvfp4``)."""
    repo, base_repo = model_id.split("/")[1], base_id.split("/")[1]
    rest = repo[len(base_repo):].strip("-_.") if repo.lower().startswith(base_repo.lower()) else ""
    name = (rest or repo.rsplit("-", 1)[-1]).lower()
    return re.sub(r"[^a-z0-9-]+", "-", name).strip("-")[:40] or "quantized"


def entry_lines(model_id: str, fmt: str, quant_lines: list[str]) -> list[str]:
    """The ``checkpoints:`` list entry, its quant context indented under it."""
    return [f"  - model: {model_id}", f"    format: {fmt}"] + ["    " + line for line in quant_lines]


def spec_with_checkpoint(text: str, model_id: str, entry: list[str]) -> str:
    """The base spec's text with ``entry`` in its ``checkpoints:`` block (an entry of the same id
    replaced; the block made at the end when there is none)."""
    lines = text.rstrip("\n").splitlines()
    span = _block(lines, "checkpoints")
    if span is None:
        return "\n".join(lines + ["checkpoints:"] + entry) + "\n"
    start, end = span
    body = lines[start + 1:end]
    items, current = [], None
    for line in body:
        if line.startswith("  - "):
            current = [line]
            items.append(current)
        elif current is not None:
            current.append(line)
    items = [i for i in items if i[0] != f"  - model: {model_id}"] + [entry]
    return "\n".join(lines[:start + 1] + [line for item in items for line in item] + lines[end:]) + "\n"


def add_checkpoint(corpus_root: Path, model_id: str, config_path: Path, like: str | None = None,
                   force: bool = False, fmt: str | None = None, progress=None) -> sc.Result:
    """Add, record and verify a published checkpoint of a corpus model (module doc)."""
    say = progress or (lambda line: None)
    root = Path(corpus_root)
    check_model_id(model_id, Where("<command line>", 0, "HF_ID"))
    raw, config = sc.read_config(config_path)
    corpus = load_corpus(root, missing_snapshots_ok=True)
    if model_id in corpus.models:
        raise SpecError(Where(f"corpus/models/{slug(model_id)}.yaml"), f"{model_id} is a spec of its own",
                        "drop --checkpoint (or remove that spec first)")
    base = sc.match_family(corpus, config, like, Where(str(config_path)), model_id)
    base_config = sc.published_config(root, base)
    where = Where(str(config_path))
    if config.get("model_type") != base_config.get("model_type", base.model_type):
        raise SpecError(where.at("model_type"), f"model_type {config.get('model_type')!r} is not {base.model_id}'s "
                        f"{base_config.get('model_type', base.model_type)!r}",
                        "a checkpoint is the base's architecture: drop --checkpoint to write a spec of its own")
    # a field one config omits and the other gives the transformers class default of is the same
    diffs = checkpoints.differences(_with_defaults(base_config, config), _with_defaults(config, base_config),
                                    ignore=UNSHAPING_KEYS | _OTHER_TOWERS)
    if diffs:
        raise SpecError(where, f"not {base.model_id}'s architecture: {len(diffs)} config field(s) differ, e.g. {diffs[0]}",
                        "a checkpoint differs from its base only in storage: drop --checkpoint to write a spec of its own")
    from engine.verify import modeling_code
    qc = modeling_code.quantization_config(config)
    if qc == modeling_code.quantization_config(base_config):
        raise SpecError(where.at("quantization_config"), f"the same quantization_config as {base.model_id}'s "
                        "(none, or equal): its storage is not in this config",
                        "pass the config.json that names the checkpoint's quantization (ModelOpt's "
                        "hf_quant_config.json recipe is not read)")
    fmt = fmt or default_format(model_id, base.model_id)
    existing = checkpoints.find(base, model_id) or checkpoints.find(base, fmt)
    if existing is not None and not (force and existing.model_id == model_id):
        raise SpecError(Where(f"corpus/models/{slug(base.model_id)}.yaml"),
                        f"{base.model_id} already lists {existing.model_id} as format {existing.format!r} — nothing was written",
                        "pass --force to record it again" if existing.model_id == model_id else "pass --format NAME")
    result = sc.Result(model_id, base.model_id)
    say(f"base: {base.model_id} ({base.family}); checkpoint format {fmt}")
    from engine.verify.evidence import registry
    reg = registry(root)
    spec_path = root / "models" / f"{slug(base.model_id)}.yaml"
    base_text = spec_path.read_text(encoding="utf-8")
    span = _block(base_text.splitlines(), "quant_context")
    quant = base_text.splitlines()[span[0]:span[1]] if span else ["quant_context:", "  default: bf16"]
    # the exclusion lists' leftovers are notes here: the weight and packing guards hold every
    # tensor of the result to the manifest, and nothing is written unless they pass
    from engine.verify import modeling_code
    try:     # once: the quant context's kept matrices and the evidence files both read it
        evidence = sc.meta_evidence(config, corpus.schemes, model_id, reg.prefixes, say)
    except (modeling_code.ModelingCodeError, ImportError, KeyError) as exc:
        result.todo.append(f"evidence: {' '.join(str(exc).split())[:200]}")
        return result
    _quant(quant, config, base_config, corpus, result.notes, reg.prefixes)
    quant = [line for line in quant if line.strip() and not line.lstrip().startswith("#")]
    quant = _kept_matrices(quant, evidence[0], reg.prefixes, result)
    text = spec_with_checkpoint(base_text, model_id, entry_lines(model_id, fmt, quant))
    name = slug(model_id)
    readme = root / "snapshots" / "README.md"
    files: dict[Path, str | bytes] = {spec_path: text, root / "snapshots" / f"{name}.config.json": raw,
                                      readme: readme_text(readme.read_text(encoding="utf-8"), model_id,
                                                             hashlib.sha256(raw).hexdigest())}
    with tempfile.TemporaryDirectory(prefix=".archledger-new-", dir=root.parent) as tmp:
        work = Path(tmp) / root.name
        shutil.copytree(root, work)
        for path, content in files.items():
            target = work / path.relative_to(root)
            target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content, encoding="utf-8")
        for stale in ("yaml", "tensors.yaml", "source.yaml"):   # --force: the old evidence goes
            (work / "snapshots" / f"{name}.{stale}").unlink(missing_ok=True)
        files.update(_evidence(work, root, base.model_id, model_id, config, evidence, result))
        _check(work, base.model_id, fmt, config, result, say)
    if result.done:
        sc._move(files)
        result.files = sorted(files)
    return result


def _with_defaults(config: dict, other: dict) -> dict:
    """``config`` with each field it omits and ``other`` gives filled in with the value ``config``
    implies: the same key of its own ``rope_parameters`` (transformers 5 moved RoPE settings there;
    Qwen3.5's ``partial_rotary_factor``), null where ``other`` says null (unset either way), else the
    transformers config class built from ``config`` (its value when config.json omits it).
    Top-level fields, or a multimodal config's ``text_config`` fields (the class values are then
    its text stack's)."""
    values = _class_values(config)
    text, other_text = config.get("text_config"), other.get("text_config")
    nested = isinstance(text, dict) and isinstance(other_text, dict)
    mine, theirs = (text, other_text) if nested else (config, other)
    rope = mine.get("rope_parameters") if isinstance(mine.get("rope_parameters"), dict) else {}
    filled = {}
    for key in theirs:
        if key in mine:
            continue
        if key in rope:
            filled[key] = rope[key]
        elif theirs[key] is None:
            filled[key] = None
        elif key in values:
            filled[key] = values[key]
    return {**config, "text_config": {**filled, **text}} if nested else {**filled, **config}


#: Sections of a multimodal config that describe other towers, never the text stack a spec models.
_OTHER_TOWERS = frozenset({"vision_config", "audio_config"})

#: A checkpoint matrix stored unquantized (its weight in one of these, no scale beside it).
_PLAIN = frozenset({"BF16", "F16", "F32"})


def _kept_matrices(quant: list[str], manifest, prefixes, result: sc.Result) -> list[str]:
    """The quant context lines with a ``bf16`` module-path override for each kind of linear the
    checkpoint keeps unquantized in every layer (``manifest``: transformers' quantizer on the meta
    device, its own skip rules beside the config's lists, e.g. GLM-5's indexer ``weights_proj``),
    unless the overrides already name it; the guards check each tensor against the same manifest."""
    from engine.language import module_patterns
    if not any(line.startswith("  default: ") and line.split()[-1] not in _UNQUANTIZED for line in quant):
        return quant
    # a weight with a scale beside it (``weight_scale``, ``weight_scale_inv``, ``input_scale``)
    # is stored quantized; another vector of the module (the router's e_score_correction_bias) is
    # no scale. Found once for all weights: GLM-5's FP8 manifest has ~180,000 tensors, and a scan
    # of all of them per weight never finished
    names = {t.name for t in manifest.tensors}
    scaled_weights = {n[:n.rindex(".weight_") + len(".weight")] for n in names if ".weight_" in n}
    scaled_weights |= {n[:-len("input_scale")] + "weight" for n in names if n.endswith(".input_scale")}
    layers: dict[str, set[int]] = {}
    quantized: set[str] = set()
    for t in manifest.tensors:
        if not t.name.endswith(".weight") or len(t.shape) != 2:
            continue
        module = module_patterns.canonical(t.name[:-len(".weight")], prefixes)
        found = re.search(r"(?<=\.layers\.)(\d+)(?=\.)", module)
        if not found:
            continue
        shape = module[:found.start()] + "*" + module[found.end():]
        scaled = t.name in scaled_weights
        if t.dtype in _PLAIN and not scaled:
            layers.setdefault(shape, set()).add(int(found[1]))
        else:
            quantized.add(shape)
    known = {line.split(":")[0].strip().strip('"') for line in quant}
    kept = [shape for shape in sorted(layers) if shape not in quantized and shape not in known
            and not any(module_patterns.matches(k, shape.replace("*", "0")) for k in known if module_patterns.is_pattern(k))]
    if not kept:
        return quant
    result.notes.append(f"{len(kept)} kind(s) of linear the quantizer keeps unquantized, from the manifest: "
                        + ", ".join(kept)[:200])
    # a module path override covers every leaf of the module and comes before `role.leaf` ones: a
    # kept module holding a leaf the base stores by `role.leaf` in another unquantized scheme (the
    # router's F32 `e_score_correction_bias`) is named by that role instead, so the leaf keeps it
    by_leaf = {}
    for line in quant:
        found = re.match(r"^    (\w+)\.(\w+): (\w+)\s*$", line)
        if found and found[3] in _UNQUANTIZED:
            by_leaf[found[2]] = found[1]
    leaves: dict[str, set[str]] = {}
    for t in manifest.tensors:
        module, _, leaf = module_patterns.canonical(t.name, prefixes).rpartition(".")
        leaves.setdefault(re.sub(r"(?<=\.layers\.)\d+(?=\.|$)", "*", module, count=1), set()).add(leaf)
    extra = []
    for shape in kept:
        roles = {by_leaf[leaf] for leaf in leaves.get(shape, ()) if leaf in by_leaf}
        if len(roles) == 1 and next(iter(roles)) not in known:
            extra.append(f"    {next(iter(roles))}: bf16")
        elif not roles:
            extra.append(f'    "{shape}": bf16')
    if "  overrides:" not in quant:
        quant = quant + ["  overrides:"]
    return quant + extra


def _evidence(work: Path, root: Path, base_id: str, model_id: str, config: dict, evidence, result: sc.Result
              ) -> dict[Path, str]:
    """The checkpoint's evidence files made in ``work`` (as ``snapshot --config --meta`` records a
    spec's, for the base spec stored as the checkpoint); ``evidence``: (manifest, source)."""
    from engine.verify.snapshot import snapshot_files
    corpus = load_corpus(work, missing_snapshots_ok=True)
    base = corpus.models[base_id]
    model = checkpoints.variant(base, checkpoints.find(base, model_id))
    manifest, source = evidence
    out = {}
    try:
        made = snapshot_files(corpus, model, config, f"hf:{model_id} config.json", manifest, source)
    except SpecError as exc:
        result.todo.append(f"evidence: {exc.one_line()}")
        return {}
    for path, text in made.items():
        path.write_text(text, encoding="utf-8")
        out[root / path.relative_to(work)] = text
    return out


def _check(work: Path, base_id: str, fmt: str, config: dict, result: sc.Result, say) -> None:
    """Validate the base with its new checkpoint in ``work``; compare the parameter counts."""
    from engine.language import quantities
    from engine.language.evaluate import Binding, walk_model
    found = sc.validated(work, base_id, result)
    if found is None:
        return
    corpus, model, report = found
    mine = [r for r in report.results if r.guard == f"checkpoint {fmt}"]
    result.verified = report.verified
    for finding in report.errors:
        result.todo.append(f"validate: {finding.one_line()}")
    if mine:
        say(f"checkpoint {fmt}: {mine[0].status} against {mine[0].evidence}")
    try:
        result.ours = int(quantities.params_total(walk_model(corpus, replace(model, checkpoints=()), Binding("numeric"))))
    except SpecError:
        pass
    result.theirs = sc.meta_param_count(config)
    if result.ours is not None and result.theirs is not None and result.ours != result.theirs:
        result.todo.append(f"parameters: ArchLedger counts {result.ours:,}, transformers {result.theirs:,}")
