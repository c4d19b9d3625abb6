"""The build's sizing step (engine/serving/fronts.py): its cost per model, and the issue's question.

Run from the repo root: ``python benchmarks/sizing.py [--all] [MODEL ...]``. For each model (default:
the `models:` list of corpus/grid.yaml's `sizing:` block; ``--all``: every model of the corpus) it
prints the CPU seconds (``time.process_time()``) of the grid evaluation and of the step over the
default grid's sizing block as the build runs it (through the structure cache the grid evaluation
filled), with the front and sizing row counts, and the totals (``--gpus all`` or ``--gpus H100,B200``:
over other GPU types than the grid's). Then it answers the issue's question both ways,
"DeepSeek-V3, 8K in / 1K out, TTFT <= 2 s, TPOT <= 50 ms, on H200 or B200": the first sizing row
within the bounds per GPU type (what the site's form picks) and ``archledger plan --json``, and
says whether they are the same point and whether the fronts equal plan's. Numbers for
docs/results.md, not asserted (tests/test_fronts.py and tests/test_site_sizing.py assert on small
grids).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import polars as pl  # noqa: E402
import yaml  # noqa: E402

from engine.project import GRID_FILE as DEFAULT  # noqa: E402

from engine.batch import grid_eval  # noqa: E402
from engine.serving.fronts import evaluate_model, load_sizing  # noqa: E402
from engine.deploy.fusion_table import load_tables
from engine.deploy.structure_cache import StructureCache  # noqa: E402
from engine.cli import main as cli  # noqa: E402
from engine.language.api import evaluate_spec  # noqa: E402
from engine.language.corpus import load_corpus  # noqa: E402

QUESTION = ("DeepSeek-V3", 8192, 1024, 2.0, 0.05, ["H200", "B200"])
FIELDS = ("config", "n_gpus", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--all", action="store_true", help="every model of the corpus")
    parser.add_argument("--gpus", help="the sizing block's GPU types for the timing: `all` or a comma list "
                        "(default: the grid's)")
    args = parser.parse_args()
    corpus = load_corpus()
    spec = load_sizing(None)
    names = [corpus.find_model(m).model_id for m in args.models] if args.models else \
        sorted(corpus.models) if args.all or spec.models is None else list(spec.models)
    # the default grid with `models: all`, so that any model named is timed
    grid = yaml.safe_load(DEFAULT.read_text())
    grid["sizing"].pop("models", None)
    if args.gpus:
        grid["sizing"]["gpus"] = "all" if args.gpus == "all" else args.gpus.split(",")
    folder = Path(tempfile.mkdtemp(prefix="sizing-bench-")) / "grid"
    folder.mkdir()
    (folder / "grid.yaml").write_text(yaml.safe_dump(grid, sort_keys=False))
    total = grid_total = 0.0
    for mid in names:
        ev = evaluate_spec(corpus, corpus.models[mid])
        cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
        started = time.process_time()
        grid_eval.evaluate_model(ev, None, None, {}, cache)
        grid_spent = time.process_time() - started
        started = time.process_time()
        f, s = evaluate_model(ev, folder / "grid.yaml", None, cache)
        spent = time.process_time() - started
        total += spent
        grid_total += grid_spent
        print(f"{mid:55s} grid {grid_spent:6.2f} s  sizing {spent:6.2f} s  front rows {len(f['model_id']):5d}  "
              f"sizing rows {len(s['model_id']):5d}", flush=True)
    print(f"total {total:.1f} CPU s of sizing over {len(names)} models, {grid_total:.1f} CPU s of grid evaluation")

    model, inp, out, ttft, tpot, gpus = QUESTION
    ev = evaluate_spec(corpus, corpus.find_model(model))
    f, s = evaluate_model(ev)
    sizing, fronts_ = pl.DataFrame(s), pl.DataFrame(f)
    for fw in spec.frameworks:     # the question under each framework the grid sizes
        argv = ["plan", model, "--input", str(inp), "--output", str(out), "--ttft", str(ttft), "--tpot", str(tpot),
                "--max-gpus", str(spec.max_gpus), "--framework", fw, "--json"] + [a for g in gpus for a in ("--gpu", g)]
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            cli(argv)
        plan = json.loads(buffer.getvalue())
        for g in plan["gpus"]:
            mine = sizing.filter((pl.col("gpu") == g["gpu"]) & (pl.col("framework") == plan["framework"])
                                 & (pl.col("kv_dtype") == plan["kv_dtype"]) & (pl.col("input_len") == inp)
                                 & (pl.col("output_len") == out)
                                 & (pl.col("ttft_s") <= ttft) & (pl.col("tpot_s") <= tpot)).sort("rank").head(1).to_dicts()
            want = g["cheapest"][0] if g["cheapest"] else None
            same = (not mine and want is None) or (mine and want and all(mine[0][k] == want[k] for k in FIELDS))
            front = fronts_.filter((pl.col("gpu") == g["gpu"]) & (pl.col("framework") == plan["framework"])
                                   & (pl.col("kv_dtype") == plan["kv_dtype"]) & (pl.col("input_len") == inp)
                                   & (pl.col("output_len") == out)).sort("rank")
            front_same = [(r["config"], r["batch"], r["ttft_s"]) for r in front.to_dicts()] == \
                [(r["config"], r["batch"], r["ttft_s"]) for r in g["front"]]
            print(f"{fw} {g['gpu']}: plan {want and {k: want[k] for k in FIELDS}}; sizing table "
                  f"{'the same point' if same else 'DIFFERENT: ' + str(mine)}; front {len(g['front'])} points, "
                  f"{'equal' if front_same else 'DIFFERENT'}")
        a = plan["answer"]
        print(f"{fw} answer: {a['total_gpus']} {a['gpu']} ({a['config']}, batch {a['batch']})" if a else "answer: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
