"""Every input file of a build, read and schema-checked before any work: the one list of them.

Layer: engine.batch. ``archledger build`` calls :func:`check_all` before it evaluates a model (a bad
file stops it in one line with nothing written), and ``archledger check`` calls it alone: the
quick answer to "does this pull request's YAML load?". Each loader checks its file's schema
(engine.language.file_schemas) as it parses it; what a schema cannot know (a GPU a contract names
exists in gpus/, a sizing block's models are in the corpus) is checked here, across files.
"""
from __future__ import annotations

from pathlib import Path

from engine.language.corpus import Corpus


def check_all(corpus: Corpus, grid_path: Path, gpu_root: Path) -> None:
    """Load the grid (and its sizing block), every GPU file and the collectives table, the measured
    kernel tables (gpus/measured/), the fusion
    tables, the lineage and every contract (its variants and its GPU); raises the first
    :class:`SpecError`. The corpus itself (specs, components, slots, variants) is loaded already."""
    from engine.batch import contract, landscape
    from engine.serving import fronts
    from engine.batch.grid import load_grid
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import load_gpus
    from engine.deploy.measured import load_measured
    load_grid(grid_path)
    gpus = load_gpus(gpu_root)
    load_measured(Path(gpu_root) / "measured", gpus)     # the measured kernel tables, each GPU known
    load_tables(corpus.root / "fusion")
    fronts.check(grid_path, gpus, set(corpus.models))
    landscape.load_lineage(corpus.root)
    for folder in contract.folders(corpus):
        contract.load_contract(folder, corpus, gpus)
