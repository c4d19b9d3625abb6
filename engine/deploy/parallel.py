"""Parallel configurations, the device mesh they define, and which ones a model allows.

Layer: engine.deploy. Devices are ranked ``((replica * pp + stage) * cp + cp_rank) * tp + tp_rank``: the
TP group is innermost (contiguous), then context parallel, then pipeline stages, then whole-model
replicas (``dp``). The TP group of ``tp`` devices is read two ways, as in SGLang and vLLM:

* outside the routed experts it is ``dp_attn`` attention replicas (each a block of
  ``attn_tp = tp / dp_attn`` consecutive ranks) — requests are split over the replicas, heads and
  feature axes over ``attn_tp``;
* inside the routed experts it is ``ep`` expert groups of ``moe_tp = tp / ep`` consecutive
  ranks — experts are split over ``ep``, expert feature axes over ``moe_tp``.

A :class:`Group` is a set of ranks that share a collective: a mesh dim (``tp`` or ``cp``), a
stride and a size. Groups that tile each other are merged (``ep`` x ``moe_tp`` = the whole TP
group), so "partial over the experts' group" and "partial over TP" are recognised as the same
devices when they are.
"""
from __future__ import annotations

import math

import numbers
from dataclasses import dataclass, field
from itertools import product

from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import sympy   # annotations; imported where used (a stored deploy never loads sympy)

from engine.language import symbols
from engine.language.errors import SpecError, Where

CP_KINDS = ("ring", "ulysses")
#: Which group a parallel world (the dims table's ``shard:``) uses, per region of the model.
REGION_WORLDS = {
    "default": {"dp": "dp_attn", "tp": "attn_tp", "cp": "cp"},
    "experts": {"ep": "ep", "tp": "moe_tp", "cp": "cp"},
}
#: Roles whose ops run in the experts region.
EXPERT_ROLES = frozenset({"experts"})
#: Most GPUs one deployment (every degree, and their product) may span. Far above any real
#: deployment of one model, and low enough that enumerating configs (divisors of the count) and
#: every count, byte and FLOP derived from it stay small and exact.
MAX_GPUS = 4096
DEGREES = ("tp", "ep", "dp_attn", "pp", "cp", "dp")


def is_count(value, low: int, high: int) -> bool:
    """An integer in [low, high]; ``bool`` is refused although Python counts it as an int."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and low <= value <= high


@dataclass(frozen=True, slots=True)
class ParallelConfig:
    """One way to place a model on ``n_gpus`` devices (see the module doc for the mesh)."""

    tp: int = 1
    ep: int = 1
    dp_attn: int = 1
    pp: int = 1
    cp: int = 1
    cp_kind: str = "ring"
    dp: int = 1
    gpus_per_node: int | None = None

    def __post_init__(self):
        """Refuse malformed degrees at construction (a zero would divide by zero later, a huge one
        would enumerate for minutes or overflow): one line naming the command-line option."""
        for name in DEGREES:
            value = getattr(self, name)
            if not is_count(value, 1, MAX_GPUS):
                raise SpecError(Where("<command line>", field="--" + name.replace("_", "-")),
                                f"{name} must be an integer from 1 to {MAX_GPUS}, got {repr(value)[:60]}",
                                f"write e.g. --{name.replace('_', '-')} 8 (degrees are GPU counts, at most {MAX_GPUS})")
        if self.gpus_per_node is not None and not is_count(self.gpus_per_node, 1, MAX_GPUS):
            got = repr(self.gpus_per_node)[:60]
            raise SpecError(Where("<command line>", field="--gpus-per-node"),
                            f"gpus_per_node must be an integer from 1 to {MAX_GPUS}, got {got}",
                            "write e.g. --gpus-per-node 8, or leave it out for the GPU's scale-up domain")
        if self.n_gpus > MAX_GPUS:
            raise SpecError(Where("<command line>", field="--gpus"),
                            f"{self.n_gpus} GPUs (dp x pp x cp x tp) is more than {MAX_GPUS}",
                            f"use at most {MAX_GPUS} GPUs in one deployment")

    @property
    def n_gpus(self) -> int:
        return self.dp * self.pp * self.cp * self.tp

    @property
    def attn_tp(self) -> int:
        return self.tp // self.dp_attn

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep

    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        for name in ("ep", "dp_attn", "pp", "cp", "dp"):
            if getattr(self, name) > 1:
                parts.append(f"{name}{getattr(self, name)}")
        if self.cp > 1:
            parts.append(self.cp_kind)
        return "-".join(parts)

    def problems(self) -> list[str]:
        """Reasons this config is malformed on its own (before looking at a model); each degree is
        already an integer in range (``__post_init__``)."""
        out = []
        if self.tp % self.dp_attn:
            out.append(f"dp_attn {self.dp_attn} does not divide tp {self.tp} "
                       "(attention replicas split the TP group)")
        if self.tp % self.ep:
            out.append(f"ep {self.ep} does not divide tp {self.tp} (expert groups split the TP group)")
        if self.cp_kind not in CP_KINDS:
            out.append(f"unknown cp kind {self.cp_kind!r}; use one of {', '.join(CP_KINDS)}")
        return out


def _one():
    import sympy
    return sympy.Integer(1)        # sympy's one (a singleton): sympy is imported when a group is made


@dataclass(frozen=True, slots=True)
class Group:
    """Ranks sharing a collective: ``size`` ranks at ``stride`` along mesh dim ``dim``.

    ``size`` is the decided integer; ``expr`` is the same size in the current binding (a number,
    or a formula over the degree symbols ``tp``, ``ep``, ``dp_attn``, ``cp`` ...).
    """

    name: str = field(compare=False)   # groups are equal when they hold the same ranks
    dim: str = ""
    stride: int = 1
    size: int = 1
    expr: sympy.Expr = field(default_factory=_one, compare=False)

    @property
    def key(self) -> tuple:
        return (self.dim, self.stride, self.size)

    def __str__(self) -> str:
        return self.name


class Mesh:
    """A config's named groups, sizes in a binding, and the link each group's traffic crosses."""

    def __init__(self, config: ParallelConfig, domain: int, symbolic: bool = False):
        import sympy
        self.config = config
        self.domain = domain
        c = config

        def deg(name: str, value: int) -> sympy.Expr:
            # a degree of 1 stays out of the formulas (it divides nothing)
            return symbols.dim(name) if symbolic and value > 1 else sympy.Integer(value)

        tp, ep, dpa, cp = deg("tp", c.tp), deg("ep", c.ep), deg("dp_attn", c.dp_attn), deg("cp", c.cp)
        self.degrees = {"tp": tp, "ep": ep, "dp_attn": dpa, "cp": cp, "pp": deg("pp", c.pp), "dp": deg("dp", c.dp)}
        groups = [
            Group("tp", "tp", 1, c.tp, tp),
            Group("attn_tp", "tp", 1, c.attn_tp, tp / dpa),
            Group("dp_attn", "tp", c.attn_tp, c.dp_attn, dpa),
            Group("moe_tp", "tp", 1, c.moe_tp, tp / ep),
            Group("ep", "tp", c.moe_tp, c.ep, ep),
            Group("cp", "cp", 1, c.cp, cp),
        ]
        self.groups = {g.name: g for g in groups}
        self._by_key: dict[tuple, Group] = {}
        for g in groups:  # first name wins: "tp" names the whole TP group however it is reached
            self._by_key.setdefault(g.key, g)

    def world_group(self, world: str, region: str) -> Group | None:
        """The group a parallel world shards over in ``region`` (None if that world is size 1 there)."""
        name = REGION_WORLDS[region].get(world)
        if name is None:
            return None
        group = self.groups[name]
        if group.size == 1:
            return None
        # attention or expert TP spanning the whole TP group is just "tp"
        return self.groups["tp"] if name in ("attn_tp", "moe_tp") and group == self.groups["tp"] else group

    def canonical(self, groups) -> tuple[Group, ...]:
        """Drop size-1 groups and merge groups that tile a larger one (``ep`` x ``moe_tp`` = ``tp``)."""
        if not groups:      # most partial-sum tuples placement asks about are empty
            return ()
        items = sorted((g for g in groups if g.size > 1), key=lambda g: (g.dim, g.stride))
        merged: list[Group] = []
        for g in items:
            if merged and merged[-1].dim == g.dim and merged[-1].stride * merged[-1].size == g.stride:
                last = merged.pop()
                key = (g.dim, last.stride, last.size * g.size)
                g = self._by_key.get(key) or Group(f"{last.name}*{g.name}", g.dim, last.stride,
                                                    last.size * g.size, last.expr * g.expr)
            merged.append(g)
        return tuple(merged)

    def span(self, groups) -> int:
        """How many consecutive ranks the group(s) reach across (for the link decision)."""
        span = 1
        for g in self.canonical(groups):
            stride = g.stride * (self.config.tp if g.dim == "cp" else 1)
            span = max(span, stride * g.size)
        return span

    def extent(self, groups) -> dict[str, int]:
        """``ranks`` in the group(s) and ``nodes``: the scale-up domains they reach across."""
        ranks = math.prod(g.size for g in self.canonical(groups))
        return {"ranks": ranks, "nodes": max(1, -(-self.span(groups) // self.domain))}

    def link(self, groups) -> str:
        """``scale_up`` when every member sits in one scale-up domain, else ``scale_out``."""
        return "scale_up" if self.span(groups) <= self.domain else "scale_out"


def enumerate_configs(n_gpus: int, *, moe: bool, max_pp: int = 8, max_cp: int = 8,
                      cp_kinds=CP_KINDS, gpus_per_node: int | None = None):
    """Every config of ``n_gpus`` devices made of powers-of-two degrees (structure only).

    Model-specific legality (heads, experts, layers divisible) is :func:`engine.deploy.check`'s job;
    this yields candidates whose degrees multiply up to ``n_gpus`` and nest correctly.
    """
    powers = [1 << i for i in range(0, 12) if (1 << i) <= n_gpus]
    for tp, pp, cp, dp in product(powers, repeat=4):
        if tp * pp * cp * dp != n_gpus or pp > max_pp or cp > max_cp:
            continue
        for dp_attn in (d for d in powers if d <= tp and tp % d == 0):
            for ep in (e for e in powers if e <= tp and tp % e == 0):
                if ep > 1 and not moe:
                    continue
                for kind in (cp_kinds if cp > 1 else ("ring",)):
                    yield ParallelConfig(tp=tp, ep=ep, dp_attn=dp_attn, pp=pp, cp=cp, cp_kind=kind, dp=dp,
                                         gpus_per_node=gpus_per_node)
