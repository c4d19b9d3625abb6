"""The sizing page of a model: ``/models/<org--name>/sizing/``, from the build's fronts and sizing tables.

Layer: site_builder (reads build/results only; computes no cost: the page's disaggregated answer is
engine/serving/rules.py's programs, run by static/js/formula.js over the rows and staircases written here). The page shows, per sizing
scenario, the throughput-per-GPU vs tokens/s-per-user chart (one line per GPU type: the Pareto
front ``archledger plan`` prints) and a form answering "how many GPUs of which kind within TTFT <=
a and TPOT <= b". The form selects rows: the lowest-``rank`` row of ``sizing.parquet`` whose
``ttft_s`` and ``tpot_s`` are within the bounds is plan's cheapest point for that GPU type
(engine/serving/fronts.py states why). Values are written at full precision (JSON floats round-trip),
so the page's comparisons are the engine's.
"""
from __future__ import annotations

import struct
from pathlib import Path

import polars as pl


#: Columns of the page's rows (one list per point, in rank order, under a "framework/kv_dtype/input/output/gpu" key).
SIZING_COLUMNS = ["config", "n_gpus", "batch", "ttft_s", "tpot_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user"]
FRONT_COLUMNS = SIZING_COLUMNS + ["max_concurrent_requests", "tpot_last_s"]   # the worst case beside the steady TPOT
#: Front points drawn per line: the chart needs no more (evenly spaced by rank, both ends kept, as
#: `archledger plan` thins its text); fronts.parquet has every point.
FRONT_SHOWN = 120
_GROUP = ["framework", "kv_dtype", "input_len", "output_len", "gpu"]


def _read(results_root: Path, table: str, name: str) -> pl.DataFrame | None:
    path = Path(results_root) / table / f"model={name}" / "part.parquet"
    return pl.read_parquet(path) if path.exists() else None


def rows(path: Path) -> int:
    """Rows of one fronts/sizing partition (a model outside the grid's sizing list has an empty one:
    the downloads leave it out)."""
    return pl.scan_parquet(path).select(pl.len()).collect().item()


def _display(value):
    """Four significant digits for what is only shown (the chart); the form's rows keep full precision."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def _thin(rows: list, n: int) -> list:
    if len(rows) <= n:
        return rows
    step = (len(rows) - 1) / (n - 1)
    return [rows[round(i * step)] for i in range(n)]


def _groups(frame: pl.DataFrame, columns: list[str]) -> dict[str, list]:
    """``columns`` of each row, in rank order, under its "framework/kv_dtype/input/output/gpu" key
    (the key joined by polars: the group columns are strings and integers, never null)."""
    ordered = frame.sort(_GROUP + ["rank"])
    keys = ordered.select(pl.concat_str([pl.col(k).cast(pl.String) for k in _GROUP], separator="/")).to_series()
    out: dict[str, list] = {}
    for key, row in zip(keys.to_list(), ordered.select(columns).iter_rows()):
        out.setdefault(key, []).append(list(row))
    return out


def _bits(value: float) -> int:
    """A double's IEEE-754 bits as a signed 64-bit integer (what sizing.js's decoder reads back)."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


def _json_int(value: int):
    """An integer JSON carries exactly (a double holds integers up to 2^53), else its decimal text."""
    return value if abs(value) <= 2 ** 53 else str(value)


def encode_doubles(values: list[float]) -> list:
    """Doubles, losslessly and compactly: the first one's bits (decimal text), then the second
    differences of the bits (the first one's first difference as it is). Consecutive TPOTs of one
    config are close to linear in the batch, so most second differences are a few units and the list
    gzips to a tenth of the decimal floats; sizing.js's ``decodeDoubles`` inverts it exactly."""
    if not values:
        return []
    bits = [_bits(v) for v in values]
    out, prev_step = [str(bits[0])], None
    for i in range(1, len(bits)):
        step = bits[i] - bits[i - 1]
        out.append(_json_int(step if prev_step is None else step - prev_step))
        prev_step = step
    return out


def _pool(frame: pl.DataFrame) -> dict:
    """One GPU type's prefill or decode points for the page: its configs (label, GPUs, KV share per
    GPU) in first-seen order, each point's config index and batch, and its TTFT (prefill, plain
    floats: few) or TPOT (decode, :func:`encode_doubles`)."""
    configs: dict[str, int] = {}
    meta = []
    for label, n, share in frame.select(["config", "n_gpus", "kv_share_bytes"]).iter_rows():
        if label not in configs:
            configs[label] = len(configs)
            meta.append([label, n, share])
    index = [configs[c] for c in frame["config"]]
    if frame["pool"][0] == "prefill":
        batch, ttft = frame["batch"].to_list(), frame["ttft_s"].to_list()
        return {"configs": meta, "config": index, "batch": batch, "ttft": ttft, "stairs": stairs(index, batch, ttft, len(meta))}
    return {"configs": meta, "config": index, "batch": frame["batch"].to_list(),
            "tpot": encode_doubles(frame["tpot_s"].to_list())}


def stairs(config: list[int], batch: list, ttft: list, n: int) -> list[list[list]]:
    """Per prefill config (index 0..n-1) its staircase as the engine's pairing reads it
    (engine.serving.staircase.staircase: TTFTs ascending, batches, the running best requests/s and
    where it was reached), for the page's run of engine.serving.rules' CHOICE: data, no rule."""
    import numpy as np
    from engine.serving.staircase import staircase        # (here: the page's other readers need no engine)
    cfg, times, batches, out = np.asarray(config), np.asarray(ttft, dtype=float), np.asarray(batch), []
    for c in range(n):
        sel = np.flatnonzero(cfg == c)
        t, b, best, arg = staircase(times[sel], batches[sel])
        out.append([t.tolist(), b.tolist(), best.tolist(), arg.tolist()])
    return out


def disagg_data(frame: pl.DataFrame | None, scenarios: list[str]) -> dict:
    """The disagg table (engine/serving/fronts.py DISAGG_SCHEMA) for the page: per
    "framework/kv_dtype/input/output" of ``scenarios``, the request's KV bytes and per GPU type its
    price, scale-up domain, links (alpha s, bytes/s), the decode GPU types its prefill pool pairs
    with (the engine's rule, written by the build) and its prefill and decode points in rank order.
    A scenario of a framework the table has rows of but that has none itself gets no GPU type (no
    split serves it); one of a framework without rows (the grid's ``disagg_frameworks`` left it out,
    or results built before the table) is absent, and the page says so."""
    if frame is None or not frame.height:
        return {}
    done = set(frame["framework"])
    out: dict = {key: {"kv_request": 0.0, "gpus": {}} for key in scenarios if key.split("/")[0] in done}
    met: set[tuple] = set()
    for (scenario, gpu), pools in _pools(frame).items():
        first = next(iter(pools.values())).row(0, named=True)     # (the GPU type's first row: its first pool's)
        key = "/".join(str(k) for k in scenario)
        if scenario not in met:       # its first GPU type's first row is the scenario's first row
            met.add(scenario)
            out[key] = {"kv_request": first["kv_transfer_bytes"], "gpus": {}}
        g = {"price": first["usd_per_gpu_hour"], "domain": first["scale_up_domain"],
             "up": [first["scale_up_alpha_s"], first["scale_up_bytes_per_s"]],
             "out": [first["scale_out_alpha_s"], first["scale_out_bytes_per_s"]],
             "pairs_with": first["pairs_with"].split(",")}
        for pool in ("prefill", "decode"):
            g[pool] = _pool(pools[pool]) if pool in pools else {"configs": [], "config": [], "batch": [],
                                                                "ttft" if pool == "prefill" else "tpot": []}
        out[key]["gpus"][gpu] = g
    return out


def _pools(frame: pl.DataFrame) -> dict[tuple, dict[str, pl.DataFrame]]:
    """The disagg rows per (scenario: framework, KV dtype, input, output) and GPU type, in that
    order, each GPU type's rows per pool in pool order ("decode" before "prefill"), a pool's rows
    in rank order: one polars call (``partition_by``) for the whole table, not a filter per GPU
    type and pool (small polars calls, about a millisecond each)."""
    keys = ["framework", "kv_dtype", "input_len", "output_len"]
    parts = frame.sort(keys + ["gpu", "pool", "rank"]).partition_by(keys + ["gpu", "pool"], maintain_order=True,
                                                                    as_dict=True)
    out: dict[tuple, dict[str, pl.DataFrame]] = {}
    for (*scenario, gpu, pool), rows in parts.items():
        out.setdefault((tuple(scenario), gpu), {})[pool] = rows
    return out


def page_data(results_root: Path, name: str) -> dict | None:
    """The sizing page's data for one model (``name``: its slug), or None when the build wrote no
    sizing rows for it (a grid without a ``sizing:`` block, or no config served). ``sizing`` and
    ``front`` map "framework/kv_dtype/input/output/gpu" to rows of :data:`SIZING_COLUMNS` /
    :data:`FRONT_COLUMNS`, in rank order: the first sizing row within both bounds is plan's answer."""
    from engine.serving.rules import exported as serving_rules     # the pairing and join programs
    sizing, front = _read(results_root, "sizing", name), _read(results_root, "fronts", name)
    if sizing is None or front is None or not sizing.height:
        return None
    scenarios = (sizing.select(["input_len", "output_len", "extrapolated", "max_gpus"]).unique(maintain_order=True)
                 .sort(["input_len", "output_len"]).to_dicts())
    shown = {k: [[_display(v) for v in r] for r in _thin(rows, FRONT_SHOWN)]
             for k, rows in _groups(front, FRONT_COLUMNS).items()}
    return {
        "gpus": list(dict.fromkeys(sizing["gpu"])),       # the build's order (the grid's sizing.gpus)
        "frameworks": list(dict.fromkeys(sizing["framework"])), "kv_dtypes": list(dict.fromkeys(sizing["kv_dtype"])),
        "scenarios": scenarios, "columns": {"sizing": SIZING_COLUMNS, "front": FRONT_COLUMNS},
        "sizing": _groups(sizing, SIZING_COLUMNS), "front": shown, "rules": serving_rules(),
        "disagg": disagg_data(_read(results_root, "disagg", name), [
            "/".join(map(str, k)) for k in sizing.select(_GROUP[:4]).unique(maintain_order=True).iter_rows()]),
    }


def render(site, results_root: Path, model_id: str, name: str, doc: dict) -> bool:
    """Write ``data/sizing/<name>.json.gz`` (gzip: every GPU type and framework of the grid's
    ``sizing:`` block is a few hundred KB as plain JSON, a fifth of that compressed) and the page;
    False (nothing written) without sizing rows."""
    data = page_data(results_root, name)
    if data is None:
        return False
    site.gzip_json(f"data/sizing/{name}.json.gz", data)
    site.page(f"models/{name}/sizing", "sizing.html", f"{doc['name']} sizing",
              {"page": "sizing", "slug": name, "model_id": model_id},
              doc=doc, slug=name, sizing=data)
    return True
