"""The corpus-wide result files: ``contracts.json`` and the playground's ``variants.json`` / ``variants.parquet``.

Layer: engine.batch. Neither depends on any model's results: with a --jobs pool they are written by
its workers while the models evaluate (:func:`_corpus_wide_in_worker`), else by the build's process.

Invariants: each is carried from the previous results only when its inputs' digest (recorded in the
previous manifest or file) is unchanged and every file still matches its manifest record (size and
SHA-256); otherwise it is evaluated again. Within ``variants.json``, one variant's comparison is
carried when its own inputs are unchanged (:func:`variant_hash`, recorded per variant in the file's
``variant_hashes``): an edit of another model's spec re-evaluates no variant. A variant is
published only with its base model.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from engine.batch import publish
from engine.batch.hashing import _digest, model_hash
from engine.batch.model_build import cached_corpus
from engine.batch.model_row import model_row
from engine.batch.parquet_writer import _frame, write_parquet
from engine.batch.schema import VARIANTS_SCHEMA
from engine.language.corpus import Corpus
from engine.language.memo import remembered


def write_contracts(corpus: Corpus, final: Path, staging: Path, shared: str, gpu_root: Path) -> str:
    """``contracts.json`` (engine.batch.contract): carried from the previous results when its inputs
    (the shared hash, which covers the components, GPUs, fusion tables and engine, and the contract
    folders) are unchanged and the file still matches its manifest record, else evaluated. Returns
    the inputs' digest (the manifest's ``contracts_hash``)."""
    from engine.batch.contract import evaluate_contracts
    files = sorted((corpus.root / "contracts").rglob("*.yaml"))
    # the folders are the slots: their relative paths are part of the identity too
    digest = _digest(files, "|".join([shared, *(p.relative_to(corpus.root).as_posix() for p in files)]).encode())
    if not _carried(final, staging, ("contracts.json",), lambda manifest: manifest.get("contracts_hash") == digest):
        text = remembered(_CONTRACTS, digest, lambda: json.dumps(evaluate_contracts(corpus, gpu_root), indent=1), 4)
        (staging / "contracts.json").write_text(text)
    return digest


#: contracts.json's text by its inputs' digest, per process: the digest is the key the carry above
#: already trusts as complete, and a process that builds into several fresh folders (the test
#: suite's workers: dozens of small builds, 1.4 CPU-s of contract evaluation each) evaluates them once.
_CONTRACTS: dict[str, str] = {}


def _carried(final: Path, staging: Path, names: tuple[str, ...], same_inputs) -> bool:
    """Copy the previous results' corpus-wide files ``names`` into ``staging`` when
    ``same_inputs(previous manifest)`` holds and every file still matches its manifest record;
    False (nothing copied) otherwise, or when there are no readable previous results."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        kept = same_inputs(manifest) and all(publish.matches(final / n, manifest["files"].get(n)) for n in names)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        kept = False
    if kept:
        for name in names:
            shutil.copy2(final / name, staging / name)
    return kept


def _corpus_wide_in_worker(name: str, root: str, final: str, staging: str, shared: str, gpu_root: str, *extra):
    """In a --jobs worker: :func:`write_contracts` or :func:`write_variants` (by name) on the
    worker's copy of the corpus."""
    fn = {"write_contracts": write_contracts, "write_variants": write_variants}[name]
    return fn(cached_corpus(root), Path(final), Path(staging), shared, Path(gpu_root), *extra)


def write_variants(corpus: Corpus, final: Path, staging: Path, shared: str, gpu_root: Path,
                   models: list[str]) -> None:
    """``variants.json`` (the playground's data: engine.playground.whatif.playground_document) and
    ``variants.parquet`` (:data:`VARIANTS_SCHEMA`) for the variants whose base is among the published
    ``models`` (a variant follows its base), carried from the previous results when their inputs
    (the shared hash, the variants, slots and every model spec and snapshot) are unchanged; else
    written again, each variant's entry carried from the previous file when its own inputs are
    (:func:`variant_hash`; tests/test_variants_carry.py) and evaluated otherwise."""
    from engine.playground import whatif
    from engine.deploy.hardware import load_gpus
    from engine.language import variants as variant_rules
    from engine.language.api import evaluate_spec
    root, base = corpus.root, corpus.root.parent
    files = [p for p in (root / "slots.yaml",) if p.exists()] + sorted((root / "variants").glob("*.yaml"))
    files += sorted({base / m.where.file for m in corpus.models.values()} |
                    {base / m.snapshot.where.file for m in corpus.models.values()}, key=str)
    chosen = [v for v in corpus.variants.values() if v.base in models]
    digest = _digest(files, (shared + "|" + ",".join(v.name for v in chosen)).encode())
    if _carried(final, staging, ("variants.json", "variants.parquet"),
                lambda _: json.loads((final / "variants.json").read_text()).get("hash") == digest):
        return
    keys = {v.name: variant_hash(corpus, v, shared) for v in chosen}
    before = _previous_entries(final, keys)
    evaluations: dict = {}
    doc = whatif.playground_document(corpus, load_gpus(gpu_root), [v for v in chosen if v.name not in before],
                                     evaluations)
    fresh = {entry["variant"]: entry for entry in doc["variants"]}
    doc["variants"] = [fresh[v.name] if v.name in fresh else _with_uses(before[v.name], v, doc["used"])
                       for v in chosen]
    doc = {"hash": digest, **doc, "variant_hashes": keys}
    rows = []
    for v in chosen:
        # a carried variant's row is its spec's walk (the model row's facts), not its comparison
        ev = evaluations[v.name] if v.name in evaluations else evaluate_spec(corpus, v.spec)
        row = model_row(ev, digest)
        row.update({"verified": False, "verified_against": variant_rules.LABEL, "variant_of": v.base,
                    "label": variant_rules.LABEL, "swaps": [whatif.swap_text(s) for s in v.swaps]})
        rows.append(row)
    (staging / "variants.json").write_text(json.dumps(doc, separators=(",", ":")))
    write_parquet(_frame({k: [r[k] for r in rows] for k in VARIANTS_SCHEMA}, VARIANTS_SCHEMA),
                  staging / "variants.parquet")


def variant_hash(corpus: Corpus, variant, shared: str) -> str:
    """What one variant's entry in ``variants.json`` is computed from but the corpus-wide uses of
    its components (``bind_list``'s ``used_by``, :func:`_with_uses`): the shared hash (components,
    slots, dims, GPUs, fusion tables, engine), its base model's hash (engine.batch.hashing.model_hash:
    every file of the base's own, the input of its results), its own file, the contract folders, the
    quant schemes and the draft components. Other models' specs and snapshots are not inputs of it
    (they are of the catalog and the uses, made again at every evaluation of the file)."""
    root, base = corpus.root, corpus.root.parent
    files = [base / variant.where.file, *sorted((root / "contracts").rglob("*.yaml")),
             *sorted((root / "quant").glob("*.yaml")), *sorted((root / "components" / "drafts").glob("*.yaml"))]
    return _digest(files, "|".join([shared, variant.name, model_hash(corpus, variant.base, shared),
                                    *(p.relative_to(root).as_posix() for p in files)]).encode())


def _previous_entries(final: Path, keys: dict[str, str]) -> dict[str, dict]:
    """The previous ``variants.json``'s entries whose recorded :func:`variant_hash` equals this
    build's (``keys``), by variant name; none when the file does not match its manifest record."""
    try:
        manifest = json.loads((final / "manifest.json").read_text())
        if not publish.matches(final / "variants.json", manifest["files"].get("variants.json")):
            return {}
        doc = json.loads((final / "variants.json").read_text())
        recorded = doc.get("variant_hashes") or {}
        return {e["variant"]: e for e in doc["variants"] if keys.get(e["variant"]) == recorded.get(e["variant"])
                and e["variant"] in keys}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return {}


def _with_uses(entry: dict, variant, used: dict) -> dict:
    """A carried entry with its binds' ``used_by`` made again from this corpus's uses (``used``:
    engine.playground.catalog.component_dims), as engine.playground.catalog.playground_entry makes them."""
    from engine.playground.catalog import used_by
    binds = [dict(b, used_by=used_by(variant, used, b["dim"])) for b in entry["bind_list"]]
    return dict(entry, bind_list=binds)
