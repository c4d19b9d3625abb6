"""The device program placement builds: per-device steps, their layouts, the program of a phase.

Layer: engine.deploy. :class:`Step` is one kernel or collective of one device, per call, its sizes
sympy expressions of the binding it was built from; :class:`Program` a phase's steps in execution
order with every row's :class:`Layout` and stored weight bytes; :class:`DeviceTypes` the element
sizes of what is not a weight. Invariants: every type is frozen (placement, fusion, transport and
cost share step objects between programs and key memos by them), and :func:`step_with` builds the
step ``dataclasses.replace`` would.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy

from engine.deploy.expert_comm import Routing
from engine.deploy.parallel import Group
from engine.language.shapes import Tensor

ONE = sympy.Integer(1)
ZERO = sympy.Integer(0)
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "ring_pass", "send_recv")


@dataclass(frozen=True, slots=True)
class Layout:
    """Per axis, the groups splitting it (outermost first); plus the groups holding partial sums."""

    shards: tuple[tuple[Group, ...], ...]
    partial: tuple[Group, ...] = ()

    @staticmethod
    def replicated(rank: int) -> "Layout":
        return Layout(tuple(() for _ in range(rank)))

    def groups(self) -> set[Group]:
        return {g for axis in self.shards for g in axis} | set(self.partial)

    def describe(self, tensor: Tensor) -> str:
        parts = [f"{a.name}/{'*'.join(g.name for g in gs)}" for a, gs in zip(tensor.axes, self.shards) if gs]
        if self.partial:
            parts.append("partial:" + "*".join(g.name for g in self.partial))
        return ", ".join(parts) or "replicated"


@dataclass(frozen=True, slots=True)
class Step:
    """One kernel (or collective) of a device's program, per call; ``repeat`` calls per step.

    ``flops``/``bytes``/``weight_bytes``/``comm_bytes`` are per device and per call. ``bytes`` is
    the HBM traffic of activations and caches (inputs read + outputs written); ``weight_bytes``
    the weights read (experts: only those routed tokens touch). ``comm_bytes`` is what the device
    sends on ``link`` with the collective's algorithm factor already applied.
    """

    uid: str
    name: str
    op: str
    kind: str                       # compute | comm | fused
    role: str
    component: str
    component_uid: str
    repeat: sympy.Expr
    inputs: tuple[str, ...]
    flops: sympy.Expr
    bytes: sympy.Expr
    weight_bytes: sympy.Expr
    comm_bytes: sympy.Expr
    compute_dtype: str
    layout: Layout
    out: Tensor
    out_read: sympy.Expr            # bytes a consumer reads when it reads this step's output
    group: str = ""
    link: str = ""
    view: bool = False
    written: sympy.Expr = ZERO      # bytes this step writes (a cache step: only the new tokens)
    parts: tuple[str, ...] = ()     # fused: the member step uids
    dims: Mapping[str, sympy.Expr] = field(default_factory=dict)
    last_token: bool = False        # prefill computes it for the last position only (logits)
    collective: str = ""            # the collective this step runs (alone or fused), its ranks and
    ranks: int = 1                  # the scale-up domains they span: its per-call latency
    nodes: int = 1                  # (GPU.collective_latency)
    routing: Routing | None = None  # an expert all-to-all: its expert_comm.Routing (a framework's
                                    # transport re-prices it, engine.deploy.expert_comm.transport)

    @property
    def total_bytes(self) -> sympy.Expr:
        return self.bytes + self.weight_bytes


_SET = object.__setattr__
_STEP_FIELDS = Step.__slots__


def step_with(step: Step, **changes) -> Step:
    """``dataclasses.replace(step, **changes)`` at half its cost: a new Step holding ``step``'s
    fields but ``changes`` (Step has no ``__post_init__`` and every field is an ``__init__``
    argument, so the two build equal steps; fusion renames inputs of tens of thousands of steps)."""
    new = object.__new__(Step)
    for name in _STEP_FIELDS:
        _SET(new, name, changes[name] if name in changes else getattr(step, name))
    return new


@dataclass(frozen=True, slots=True)
class Program:
    """A phase's per-device program: steps in execution order, plus the layout of every row."""

    phase: str
    steps: tuple[Step, ...]
    layouts: Mapping[str, Layout]
    stored: Mapping[str, sympy.Expr] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceTypes:
    """Element sizes of what is not a weight: activations and cache entries."""

    act_bytes: int = 2
    kv_bytes: int = 2

    @property
    def partial_bytes(self) -> int:
        """Element size of partial sums on the wire: at least BF16's 2 bytes. An FP8 GEMM writes
        its output at BF16 and the reduction of a row-parallel GEMM's partial sums runs on that
        output; FP8 comes after the reduction (TensorRT-LLM's all-reduce + RMSNorm + FP8-quant
        fusion, AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8, and vLLM's
        AllReduceFusedAddRMSNormStaticQuantFP8Pattern take the BF16 sum and quantize the norm's
        output), so ``act_dtype fp8`` does not halve an all-reduce or reduce-scatter message."""
        return max(self.act_bytes, 2)


def layout_of(step: Step) -> Layout:
    return step.layout
