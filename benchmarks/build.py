"""Benchmark the main job: cold build, no-change rebuild, one-spec rebuild, grid rate, peak memory.

Run from the repo root: ``python benchmarks/build.py [--jobs N]``. Works on copies (a temporary
corpus and output folder), so the repo's build/ is untouched. Prints a Markdown table for README.
Timings are measured here, never asserted in tests.
"""
from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.batch import collector  # noqa: E402

collector.tune()        # as the archledger command does first (its workers inherit sympy's cache size)

from engine.batch.results import build  # noqa: E402
from engine.language.corpus import load_corpus  # noqa: E402


def _peak_mib() -> float:
    """Peak resident memory of this process and its (finished) worker processes, in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus_dir = tmp / "corpus"
        shutil.copytree(REPO / "corpus", corpus_dir)
        out = tmp / "build"
        rows = []
        start = time.perf_counter()
        cold = build(load_corpus(corpus_dir), out, jobs=args.jobs)
        rows.append(("cold build, whole corpus over the default grid", time.perf_counter() - start,
                      f"{len(cold.recomputed)} models, {cold.points:,} grid points, "
                      f"{cold.deployment_rows:,} deployment rows, {cold.op_rows:,} op rows"))
        start = time.perf_counter()
        same = build(load_corpus(corpus_dir), out, jobs=args.jobs)
        rows.append(("rebuild, nothing changed", time.perf_counter() - start,
                      f"{len(same.recomputed)} models evaluated"))
        spec = corpus_dir / "models" / "deepseek-ai--DeepSeek-V3.yaml"
        spec.write_text(spec.read_text() + "\n# benchmark edit\n")
        start = time.perf_counter()
        one = build(load_corpus(corpus_dir), out, jobs=args.jobs)
        rows.append(("rebuild after editing one spec (DeepSeek-V3, the largest)", time.perf_counter() - start,
                      f"{len(one.recomputed)} model evaluated, {one.points:,} points"))
        print("| what | seconds | notes |\n|---|---|---|")
        for what, seconds, note in rows:
            print(f"| {what} | {seconds:.1f} | {note} |")
        print(f"| grid points per second (cold build, end to end) | | {cold.points / rows[0][1]:,.0f} |")
        print(f"| peak memory (one process) | | {_peak_mib():.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
