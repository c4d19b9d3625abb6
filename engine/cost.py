"""Speed-of-light cost of a device program: per step compute, memory and link time; SOL = their max.

Layer: engine. Steps hold per-device expressions in the scenario symbols (and the KV element size);
:func:`compile_program` turns a program into one numpy function evaluated over many scenario
points at once (the grid build's vectorized path and the single point of ``archledger deploy``
use the same code).

* t_compute = FLOPs / peak of the operands' dtype on this GPU (next wider native dtype if needed)
* t_memory  = (activation + cache + weight bytes) / HBM bandwidth
* t_comm    = bytes sent / link bandwidth (scale-up or scale-out, one direction)
* SOL(step) = max of the three, the bound is the largest term; a phase is the sum of its steps
  (no overlap between kernels is assumed: the bound is on each kernel, not on the schedule).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import sympy

from engine import symbols
from engine.hardware import GPU
from engine.placement import Program, Step

BOUNDS = ("compute", "memory", "comm")
#: Symbol for the bytes of one cache element: programs keep it free so one compiled program
#: serves every KV dtype (bound at evaluation).
KV_BYTES = symbols.dim("kv_bytes")
ARGS = tuple(symbols.dim(n) for n in symbols.SCENARIO_DIMS) + (KV_BYTES,)
_MODULES = [{"Min": np.minimum, "Max": np.maximum}, "numpy"]


def step_totals(step: Step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """Per device, all calls of the step: FLOPs, HBM bytes (weights included), link bytes, and the
    weight bytes among the HBM bytes (prefill logits: last token only)."""
    totals = (step.flops * step.repeat, step.total_bytes * step.repeat, step.comm_bytes * step.repeat,
              step.weight_bytes * step.repeat)
    if step.last_token:
        seq = symbols.dim(symbols.SEQ)
        totals = tuple(e.subs(seq, 1) for e in totals)
    return totals


class CompiledProgram:
    """A program's per-step totals as one numpy function of (batch, seq, ctx, kv_bytes).

    Compiled once per program (GPU-independent); a GPU only supplies the peaks, bandwidths and
    links the times divide by. Inputs broadcast: ``batch`` of shape (n, 1) and ``ctx`` of shape
    (1, m) evaluate the n x m grid, each sub-expression at the shape it depends on.
    """

    def __init__(self, program: Program):
        self.program = program
        totals = [step_totals(s) for s in program.steps]
        self._fn = sympy.lambdify(ARGS, [[t[i] for t in totals] for i in range(3)], modules=_MODULES)
        self._weights = [t[3] for t in totals]
        self._weights_fn = None
        self._rates: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}

    def rates(self, gpu: GPU) -> tuple[np.ndarray, np.ndarray, float]:
        """Per step: peak FLOP/s of its operand dtype and its link's bytes/s; and HBM bytes/s."""
        if gpu.key not in self._rates:
            steps = self.program.steps
            self._rates[gpu.key] = (np.array([gpu.peak_flops(s.compute_dtype) for s in steps]),
                                    np.array([link_bandwidth(gpu, s.link) for s in steps]),
                                    gpu.hbm_bytes_per_s)
        return self._rates[gpu.key]

    def evaluate(self, gpu: GPU, batch, seq, ctx, kv_bytes, weights: bool = False) -> dict[str, np.ndarray]:
        """Arrays of shape (steps, *broadcast shape): flops, bytes, comm_bytes, t_compute, t_memory,
        t_comm, t_sol (and weight_bytes when asked)."""
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        flops, traffic, comm = (np.stack([np.broadcast_to(np.asarray(v, dtype=float), shape) for v in part])
                                for part in self._fn(*args))
        peaks, links, hbm = self.rates(gpu)
        expand = (slice(None),) + (None,) * len(shape)
        t_compute, t_memory, t_comm = flops / peaks[expand], traffic / hbm, comm / links[expand]
        out = {"flops": flops, "bytes": traffic, "comm_bytes": comm, "t_compute": t_compute,
               "t_memory": t_memory, "t_comm": t_comm,
               "t_sol": np.maximum(np.maximum(t_compute, t_memory), t_comm)}
        if weights:
            if self._weights_fn is None:
                self._weights_fn = sympy.lambdify(ARGS, self._weights, modules=_MODULES)
            out["weight_bytes"] = np.stack([np.broadcast_to(np.asarray(v, dtype=float), shape)
                                            for v in self._weights_fn(*args)])
        return out


def link_bandwidth(gpu: GPU, link: str) -> float:
    if link == "scale_up":
        return gpu.scale_up_bytes_per_s
    if link == "scale_out":
        return gpu.scale_out_bytes_per_s
    return float("inf")


def compile_program(program: Program) -> CompiledProgram:
    return CompiledProgram(program)


def bound_of(t_compute: float, t_memory: float, t_comm: float) -> str:
    """Which term bounds a step or a phase (ties go to the earlier term)."""
    values = (t_compute, t_memory, t_comm)
    return BOUNDS[int(np.argmax(values))]


def intensity(flops: float, traffic: float) -> float:
    """Arithmetic intensity in FLOP per HBM byte (inf when nothing is read)."""
    return flops / traffic if traffic else float("inf")


def scenario_point(phase: str, input_len: int, output_len: int) -> Mapping[str, int]:
    """The (seq, ctx) a phase runs at: prefill the prompt; decode one token at the last position."""
    if phase == "prefill":
        return {"seq": input_len, "ctx": input_len}
    return {"seq": 1, "ctx": input_len + output_len}
