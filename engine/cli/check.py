"""``archledger check``: read and schema-check every input file; evaluate nothing.

Layer: engine.cli (the work is :func:`engine.batch.inputs.check_all`). The corpus (specs,
components, quant schemes, snapshots, slots, variants), the GPU files and collectives table, the
measured kernel tables (gpus/measured/), the fusion tables, the grid, the lineage, the contracts and the evidence files (the verification
registry, each model's tensor manifest and source snapshot) are loaded exactly as a build loads them:
exit 0 and one summary line when all load, else exit 2 and the first problem in one line.
Nothing is written.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub, parents=()) -> None:
    p = sub.add_parser("check", parents=list(parents),
                       help="read and schema-check every input file (nothing is evaluated)",
                       description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("--grid", default=None, metavar="FILE", help="grid YAML (default: grid.yaml of the corpus)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine.batch.grid import grid_file
    from engine.batch.inputs import check_all
    from engine.language.corpus import load_corpus
    from engine.verify.evidence import load_evidence, registry
    corpus = load_corpus(args.corpus)
    check_all(corpus, grid_file(corpus.root, args.grid), Path(args.gpus_root))
    registry(corpus.root)
    for model in corpus.models.values():   # what validate reads (it also runs the guards: not here)
        load_evidence(corpus, model)
    print(f"ok: {len(corpus.models)} models, {len(corpus.variants)} variants, {len(corpus.components)} components; "
          "GPUs, measured kernel tables, fusion tables, grid, lineage, contracts and evidence files load")
    return 0
