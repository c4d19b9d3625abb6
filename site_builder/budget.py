"""The site's size budget, per model (issue 42): at most 1.5 MB per model plus 10 MB of fixed pages.

Layer: site_builder (reads a built site's files; imports nothing of the engine). A site grows with
its corpus: each model brings its pages, its drawings, its data files and its downloads; the rest
(gallery, landscape, components, methodology, playground, static assets) is there at any corpus
size. :func:`measure` splits a built site's bytes that way so the budget can be stated per model
and checked at any corpus size (benchmarks/site.py prints it for a full build;
tests/test_site_size.py holds a small build to it); and :data:`PAGE_LIMIT`, the most HTML one page may have.

Invariants: every regular file below the site is counted once, either for exactly one model or as
fixed (``sum(per_model.values()) + fixed == total``); a file is a model's when one part of its path
relative to the site is the model's slug (``org--name``), ``model=<slug>`` (the downloads'
partitions) or ``<slug>.<ext>`` (``data/models/<slug>.json.gz``; :func:`owner`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Bytes the site may spend per model in the corpus, and on pages that do not grow with it.
PER_MODEL_BYTES = 1_500_000
FIXED_BYTES = 10_000_000
#: Most bytes of HTML one page may have (issue 19; tests/test_site_size.py, benchmarks/site.py): what
#: would pass it is drawn from data the site already has (a model's per-op table from its document,
#: static/js/model.js) or loaded on demand (structure drawings).
PAGE_LIMIT = 300_000


@dataclass(frozen=True)
class SiteBytes:
    """A built site's bytes: per model (by slug) and fixed, with the budget they are held to."""

    per_model: dict[str, int]
    fixed: int
    files: int

    @property
    def total(self) -> int:
        return sum(self.per_model.values()) + self.fixed

    @property
    def budget(self) -> int:
        """What a site of this many models may weigh: PER_MODEL_BYTES x models + FIXED_BYTES."""
        return PER_MODEL_BYTES * len(self.per_model) + FIXED_BYTES

    @property
    def mean_per_model(self) -> float:
        return sum(self.per_model.values()) / len(self.per_model) if self.per_model else 0.0

    def within(self) -> bool:
        """The budget holds: the whole site within it and the fixed pages within theirs."""
        return self.total <= self.budget and self.fixed <= FIXED_BYTES


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files below ``path`` (0 when it is absent)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file()) if Path(path).exists() else 0


def owner(rel: Path, slugs: set[str]) -> str | None:
    """The model slug a site file (path relative to the site) belongs to, or None when fixed.

    A slug may hold dots (``zai-org--GLM-5.2``) and be the start of another (``zai-org--GLM-5``):
    a part ``<slug>.<ext>`` is the longest slug it starts with, never the text up to its first dot."""
    for part in rel.parts:
        name = part[len("model="):] if part.startswith("model=") else part
        if name in slugs:
            return name
        named = [s for s in slugs if name.startswith(s + ".")]
        if named:
            return max(named, key=len)
    return None


def measure(site: Path) -> SiteBytes:
    """Split ``site``'s bytes per model (the models are the folders of ``site/models/``) and fixed."""
    site = Path(site)
    slugs = {p.name for p in (site / "models").iterdir() if p.is_dir()} if (site / "models").is_dir() else set()
    per_model = dict.fromkeys(sorted(slugs), 0)
    fixed = files = 0
    for path in site.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        size = path.stat().st_size
        files += 1
        slug = owner(path.relative_to(site), slugs)
        if slug is None:
            fixed += size
        else:
            per_model[slug] += size
    return SiteBytes(per_model, fixed, files)
