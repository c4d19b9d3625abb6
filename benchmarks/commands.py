"""Benchmark the question commands on a built checkout, each in a cold process, as a user runs them.

Run from the repo root after ``archledger build``: ``python benchmarks/commands.py [--runs 5] [--out build]``.
For each command (issue 42's targets: ``--help`` <= 0.15 s wall, ``deploy`` <= 0.5 s wall in a cold
process, the README's ``plan`` example <= 2 s) it runs ``python -m site_builder.cli ...`` ``--runs``
times and prints the best wall clock and the best CPU time (user + system of the child: on a
shared host the wall clock also counts other processes' turns, the CPU time does not), and which
of the heavy libraries (sympy, numpy, polars, pyarrow) the process imported (read from
``python -X importtime``). Before each command a fixed CPU-bound loop is timed (the *host gauge*,
as benchmarks/end_to_end.py): a slow figure on a slow host shows it. Timings are measured here,
never asserted in tests (tests/test_cli_fast.py checks the imports). Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: (arguments, wall-clock target in seconds or None).
COMMANDS = (
    (["--help"], 0.15),
    (["list"], None),
    (["show", "Qwen3-8B", "--json"], None),
    (["deploy", "Llama-3.1-70B", "--gpu", "H100", "--tp", "8", "--json"], 0.5),
    (["plan", "DeepSeek-V3", "--input", "8192", "--output", "1024", "--ttft", "2", "--tpot", "0.05",
      "--gpu", "H200", "--gpu", "B200"], 2.0),
)
HEAVY = ("sympy", "numpy", "polars", "pyarrow")


def gauge() -> float:
    """Seconds of a fixed CPU-bound loop (20 M integer additions), the host's speed right now."""
    def loop() -> int:
        total = 0
        for i in range(20_000_000):
            total += i
        return total
    start = time.perf_counter()
    loop()
    return time.perf_counter() - start


def run_once(argv: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, exit status) of one cold ``python -m site_builder.cli ARGV``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "site_builder.cli", *argv], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def heavy_imports(argv: list[str], env: dict) -> list[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "site_builder.cli", *argv], cwd=REPO,
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    names = {m.group(1).strip().split(".")[0]
             for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|(.+)$", done.stderr, re.M)}
    return [h for h in HEAVY if h in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="cold runs per command; the best is reported")
    parser.add_argument("--out", default=None, help="the built output folder (default: the checkout's build/)")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = ["--out", args.out] if args.out else []
    if not Path(args.out or REPO / "build", "results", "manifest.json").is_file():
        print("error: no built checkout — run `archledger build` first", file=sys.stderr)
        return 2
    print("| command (cold process) | best wall | best CPU | target (wall) | host gauge | imports |")
    print("|---|---|---|---|---|---|")
    for command, target in COMMANDS:
        full = [*out, *command]
        run_once(full, env)            # warms the OS file cache and the YAML parse cache, as a second use does
        host = gauge()
        runs = [run_once(full, env) for _ in range(max(1, args.runs))]
        wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        status = {r[2] for r in runs}
        goal = f"≤ {target:g} s {'✓' if wall <= target else '✗'}" if target else ""
        print(f"| `archledger {' '.join(command)}` (exit {','.join(map(str, sorted(status)))}) | {wall:.2f} s "
              f"| {cpu:.2f} s | {goal} | {host:.2f} s | {', '.join(heavy_imports(full, env)) or 'none of ' + '/'.join(HEAVY)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
