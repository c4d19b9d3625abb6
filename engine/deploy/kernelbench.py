"""``archledger kernelbench``: measure the kernel classes of ``gpus/measured/`` on this machine.

Layer: engine.deploy. torch is optional (the ``oracle`` extra) and imported only when a bench
runs (:func:`require_torch`: absent, one line and exit 2). The tables written are the schema the
imported ones follow (engine.language.file_schemas.MEASURED, serialized by
engine.deploy.measured_write), so ``deploy``, ``plan`` and the build use a user's own tables
like the imported ones (engine.deploy.measured).

Invariants:

* **What is measured**: GEMM (``torch.nn.functional.linear``, bf16) over tokens x the corpus's
  (n, k) grid (engine.deploy.kernel_shapes); decode and prefill attention
  (``torch.nn.functional.scaled_dot_product_attention``, bf16 KV, grouped query heads, causal in
  prefill) per head size of the corpus, on the axes of the imported tables; NCCL all-reduce and
  all-gather (bf16, ``torch.distributed``) at 2, 4, 8 GPUs where at least 4 CUDA GPUs are
  visible (a table needs two GPU counts), else skipped with a one-line note.
* **Timing**: ``warmup`` calls, then the median of ``reps`` timed calls (fewer, at least 3, where
  they would take over :data:`BUDGET_S`): CUDA events around each call on cuda,
  ``time.perf_counter`` on cpu; a collective's time is the slowest rank's.
* **Writing** (:func:`write_tables`): every table is made before one is written; an existing
  file is refused without ``force``; the tables are written to a temporary folder beside the
  output, loaded there by the project's loader (engine.deploy.measured.load_measured, with the
  GPU files: a table of an unknown GPU, a zero latency or a broken grid is refused there), checked
  against the destination's other versions of the same kernel (the loader reads one per GPU,
  framework and kernel), and only then moved into place. Nothing is written on any refusal.
* **Provenance**: each file's ``source`` names the tool, torch's version, the device, the date,
  the command line and what was timed.
"""
from __future__ import annotations

import datetime
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.deploy.measured import folder, load_measured
from engine.deploy.measured_write import dump_yaml, grid_rows, sig4
from engine.language.errors import SpecError, Where

TOOL = "archledger kernelbench"
#: The one-line answer when torch is not installed.
NO_TORCH = "torch is not installed — kernelbench measures with it: pip install -e '.[oracle]'"
CLASSES = ("gemm", "attention", "nccl")

#: Attention axes of a full bench and of ``--quick`` (the imported tables' axes; values chosen so
#: the largest decode KV cache, 64 x 8 x 65536 x 128 bf16 K and V, is 17 GB).
DECODE = {"batch": [1, 4, 16, 64], "kv_heads": [1, 2, 4, 8], "q_per_kv": [1, 2, 4, 8],
          "ctx": [256, 1024, 4096, 16384, 65536]}
PREFILL = {"batch": [1, 2, 4, 8], "isl": [128, 512, 1024, 2048, 4096, 8192], "kv_heads": [1, 2, 4, 8],
           "q_per_kv": [1, 2, 4, 8]}
QUICK_DECODE = {"batch": [1, 2], "kv_heads": [1, 2], "q_per_kv": [1, 2], "ctx": [16, 64]}
QUICK_PREFILL = {"batch": [1, 2], "isl": [8, 32], "kv_heads": [1, 2], "q_per_kv": [1, 2]}
#: Collectives: GPU counts and message bytes (powers of two, divisible by every count x 2 bytes).
COLLECTIVE_GPUS = [2, 4, 8]
BYTES = [1 << i for i in range(10, 29, 2)]           # 1 KiB .. 256 MiB
QUICK_BYTES = [1 << 10, 1 << 20]
#: About the most seconds of timed calls per point (a 0.3 s GEMM is timed 3 times, not 20).
BUDGET_S = 1.0
UNITS = {"m": "tokens", "n": "output features", "k": "input features", "batch": "requests", "ctx": "cached tokens",
         "isl": "prompt tokens", "kv_heads": "KV heads per GPU", "q_per_kv": "query heads per KV head",
         "gpus": "GPUs", "bytes": "message bytes"}


class KernelbenchError(Exception):
    """Input or environment the bench cannot use: one line, exit 2."""


def require_torch():
    """torch, or :class:`KernelbenchError` with :data:`NO_TORCH`."""
    try:
        import torch
    except ImportError:
        raise KernelbenchError(NO_TORCH) from None
    return torch


@dataclass
class Bench:
    """One run's settings: the device, the repeats and what the files record."""

    torch: object
    device: str                          # "cpu" or "cuda"
    gpu: str                             # the `gpu:` name the tables are for
    framework: str
    version: str                         # the framework's version the tables are filed under
    command: str
    warmup: int = 3
    reps: int = 20
    notes: list[str] = field(default_factory=list)
    #: fewer calls for a slow kernel; off for a collective (every rank must make the same calls)
    adapt: bool = True

    @property
    def device_name(self) -> str:
        if self.device == "cuda":
            return self.torch.cuda.get_device_name()
        return f"cpu ({platform.processor() or platform.machine()}, {self.torch.get_num_threads()} threads)"

    def source(self, kernel: str, what: str) -> dict:
        """The ``source`` block of a table: the tool, torch, the device, the date, the command."""
        return {"package": "torch", "version": str(self.torch.__version__),
                "path": f"engine/deploy/kernelbench.py ({kernel})",
                "licence": "own measurement (no third-party data)",
                "licence_src": "measured on this machine by archledger kernelbench",
                "device": self.device_name, "selection": what, "tool": TOOL,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "command": self.command}

    def time(self, fn) -> float:
        """Median seconds of one call of ``fn`` after the warmup (the module's timing rule); a
        kernel slower than :data:`BUDGET_S` / reps per call gets fewer calls (at least 3)."""
        start = time.perf_counter()
        for _ in range(self.warmup):
            fn()
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        per_call = (time.perf_counter() - start) / max(self.warmup, 1)
        reps = self.reps if not self.adapt or per_call * self.reps <= BUDGET_S else max(3, int(BUDGET_S / per_call))
        if self.device == "cuda":
            return _cuda_median(self.torch, fn, reps)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)


def _cuda_median(torch, fn, reps: int) -> float:
    """Median seconds of ``fn`` timed by CUDA events around each call."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda.synchronize()
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) / 1000.0


def table(bench: Bench, kernel: str, variant: str, framework: str, version: str, what: str,
          axes: list[tuple[str, list]], points: dict[tuple, float]) -> dict:
    """One table mapping (the MEASURED schema) from measured seconds per grid point."""
    us = {key: sig4(s * 1e6) for key, s in points.items()}
    return {"kernel": kernel, "variant": variant, "gpu": bench.gpu, "framework": framework,
            "framework_version": version, "source": bench.source(kernel, what),
            "axes": [{"name": n, "unit": UNITS[n], "values": list(v)} for n, v in axes],
            "latency_us": grid_rows(us, [list(v) for _, v in axes])}


# -- the kernel classes -----------------------------------------------------------------------------

def gemm_table(bench: Bench, tokens: list[int], ns: list[int], ks: list[int]) -> dict:
    """bf16 ``linear`` (x [m, k] by weight [n, k]) at every (m, n, k) of the grid."""
    torch = bench.torch
    dt, dev = torch.bfloat16, bench.device
    points = {}
    with torch.inference_mode():
        for n in ns:
            for k in ks:
                w = torch.randn(n, k, dtype=dt, device=dev)
                for m in tokens:
                    x = torch.randn(m, k, dtype=dt, device=dev)
                    points[(m, n, k)] = bench.time(lambda: torch.nn.functional.linear(x, w))
                del w
    return table(bench, "gemm", "bf16", bench.framework, bench.version,
                 "torch.nn.functional.linear, bf16, m x n x k over the corpus's GEMM shapes",
                 [("m", tokens), ("n", ns), ("k", ks)], points)


def attention_tables(bench: Bench, head_dim: int, quick: bool) -> list[dict]:
    """Decode and prefill attention at ``head_dim`` over the module's axes (bf16 KV cache)."""
    torch = bench.torch
    sdpa = torch.nn.functional.scaled_dot_product_attention
    dt, dev = torch.bfloat16, bench.device
    out = []
    for kernel, axes in (("decode_attention", QUICK_DECODE if quick else DECODE),
                         ("prefill_attention", QUICK_PREFILL if quick else PREFILL)):
        points = {}
        names = list(axes)
        with torch.inference_mode():
            for combo in itertools.product(*axes.values()):
                a = dict(zip(names, combo))
                heads = a["kv_heads"] * a["q_per_kv"]
                queries, keys = (1, a["ctx"]) if kernel == "decode_attention" else (a["isl"], a["isl"])
                q = torch.randn(a["batch"], heads, queries, head_dim, dtype=dt, device=dev)
                k = torch.randn(a["batch"], a["kv_heads"], keys, head_dim, dtype=dt, device=dev)
                v = torch.randn_like(k)
                causal = kernel == "prefill_attention"
                points[combo] = bench.time(lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=True))
                del q, k, v
        what = (f"torch.nn.functional.scaled_dot_product_attention, bf16, head size {head_dim}, "
                + ("one query token per request over the cached tokens" if kernel == "decode_attention"
                   else "causal over the prompt"))
        out.append(table(bench, kernel, f"bf16_d{head_dim}", bench.framework, bench.version, what,
                         list(axes.items()), points))
    return out


def nccl_version(torch) -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _collective_counts(bench: Bench) -> list[int]:
    """The GPU counts of :data:`COLLECTIVE_GPUS` this machine can run (CUDA GPUs visible)."""
    visible = bench.torch.cuda.device_count() if bench.device == "cuda" else 0
    return [g for g in COLLECTIVE_GPUS if g <= visible]


def collective_tables(bench: Bench, quick: bool) -> list[dict]:
    """NCCL all-reduce and all-gather over (GPUs, message bytes); none (a note) with fewer than two
    GPU counts to measure (a table needs two values per axis)."""
    torch = bench.torch
    counts = _collective_counts(bench)
    if len(counts) < 2:
        visible = torch.cuda.device_count() if bench.device == "cuda" else 0
        bench.notes.append(f"nccl: skipped — {visible} CUDA GPU(s) visible; a table needs two GPU counts "
                           f"of {COLLECTIVE_GPUS} (at least 4 GPUs)")
        return []
    sizes = QUICK_BYTES if quick else BYTES
    points: dict[str, dict] = {"all_reduce": {}, "all_gather": {}}
    for world in counts:
        for (kind, size), seconds in _spawn_collectives(torch, world, sizes, bench.warmup, bench.reps).items():
            points[kind][(world, size)] = seconds
    version = nccl_version(torch)
    return [table(bench, kind, "nccl", "nccl", version,
                  f"torch.distributed {kind} (NCCL {version}), bf16, the slowest rank's median; bytes: "
                  + ("the tensor reduced" if kind == "all_reduce" else "the gathered output"),
                  [("gpus", counts), ("bytes", sizes)], points[kind]) for kind in points]


def _spawn_collectives(torch, world: int, sizes: list[int], warmup: int, reps: int, backend: str = "nccl") -> dict:
    """(kind, bytes) -> the slowest rank's median seconds at ``world`` ranks, one process per rank
    (``backend`` gloo: CPU processes, to check the plumbing without GPUs)."""
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        mp.spawn(_collective_worker, args=(world, port, sizes, warmup, reps, str(result), backend), nprocs=world,
                 join=True)
        rows = json.loads(result.read_text())
    return {(kind, size): seconds for kind, size, seconds in rows}


def _collective_worker(rank: int, world: int, port: int, sizes: list[int], warmup: int, reps: int,
                       result: str, backend: str = "nccl") -> None:
    """One rank of a collective bench (a spawned process): times each collective, rank 0 writes
    the slowest rank's medians."""
    import torch
    import torch.distributed as dist
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    bench = Bench(torch, device, "", backend, "", "", warmup=warmup, reps=reps, adapt=False)
    # all_gather_single (torch >= 2.13) is all_gather_into_tensor renamed
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rows = []
    for size in sizes:
        whole = torch.ones(size // 2, dtype=torch.bfloat16, device=device)
        part = torch.ones(size // 2 // world, dtype=torch.bfloat16, device=device)
        for kind, fn in (("all_reduce", lambda: dist.all_reduce(whole)),
                         ("all_gather", lambda: gather(whole, part))):
            t = torch.tensor([bench.time(fn)], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            rows.append((kind, size, float(t.item())))
    if rank == 0:
        Path(result).write_text(json.dumps(rows))
    dist.destroy_process_group()


# -- writing ----------------------------------------------------------------------------------------

HEAD = ("# Measured kernel times of this machine, written by `archledger kernelbench` (source: says the\n"
        "# device, torch, date and command); re-run it rather than edit. Read by engine/deploy/measured.py.\n")


def relpath(t: dict) -> Path:
    """Where a table lies under the measured root (engine.deploy.measured's layout)."""
    return Path(folder(t["gpu"])) / f"{t['framework']}-{t['framework_version']}" / f"{t['kernel']}-{t['variant']}.yaml"


def planned(bench: Bench, classes, head_dims: list[int]) -> list[Path]:
    """The files a run of ``classes`` will write (relative to the measured root), known before it
    measures: an existing one is refused before minutes of timing, not after."""
    place = Path(folder(bench.gpu)) / f"{bench.framework}-{bench.version}"
    out = [place / "gemm-bf16.yaml"] if "gemm" in classes else []
    if "attention" in classes:
        out += [place / f"{k}_attention-bf16_d{d}.yaml" for d in head_dims for k in ("decode", "prefill")]
    if "nccl" in classes and len(_collective_counts(bench)) >= 2:
        nccl = Path(folder(bench.gpu)) / f"nccl-{nccl_version(bench.torch)}"
        out += [nccl / f"{kind}-nccl.yaml" for kind in ("all_reduce", "all_gather")]
    return out


def refuse_existing(rels, out: Path, force: bool) -> None:
    """SpecError naming the first of ``rels`` already under ``out``, unless ``force``."""
    present = sorted(p for p in rels if (Path(out) / p).exists())
    if present and not force:
        raise SpecError(Where(str(Path(out) / present[0]), field="--out"), f"exists ({len(present)} of the tables "
                        "would be overwritten)", "pass --force to overwrite, or write elsewhere with --out DIR")


def write_tables(tables: list[dict], out: Path, gpus: dict, force: bool = False) -> list[Path]:
    """Write ``tables`` under ``out`` by the module's rule (staged, loaded, checked, then moved);
    returns the paths written. Refusals raise SpecError (one line, exit 2), nothing written."""
    out = Path(out)
    texts = {relpath(t): dump_yaml(t, HEAD) for t in tables}
    refuse_existing(texts, out, force)
    anchor = out
    while not anchor.exists():
        anchor = anchor.parent
    stage = Path(tempfile.mkdtemp(prefix=".kernelbench-", dir=anchor if anchor != out else out.parent))
    try:
        root = stage / "gpus" / "measured"
        for rel, text in texts.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        staged = load_measured(root, gpus)                        # the project's loader: schema, grid, GPU
        _refuse_other_versions(staged, out, root)
        written = []
        for rel in texts:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(root / rel, out / rel)
            written.append(out / rel)
        return written
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _refuse_other_versions(staged: dict, out: Path, root: Path) -> None:
    """A staged table whose GPU, framework, kernel and variant another version's file under ``out``
    already has: the loader would refuse the pair (it reads one)."""
    for gpu in sorted({key[0] for key in staged}):
        for key, there in load_measured(out, gpu=gpu).items():
            mine = staged.get(key)
            if mine is not None and Path(there.path).parent.name != Path(mine.path).parent.name:
                raise SpecError(Where(str(out / Path(there.path).relative_to(Path(there.path).parents[2])),
                                      field="framework_version"),
                                f"a {mine.name} table is already filed under another version",
                                "move that folder aside (deploy reads one version per framework), "
                                "or write elsewhere with --out DIR")


def say(text: str) -> None:
    """Progress on stderr (stdout keeps the summary)."""
    print(f"kernelbench: {text}", file=sys.stderr, flush=True)
