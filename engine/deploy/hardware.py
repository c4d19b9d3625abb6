"""The accelerator table: one YAML file per GPU under ``gpus/``, read into SI units.

Layer: engine.deploy. A file gives dense peak TFLOPS per dtype, HBM capacity (decimal GB) and bandwidth
(TB/s), the scale-up link (the vendor's per-GPU figure, both directions together, and the size of
the domain it spans) and scale-out bandwidth (one direction). Any number may be written as
``{value: X, alt: Y, note: "..."}`` when sources disagree: ``value`` is used, ``alt`` is kept and
shown. Adding a GPU is adding one file; nothing here names a GPU.

Each link also names its hardware class (``hw: nvlink | pci | net | xgmi``) for the per-call
latency of collectives: ``gpus/collectives/nccl.yaml`` holds NCCL's tuner constants and
:meth:`CollectiveModel.latency` its formulas (alpha; the bandwidth term is engine.deploy.cost's).
"""
from __future__ import annotations

import functools

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.project import PACKAGE_ROOT
from engine.language import file_schemas
from engine.language.names import check_name, refuse_symlinks, shown_value
from engine.language.reader import Reader
from engine.language.errors import SpecError, Where
from engine.language.filememo import ContentMemo
from engine.deploy.parallel import MAX_GPUS

DEFAULT_ROOT = PACKAGE_ROOT / "gpus"
#: The collective latency model, shared by every GPU file (a ``--gpus`` folder may bring its own).
COLLECTIVES_FILE = Path("collectives") / "nccl.yaml"
#: A link's hardware class when its file does not name one.
DEFAULT_HW = {"scale_up": "nvlink", "scale_out": "net"}

#: Compute dtypes from narrowest to widest (GPU.compute_dtype: which one a matmul runs at).
COMPUTE_DTYPES = ("fp4", "fp8", "bf16")


@dataclass(frozen=True, slots=True)
class Figure:
    """A published number with the disagreeing figure it was chosen over (if any)."""

    value: float
    alt: float | None = None
    note: str = ""
    estimate: bool = False


@dataclass(frozen=True, slots=True)
class CollectiveModel:
    """Per-call latency of a collective (seconds), NCCL's tuner model (``gpus/collectives/nccl.yaml``).

    Invariant: latency grows with ranks and nodes and is never below the algorithm's base
    latency; ``all_reduce`` takes the cheaper of ring and tree, as NCCL's tuner does."""

    base: dict[str, float]                # algorithm -> seconds
    hop: dict[str, dict[str, float]]      # hardware class -> algorithm -> seconds per step
    src: str

    def latency(self, op: str, ranks: int, nodes: int, intra: str, inter: str) -> float:
        """Alpha of one ``op`` call over ``ranks`` ranks spread on ``nodes`` scale-up domains whose
        links are of class ``intra`` (inside a domain) and ``inter`` (between domains)."""
        if ranks <= 1:
            return 0.0
        n, N = ranks, max(nodes, 1)
        near, far = self.hop[intra], self.hop[inter]

        def ring_steps(total: int, crossing: int) -> float:
            return (total - crossing) * near["ring"] + crossing * far["ring"]

        if op == "all_reduce":
            by_ring = self.base["ring"] + ring_steps(2 * (n - 1), 2 * (N - 1))
            by_tree = self.base["tree"] + 2 * ((n // N - 1) * near["tree"] + math.log2(N) * far["tree"])
            return min(by_ring, by_tree)
        if op in ("all_gather", "reduce_scatter"):
            return self.base["ring"] + ring_steps(n - 1, N - 1)
        # point-to-point rounds, each as slow as its slowest (network) link: all_to_all and
        # send_recv are one round of concurrent sends, ring_pass n - 1 rounds around the ring
        rounds = n - 1 if op == "ring_pass" else 1
        return rounds * (self.base["ring"] + (far if N > 1 else near)["ring"])


def load_collectives(root: Path) -> CollectiveModel:
    """The latency table under ``root`` (or the repo's, when a GPU folder brings none)."""
    path = _collectives_file(root)
    data = Reader(path, path.parent, file_schemas.COLLECTIVES).data   # kinds and ranges: its schema
    hop = {hw: {a: _figure(row[a]).value * 1e-6 for a in ("ring", "tree")} for hw, row in data["hop_us"].items()}
    return CollectiveModel({a: _figure(data["base_us"][a]).value * 1e-6 for a in ("ring", "tree")},
                           hop, data["src"])


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator in SI units (FLOP/s, bytes, bytes/s)."""

    key: str
    name: str
    vendor: str
    arch: str
    doc: str
    peak: dict[str, Figure]          # TFLOPS figures by dtype (as written)
    hbm: Figure                       # GB
    hbm_bw: Figure                    # TB/s
    scale_up_link: str
    scale_up: Figure                  # GB/s, both directions
    scale_up_domain: int
    scale_out_link: str
    scale_out: Figure                 # GB/s, one direction
    sources: tuple[str, ...]
    where: Where
    scale_up_hw: str = "nvlink"       # hardware class of each link (collective latency)
    scale_out_hw: str = "net"
    collectives: CollectiveModel | None = None
    hbm_reported: Figure | None = None  # MiB, the total the driver reports (nvidia-smi), if on file
    price_usd_per_hour: float | None = None  # on-demand price of one GPU for an hour, if a source is on file
    price_src: str = ""                      # where that price was read (provider page, instance, date)

    def collective_latency(self, op: str, ranks: int, nodes: int) -> float:
        """Seconds of fixed cost per call of collective ``op`` (0 without a latency model)."""
        if self.collectives is None:
            return 0.0
        return self.collectives.latency(op, ranks, nodes, self.scale_up_hw,
                                        self.scale_out_hw if nodes > 1 else self.scale_up_hw)

    @property
    def hbm_bytes(self) -> float:
        """Capacity the runtime sees: the driver's reported total (``hbm_mib``, MiB; every GPU file
        states it, or an estimate marked so), else (a GPU built in code without one) the datasheet's
        decimal GB (a lower bound: "80 GB" parts report 80 GiB or close)."""
        if self.hbm_reported is not None:
            return self.hbm_reported.value * 2**20
        return self.hbm.value * 1e9

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_bw.value * 1e12

    @property
    def scale_up_bytes_per_s(self) -> float:
        """One direction of the scale-up link (collectives send and receive at the same time)."""
        return self.scale_up.value * 1e9 / 2

    @property
    def scale_out_bytes_per_s(self) -> float:
        return self.scale_out.value * 1e9

    def compute_dtype(self, operands: str) -> str:
        """The native dtype a matmul runs at, from its operand classes ``weights[/activations]``
        (a quant scheme's ``compute`` and ``activations``).

        Where the GPU has tensor cores for the weights' class, the matmul runs at the wider of the
        two operands (each at its nearest native dtype): FP8 W8A8 at FP8 on Hopper, MXFP4 weights
        with BF16 activations (W4A16) at BF16 even on Blackwell. Where it has none, frameworks run
        weight-only kernels that dequantize to BF16 (Marlin: FP8 on Ampere, FP4 on Hopper)."""
        return _native_dtype(tuple(self.peak), operands)

    def peak_flops(self, dtype: str) -> float:
        """Dense FLOP/s for operands of ``dtype`` (at the native dtype it runs in)."""
        return self.peak[self.compute_dtype(dtype)].value * 1e12


@functools.lru_cache(maxsize=1024)
def _native_dtype(native: tuple[str, ...], operands: str) -> str:
    """:meth:`GPU.compute_dtype` for a GPU whose peak table lists ``native`` (memoized: the per-op
    tables ask it for every step of every plan)."""
    weights, _, acts = operands.partition("/")
    for dtype in (weights, acts or weights):
        if dtype not in COMPUTE_DTYPES:
            raise ValueError(f"unknown compute dtype {dtype!r}; use one of {', '.join(COMPUTE_DTYPES)}")
    if weights not in native:
        return "bf16"
    act = acts or weights
    native_act = next(d for d in COMPUTE_DTYPES[COMPUTE_DTYPES.index(act):] if d in native)
    return max(weights, native_act, key=COMPUTE_DTYPES.index)


def _figure(value: Any) -> Figure:
    """A figure as written (a number, or ``{value, alt, note, estimate}``), already checked for kind
    and physical range by the file's schema (engine.language.file_schemas.figure)."""
    if isinstance(value, dict):
        alt = value.get("alt")
        return Figure(float(value["value"]), None if alt is None else float(alt), value.get("note", ""),
                      value.get("estimate", False))
    return Figure(float(value))


def _hw(reader: Reader, link: dict, field: str, classes) -> str:
    hw = link.get("hw", DEFAULT_HW[field])
    if hw not in classes:
        raise SpecError(reader.where(link, f"{field}.hw", "hw"), f"unknown link class {shown_value(hw)}",
                        "use one of: " + ", ".join(classes) + f" (the classes of gpus/{COLLECTIVES_FILE})")
    return hw


def load_gpu(path: Path, root: Path, collectives: CollectiveModel | None = None) -> GPU:
    """One GPU file; kinds, fields and the physical range of every figure are its schema's
    (engine.language.file_schemas.GPU), the rules across fields are checked here."""
    reader = Reader(path, root, file_schemas.GPU)
    data = reader.data
    peak = data["peak_tflops"]
    for dtype in peak:
        if dtype not in COMPUTE_DTYPES:
            raise SpecError(reader.where(peak, f"peak_tflops.{dtype}", dtype), f"unknown dtype {dtype!r}",
                            "use one of: " + ", ".join(COMPUTE_DTYPES))
    if "bf16" not in peak:
        raise SpecError(reader.where(data, "peak_tflops", "peak_tflops"), "missing bf16",
                        "every GPU needs a BF16 figure (mark an estimate with `estimate: true`)")
    up, out = data["scale_up"], data["scale_out"]
    collectives = collectives or load_collectives(root)
    domain = up["domain"]
    if domain > MAX_GPUS:
        raise SpecError(reader.where(up, "scale_up.domain", "domain"), f"expected a GPU count, got {shown_value(domain)}",
                        f"write `domain: 8` (GPUs one scale-up link connects, 1 to {MAX_GPUS})")
    # the key names site files (data/deploy/<model>/<gpu>.json): one name, never a path
    key = check_name(data["gpu"], reader.where(data, "gpu", "gpu"), "GPU name", "`gpu: H200`")
    return GPU(key=key, name=data["name"], vendor=data["vendor"], arch=data["arch"], doc=data["doc"],
               peak={d: _figure(peak[d]) for d in peak},
               hbm=_figure(data["hbm_gb"]), hbm_bw=_figure(data["hbm_tb_s"]),
               scale_up_link=up["link"], scale_up=_figure(up["gb_s"]),
               scale_up_domain=domain, scale_out_link=out["link"], scale_out=_figure(out["gb_s"]),
               sources=tuple(data.get("sources") or ()), where=reader.where(data),
               scale_up_hw=_hw(reader, up, "scale_up", collectives.hop),
               scale_out_hw=_hw(reader, out, "scale_out", collectives.hop), collectives=collectives,
               hbm_reported=_figure(data["hbm_mib"]),   # required by the schema
               **_price(data))


def _price(data: dict) -> dict[str, Any]:
    """``price: {usd_per_hour: X, src: "..."}``: one GPU's on-demand hourly price and where it was read
    (the schema refuses a price without its source: $/M tokens are only as good as the price behind them)."""
    if "price" not in data:
        return {}
    price = data["price"]
    return {"price_usd_per_hour": _figure(price["usd_per_hour"]).value, "price_src": price["src"].strip()}


def load_gpus(root: Path | str | None = None) -> dict[str, GPU]:
    """Every GPU file under ``root`` (default: the repo's ``gpus/``), keyed by its ``gpu:`` name."""
    root = Path(root) if root else DEFAULT_ROOT
    refuse_symlinks(root, root, root.name)   # a linked GPU file could read any file of the machine
    # once per process and content of the files read (a build asks per model); GPU values are
    # frozen, the dict is each caller's own
    files = [*sorted(root.glob("*.yaml")), root / COLLECTIVES_FILE, _collectives_file(root)]
    return dict(_GPUS.get(("gpus", str(root)), files, lambda: _load_gpus(root)))


_GPUS = ContentMemo()


def _collectives_file(root: Path) -> Path:
    """The latency table a GPU folder uses: its own, else the repo's."""
    path = root / COLLECTIVES_FILE
    return path if path.exists() else DEFAULT_ROOT / COLLECTIVES_FILE


def _load_gpus(root: Path) -> dict[str, GPU]:
    gpus: dict[str, GPU] = {}
    collectives = load_collectives(root)
    for path in sorted(root.glob("*.yaml")):
        gpu = load_gpu(path, root, collectives)
        if gpu.key in gpus:
            raise SpecError(gpu.where.at("gpu"), f"GPU {gpu.key!r} is declared twice",
                            f"also in {gpus[gpu.key].where.file}; keep one")
        gpus[gpu.key] = gpu
    return gpus


def find_gpu(gpus: dict[str, GPU], name: str) -> GPU:
    """A GPU by its name, case-insensitively; an unknown name lists the known ones."""
    for key, gpu in gpus.items():
        if key.lower() == name.lower():
            return gpu
    raise SpecError(Where("<command line>", field="--gpu"), f"unknown GPU {name!r}",
                    "known: " + ", ".join(sorted(gpus)))
