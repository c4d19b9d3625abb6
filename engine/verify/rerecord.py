"""Re-record every model's modeling-code evidence with the installed transformers, and say what changed.

Layer: engine.verify. ``archledger snapshot --all --meta`` is how the oracle is refreshed or bumped:
each model whose evidence came from the modeling code is rebuilt from its published config.json
(``corpus/snapshots/<name>.config.json``), every file is written together (none if one fails),
and the pin (``oracle.transformers`` in ``corpus/verification.yaml`` and the ``oracle`` extra of
``pyproject.toml`` beside the corpus) moves to the installed release. Evidence from checkpoint
headers is never touched: it does not depend on transformers.

What changed is reported per model as one line per fact (class, tensors added / removed / changed,
bytes, the modeling file's hash, forward methods added / removed / changed): a reviewer reads
these beside ``archledger validate``, whose source guard then names every anchor that no longer
occurs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.language.corpus import Corpus
from engine.language.ir import ModelSpec
from engine.verify import manifest as manifest_mod
from engine.verify.evidence import SourceSnapshot, load_evidence, snapshot_name
from engine.verify.manifest import Manifest

#: (label, provenance, excerpts) of a forward-source snapshot, as :func:`snapshot.snapshot_files` takes it.
Source = tuple[str, dict, dict[str, str]]


@dataclass(frozen=True)
class Rerecorded:
    model: ModelSpec
    manifest: Manifest
    source: Source | None
    changes: list[str]


def modeling_code_models(corpus: Corpus) -> tuple[list[tuple[ModelSpec, Path]], list[str]]:
    """(model, its published config.json) for every model whose evidence is the modeling code,
    and the ids of the others (checkpoint-header evidence, or no published config to rebuild from)."""
    chosen, kept = [], []
    for model in corpus.models.values():
        name = snapshot_name(model)
        path = manifest_mod.manifest_path(corpus.root, name)
        config = corpus.root / "snapshots" / f"{name}.config.json"
        kind = manifest_mod.load(path, corpus.root).kind if path.exists() else "modeling-code"
        # a declared-unverified spec has no modeling code to re-record (transformers lacks it)
        if kind == "modeling-code" and config.exists() and not model.unverified:
            chosen.append((model, config))
        else:
            kept.append(model.model_id)
    return chosen, kept


def manifest_changes(old: Manifest | None, new: Manifest) -> list[str]:
    """What differs between two manifests of one model, one line per fact (empty: nothing)."""
    if old is None:
        return [f"tensor manifest: new ({len(new.tensors):,} tensors, {new.total_bytes:,} bytes)"]
    out = []
    if old.provenance.get("class") != new.provenance.get("class"):
        out.append(f"class: {old.provenance.get('class')} -> {new.provenance.get('class')}")
    before = {t.name: t for t in old.tensors}
    after = {t.name: t for t in new.tensors}
    added, removed = sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys())
    changed = sorted(n for n in before.keys() & after.keys()
                     if (before[n].dtype, before[n].shape) != (after[n].dtype, after[n].shape))
    for label, names in (("added", added), ("removed", removed)):
        if names:
            out.append(f"tensors {label}: {len(names):,} (first {names[0]})")
    if changed:
        n = changed[0]
        out.append(f"tensors changed: {len(changed):,} (first {n}: {before[n].dtype} {list(before[n].shape)} -> "
                   f"{after[n].dtype} {list(after[n].shape)})")
    if old.total_bytes != new.total_bytes:
        out.append(f"total bytes: {old.total_bytes:,} -> {new.total_bytes:,}")
    return out


def source_changes(old: SourceSnapshot | None, new: Source | None) -> list[str]:
    """What differs between the recorded forward source and a new one (empty: nothing)."""
    if new is None:
        return [] if old is None else ["forward source: no longer found in transformers"]
    label, provenance, excerpts = new
    if old is None:
        return [f"forward source: new ({label})"]
    out = []
    was, now = old.provenance.get("sha256"), provenance.get("sha256")
    if old.source != label or was != now:
        out.append(f"modeling source: {old.source} (sha256 {str(was)[:12]}) -> {label} (sha256 {str(now)[:12]})")
    gone = sorted(old.excerpts.keys() - excerpts.keys())
    new_ones = sorted(excerpts.keys() - old.excerpts.keys())
    edited = sorted(k for k in old.excerpts.keys() & excerpts.keys()
                    if " ".join(old.excerpts[k].split()) != " ".join(excerpts[k].split()))
    for what, names in (("removed", gone), ("added", new_ones), ("changed", edited)):
        if names:
            out.append(f"forward methods {what}: {', '.join(names)}")
    return out


def rerecord(corpus: Corpus, build: Callable[[ModelSpec, Path], tuple[Manifest, Source | None]]) -> list[Rerecorded]:
    """Each modeling-code model rebuilt by ``build(model, config_path)``, with what changed."""
    out = []
    for model, config in modeling_code_models(corpus)[0]:
        old = load_evidence(corpus, model)
        manifest, source = build(model, config)
        out.append(Rerecorded(model, manifest, source,
                              manifest_changes(old.manifest, manifest) + source_changes(old.source, source)))
    return out


_REGISTRY_PIN = re.compile(r'^oracle: \{transformers: "[^"]*"\}', re.M)
_EXTRA_PIN = re.compile(r'^(oracle = \[.*?)"transformers[^"]*"', re.M)


def pin_files(corpus_root: Path, release: str) -> dict[Path, str]:
    """The texts of ``corpus/verification.yaml`` and (when beside the corpus) ``pyproject.toml``
    with the oracle pinned to ``release``; a file without its pin line is left out."""
    out = {}
    registry = corpus_root / "verification.yaml"
    text = registry.read_text(encoding="utf-8")
    if _REGISTRY_PIN.search(text):
        out[registry] = _REGISTRY_PIN.sub(f'oracle: {{transformers: "{release}"}}', text, count=1)
    else:   # first pin: the registry had none
        out[registry] = f'oracle: {{transformers: "{release}"}}\n' + text
    project = corpus_root.parent / "pyproject.toml"
    if project.exists():
        text = project.read_text(encoding="utf-8")
        if _EXTRA_PIN.search(text):
            out[project] = _EXTRA_PIN.sub(rf'\g<1>"transformers=={release}"', text, count=1)
    return out
