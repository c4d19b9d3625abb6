"""Evidence snapshots: config fields, checkpoint tensor manifest and forward source, with provenance.

Layer: engine.verify. ``archledger snapshot MODEL`` records what a spec is verified against, so builds
and tests run offline (see :mod:`engine.verify.evidence` for the three files). Sources, in order of
preference:

(a) the Hugging Face Hub through huggingface_hub: config.json, the safetensors headers read with
    HTTP range requests (no weights downloaded), and the repo's own modeling code if it ships one;
(b) a local checkpoint directory: config.json and the headers of its safetensors files;
(c) the transformers modeling code on the ``meta`` device (:mod:`engine.verify.modeling_code`) when
    neither is reachable: tensor names and shapes, scale tensors from the quant scheme.

The config snapshot keeps the fields the spec's walk reads plus those the verification registry
names (so a structural field the spec ignores is visible to the guards), never the whole file.
Files are written to a temp name and moved into place, so a failure leaves the old ones.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from engine.verify import evidence as evidence_mod
from engine.verify import manifest as manifest_mod
from engine.language.corpus import Corpus
from engine.language.model_load import config_view, TEXT_CONFIG, with_config_defaults
from engine.language.evaluate import Binding, Walker
from engine.language.ir import ModelSpec, Snapshot
from engine.verify.manifest import Manifest, ManifestTensor
from engine.language.yamlio import loads_json, refuse_non_finite


def fields_read(corpus: Corpus, model: ModelSpec, config: dict[str, Any]) -> dict[str, Any]:
    """The top-level config fields a numeric walk of ``model`` reads, plus the registry's fields."""
    fields = with_config_defaults(config_view(config), model.config_defaults)   # the spec's declared defaults
    probe = replace(model, snapshot=Snapshot(model.snapshot.source, fields, model.snapshot.where))
    walker = Walker(corpus, probe, Binding("numeric"))
    walker.walk()
    keys = {path[0] for path in walker.config_reads}
    keys.add("model_type")
    keys |= evidence_mod.registry(corpus.root).top_level_fields()
    nested = config.get(TEXT_CONFIG) if isinstance(config.get(TEXT_CONFIG), dict) else {}
    if any(key not in config and key in nested for key in keys):
        keys.add(TEXT_CONFIG)   # recorded whole, as published; read through config_view
    return {key: config[key] for key in sorted(keys) if key in config}


def config_text(corpus: Corpus, model: ModelSpec, config: dict[str, Any], source: str) -> str:
    """YAML text of the config snapshot for ``model``."""
    fields = fields_read(corpus, model, config)
    refuse_non_finite(fields)   # NaN/Infinity only where no spec or guard reads it
    header = ("# Config fields this spec binds (and the ones the verification guards read), recorded\n"
              "# from the published config.json. Refresh with: archledger snapshot MODEL\n")
    return header + yaml.safe_dump({"source": source, "fields": fields}, sort_keys=False,
                                   default_flow_style=None, width=100)


def config_snapshot(corpus: Corpus, model: ModelSpec, config_path: Path, source: str) -> str:
    """YAML text of the config snapshot for ``model`` from a config.json file."""
    return config_text(corpus, model, loads_json(Path(config_path).read_text()), source)


def manifest_from_scan(scan, source: str) -> Manifest:
    """A manifest from safetensors headers (:mod:`engine.verify.checkpoint_headers`)."""
    tensors = tuple(ManifestTensor(t.name, t.dtype, tuple(t.shape)) for t in scan.tensors)
    provenance = {"kind": "checkpoint-headers", "location": scan.source, "files": len(scan.files)}
    return Manifest(source, provenance, int(scan.total_bytes), tensors, ("*",))


def write_atomic(files: dict[Path, str]) -> None:
    """Write every file to a temp name first, then move them all into place."""
    temps = {}
    for path, text in files.items():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        temps[tmp] = path
    for tmp, path in temps.items():
        tmp.replace(path)


def snapshot_files(corpus: Corpus, model: ModelSpec, config: dict[str, Any], config_source: str,
                   manifest: Manifest | None, source: tuple[str, dict, dict[str, str]] | None) -> dict[Path, str]:
    """The evidence files (path -> text) for ``model``; ``source`` is (label, provenance, excerpts)."""
    name = model.model_id.replace("/", "--")
    folder = corpus.root / "snapshots"
    files = {folder / f"{name}.yaml": config_text(corpus, model, config, config_source)}
    if manifest is not None:
        files[manifest_mod.manifest_path(corpus.root, name)] = manifest_mod.dump(manifest)
    if source is not None:
        label, provenance, excerpts = source
        files[evidence_mod.source_path(corpus.root, name)] = evidence_mod.dump_source(label, provenance, excerpts)
    return files


def transformers_changes(corpus: Corpus, model: ModelSpec, manifest: Manifest | None,
                         source: tuple[str, dict, dict[str, str]] | None) -> list[str]:
    """``FILE: recorded with transformers A, this run has B`` for each evidence file of ``model``
    that exists, was recorded from the transformers modeling code, and would now be rewritten from
    another transformers release. ``archledger snapshot`` refuses these without ``--force``: a
    re-run must not silently replace reviewed evidence with whatever transformers is installed."""
    from engine.language.yamlio import load_yaml
    name = model.model_id.replace("/", "--")
    new = [(manifest_mod.manifest_path(corpus.root, name), manifest.provenance if manifest else None),
           (evidence_mod.source_path(corpus.root, name), source[1] if source else None)]
    changes = []
    for path, provenance in new:
        now = evidence_mod.transformers_release(provenance)
        if now is None or not path.exists():
            continue
        rel = f"corpus/snapshots/{path.name}"
        data = load_yaml(path, rel, hint="regenerate the file with `archledger snapshot MODEL --force`")
        was = evidence_mod.transformers_release(data.get("provenance") if isinstance(data, dict) else None)
        if was is not None and was != now:
            changes.append(f"{rel}: recorded with transformers {was}, this run has {now}")
    return changes

