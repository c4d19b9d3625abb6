"""Published serving measurements beside ArchLedger at the same setup: measured / bound, measured / estimate, measured / expected.

Run from the repo root: ``python benchmarks/published.py [--check] [--only ID]``. Offline: the
measurements live in ``benchmarks/data/published.yaml``, each with its source (repository, path and
commit, or URL and date) and how its tokens/s per GPU was derived from the source's text. Each
point is evaluated with ``engine.deploy.plan(...).at(scenario)`` at the point's model, GPU,
parallel config, Options (framework, weight format, KV / activation dtype, usable HBM share,
chunked-prefill budget, MTP) and scenario, and one markdown table is printed.

What a point compares (the data file's ``metric``):

* ``prefill``: prompt tokens/s per GPU = batch x input_len / TTFT / replica GPUs;
* ``decode``: output tokens/s per GPU = batch / TPOT / replica GPUs (one decode step at the
  point's context; with MTP the TPOT is per token, as the summary defines it);
* ``output``: output tokens/s per GPU over whole requests = batch x output_len / (TTFT +
  output_len x TPOT) / replica GPUs at batch = the capacity (an offline max-throughput run: the
  wall time holds every prompt's prefill and every decode step).

``batch`` is requests per model replica = requests_per_gpu x replica GPUs (tp x pp x cp), or the
capacity the summary reports for ``requests_per_gpu: capacity``: the steady-state capacity of
continuous batching (``max_concurrent_requests_steady``, and its ``fits_steady``) where the
engine has it, else ``max_concurrent_requests`` (every request holding its full KV all its life).

Which columns: the times are read from the deployment summary by name. For each of ``ttft_s``
and ``tpot_s`` the *bound* is the first key whose words (split at ``_``) are the base's words
plus ``bound`` (with at most ``lower``/``true`` besides: ``ttft_bound_s``, ``ttft_s_bound``,
``ttft_lower_bound_s``), the *estimate* likewise with ``estimate`` (or ``schedule`` /
``sched``). Where the summary has no such key the column falls back to the deployment's
headline ``ttft_s`` / ``tpot_s``, and the line under the table says which key each column read.
Before the lower-bound work the headline is the speed of light (a sum of per-step maxima, no
overlap) and both columns read it; with ``ttft_bound_s`` / ``tpot_bound_s`` beside a headline
that is the schedule estimate, the bound reads those and the estimate the headline. So the
script needs no change when the lower bound and the schedule estimate columns land. An
``output`` point's TPOT prefers the step at the mean decode context (``tpot_mean_s`` and its
bound, where the engine has them) to the step at the last position (``tpot_s``): its wall time
holds every decode step of the output, not the last one ``output_len`` times.

The *expected* column reads ``ttft_expected_s`` / ``tpot_expected_s`` (``tpot_mean_expected_s``
for an ``output`` point): the times from measured kernels (engine.deploy.measured,
``gpus/measured/``); the last line counts the points whose measured / expected lies within
:data:`WITHIN` (20%), beside the estimate's and the bound's counts. A point whose row names a
``harness`` (the data file's ``harness:`` entries; ``trtllm-bench`` for the TensorRT-LLM
perf-overview rows) gets its expected throughput from :meth:`Evaluator.harness_run`: the run as that
tool makes it (benchmarks/trtllm_bench.py: its batch limits, CUDA-graph padding and the waves of its
requests); the bound and the estimate stay at the capacity.

A point's ``overlap:`` (``two_batch`` for SGLang's two-batch overlap and DeepSeek's dual
micro-batch) is passed as ``Options.overlap`` where the engine has that field; an engine without
it evaluates the point without overlap, and a line under the table names those points.

``--check`` exits 1 when any point's measured / bound exceeds 1.0 (a published measurement above
what no schedule can beat means the bound is wrong), after printing the table. A bad data file is
a one-line error naming the file, the point and the field (exit 2).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from engine.language.errors import SpecError, Where  # noqa: E402  (after the sys.path line)
from engine.language.yamlio import load_yaml  # noqa: E402
from engine.deploy.fusion_table import OVERLAP_POLICIES

DATA = REPO / "benchmarks" / "data" / "published.yaml"
METRICS = ("prefill", "decode", "output")
#: Fields every point must hold (a group with ``runs`` holds input_len / output_len / measured in its runs).
REQUIRED = ("id", "source", "model", "gpu", "gpus", "tp", "framework", "metric", "requests_per_gpu", "derivation")
#: Options fields a point may set, with their default (the CLI's defaults, engine.cli.deploy).
OPTION_DEFAULTS = {"weight_format": "checkpoint", "kv_dtype": "bf16", "act_dtype": "bf16", "hbm_fraction": 0.9,
                   "prefill_tokens": 8192}
#: A point's ``overlap:`` (the schedule estimate's overlap policy, Options.overlap; "" = the
#: framework's default): engine.deploy.fusion_table.OVERLAP_POLICIES.
OVERLAPS = ("",) + OVERLAP_POLICIES
DEGREES = ("tp", "ep", "dp_attn", "pp", "cp")
#: Extra words a bound / estimate key may carry besides the base key's words and its kind.
KIND_WORDS = {"bound": {"bound"}, "estimate": {"estimate", "schedule", "sched"}, "steady": {"steady"},
              "expected": {"expected"}}
#: The throughput columns: the lower bound, the schedule estimate, the expected time from measured
#: kernels (engine.deploy.measured; the estimate's keys where the engine has no expected time).
KINDS = ("bound", "estimate", "expected")
#: A point is "within" when measured / expected lies in [1 - WITHIN, 1 + WITHIN] (issue 39's 20%).
WITHIN = 0.2
KIND_EXTRA = {"lower", "true"}


@dataclass(frozen=True)
class Point:
    """One published figure and the setup it ran at (a group's runs expand to one Point each)."""

    id: str
    source: str
    model: str
    gpu: str
    gpus: int
    gpus_per_node: int | None
    framework: str
    degrees: dict            # the published tp / ep / dp_attn / pp / cp
    evaluated: dict          # the degrees evaluated (``evaluated_as`` or the published ones)
    options: dict            # Options fields
    mtp: tuple[int, float]   # (draft tokens, acceptance); (0, 0.0) = off
    metric: str
    input_len: int
    output_len: int
    requests_per_gpu: int | None   # None = at capacity
    measured: float
    line: int
    harness: dict | None = None   # the benchmark harness's settings (``harness:`` of the data file), None = none


def _fail(path: str, line: int, field: str, problem: str, hint: str = "") -> SpecError:
    return SpecError(Where(path, line, field), problem, hint)


def _positive(value, path, line, field, kind=int) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if not ok or (kind is int and not isinstance(value, int)):
        raise _fail(path, line, field, f"{field} must be a positive {'whole number' if kind is int else 'number'}, "
                    f"got {value!r}")


def load_points(path: Path = DATA) -> tuple[dict, list[Point]]:
    """The sources and the points of the data file; a missing or malformed field is a one-line
    SpecError naming the file, line and field. Checks the file alone (no corpus, no GPUs)."""
    display = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    data = load_yaml(path, display)
    sources = data.get("sources")
    if not isinstance(sources, dict) or not sources:
        raise _fail(display, 1, "sources", "no sources", "add a sources: mapping (title, where, date, checked)")
    for key, src in sources.items():
        line = sources.line_of(key)
        for field in ("title", "where", "date", "checked"):
            if not isinstance(src, dict) or not str(src.get(field, "")).strip():
                raise _fail(display, line, f"sources.{key}.{field}", f"source {key!r} has no {field}",
                            "say where the figure was read and what could be checked")
    harnesses = data.get("harness") or {}
    points, seen = [], set()
    for i, row in enumerate(data.get("points") or []):
        if not isinstance(row, dict):
            raise _fail(display, data["points"].line_of_item(i), f"points[{i}]", "a point must be a mapping",
                        "write id:, source:, model:, ... (see the file's header)")
        line = row.line
        for field in REQUIRED:
            if field not in row:
                raise _fail(display, line, field, f"point {row.get('id', '?')!r} has no {field}")
        if row["source"] not in sources:
            raise _fail(display, line, "source", f"unknown source {row['source']!r}", "one of: " + ", ".join(sources))
        if row["metric"] not in METRICS:
            raise _fail(display, line, "metric", f"unknown metric {row['metric']!r}", "one of: " + ", ".join(METRICS))
        _positive(row["gpus"], display, line, "gpus")
        degrees = {d: row.get(d, 1) for d in DEGREES}
        for d, v in degrees.items():
            _positive(v, display, line, d)
        evaluated = dict(degrees)
        if "evaluated_as" in row:
            alt = row["evaluated_as"]
            if not str(alt.get("why", "")).strip():
                raise _fail(display, line, "evaluated_as.why", "evaluated_as without a reason", "add why:")
            evaluated.update({d: alt[d] for d in DEGREES if d in alt})
        replica = degrees["tp"] * degrees["pp"] * degrees["cp"]
        if row["gpus"] % replica:
            raise _fail(display, line, "gpus", f"{row['gpus']} GPUs are not a multiple of tp x pp x cp = {replica}")
        rpg = row["requests_per_gpu"]
        if rpg != "capacity":
            _positive(rpg, display, line, "requests_per_gpu")
        options = {k: row.get(k, v) for k, v in OPTION_DEFAULTS.items()}
        if row.get("overlap", "") not in OVERLAPS:
            raise _fail(display, line, "overlap", f"unknown overlap {row['overlap']!r}", "none or two_batch")
        if row.get("overlap"):
            options["overlap"] = row["overlap"]
        _positive(options["hbm_fraction"], display, line, "hbm_fraction", float)
        harness = row.get("harness")
        if harness is not None and harness not in harnesses:
            raise _fail(display, line, "harness", f"unknown harness {harness!r}",
                        "one of the file's harness: entries: " + ", ".join(harnesses))
        mtp = row.get("mtp") or {}
        runs = row.get("runs")
        if runs is None:
            for field in ("input_len", "output_len", "measured", "published"):
                if field not in row:
                    raise _fail(display, line, field, f"point {row['id']!r} has no {field}")
            _positive(row["measured"], display, line, "measured", float)
            runs = [[row["input_len"], row["output_len"], row["measured"] * row["gpus"]]]
            per_gpu_given = True
        else:
            per_gpu_given = False
        for i, run in enumerate(runs):
            if not (isinstance(run, list) and len(run) == 3):
                raise _fail(display, line, f"runs[{i}]", f"run {run!r} is not [input_len, output_len, published]")
            for field, value in zip(("input_len", "output_len", "published"), run):
                _positive(value, display, line, f"runs[{i}].{field}", int if field != "published" else float)
            pid = row["id"] if len(runs) == 1 and per_gpu_given else f"{row['id']}-{run[0]}/{run[1]}"
            if pid in seen:
                raise _fail(display, line, "id", f"duplicate point id {pid!r}")
            seen.add(pid)
            measured = row["measured"] if per_gpu_given else run[2] / row["gpus"]
            points.append(Point(pid, row["source"], row["model"], row["gpu"], row["gpus"], row.get("gpus_per_node"),
                                row["framework"], degrees, evaluated, options,
                                (int(mtp.get("tokens", 0)), float(mtp.get("acceptance", 0))),
                                row["metric"], int(run[0]), int(run[1]),
                                None if rpg == "capacity" else int(rpg), float(measured), line,
                                _harness_at(harness, harnesses[harness], display, line, run) if harness else None))
    if not points:
        raise _fail(display, 1, "points", "no points")
    return sources, points


def _harness_at(name: str, h: dict, path: str, line: int, run: list) -> dict:
    """A harness's settings for one run: its CUDA-graph batch sizes and the requests the run queued
    (``num_requests`` by ``"ISL/OSL"``); a run the table lacks is a one-line error."""
    sizes = h.get("cuda_graph_batch_sizes") if isinstance(h, dict) else None
    if not (isinstance(sizes, list) and sizes and all(isinstance(x, int) and x > 0 for x in sizes)):
        raise _fail(path, line, "harness", f"the harness {name!r} has no cuda_graph_batch_sizes",
                    "write cuda_graph_batch_sizes: [1, 2, 4, ...] (the recipe's captured sizes)")
    key = f"{run[0]}/{run[1]}"
    n = (h.get("num_requests") or {}).get(key)
    if not isinstance(n, int) or n < 1:
        raise _fail(path, line, "harness", f"the harness has no num_requests for {key}",
                    f"add {key}: N under harness.<name>.num_requests")
    return {"name": name, "requests": n, "batch_sizes": tuple(h["cuda_graph_batch_sizes"])}


def column(summary: dict, bases: str | tuple[str, ...], kind: str) -> str:
    """The summary key holding the ``kind`` ("bound", "estimate", "steady") of the first of
    ``bases`` that has one, else the first of ``bases`` the summary holds (the headline column).
    A key matches a base when its words are the base's words plus one word of the kind and at
    most the words of :data:`KIND_EXTRA` (``tpot_bound_s``, ``tpot_s_bound``, ``tpot_lower_bound_s``)."""
    bases = (bases,) if isinstance(bases, str) else tuple(bases)
    for base in bases:
        words = set(base.split("_"))
        for key in sorted(summary):
            extra = set(key.split("_")) - words
            if words <= set(key.split("_")) and extra & KIND_WORDS[kind] and extra <= KIND_WORDS[kind] | KIND_EXTRA:
                return key
    return next((b for b in bases if b in summary), bases[-1])


def tpot_bases(point: "Point") -> tuple[str, ...]:
    """TPOT keys in order of preference: an ``output`` point spans a request's whole output, so the
    step at the mean decode context (``tpot_mean_s``, where the engine has it) comes first; a
    ``decode`` point is one step at its stated context (``tpot_s``)."""
    return ("tpot_mean_s", "tpot_s") if point.metric == "output" else ("tpot_s",)


def capacity_key(summary: dict) -> str:
    """The capacity the ``output`` points run at: the steady-state one (continuous batching) where
    the summary has it, else ``max_concurrent_requests`` (every request holding its full KV)."""
    return column(summary, "max_concurrent_requests", "steady")


def throughput(point: Point, summary: dict, ttft_key: str, tpot_key: str) -> float:
    """Tokens/s per GPU of ``point.metric`` from the summary's times under the given keys."""
    replica = summary["n_gpus"] / summary["dp"]
    batch, ttft, tpot = float(summary["batch"]), float(summary[ttft_key]), float(summary[tpot_key])
    if point.metric == "prefill":
        return batch * point.input_len / ttft / replica
    if point.metric == "decode":
        return batch / tpot / replica
    return batch * point.output_len / (ttft + point.output_len * tpot) / replica


class Evaluator:
    """Evaluations, GPUs and fusion tables loaded once; :meth:`summary` plans one point."""

    def __init__(self, corpus: Path = REPO / "corpus", gpus_root: Path = REPO / "gpus"):
        from engine.deploy import load_gpus, load_tables
        self.corpus = corpus
        self.gpus = load_gpus(gpus_root)
        self.tables = load_tables(corpus / "fusion")
        self._evs: dict = {}

    def evaluation(self, model: str):
        from engine.api import evaluate
        if model not in self._evs:
            self._evs[model] = evaluate(model, self.corpus)
        return self._evs[model]

    def summary(self, point: Point) -> dict:
        """The deployment summary at the point's setup (at capacity for ``requests_per_gpu: capacity``);
        ``fits`` false when the point's batch exceeds the KV capacity (the times are still priced)."""
        e = point.evaluated
        replica = e["tp"] * e["pp"] * e["cp"]

        def at(batch: int) -> dict:
            return self._plan(point, batch).summary

        if point.requests_per_gpu is not None:
            return at(point.requests_per_gpu * replica)
        probe = at(1)
        cap = int(probe[capacity_key(probe)])
        return at(cap) if cap >= 1 else probe

    def _plan(self, point: Point, batch: int):
        """The deployment evaluated at the point's setup and ``batch`` requests per replica
        (``plan(...).at``: its summary and per-op rows)."""
        from engine.deploy import Options, ParallelConfig, Scenario, find_gpu, plan
        e = point.evaluated
        config = ParallelConfig(tp=e["tp"], ep=e["ep"], dp_attn=e["dp_attn"], pp=e["pp"], cp=e["cp"], dp=1,
                                gpus_per_node=point.gpus_per_node)
        extra = {"mtp_tokens": point.mtp[0], "mtp_acceptance": point.mtp[1]} if point.mtp[0] else {}
        options = Options(framework=point.framework, **point.options, **extra)
        scenario = Scenario(batch=batch, input_len=point.input_len, output_len=point.output_len)
        return plan(self.evaluation(point.model), find_gpu(self.gpus, point.gpu), config, options,
                    self.tables.get(options.framework), scenario).at(scenario)

    def harness_run(self, point: Point, capacity: int) -> dict:
        """An ``output`` point under its harness (benchmarks/trtllm_bench.py): trtllm-bench's batch
        limits from its own KV estimate, the CUDA-graph sizes it captures, the waves of the run's
        requests (each at most the KV capacity and the limit) and, per wave, the expected TTFT of its
        prefill and its decode steps, each padded to the captured size (the token-proportional ops
        at the padded batch, attention at the real requests). Returns the expected tokens/s per GPU
        and what it read (limits, waves, padded batch per rank)."""
        import trtllm_bench as tb
        h, e = point.harness, point.evaluated
        ev = self.evaluation(point.model)
        b = ev.bound
        replica = e["tp"] * e["pp"] * e["cp"]
        ranks = max(e["dp_attn"], 1)
        fmt = point.options["weight_format"]
        max_bs, max_tokens = tb.engine_setting(
            params=int(ev.overview()["params_total"].value), n_layers=int(b["n_layers"]),
            n_kv_heads=int(b["n_kv_heads"]), d_head=int(b["d_head"]), tp=e["tp"], pp=e["pp"],
            hbm_mib=float(self.gpu_mib(point.gpu)), input_len=point.input_len, output_len=point.output_len,
            kv_fraction=float(point.options["hbm_fraction"]), weight_bytes=tb.BYTES_PER_ELEM[fmt],
            kv_bytes=tb.BYTES_PER_ELEM[point.options["kv_dtype"]])
        sizes = tb.captured(h["batch_sizes"], max_bs, max_tokens, point.mtp[0])
        # the running batch: the KV capacity, and max_batch_size per executor (one per attention rank)
        limit = min(capacity, max_bs * ranks)
        requests = h["requests"] * replica // point.gpus
        waves = tb.waves(requests, limit)
        seconds, pads = 0.0, []
        for batch in sorted(set(waves)):
            s = self._plan(point, batch)
            ttft, tpot = float(s.summary[column(s.summary, "ttft_s", "expected")]), \
                float(s.summary[column(s.summary, tpot_bases(point), "expected")])
            rank = math.ceil(batch / ranks)
            pad = tb.padded(rank, sizes)
            if pad != rank:
                tpot += token_ops_s(self._plan(point, pad * ranks).ops["decode"]) - token_ops_s(s.ops["decode"])
            pads.append((rank, pad))
            seconds += waves.count(batch) * (ttft + point.output_len * tpot)
        return {"expected": requests * point.output_len / seconds / replica, "max_batch_size": max_bs,
                "max_num_tokens": max_tokens, "waves": waves, "padded": pads}

    def gpu_mib(self, name: str) -> float:
        """The GPU's memory as the driver reports it (MiB; NVML's total, what trtllm-bench reads)."""
        from engine.deploy import find_gpu
        return find_gpu(self.gpus, name).hbm_bytes / 2**20


def evaluate_points(points: list[Point]) -> list[dict]:
    """One result row per point: measured, the bound and estimate throughputs, their keys, fit."""
    ev = Evaluator()
    rows = []
    for p in points:
        s = ev.summary(p)
        keys = {kind: (column(s, "ttft_s", kind), column(s, tpot_bases(p), kind)) for kind in KINDS}
        fits = s[column(s, "fits", "steady")] if p.requests_per_gpu is None else s["fits"]
        row = {"point": p, "batch": int(s["batch"]), "fits": bool(fits), "keys": keys,
               **{kind: throughput(p, s, *keys[kind]) for kind in KINDS}}
        if p.harness and p.metric == "output":
            row["harness"] = ev.harness_run(p, int(s["batch"]))
            row["expected"] = row["harness"]["expected"]
        rows.append(row)
    return rows


#: Ops of a decode step whose work is per request and its context (a CUDA-graph dummy request reads
#: one KV block: these stay at the real requests when a step is padded).
PER_CONTEXT = ("flash_attention", "flash_mla", "attention_score", "softmax", "attention_apply")


def token_ops_s(ops: list[dict]) -> float:
    """Expected seconds of a decode step's token-proportional ops (all but :data:`PER_CONTEXT`)."""
    return sum(r["t_expected_s"] for r in ops if r["op"] not in PER_CONTEXT)


def _n(x: float) -> str:
    return f"{x:,.0f}"


def table(rows: list[dict]) -> str:
    """The markdown table (one line per point) and a line naming the summary keys each column read."""
    keys = {kind: sorted({r["keys"][kind] for r in rows}) for kind in KINDS}
    out = ["| point | model | GPUs | config | metric | ISL/OSL | batch/replica | measured tok/s/GPU | bound | "
           "measured / bound | estimate | measured / estimate | expected | measured / expected |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["point"]
        e = p.evaluated
        config = "-".join(f"{d}{e[d]}" for d in DEGREES if e[d] > 1) or "tp1"
        if e != p.degrees:
            config += " (published " + "-".join(f"{d}{p.degrees[d]}" for d in DEGREES if p.degrees[d] > 1) + ")"
        batch = f"{r['batch']:,}" + ("" if r["fits"] else " (does not fit)")
        if "harness" in r:          # the expected column's run: its waves and padded decode batch per rank
            h = r["harness"]
            batch += (f"; {p.harness['name'] or 'harness'}: {len(h['waves'])} wave(s) of {h['waves'][0]:,}"
                      + (f", last {h['waves'][-1]:,}" if h["waves"][-1] != h["waves"][0] else "")
                      + ", padded " + ", ".join(f"{a}->{b}" for a, b in h["padded"] if a != b))
        out.append(f"| {p.id} | {p.model.split('/')[-1]} | {p.gpus} x {p.gpu} | {config} | {p.metric} | "
                   f"{p.input_len}/{p.output_len} | {batch} | {_n(p.measured)} | {_n(r['bound'])} | "
                   f"{p.measured / r['bound']:.2f} | {_n(r['estimate'])} | {p.measured / r['estimate']:.2f} | "
                   f"{_n(r['expected'])} | {p.measured / r['expected']:.2f} |")
    out.append("")
    out.append("bound read from " + "; ".join(f"({a}, {b})" for a, b in keys["bound"])
               + " - estimate read from " + "; ".join(f"({a}, {b})" for a, b in keys["estimate"])
               + " - expected read from " + "; ".join(f"({a}, {b})" for a, b in keys["expected"])
               + " (ttft, tpot): a column with no key of its own reads the deployment's headline ttft_s / tpot_s")
    out.append(within_line(rows))
    return "\n".join(out)


def within_line(rows: list[dict]) -> str:
    """How many points' measured / estimate and measured / expected lie within :data:`WITHIN`."""
    def count(kind: str) -> int:
        return sum(abs(r["point"].measured / r[kind] - 1) <= WITHIN for r in rows)
    return (f"within {WITHIN:.0%} of the measurement: expected {count('expected')} of {len(rows)} points, "
            f"estimate {count('estimate')}, bound {count('bound')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the data file (default benchmarks/data/published.yaml)")
    ap.add_argument("--only", action="append", default=[], help="only points whose id starts with this (repeatable)")
    ap.add_argument("--check", action="store_true", help="exit 1 if any measured / bound exceeds 1.0")
    args = ap.parse_args(argv)
    try:
        _, points = load_points(args.data)
        if args.only:
            points = [p for p in points if any(p.id.startswith(o) for o in args.only)]
        rows = evaluate_points(points)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    over = [r for r in rows if r["point"].measured > r["bound"]]
    if args.check and over:
        print(f"\n{len(over)} point(s) above the bound: " + ", ".join(r["point"].id for r in over), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
