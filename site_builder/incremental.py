"""What each page group of the site is rendered from, and carrying an unchanged group from the published site.

Layer: site_builder. A group's key hashes its inputs: the renderer's code (:func:`_code_hash`:
templates, static/, site_builder/*.py, the rendering libraries' versions) and the results manifest's
entries of the models it shows (:func:`_results_inputs`). ``site-manifest.json``
(:data:`SITE_MANIFEST`) records each group's key and the size and SHA-256 of each file it wrote.

Invariants: a group is carried (:func:`_carry`) only when its key matches the published record and
every recorded file is still there, a regular file of the recorded size and SHA-256; otherwise
nothing of it is carried and it is rendered again. Nothing here writes the published site.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from engine.batch import dependencies, uptodate
from site_builder.sources import REPO, STATIC, TEMPLATES

if TYPE_CHECKING:      # (annotations only: the build's up-to-date check imports this module, and data imports polars)
    from site_builder.data import Results
    from site_builder.writer import Site


#: The site's record of what each page group was rendered from (``SITE_MANIFEST`` in the site root).
SITE_MANIFEST = "site-manifest.json"
SITE_MANIFEST_VERSION = 1


def _hash(*parts) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _code_hash(static_digest: str) -> str:
    """What every page depends on besides the results: the templates, static/ (pages name its
    hashed files), the renderer's own code (site_builder/*.py) and the installed versions of the
    libraries it renders with (:data:`engine.batch.dependencies.SITE`)."""
    files = sorted(p for p in TEMPLATES.rglob("*") if p.is_file()) + \
        sorted(Path(__file__).resolve().parent.glob("*.py"))
    return _hash(SITE_MANIFEST_VERSION, static_digest, dependencies.fingerprint(dependencies.SITE),
                 *[(p.name.encode() + b"\0" + p.read_bytes()) for p in files])


def sources_digest() -> str:
    """Everything a render reads besides the results, as one SHA-256: the templates, static/, the
    renderer's code (site_builder/*.py), every Markdown page under docs/ and CONTRIBUTING.md (a
    superset of the published pages, site_builder.pages.DOCS: tests/test_build_uptodate.py checks
    it covers them) and the rendering libraries' versions. Equal digests and equal results give
    the same site (:mod:`engine.batch.uptodate`: a build with nothing to do skips on it). Reads
    files only (no polars, no jinja)."""
    here = Path(__file__).resolve().parent
    files = [*sorted(p for p in TEMPLATES.rglob("*") if p.is_file()), *sorted(p for p in STATIC.rglob("*") if p.is_file()),
             *sorted(here.glob("*.py")), *sorted((REPO / "docs").glob("*.md")), REPO / "CONTRIBUTING.md"]
    return _hash(SITE_MANIFEST_VERSION, dependencies.fingerprint(dependencies.SITE),
                 *[(p.relative_to(REPO).as_posix().encode() + b"\0" + p.read_bytes()) for p in files if p.is_file()])


def _results_inputs(results: "Results") -> tuple[dict, dict]:
    """Per model, what its pages are rendered from (its results manifest entry: input hash and the
    size and SHA-256 of its Parquet partitions and document, plus its models.parquet row); and what
    the corpus-wide pages are rendered from (all of those, and contracts.json). Empty when the
    results folder has no manifest (then every page is rendered)."""
    try:
        manifest = json.loads((results.root / "manifest.json").read_text())
        entries = manifest["models"]
        contracts = manifest["files"].get("contracts.json")
        landscape_file = manifest["files"].get("landscape.json")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, {}
    per_model = {}
    for row in results.models.iter_rows(named=True):
        entry = entries.get(row["model_id"]) if isinstance(entries, dict) else None
        if isinstance(entry, dict) and "files" in entry:
            per_model[row["model_id"]] = _hash(entry.get("hash"), entry["files"], row)
    if len(per_model) != results.models.height:
        return {}, {}
    return per_model, {"models": per_model, "contracts": contracts, "landscape": landscape_file,
                       "unverified": manifest.get("unverified")}


def _previous_groups(previous: Path | None) -> dict:
    if previous is None:
        return {}
    try:
        data = json.loads((Path(previous) / SITE_MANIFEST).read_text())
        if data.get("version") == SITE_MANIFEST_VERSION and isinstance(data.get("groups"), dict):
            return data["groups"]
    except (OSError, ValueError, AttributeError):
        pass
    return {}


def _vouched(previous: Path | None) -> dict[str, list[int]]:
    """The published site's files whose bytes the stamp of the published trees vouches for
    (:func:`engine.batch.uptodate.vouched`, anchored on the site manifest the groups' records come
    from); {} for no previous site."""
    return uptodate.vouched(Path(previous).parent, Path(previous).name, SITE_MANIFEST) if previous is not None else {}


def _carry(previous: Path, site: "Site", record: dict, vouched: dict[str, list[int]] | None = None) -> bool:
    """Hard-link (or copy) a page group's files from the previously published site into the staged
    one, when every file is still there as a regular file of the recorded size and SHA-256 (read
    and hashed, or the same stat as the stamp that ``vouched`` comes from: :func:`_vouched`).
    Returns False (nothing carried) otherwise."""
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return False
    vouched = vouched or {}
    for rel, expected in files.items():
        if (not isinstance(rel, str) or rel.startswith("/") or ".." in rel.split("/")
                or not uptodate.matches(previous / rel, expected, vouched.get(rel))):
            return False
    for rel in files:
        site.place(previous / rel, rel)
    return True
