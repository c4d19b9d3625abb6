"""Import measured kernel times from the public ``aiconfigurator-core`` package into ``gpus/measured/``.

Run from the repo root, with the package installed (``pip install aiconfigurator-core==0.12.0``, or
``pip install --no-deps --target DIR <wheel>`` and ``--site DIR``)::

    python benchmarks/import_kernels.py [--site DIR] [--out gpus/measured]

The package (Apache-2.0, NVIDIA; github.com/ai-dynamo/aiconfigurator) ships its collected kernel
database as Parquet under ``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/``.
This script is the only place that reads it: ArchLedger builds and tests without it. It writes one
small YAML table per GPU x framework x version x kernel class (engine.deploy.measured reads them;
their schema: engine.language.file_schemas.MEASURED), each naming the package, its version, the path
inside it, the licence and the rows it kept.

What is kept (:data:`RECIPES`, one per package version this script knows; any other version is
refused in one line, exit 2, nothing written):

* GEMM: bf16, fp8 (per-tensor scaled) and fp8_block (128x128 block scales) at m, n, k on powers
  of two (m 1..32768, n and k 128..16384 and 65536): the grid the source measures on every GPU,
  without its in-between points (log-space interpolation covers them within a few per cent) so a
  table stays about 15 KB. Axis values whose grid has holes in the source are dropped.
* attention (full, head size 128): the framework's prefill (context) and decode (generation)
  attention per KV-cache dtype over batch, prompt length or context, KV heads per GPU (1, 2, 4,
  8) and query heads per KV head (1, 2, 4, 8).
* MLA decode (absorbed multi-head latent attention, the ``flash_mla`` step): the framework's
  generation MLA per KV-cache dtype over batch, query heads per GPU and context, at the source's
  one latent shape (kv_lora_rank 512, rotary 64: DeepSeek-V3's; the variant names the rank),
  where the recipe lists the framework (the package has no vLLM table at 0.24.0); and the two
  per-head matmuls around it (the source's mla_bmm: ``mla_gen_pre`` absorbs the query into the
  latent, ``mla_gen_post`` up-projects the latent output) per side and dtype over tokens and
  heads per GPU; and the prefill (context) MLA, per KV-cache dtype over prompts, prompt length
  and heads per GPU (no cached prefix: the source's step 0).
* MoE (the fused routed experts): per expert shape and split (hidden, expert intermediate size,
  top-k, experts, moe_tp, moe_ep within 8 GPUs) the framework's time over the tokens entering the
  layer (powers of two to 8192), bf16, fp8 and fp8_block weights, balanced routing, gated experts
  only (TensorRT-LLM's ``*_nongated`` kernel sources run a plain up-projection MLP: another op);
  and, for a framework the recipe names in ``moe_routing``, the same at the source's uneven
  routing (``power_law_1.2``: AIConfigurator's default for its MoE models) for moe_ep > 1 only
  (variant ``<dtype>_power_law_1.2``; docs/deployment.md "Uneven expert routing").
* all-reduce: the framework's custom all-reduce (vLLM and SGLang: CUDA-graph and eager, one table
  each; TensorRT-LLM: its one allreduce op, ``custom``) and NCCL's all_reduce,
  all_gather, reduce_scatter and alltoall (fp16/bf16 rows) at 2, 4, 8 GPUs over message sizes.

Units: latency in µs (the source's ms x 1000, 4 significant digits: the source's own repeat noise
is larger), message sizes in bytes (the source counts 2-byte elements).

Why YAML: the tables are input like a GPU file (the project's one schema mechanism and its bounded
reader check them), diffs read line by line (one line per row of the innermost axis), and the
whole set stays a few hundred KB.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.deploy.measured_write import dump_yaml, grid_rows, sig4 as _sig  # noqa: E402,F401  (after the sys.path line)

PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
#: The licence of the package, and where it is stated (the wheel has no LICENSE file).
LICENCE = "Apache-2.0"
LICENCE_SRC = ("the wheel's METADATA (License-Expression: Apache-2.0), its CycloneDX SBOM and the "
               "SPDX-License-Identifier header of each collection_meta.yaml")

#: The source's system folder -> the ``gpu:`` name of the GPU file (gpus/*.yaml) it measured.
SYSTEMS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}

#: GEMM dtypes of the source -> ArchLedger's names.
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
#: Elements -> bytes of the communication tables' dtypes kept.
ELEMENT_BYTES = {"half": 2, "bfloat16": 2}
#: NCCL op names of the source -> ArchLedger's collective names.
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "alltoall": "all_to_all"}

POW2_M = [1 << i for i in range(16)]                       # 1 .. 32768
POW2_NK = [1 << i for i in range(7, 15)] + [65536]         # 128 .. 16384, 65536


@dataclass(frozen=True)
class Recipe:
    """What to read from one package version: per framework the data version of each table."""

    frameworks: dict[str, str]      # framework -> version of its gemm and custom all-reduce tables
    nccl: str                       # NCCL version
    mla: tuple[str, ...] = ()       # frameworks whose generation MLA table is read (at their version)
    #: framework -> the uneven routing whose MoE tables are read besides the balanced ones, at
    #: moe_ep > 1 only (the routing its fusion table's ``moe_routing:`` names; engine.deploy.measured)
    moe_routing: tuple[tuple[str, str], ...] = ()


#: One entry per package version whose layout this script has read (a new version: read its
#: tree, add an entry; the paths are the package's own).
RECIPES = {"0.12.0": Recipe(frameworks={"sglang": "0.5.14", "vllm": "0.24.0", "trtllm": "1.3.0rc20"}, nccl="2.29.2",
                            mla=("sglang", "trtllm"), moe_routing=(("trtllm", "power_law_1.2"),))}


class Refused(Exception):
    """Input the import cannot use: one line, exit 2."""


def package_root(site: str | None) -> tuple[Path, str]:
    """(the installed package's folder, its version); Refused when absent or of an unknown version."""
    if site:
        sys.path.insert(0, site)
    import importlib.metadata
    import importlib.util
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise Refused(f"{PACKAGE} is not installed — pip install {PACKAGE}=="
                      f"{max(RECIPES)} (or pass --site DIR of a --target install)")
    root = Path(list(spec.submodule_search_locations)[0])
    # the version of the copy found (beside it), not of another install the metadata finder may see first
    found = sorted(root.parent.glob(f"{MODULE}-*.dist-info"))
    version = (found[0].name.removesuffix(".dist-info").split("-", 1)[1] if found
               else importlib.metadata.version(PACKAGE))
    if version not in RECIPES:
        raise Refused(f"{PACKAGE} {version} is not a version this import knows — install one of "
                      f"{', '.join(sorted(RECIPES))} or add a recipe for {version} to {Path(__file__).name}")
    return root, version


def complete_grid(points: dict[tuple, float], axes: list[list]) -> list[list]:
    """``axes`` with values dropped, one at a time, until every combination of the kept values is
    in ``points``: each time the value whose removal takes out the most missing combinations per
    measured grid point lost (ties: the largest value of the earliest axis, so a batch axis loses
    its largest batches before a length axis loses its longest lengths; beyond the kept range the
    lookup scales by the roofline)."""
    import itertools
    present = [{key[i] for key in points} for i in range(len(axes))]
    axes = [[v for v in a if v in present[i]] for i, a in enumerate(axes)]   # values measured at all
    while True:
        missing = [c for c in itertools.product(*axes) if c not in points]
        if not missing:
            return axes
        counts = {}
        for combo in missing:
            for i, v in enumerate(combo):
                counts[(i, v)] = counts.get((i, v), 0) + 1
        size = math.prod(len(a) for a in axes)

        def score(key):
            i, v = key
            lost = size // len(axes[i]) - counts[key]          # measured points the removal drops
            return (counts[key] / max(lost, 0.5), -i, v)
        i, v = max((key for key in counts if len(axes[key[0]]) > 2), key=score, default=(None, None))
        if i is None:
            raise Refused("no complete grid with two values per axis")
        axes[i].remove(v)


def busiest_source(rows):
    """(the kernel source with the most rows, its rows): where several of the framework's kernels
    measured one op, the one measured most (ties: the name's order)."""
    import polars as pl
    kernel = rows.group_by("kernel_source").len().sort(["len", "kernel_source"], descending=True)["kernel_source"][0]
    return kernel, rows.filter(pl.col("kernel_source") == kernel)


def fastest(rows, columns: list[str], key=lambda *v: v) -> dict[tuple, float]:
    """Grid point ``key(*values of columns)`` -> µs (the source's ms x 1000, 4 digits), the fastest
    of its repeats, rows with a positive latency only; ``key`` None drops a row."""
    points: dict[tuple, float] = {}
    for *values, ms in rows.select(columns + ["latency"]).iter_rows():
        k = key(*values)
        if ms > 0 and k is not None:
            points[k] = min(points.get(k, float("inf")), _sig(1000 * ms))
    return points


def table(kind: str, variant: str, gpu: str, framework: str, version: str, package_version: str,
          path: str, device: str, selection: str, axes: list[tuple[str, str, list]], rows: list[list[float]]) -> dict:
    """One measured table as the YAML mapping written (engine.language.file_schemas.MEASURED)."""
    return {"kernel": kind, "variant": variant, "gpu": gpu, "framework": framework, "framework_version": version,
            "source": {"package": PACKAGE, "version": package_version, "path": path, "licence": LICENCE,
                       "licence_src": LICENCE_SRC, "device": device, "selection": selection},
            "axes": [{"name": n, "unit": u, "values": v} for n, u, v in axes],
            "latency_us": rows}


def gemm_tables(frame, gpu: str, framework: str, version: str, package_version: str, path: str) -> list[dict]:
    """One table per GEMM dtype of the source's gemm_perf (the kernel source with the most points
    when several measure one dtype)."""
    import polars as pl
    out = []
    for dtype, name in GEMM_DTYPES.items():
        rows = frame.filter(pl.col("gemm_dtype") == dtype)
        if rows.is_empty():
            continue
        kernel, rows = busiest_source(rows)
        points: dict[tuple, list] = {}
        for m, n, k, ms in rows.select(["m", "n", "k", "latency"]).iter_rows():
            points.setdefault((m, n, k), []).append(ms)
        points = {key: _sig(1000 * min(v)) for key, v in points.items() if min(v) > 0}   # repeats: the fastest
        axes = complete_grid(points, [POW2_M, POW2_NK, POW2_NK])
        out.append(table("gemm", name, gpu, framework, version, package_version, path, rows["device"][0],
                         f"gemm_dtype == {dtype}, kernel_source == {kernel}; m, n, k on powers of two",
                         [("m", "tokens", axes[0]), ("n", "output features", axes[1]),
                          ("k", "input features", axes[2])], grid_rows(points, axes)))
    return out


#: Attention: the head size imported, the KV heads per GPU and query heads per KV head kept (the
#: grid every framework measures at full attention; window 0).
ATTENTION_HEAD_DIM = 128
ATTENTION_KV_HEADS = [1, 2, 4, 8]
ATTENTION_Q_PER_KV = [1, 2, 4, 8]
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


def attention_tables(frame, phase: str, gpu: str, framework: str, version: str, package_version: str,
                     path: str) -> list[dict]:
    """One table per KV-cache dtype of the source's context (``phase`` prefill) or generation
    (decode) attention at head size :data:`ATTENTION_HEAD_DIM`, full attention, the kernel source
    with the most points. Decode axes: batch, KV heads, query heads per KV head, context (the
    source's step + 1: the cached tokens the new one attends to); prefill: batch, prompt length
    (isl), KV heads, query heads per KV head."""
    import polars as pl
    out = []
    for dtype, name in KV_DTYPES.items():
        rows = frame.filter((pl.col("kv_cache_dtype") == dtype) & (pl.col("head_dim") == ATTENTION_HEAD_DIM)
                            & (pl.col("window_size") == 0))
        if rows.is_empty():
            continue
        kernel, rows = busiest_source(rows)
        points: dict[tuple, float] = {}
        for b, isl, h, kv, step, ms in rows.select(["batch_size", "isl", "num_heads", "num_key_value_heads", "step",
                                                    "latency"]).iter_rows():
            if h % kv or ms <= 0:
                continue
            key = (b, kv, h // kv, step + 1) if phase == "decode" else (b, isl, kv, h // kv)
            points[key] = min(points.get(key, float("inf")), _sig(1000 * ms))
        present = lambda i: sorted({k[i] for k in points})          # noqa: E731
        if phase == "decode":
            axes = [("batch", "requests", present(0)), ("kv_heads", "KV heads per GPU", ATTENTION_KV_HEADS),
                    ("q_per_kv", "query heads per KV head", ATTENTION_Q_PER_KV), ("ctx", "cached tokens", present(3))]
        else:
            axes = [("batch", "prompts", present(0)), ("isl", "prompt tokens", [x for x in present(1) if x >= 16]),
                    ("kv_heads", "KV heads per GPU", ATTENTION_KV_HEADS),
                    ("q_per_kv", "query heads per KV head", ATTENTION_Q_PER_KV)]
        values = complete_grid(points, [a[2] for a in axes])
        out.append(table(f"{phase}_attention", f"{name}_d{ATTENTION_HEAD_DIM}", gpu, framework, version,
                         package_version, path, rows["device"][0],
                         f"kv_cache_dtype == {dtype}, head_dim == {ATTENTION_HEAD_DIM}, window_size == 0, "
                         f"kernel_source == {kernel}",
                         [(a[0], a[1], v) for a, v in zip(axes, values)], grid_rows(points, values)))
    return out


#: MLA: the latent rank of every row of the source's generation_mla_perf (DeepSeek-V3's
#: kv_lora_rank 512 with a 64-wide rotary key; the source's op has no rank column: its collector
#: builds DeepSeek-V3's attention module at num_heads = 128 / tp_size, or 64 heads at tp 1).
MLA_RANK = 512


def mla_tables(frame, gpu: str, framework: str, version: str, package_version: str, path: str) -> list[dict]:
    """One table per KV-cache dtype of the source's generation MLA (absorbed decode attention at
    latent rank :data:`MLA_RANK`), the kernel source with the most points: axes batch, query heads
    per GPU (the source's num_heads), context (its step + 1, as decode attention)."""
    import polars as pl
    out = []
    for dtype, name in KV_DTYPES.items():
        rows = frame.filter(pl.col("kv_cache_dtype") == dtype)
        if rows.is_empty():
            continue
        kernel, rows = busiest_source(rows)
        points = fastest(rows, ["batch_size", "num_heads", "step"], lambda b, h, step: (b, h, step + 1))
        present = lambda i: sorted({k[i] for k in points})          # noqa: E731
        values = complete_grid(points, [present(0), present(1), present(2)])
        out.append(table("decode_mla", f"{name}_r{MLA_RANK}", gpu, framework, version, package_version, path,
                         rows["device"][0],
                         f"kv_cache_dtype == {dtype}, mla_dtype == {rows['mla_dtype'][0]}, kernel_source == {kernel} "
                         f"(latent rank {MLA_RANK}, rotary 64)",
                         [("batch", "requests", values[0]), ("heads", "query heads per GPU", values[1]),
                          ("ctx", "cached tokens", values[2])], grid_rows(points, values)))
    return out


def context_mla_tables(frame, gpu: str, framework: str, version: str, package_version: str, path: str) -> list[dict]:
    """One table per KV-cache dtype of the source's context MLA (prefill attention over K and V
    decompressed from the latent, DeepSeek-V3's shape), the kernel source with the most points:
    axes batch (prompts), isl (prompt tokens), heads per GPU."""
    import polars as pl
    out = []
    for dtype, name in KV_DTYPES.items():
        rows = frame.filter((pl.col("kv_cache_dtype") == dtype) & (pl.col("step") == 0))
        if rows.is_empty():
            continue
        kernel, rows = busiest_source(rows)
        points = fastest(rows, ["batch_size", "isl", "num_heads"], lambda b, isl, h: (b, isl, h) if isl >= 16 else None)
        present = lambda i: sorted({k[i] for k in points})          # noqa: E731
        values = complete_grid(points, [present(0), present(1), present(2)])
        out.append(table("prefill_mla", f"{name}_r{MLA_RANK}", gpu, framework, version, package_version, path,
                         rows["device"][0], f"kv_cache_dtype == {dtype}, step == 0, mla_dtype == {rows['mla_dtype'][0]}, "
                         f"kernel_source == {kernel} (latent rank {MLA_RANK}, heads of 128 + 64 rotary, values 128)",
                         [("batch", "prompts", values[0]), ("isl", "prompt tokens", values[1]),
                          ("heads", "query heads per GPU", values[2])], grid_rows(points, values)))
    return out


#: MLA BMM: the source's op names -> the side ArchLedger's lookup names (engine.deploy.kernel_spec._bmm_side).
MLA_BMM_SIDES = {"mla_gen_pre": "pre", "mla_gen_post": "post"}
MLA_BMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


def mla_bmm_tables(frame, gpu: str, framework: str, version: str, package_version: str, path: str) -> list[dict]:
    """One table per side and dtype of the source's mla_bmm_perf (DeepSeek-V3's per-head matmuls
    of 128 x :data:`MLA_RANK`), the kernel source with the most points: axes tokens (the source's
    num_tokens: requests x query tokens on one GPU) and heads per GPU."""
    import polars as pl
    out = []
    for op, side in MLA_BMM_SIDES.items():
        for dtype, name in MLA_BMM_DTYPES.items():
            rows = frame.filter((pl.col("op_name") == op) & (pl.col("bmm_dtype") == dtype))
            if rows.is_empty():
                continue
            kernel, rows = busiest_source(rows)
            points = fastest(rows, ["num_tokens", "num_heads"])
            values = complete_grid(points, [sorted({k[0] for k in points}), sorted({k[1] for k in points})])
            out.append(table("mla_bmm", f"{side}_{name}_r{MLA_RANK}", gpu, framework, version, package_version, path,
                             rows["device"][0], f"op_name == {op}, bmm_dtype == {dtype}, kernel_source == {kernel}",
                             [("tokens", "query tokens on one GPU", values[0]), ("heads", "query heads per GPU", values[1])],
                             grid_rows(points, values)))
    return out


#: MoE: the weight dtypes kept, the token counts (powers of two), the largest moe_tp x moe_ep
#: (one scale-up domain; wide expert parallelism runs DeepEP, priced apart), the workload.
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
MOE_TOKENS = [1 << i for i in range(14)]                   # 1 .. 8192
MOE_MAX_GPUS = 8
#: The exact-match keys of an MoE table (engine.deploy.measured.MOE_KEYS) and the source's columns.
MOE_KEYS = {"hidden": "hidden_size", "inter": "inter_size", "topk": "topk", "experts": "num_experts",
            "moe_tp": "moe_tp_size", "moe_ep": "moe_ep_size"}


def moe_tables(frame, gpu: str, framework: str, version: str, package_version: str, path: str,
               distribution: str = "balanced") -> list[dict]:
    """One table per MoE weight dtype of the source's moe_perf (``distribution``: its routing,
    ``balanced`` by default; another, e.g. ``power_law_1.2``, only at moe_ep > 1, where ranks wait
    for the busiest, named in the variant: ``fp8_power_law_1.2``): per expert shape
    and split (hidden, expert intermediate size, top-k, experts, moe_tp, moe_ep; moe_tp x moe_ep at
    most :data:`MOE_MAX_GPUS`) a curve over the tokens entering the layer (the source's num_tokens:
    one attention replica's tokens x attention DP), from the kernel source whose complete curve
    is fastest over all of :data:`MOE_TOKENS` (the framework's backends differ by split: vLLM's
    FlashInfer CUTLASS runs expert parallelism, its Triton experts tensor parallelism). A shape
    no kernel source measured at every token count is left out."""
    import polars as pl
    out = []
    for dtype, name in MOE_DTYPES.items():
        uneven = distribution != "balanced"
        rows = frame.filter((pl.col("moe_dtype") == dtype) & (pl.col("distribution") == distribution)
                            & (pl.col("moe_tp_size") * pl.col("moe_ep_size") <= MOE_MAX_GPUS)
                            & ((pl.col("moe_ep_size") > 1) | pl.lit(not uneven))
                            & ~pl.col("kernel_source").str.contains("nongated"))
        if rows.is_empty():
            continue
        by_kernel: dict[tuple, dict] = {}          # (shape, kernel source) -> tokens -> µs
        for r in rows.iter_rows(named=True):
            if r["latency"] > 0 and r["num_tokens"] in MOE_TOKENS:
                curve = by_kernel.setdefault((tuple(r[c] for c in MOE_KEYS.values()), r["kernel_source"]), {})
                curve[r["num_tokens"]] = min(curve.get(r["num_tokens"], float("inf")), _sig(1000 * r["latency"]))
        curves: dict[tuple, dict] = {}
        for (shape, _), curve in sorted(by_kernel.items()):
            if len(curve) == len(MOE_TOKENS) and (shape not in curves or sum(map(math.log, curve.values()))
                                                  < sum(map(math.log, curves[shape].values()))):
                curves[shape] = curve
        keys = sorted(curves)
        kernel = ", ".join(sorted({k for (_, k), c in by_kernel.items() if len(c) == len(MOE_TOKENS)}))
        if not keys:
            continue
        t = table("moe", f"{name}_{distribution}" if uneven else name, gpu, framework, version, package_version,
                  path, rows["device"][0],
                  f"moe_dtype == {dtype}, distribution == {distribution}, moe_tp x moe_ep <= {MOE_MAX_GPUS}"
                  f"{', moe_ep > 1' if uneven else ''}, "
                  f"num_tokens on powers of two; per shape the fastest complete curve of: {kernel}",
                  [("tokens", "tokens into the layer (one attention replica's x attention DP)", MOE_TOKENS)],
                  [[curves[k][n] for n in MOE_TOKENS] for k in keys])
        rows_us = t.pop("latency_us")              # the keys before the rows they name
        t["keys"] = {"names": list(MOE_KEYS), "values": [list(k) for k in keys]}
        t["latency_us"] = rows_us
        out.append(t)
    return out


def comm_table(frame, kind: str, variant: str, gpu: str, framework: str, version: str, package_version: str,
               path: str, selection: str, element_bytes: int) -> dict:
    """A collective's table over (GPUs, message bytes)."""
    points: dict[tuple, float] = {}
    for ranks, size, ms in frame.select(["num_gpus", "message_size", "latency"]).iter_rows():
        if ms > 0:
            key = (ranks, size * element_bytes)
            points[key] = min(points.get(key, float("inf")), _sig(1000 * ms))
    axes = complete_grid(points, [sorted({k[0] for k in points}), sorted({k[1] for k in points})])
    return table(kind, variant, gpu, framework, version, package_version, path, frame["device"][0], selection,
                 [("gpus", "GPUs", axes[0]), ("bytes", "message bytes", axes[1])], grid_rows(points, axes))


def custom_allreduce_variants(frame) -> list[tuple[str, str, str]]:
    """(column, value, variant) per table of a framework's custom all-reduce file: vLLM and
    SGLang measure a CUDA-graph and an eager backend (``backend`` vllm_graph -> custom_graph),
    TensorRT-LLM its one allreduce op (no ``backend`` column; ``implementation`` trtllm -> custom,
    read by engine.deploy.measured in both phases)."""
    if "backend" in frame.columns:
        return [("backend", b, f"custom_{b.rsplit('_', 1)[-1]}") for b in sorted(frame["backend"].unique())]
    return [("implementation", b, "custom") for b in sorted(frame["implementation"].unique())]


def collect(root: Path, package_version: str) -> dict[Path, dict]:
    """Every table of the recipe: relative output path -> mapping."""
    import polars as pl
    recipe = RECIPES[package_version]
    data = root / "systems" / "data"
    out: dict[Path, dict] = {}

    def rel(p: Path) -> str:
        return str(p.relative_to(root.parent))

    def read(p: Path):
        if not p.is_file():
            raise Refused(f"{rel(p)}: missing from {PACKAGE} {package_version} — the recipe names it")
        return pl.read_parquet(p)

    for system, gpu in SYSTEMS.items():
        stem = gpu.lower()                                  # engine.deploy.measured.folder
        for framework, version in recipe.frameworks.items():
            folder = Path(stem) / f"{framework}-{version}"
            path = data / system / "gemm" / framework / version / "gemm_perf.parquet"
            for t in gemm_tables(read(path), gpu, framework, version, package_version, rel(path)):
                out[folder / f"gemm-{t['variant']}.yaml"] = t
            for phase, file in (("prefill", "context_attention_perf"), ("decode", "generation_attention_perf")):
                path = data / system / "attention" / framework / version / f"{file}.parquet"
                for t in attention_tables(read(path), phase, gpu, framework, version, package_version, rel(path)):
                    out[folder / f"{t['kernel']}-{t['variant']}.yaml"] = t
            mla = (("mla", "generation_mla_perf", mla_tables), ("mla", "context_mla_perf", context_mla_tables),
                   ("mla_bmm", "mla_bmm_perf", mla_bmm_tables)) if framework in recipe.mla else ()
            for op, file, tables in mla:
                path = data / system / op / framework / version / f"{file}.parquet"
                for t in tables(read(path), gpu, framework, version, package_version, rel(path)):
                    out[folder / f"{t['kernel']}-{t['variant']}.yaml"] = t
            path = data / system / "moe" / framework / version / "moe_perf.parquet"
            frame = read(path)
            for distribution in ("balanced",) + tuple(d for f, d in recipe.moe_routing if f == framework):
                for t in moe_tables(frame, gpu, framework, version, package_version, rel(path), distribution):
                    out[folder / f"moe-{t['variant']}.yaml"] = t
            path = data / system / "comm" / framework / version / "custom_allreduce_perf.parquet"
            frame = read(path)
            for column, backend, variant in custom_allreduce_variants(frame):
                rows = frame.filter(pl.col(column) == backend)
                dtype = rows["allreduce_dtype"][0]
                out[folder / f"all_reduce-{variant}.yaml"] = comm_table(
                    rows, "all_reduce", variant, gpu, framework, version, package_version, rel(path),
                    f"{column} == {backend} ({dtype})", ELEMENT_BYTES[dtype])
        path = data / system / "comm" / "nccl" / recipe.nccl / "nccl_perf.parquet"
        frame = read(path)
        for op, name in NCCL_OPS.items():
            rows = frame.filter((pl.col("op_name") == op) & (pl.col("nccl_dtype") == "half"))
            out[Path(stem) / f"nccl-{recipe.nccl}" / f"{name}-nccl.yaml"] = comm_table(
                rows, name, "nccl", gpu, "nccl", recipe.nccl, package_version, rel(path),
                f"op_name == {op}, nccl_dtype == half", ELEMENT_BYTES["half"])
    return out


def dump(mapping: dict) -> str:
    """The YAML text of one table (engine.deploy.measured_write.dump_yaml) under a header saying how it was made."""
    head = ("# Measured kernel times imported by benchmarks/import_kernels.py from the public "
            f"{PACKAGE} package; do not edit by hand\n# (re-run the import). Read by engine/deploy/measured.py.\n")
    return dump_yaml(mapping, head)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", help="folder the package was installed into (pip install --target)")
    parser.add_argument("--out", default=str(REPO / "gpus" / "measured"), help="output folder")
    args = parser.parse_args(argv)
    try:
        root, version = package_root(args.site)
        tables = collect(root, version)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    texts = {out / rel: dump(t) for rel, t in sorted(tables.items())}   # all made before one is written
    total = 0
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        total += len(text.encode())
    print(f"wrote {len(texts)} tables, {total:,} bytes, under {out} ({PACKAGE} {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
