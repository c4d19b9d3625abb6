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

The spec text is :mod:`engine.verify.scaffold_text`'s (its quant context
:mod:`engine.verify.scaffold_quant`'s, aliases, layer plans and switches
:mod:`engine.verify.scaffold_plan`'s); this module reads the inputs, writes and checks.

Invariants: everything is built in a copy of the corpus and moved into place only when all of it
was made; a refusal (:class:`SpecError`: unreadable config, no ``model_type``, unknown family, not a
Hub id, an existing spec without ``force``) writes nothing. What could not be made mechanically is
one line each in :attr:`Result.todo`; an empty list, a passing validation and equal counts are
what "verified with no hand edit" means.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from engine.language.corpus import Corpus, load_corpus
from engine.language.model_load import TEXT_CONFIG, load_model
from engine.language.names import check_model_id, slug
from engine.language.errors import SpecError, Where
from engine.language.ir import ModelSpec
from engine.language.yamlio import loads_json

from engine.verify.config_keys import UNSHAPING_KEYS  # noqa: E402  (the guards share it)
from engine.verify.scaffold_lines import _CONFIG_READ
from engine.verify.scaffold_text import lineage_text, readme_text, spec_text


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
