"""Pareto fronts and sizing answers: ``archledger plan``'s search, precomputed per model at build time.

Layer: engine.serving (on engine.serving.sizing; nothing here evaluates a point itself). For each
scenario (input, output) of the grid's ``sizing:`` block, each framework and KV dtype, one
:func:`engine.serving.sizing.search` over the block's GPU types runs exactly what ``archledger plan
MODEL --input I --output O --gpu G ... --framework F --kv-dtype D --max-gpus N`` runs (one replica:
no ``--users`` / ``--rate``), and two tables are written per model:

* ``fronts`` (:data:`FRONTS_SCHEMA`): per GPU type, the Pareto front of tokens/s/GPU vs
  tokens/s/user that plan prints (:meth:`GPUSearch.front`), every point with its config and batch;
* ``sizing`` (:data:`SIZING_SCHEMA`): per GPU type, the served points in plan's order of preference
  (fewest GPUs, then the highest tokens/s/GPU, then the search's own order: ``rank`` 0 first),
  keeping only the points that are the answer for some TTFT/TPOT bound. The cheapest point meeting
  ``TTFT <= a`` and ``TPOT <= b`` is the lowest-rank row with ``ttft_s <= a`` and ``tpot_s <= b``:
  the same point :meth:`GPUSearch.cheapest` returns first.

Thinning (exact): a point is dropped when an earlier point in that order has a TTFT and a TPOT no
larger than its own. Whenever the dropped point meets a bound, the earlier one meets it too and is
preferred, so no answer changes; a point that is kept is the answer at its own (TTFT, TPOT), so
no smaller set answers every bound.

Cost: the build hands this step the model's :class:`engine.deploy.structure_cache.StructureCache`
the grid evaluation just filled, so the search compiles only the structures the grid has not (its
configs outside the grid's parallel rules, e.g. pipeline-only splits); the rows are the same as a
fresh plan search's (tests/test_fronts_cache.py).

Invariant: every row is a (legal config, batch) point the search evaluated, with the fields it gave.
"""
from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from engine.language.api import Evaluation
from engine.language.corpus import Reader, shown_value
from engine.language.file_schemas import GRID
from engine.language.errors import SpecError, Where
from engine.language.filememo import ContentMemo
from engine.deploy.parallel import MAX_GPUS
from engine.deploy.structure import MAX_TOKENS

#: The keys of the grid's ``sizing:`` block.
SIZING_KEYS = ("scenarios", "gpus", "frameworks", "kv_dtypes", "max_gpus", "models", "disagg_frameworks")
_REQUIRED = SIZING_KEYS[:5]
MAX_SCENARIOS = 8

_KEY = {
    "model_id": (pl.String, "Hugging Face model id."),
    "gpu": (pl.String, "GPU name (gpus/*.yaml `gpu:`)."),
    "framework": (pl.String, "Fusion table applied: vllm, sglang or none."),
    "kv_dtype": (pl.String, "KV cache dtype (bf16, fp8)."),
    "input_len": (pl.Int64, "Prompt tokens per request (the sizing scenario)."),
    "output_len": (pl.Int64, "Generated tokens per request (the sizing scenario)."),
    "extrapolated": (pl.Boolean, "input_len + output_len exceeds the model's max_context."),
    "max_gpus": (pl.Int64, "Largest model replica searched: GPU counts 1, 2, 4 ... up to it (archledger plan --max-gpus)."),
    "rank": (pl.Int64, "Position in the table's order for this (model, GPU, framework, KV dtype, scenario), from 0."),
    "config": (pl.String, "Parallel config of one model replica, e.g. tp8-ep8-dp_attn8 (archledger plan's label)."),
    "n_gpus": (pl.Int64, "GPUs of one model replica (tp x pp)."),
    "tp": (pl.Int64, "Tensor-parallel group size per pipeline stage."),
    "ep": (pl.Int64, "Expert-parallel degree inside the TP group."),
    "dp_attn": (pl.Int64, "Attention data-parallel replicas inside the TP group."),
    "pp": (pl.Int64, "Pipeline stages."),
    "batch": (pl.Int64, "Concurrent requests per model replica."),
    "ttft_s": (pl.Float64, "Time to first token at this batch, as archledger deploy computes it: the schedule estimate, not the lower bound ttft_bound_s (s)."),
    "tpot_s": (pl.Float64, "Time per output token in the steady state of continuous batching (the batch's requests at every stage of their output: the decode step at the output's mean context, archledger deploy's tpot_mean_s): the schedule estimate, not a lower bound (s)."),
    "tpot_last_s": (pl.Float64, "Time per output token with every request at its last position (archledger deploy's tpot_s), the worst case beside tpot_s (s)."),
    "tokens_per_s_per_gpu": (pl.Float64, "Decode throughput per GPU in the steady state: batch / tpot_s / n_gpus."),
    "tokens_per_s_per_user": (pl.Float64, "Decode tokens per second one request sees in the steady state: 1 / tpot_s."),
    "max_concurrent_requests": (pl.Int64, "The config's steady-state capacity under continuous batching (requests per replica; archledger deploy's max_concurrent_requests_steady): the points served."),
}

#: fronts.parquet: one row per point of the Pareto front of tokens/s/GPU vs tokens/s/user.
FRONTS_SCHEMA = {**_KEY, "rank": (pl.Int64, "Position on the front, from 0 (the fastest user first, decreasing tokens/s/user).")}

#: sizing.parquet: the served points that answer "cheapest config within TTFT <= a and TPOT <= b".
SIZING_SCHEMA = {**_KEY, "rank": (pl.Int64, "archledger plan's order of preference, from 0: fewest GPUs, then the highest tokens/s/GPU, then the search's order. The cheapest point meeting TTFT <= a and TPOT <= b is the lowest-rank row with ttft_s <= a and tpot_s <= b.")}

#: disagg.parquet: the prefill and decode points that decide plan's ``answer_disaggregated`` for any
#: TTFT and TPOT bounds (engine/serving/disagg_sizing.py: what is kept and why no answer changes).
DISAGG_SCHEMA = {
    **{k: _KEY[k] for k in ("model_id", "gpu", "framework", "kv_dtype", "input_len", "output_len", "extrapolated",
                            "max_gpus")},
    "pool": (pl.String, "prefill (a prefill-pool point: batch prompts prefilled at once, output 1) or decode (a served decode point)."),
    "rank": (pl.Int64, "Order within (model, GPU, framework, KV dtype, scenario, pool), from 0: decode points in the search's order (plan's tie-break), prefill points by config in the search's order, then TTFT."),
    **{k: _KEY[k] for k in ("config", "n_gpus", "tp", "ep", "dp_attn", "pp", "batch")},
    "ttft_s": (pl.Float64, "Prefill rows: TTFT of the prefill point (the prompt and the first token, output 1). Decode rows: the served point's own TTFT."),
    "tpot_s": (pl.Float64, "Decode rows: the served point's time per output token in the steady state of continuous batching (the decode step at the output's mean context, as fronts' and sizing's tpot_s) (s). Prefill rows: null."),
    "kv_share_bytes": (pl.Float64, "KV bytes one GPU of the config holds of a request at the prompt length (the KV transfer's busiest link carries the larger of the two pools')."),
    "kv_transfer_bytes": (pl.Float64, "KV bytes of one request at the prompt length, every cache (kv_transfer_bytes of archledger disagg)."),
    "usd_per_gpu_hour": (pl.Float64, "The GPU file's price of one GPU ($/h); null without one."),
    "scale_up_domain": (pl.Int64, "GPUs of one scale-up domain (a split within one domain of one GPU type moves its KV over scale-up)."),
    "scale_up_alpha_s": (pl.Float64, "Point-to-point latency over scale-up (s): alpha of the KV transfer's send/recv."),
    "scale_up_bytes_per_s": (pl.Float64, "Scale-up bandwidth of one GPU, one direction (B/s)."),
    "scale_out_alpha_s": (pl.Float64, "Point-to-point latency over scale-out (s); a pair of GPU types takes the larger."),
    "scale_out_bytes_per_s": (pl.Float64, "Scale-out bandwidth of one GPU, one direction (B/s); a pair of GPU types takes the smaller."),
    "pairs_with": (pl.String, "The decode GPU types this GPU type's prefill pool pairs with, comma-separated (plan's default rule, one vendor: engine.serving.pairing.pair_allowed)."),
}

#: deployments.parquet's ``on_front`` column: the rows of each Pareto front, grouped by these keys.
GRID_FRONT_KEY = ["gpu", "framework", "kv_dtype", "input_len", "output_len"]


def grid_front(deployments: pl.DataFrame) -> pl.Series:
    """``on_front`` for the rows of one model's deployments table, in its row order: true on the
    decode rows the steady state of continuous batching serves (``fits_steady``, the search's own
    served rule: :func:`engine.deploy.sol.steady_fit`) that are on the Pareto front of steady
    tokens/s/GPU (``batch / tpot_mean_s / n_gpus``) vs tokens/s/user (``1 / tpot_mean_s``) of their
    GPU type, framework, KV dtype, prompt and output length, over every GPU count, config and batch
    of the grid (:func:`engine.serving.pareto.front` on each group's rows in table order, so of
    exact duplicates the first); false elsewhere. :data:`engine.serving.steady.FRONT_BASIS` says so in words: the front
    fronts.parquet and ``archledger plan`` draw, on the grid's points. The worst case (``fits``,
    ``tpot_s``) stays on the rows beside it. The deploy page's chart draws the same fronts from the
    configs' formulas (static/js/deploy_eval.js ``fronts``)."""
    from engine.serving.steady import steady_rate
    from engine.serving.pareto import front
    served = (deployments.select(*GRID_FRONT_KEY, "phase", "fits_steady", "tpot_mean_s", "batch", "n_gpus")
              .with_row_index("row")
              .filter((pl.col("phase") == "decode") & pl.col("fits_steady"))
              .with_columns(rate=steady_rate())
              .group_by(GRID_FRONT_KEY, maintain_order=True)
              .agg("row", "tpot_mean_s", "rate"))
    flags = np.zeros(deployments.height, dtype=bool)
    for rows, tpot, rate in zip(served["row"].to_list(), served["tpot_mean_s"].to_list(),
                                served["rate"].to_list()):
        rows = np.asarray(rows)
        flags[rows[front(1 / np.asarray(tpot), np.asarray(rate))]] = True
    return pl.Series("on_front", flags)


_POINT = [k for k in _KEY if k not in ("model_id", "gpu", "framework", "kv_dtype", "input_len", "output_len",
                                        "extrapolated", "max_gpus", "rank")]


@dataclass(frozen=True)
class Sizing:
    """The grid's ``sizing:`` block: what the build precomputes for the sizing form."""

    scenarios: tuple[tuple[int, int], ...]     # (input, output)
    gpus: tuple[str, ...] | None               # None: every GPU of gpus/ (``gpus: all``)
    frameworks: tuple[str, ...]
    kv_dtypes: tuple[str, ...]
    max_gpus: int
    models: tuple[str, ...] | None = None     # Hugging Face ids; None: every model of the corpus
    disagg_frameworks: tuple[str, ...] | None = None   # whose disagg rows are written; None: every framework
    #: The block's place in the grid file (the bound on a model's searches names it).
    where: Where = field(default=Where(), compare=False)


def load_sizing(grid_path: Path | str | None) -> Sizing | None:
    """The ``sizing:`` block of a grid file, checked (one line per mistake), or None when the grid
    has none (then the build writes empty fronts and sizing tables)."""
    from engine.project import GRID_FILE as DEFAULT
    from engine.deploy import fusion_table
    path = Path(grid_path) if grid_path else DEFAULT
    # once per process and content of the files read (a build asks per model; the fusion tables
    # name the frameworks allowed); a Sizing is frozen tuples
    files = [path, *fusion_table.table_files()]
    return _SIZINGS.get(("sizing", str(path)), files, lambda: _load_sizing(path))


_SIZINGS = ContentMemo()


def _load_sizing(path: Path) -> Sizing | None:
    from engine.language.checked import choices_field as _choices, count_field as _count, list_field as _list
    from engine.deploy.fusion_table import load_tables
    from engine.language.kv import KV_DTYPE_BYTES
    reader = Reader(path, path.parent.parent, GRID)
    data = reader.mapping(reader.data, "")
    if "sizing" not in data:
        return None
    block = reader.mapping(data["sizing"], "sizing", data, "sizing")
    reader.keys(block, "sizing", SIZING_KEYS, _REQUIRED)
    scenarios = []
    items = _list(reader, block, "scenarios", "sizing.scenarios")
    if len(items) > MAX_SCENARIOS:
        raise SpecError(reader.where(block, "sizing.scenarios", "scenarios"), f"{len(items)} scenarios",
                        f"list at most {MAX_SCENARIOS}: each is a full plan search per model and GPU type")
    for i, item in enumerate(items):
        field = f"sizing.scenarios[{i}]"
        item = reader.mapping(item, field, block, "scenarios")
        reader.keys(item, field, ("input", "output"), ("input", "output"))
        scenarios.append(tuple(_count(item[k], reader.where(item, f"{field}.{k}", k), MAX_TOKENS, "token counts")
                               for k in ("input", "output")))
    gpus = block["gpus"]
    if gpus != "all":
        gpus = _list(reader, block, "gpus", "sizing.gpus")
        for i, name in enumerate(gpus):
            if not isinstance(name, str):
                raise SpecError(reader.where(block, f"sizing.gpus[{i}]", "gpus"),
                                f"{shown_value(name)} is not a GPU name",
                                "write `gpus: all` or a list, e.g. `gpus: [H200, B200]` (the `gpu:` names of gpus/*.yaml)")
    frameworks = _choices(reader, block, "frameworks", "sizing.frameworks", ("none", *sorted(load_tables())))
    kv_dtypes = _choices(reader, block, "kv_dtypes", "sizing.kv_dtypes", tuple(KV_DTYPE_BYTES))
    max_gpus = _count(block["max_gpus"], reader.where(block, "sizing.max_gpus", "max_gpus"), MAX_GPUS,
                      "the largest model replica searched")
    models = block.get("models", "all")
    if models != "all":
        models = _list(reader, block, "models", "sizing.models")
        for i, name in enumerate(models):
            if not isinstance(name, str) or "/" not in name:
                raise SpecError(reader.where(block, f"sizing.models[{i}]", "models"),
                                f"{shown_value(name)} is not a Hugging Face model id",
                                "write `models: all` or a list of ids, e.g. `models: [deepseek-ai/DeepSeek-V3]`")
    disagg = None
    if "disagg_frameworks" in block:     # the disaggregated answers' points (disagg.parquet) for these only
        disagg = _choices(reader, block, "disagg_frameworks", "sizing.disagg_frameworks", frameworks, empty_ok=True)
    return Sizing(tuple(scenarios), None if gpus == "all" else tuple(gpus), frameworks, kv_dtypes, max_gpus,
                  None if models == "all" else tuple(models), disagg,
                  Where(reader.display, data.line_of("sizing"), "sizing"))


def staircase(order: np.ndarray, ttft: np.ndarray, tpot: np.ndarray) -> list[int]:
    """The points of ``order`` (indices, most preferred first) that no earlier point dominates in
    (TTFT, TPOT): an earlier point with TTFT <= and TPOT <= makes a point never the first to meet
    a bound. Returned in ``order``'s order.

    A point dominated by an earlier one is dropped whichever point that is (a dropped point is
    dominated by a kept one before it, and domination is transitive), so the points dominated by
    the earlier point of least TPOT or of least TTFT (:func:`_cheaply_dominated`, vectorized: most
    of a search's points) are dropped before the loop, which keeps the same points of the rest."""
    order = np.asarray(order, dtype=int)
    order = order[~_cheaply_dominated(ttft[order], tpot[order])]
    xs: list[float] = []      # the kept points' TTFTs, increasing; their TPOTs strictly decreasing
    ys: list[float] = []
    keep = []
    for i in order.tolist():
        x, y = float(ttft[i]), float(tpot[i])
        j = bisect.bisect_right(xs, x)
        if j and ys[j - 1] <= y:          # the earlier point with the largest TTFT <= x has the least TPOT
            continue
        keep.append(i)
        k = j                              # drop the staircase entries this point dominates
        while k < len(xs) and ys[k] >= y:
            k += 1
        xs[j:k], ys[j:k] = [x], [y]
    return keep


def _cheaply_dominated(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per point (in order), whether the earlier point of least ``y``, or of least ``x``, has
    ``x`` and ``y`` no larger than its own (the first point: never)."""
    drop = np.zeros(len(x), dtype=bool)
    if len(x) > 1:
        idx = np.arange(len(x))
        for key in (y, x):
            before = np.concatenate(([np.inf], np.minimum.accumulate(key)[:-1]))
            least = np.maximum.accumulate(np.where(key < before, idx, 0))[:-1]   # of the points before each
            drop[1:] |= (x[least] <= x[1:]) & (y[least] <= y[1:])
    return drop


def preference(points: dict) -> np.ndarray:
    """Indices of a search's points in plan's order of preference for one replica: fewest GPUs,
    then the highest tokens/s/GPU, ties in the search's order (the stable lexsort of
    :meth:`engine.serving.sizing.GPUSearch.cheapest`)."""
    return np.lexsort((-points["tokens_per_s_per_gpu"], points["n_gpus"]))


def evaluate_model(ev: Evaluation, grid_path=None, gpu_root=None, cache=None, disagg: dict | None = None
                   ) -> tuple[dict, dict]:
    """(fronts columns, sizing columns) for one model: empty when the grid has no ``sizing:`` block.
    ``cache``: the model's :class:`engine.deploy.structure_cache.StructureCache` the grid evaluation
    filled (the build passes it: the search then compiles only the structures the grid did not
    build); the rows are the same with or without it (tests/test_fronts_cache.py). ``disagg``: a
    dict to fill with the disagg columns (:data:`DISAGG_SCHEMA`) of the block's
    ``disagg_frameworks`` (default: every framework); for those the search also evaluates the
    prefill-pool points, as plan does (the fronts and sizing rows are the same)."""
    from engine.deploy import Options
    from engine.deploy.fusion_table import load_tables
    from engine.serving.pareto import front
    from engine.serving.sizing import SLA, search
    from engine.deploy.structure_cache import StructureCache

    fronts = {k: [] for k in FRONTS_SCHEMA}
    sizing = {k: [] for k in SIZING_SCHEMA}
    if disagg is not None:
        disagg.update({k: [] for k in DISAGG_SCHEMA})
    spec, gpus = check_work(ev, grid_path, gpu_root)
    if spec is None:
        return fronts, sizing
    if cache is None:
        cache = StructureCache(ev, load_tables(ev.corpus.root / "fusion"))
    tables = cache.tables
    max_ctx = int(ev.numeric.max_context)
    # no SLA filters the rows (the bounds are the reader's): both bounds beyond any latency
    unbounded = SLA(1e30, 1e30)
    for framework in spec.frameworks:
        pools = disagg is not None and (spec.disagg_frameworks is None or framework in spec.disagg_frameworks)
        for kv_dtype in spec.kv_dtypes:
            for input_len, output_len in spec.scenarios:
                results = search(ev, gpus, input_len, output_len, unbounded, max_gpus=spec.max_gpus,
                                 options=Options(framework=framework, kv_dtype=kv_dtype),
                                 fusion=tables.get(framework), cache=cache, pools=pools)
                head = {"model_id": ev.model.model_id, "framework": framework, "kv_dtype": kv_dtype,
                        "input_len": input_len, "output_len": output_len,
                        "extrapolated": input_len + output_len > max_ctx, "max_gpus": spec.max_gpus}
                for res in results:
                    if not res.points:
                        continue
                    p = res.points
                    _append(fronts, res, front(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]), head)
                    _append(sizing, res, staircase(preference(p), p["ttft_s"], p["tpot_s"]), head)
                if pools:
                    _append_disagg(disagg, ev, gpus, results, input_len, output_len, kv_dtype, head)
    return fronts, sizing


def _append_disagg(columns: dict, ev: Evaluation, gpus, results, input_len: int, output_len: int, kv_dtype: str,
                   head: dict) -> None:
    """Append one scenario's disagg rows: per GPU type the prefill and decode points
    :func:`engine.serving.disagg_sizing.candidates` keeps, with what the pairing needs of the GPU."""
    from engine.serving.disagg_sizing import candidates, records
    from engine.serving.disagg import links, transfer_bytes
    from engine.serving.pairing import pair_allowed
    from engine.language.kv import KV_DTYPE_BYTES
    kv_request = float(transfer_bytes(ev, input_len, KV_DTYPE_BYTES[kv_dtype]))
    prefill, decode = candidates(results, gpus, output_len)
    for gpu in gpus:
        # the rows as columns, prefill rows first (by config, then TTFT), then decode rows in the
        # search's order: (config, batch, ttft, tpot) per pool, each pool ranked from 0
        pools: dict[str, tuple[list, list, list, list]] = {"prefill": ([], [], [], []), "decode": ([], [], [], [])}
        pres = prefill[gpu.key]
        cfgs, batches, ttfts, tpots = pools["prefill"]
        for c, cfg in enumerate(pres.pool_configs):
            t, b = records(pres, c)
            cfgs.extend([cfg] * len(t))
            batches.extend(map(int, b.tolist()))
            ttfts.extend(map(float, t.tolist()))
            tpots.extend([None] * len(t))
        dres = decode[gpu.key]
        if dres.points:
            p = dres.points
            cfgs, batches, ttfts, tpots = pools["decode"]
            cfgs.extend(dres.configs[int(k)] for k in p["config"].tolist())
            batches.extend(map(int, p["batch"].tolist()))
            ttfts.extend(map(float, p["ttft_s"].tolist()))
            tpots.extend(map(float, p["tpot_s"].tolist()))
        share = {**pres.kv_share, **dres.kv_share}
        up, out = links(gpu, gpu)        # the page pairs two GPU types' links as disagg.links does
        link = {"usd_per_gpu_hour": gpu.price_usd_per_hour, "scale_up_domain": int(gpu.scale_up_domain),
                "scale_up_alpha_s": float(up.alpha_s), "scale_up_bytes_per_s": float(up.bytes_per_s),
                "scale_out_alpha_s": float(out.alpha_s), "scale_out_bytes_per_s": float(out.bytes_per_s),
                "kv_transfer_bytes": kv_request,
                "pairs_with": ",".join(g.key for g in gpus if pair_allowed(gpu, g))}
        for pool, (cfgs, batches, ttfts, tpots) in pools.items():
            n = len(cfgs)
            for k, v in head.items():
                columns[k].extend([v] * n)
            for k, v in link.items():
                columns[k].extend([v] * n)
            columns["gpu"].extend([gpu.key] * n)
            columns["pool"].extend([pool] * n)
            columns["rank"].extend(range(n))
            labels = {cfg: cfg.label() for cfg in set(cfgs)}
            columns["config"].extend(labels[cfg] for cfg in cfgs)
            for k in ("n_gpus", "tp", "ep", "dp_attn", "pp"):
                columns[k].extend(getattr(cfg, k) for cfg in cfgs)
            columns["batch"].extend(batches)
            columns["ttft_s"].extend(ttfts)
            columns["tpot_s"].extend(tpots)
            kv = {cfg: float(share[cfg]) for cfg in labels}
            columns["kv_share_bytes"].extend(kv[cfg] for cfg in cfgs)


def check_work(ev: Evaluation, grid_path=None, gpu_root=None) -> tuple[Sizing | None, list]:
    """(the sizing block, its GPUs) for ``ev``, or (None, []) when the block does not cover the
    model; refused in one line (:func:`engine.serving.sizing.check_pairs`) when the model's searches
    together would cover more (GPU type, config) pairs than the bound: checked before any search."""
    from engine.deploy.hardware import find_gpu
    from engine.serving.sizing import check_pairs
    spec, all_gpus = _inputs(grid_path, gpu_root)
    if not covers(spec, ev.model.model_id):
        return None, []
    gpus = [find_gpu(all_gpus, name) for name in spec.gpus] if spec.gpus is not None else list(all_gpus.values())
    check_pairs(pairs_bound(ev, spec, gpus), spec.where, f"{ev.model.model_id}: list fewer GPU types, frameworks, "
                "KV dtypes or scenarios, or a smaller max_gpus")
    return spec, gpus


def pairs_bound(ev: Evaluation, spec: Sizing, gpus: list) -> dict[str, int]:
    """The factors whose product is the (GPU type, config) pairs ``ev``'s searches for the block
    cover together (what :data:`engine.serving.sizing.MAX_SEARCH_PAIRS` bounds)."""
    from engine.serving.sizing import legal_configs
    return {"frameworks": len(spec.frameworks), "KV dtypes": len(spec.kv_dtypes), "scenarios": len(spec.scenarios),
            "GPU types": len(gpus), f"configs up to {spec.max_gpus} GPUs": len(legal_configs(ev, spec.max_gpus))}


def covers(spec: Sizing | None, model_id: str) -> bool:
    """Whether the sizing block ``spec`` (None: the grid has none) sizes the model: the one place
    the sizing step reads the model's id other than to label its rows (engine.batch.twins)."""
    return spec is not None and (spec.models is None or model_id in spec.models)


def _inputs(grid_path, gpu_root) -> tuple:
    """(the sizing block, the GPUs): each loader reads its files once per process and content (a
    build evaluates every model against the same files: parsing them per model cost ~0.3 s each)."""
    from engine.deploy.hardware import load_gpus
    return load_sizing(grid_path), load_gpus(gpu_root)


def _append(columns: dict, res, index, head: dict) -> None:
    """Append the points ``index`` of a search (:meth:`GPUSearch.rows`'s fields, as columns), ranked in order."""
    idx = np.asarray(index, dtype=int)
    n = len(idx)
    for k, v in head.items():
        columns[k].extend([v] * n)
    columns["gpu"].extend([res.gpu] * n)
    columns["rank"].extend(range(n))
    configs = [res.configs[c] for c in res.points["config"][idx].tolist()]
    columns["config"].extend(c.label() for c in configs)
    for k in ("n_gpus", "tp", "ep", "dp_attn", "pp"):
        columns[k].extend(getattr(c, k) for c in configs)
    for k in _POINT:
        if k not in ("config", "n_gpus", "tp", "ep", "dp_attn", "pp"):
            columns[k].extend(res.points[k][idx].tolist())


def write_model(ev: Evaluation, grid_path, gpu_root, staging: Path, slug: str, write, cache=None) -> dict:
    """Evaluate and write ``fronts/model=<slug>/part.parquet``, ``sizing/model=<slug>/part.parquet`` and
    ``disagg/model=<slug>/part.parquet`` under ``staging`` (``write(columns, schema, path)`` writes one
    Parquet file). Always writes all three,
    empty without a ``sizing:`` block, so a model's files are the same set for every grid. Returns
    row counts and seconds."""
    started = time.perf_counter()
    from engine.language import finite
    disagg: dict = {}
    fronts, sizing = evaluate_model(ev, grid_path, gpu_root, cache, disagg)
    finite.check_tables(ev.model, {"fronts": fronts, "sizing": sizing, "disagg": disagg})
    for table, columns, schema in (("fronts", fronts, FRONTS_SCHEMA), ("sizing", sizing, SIZING_SCHEMA),
                                   ("disagg", disagg, DISAGG_SCHEMA)):
        folder = Path(staging) / table / f"model={slug}"
        folder.mkdir(parents=True, exist_ok=True)
        write(columns, schema, folder / "part.parquet")
    return {"fronts": len(fronts["model_id"]), "sizing": len(sizing["model_id"]), "disagg": len(disagg["model_id"]),
            "sizing_seconds": round(time.perf_counter() - started, 3)}


def check(grid_path, gpus: dict, model_ids=None) -> None:
    """Fail early (before any model is evaluated) on a bad ``sizing:`` block, an unknown GPU in it,
    or a model id that is not in the corpus (``model_ids``)."""
    from engine.project import GRID_FILE as DEFAULT
    spec = load_sizing(grid_path)
    if spec is None:
        return
    path = Path(grid_path) if grid_path else DEFAULT
    reader = Reader(path, path.parent.parent, GRID)
    known = {k.lower() for k in gpus}
    for name in spec.gpus or ():
        if name.lower() not in known:
            raise SpecError(reader.where(reader.data["sizing"], "sizing.gpus", "gpus"), f"unknown GPU {name!r}",
                            "known: " + ", ".join(sorted(gpus)))
    unknown = [m for m in (spec.models or ()) if model_ids is not None and m not in model_ids]
    if unknown:
        raise SpecError(reader.where(reader.data["sizing"], "sizing.models", "models"),
                        f"{unknown[0]!r} is not a model of the corpus",
                        "write the Hugging Face id a spec of corpus/models/ declares (archledger list)")
