"""Benchmark the `archledger build` command end to end (results and site), as a user runs it.

Run from the repo root: ``python benchmarks/end_to_end.py [--repeats N] [--jobs N]``. Works on
copies (a temporary corpus and output folders), so the repo's build/ is untouched. Each figure is
the wall clock of one whole command in a fresh process (imports, workers, results, site, publish):

* cold build (``--repeats`` runs, each into an empty folder): best and median;
* rebuild with nothing changed; after a one-line edit of one spec (Qwen3-8B, then DeepSeek-V3,
  the largest evaluation); the full site render from the results (``archledger site`` after the
  site manifest is removed, so no page is carried).

The host this runs on shares its cores: before every run a fixed CPU-bound loop is timed (the
*host gauge*: 20 M integer additions in a Python function; 0.58-0.96 s on this machine within one run of
this script on 2026-12-01), and
each row prints the gauges its runs saw, so a slow figure can be told from a slow host. Timings
are measured here, never asserted in tests. Prints a Markdown table for README.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EDITS = ("Qwen--Qwen3-8B", "deepseek-ai--DeepSeek-V3")


def gauge() -> float:
    """Seconds of a fixed CPU-bound loop: how fast this host runs Python right now."""
    start, total = time.perf_counter(), 0
    for i in range(20_000_000):
        total += i
    return time.perf_counter() - start


def timed(*args: str) -> tuple[float, float]:
    """(host gauge, wall seconds) of one ``archledger`` command run from this checkout."""
    host = gauge()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "site_builder.cli", *args], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return host, time.perf_counter() - start


def row(what: str, runs: list[tuple[float, float]]) -> str:
    seconds = [s for _, s in runs]
    hosts = ", ".join(f"{h:.2f}" for h, _ in runs)
    if len(runs) == 1:
        return f"| {what} | {seconds[0]:.1f} s | {hosts} s |"
    return (f"| {what} | {min(seconds):.1f} s best of {len(runs)}, median {statistics.median(seconds):.1f} s "
            f"({', '.join(f'{s:.1f}' for s in seconds)}) | {hosts} s |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cold builds to run (default 3)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    jobs = ["--jobs", str(args.jobs), "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = tmp / "corpus"
        shutil.copytree(REPO / "corpus", corpus)
        source = ["--corpus", str(corpus)]
        cold = []
        for i in range(args.repeats):
            out = tmp / f"cold{i}"
            cold.append(timed("build", *source, "--out", str(out), *jobs))
            if i < args.repeats - 1:
                shutil.rmtree(out)
        out = ["--out", str(tmp / f"cold{args.repeats - 1}")]
        rows = [row("cold build, whole corpus over the default grid (results and site)", cold),
                row("nothing changed", [timed("build", *source, *out, *jobs)])]
        for name in EDITS:
            spec = corpus / "models" / f"{name}.yaml"
            spec.write_text(spec.read_text() + "\n# benchmark edit\n")
            rows.append(row(f"one-spec edit: {name.split('--')[1]}", [timed("build", *source, *out, *jobs)]))
        (tmp / f"cold{args.repeats - 1}" / "site" / "site-manifest.json").unlink()
        rows.append(row("full site render from results (`archledger site`, no page carried)",
                        [timed("site", *out, "--quiet")]))
    print("| what | wall clock | host gauge before each run |\n|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
