"""Speed-of-light cost of a device program: per step compute, memory and link time; SOL = their max.

Layer: engine. Steps hold per-device expressions in the scenario symbols; :func:`compile_program`
turns a program into one numpy function evaluated over many scenario points at once (the grid
build's vectorized path and the single point of ``archledger deploy`` use the same code).

* t_compute = FLOPs / peak of the operands' dtype on this GPU (next wider native dtype if needed)
* t_memory  = (activation + cache + weight bytes) / HBM bandwidth
* t_comm    = bytes sent / link bandwidth (scale-up or scale-out, one direction)
* SOL(step) = max of the three, the bound is the largest term; a phase is the sum of its steps
  (no overlap between kernels is assumed: the bound is on each kernel, not on the schedule).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import sympy

from engine import symbols
from engine.hardware import GPU
from engine.placement import Program, Step

BOUNDS = ("compute", "memory", "comm")
SCENARIO = tuple(symbols.dim(n) for n in symbols.SCENARIO_DIMS)


def step_totals(step: Step) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """Per device, all calls of the step: FLOPs, HBM bytes (weights included), link bytes, and the
    weight bytes among the HBM bytes (prefill logits: last token only)."""
    totals = (step.flops * step.repeat, step.total_bytes * step.repeat, step.comm_bytes * step.repeat,
              step.weight_bytes * step.repeat)
    if step.last_token:
        seq = symbols.dim(symbols.SEQ)
        totals = tuple(e.subs(seq, 1) for e in totals)
    return totals


@dataclass(frozen=True, slots=True)
class CompiledProgram:
    """A program's step totals as one vectorized function of (batch, seq, ctx)."""

    program: Program
    peaks: np.ndarray       # FLOP/s per step
    links: np.ndarray       # bytes/s per step (inf for steps without traffic)
    hbm: float
    fn: object

    def evaluate(self, batch, seq, ctx) -> dict[str, np.ndarray]:
        """Arrays of shape (steps, points): flops, bytes, comm_bytes, weight_bytes, t_compute, t_memory,
        t_comm, t_sol."""
        shape = np.broadcast(np.asarray(batch), np.asarray(seq), np.asarray(ctx)).shape
        raw = self.fn(*(np.broadcast_to(np.asarray(v, dtype=float), shape) for v in (batch, seq, ctx)))
        flops, traffic, comm, weights = (np.array([np.broadcast_to(np.asarray(v, dtype=float), shape)
                                                   for v in part]) for part in raw)
        t_compute = flops / self.peaks[:, None] if flops.ndim == 2 else flops / self.peaks
        t_memory = traffic / self.hbm
        t_comm = comm / (self.links[:, None] if comm.ndim == 2 else self.links)
        t_sol = np.maximum(np.maximum(t_compute, t_memory), t_comm)
        return {"flops": flops, "bytes": traffic, "comm_bytes": comm, "weight_bytes": weights, "t_compute": t_compute,
                "t_memory": t_memory, "t_comm": t_comm, "t_sol": t_sol}


def link_bandwidth(gpu: GPU, link: str) -> float:
    if link == "scale_up":
        return gpu.scale_up_bytes_per_s
    if link == "scale_out":
        return gpu.scale_out_bytes_per_s
    return float("inf")


def compile_program(program: Program, gpu: GPU) -> CompiledProgram:
    totals = [step_totals(s) for s in program.steps]
    columns = [[t[i] for t in totals] for i in range(4)]
    fn = sympy.lambdify(SCENARIO, columns, modules=[{"Min": np.minimum, "Max": np.maximum}, "numpy"],
                        cse=True)
    peaks = np.array([gpu.peak_flops(s.compute_dtype) for s in program.steps])
    links = np.array([link_bandwidth(gpu, s.link) for s in program.steps])
    return CompiledProgram(program, peaks, links, gpu.hbm_bytes_per_s, fn)


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
