"""Speed-of-light cost of a device program: per step compute, memory and link time; SOL = their max.

Layer: engine.deploy. Steps hold per-device expressions in the scenario symbols (and the KV element size);
:func:`compile_program` turns a program into one numpy function evaluated over many scenario
points at once (the grid build's vectorized path and the single point of ``archledger deploy``
use the same code). The pieces, one module each: a step's totals (:mod:`engine.deploy.step_totals`),
their numpy functions (:mod:`engine.deploy.step_functions`), the values of those functions at point
sets (:mod:`engine.deploy.point_values`); :class:`CompiledProgram` holds a program's functions and
rates, its columns are :mod:`engine.deploy.compiled_tables`' and its sums
:mod:`engine.deploy.compiled_totals`'.

* t_compute = FLOPs / peak of the operands' dtype on this GPU (next wider native dtype if needed)
* t_memory  = (activation + cache + weight bytes) / HBM bandwidth
* t_comm    = calls x alpha + bytes sent / link bandwidth (scale-up or scale-out, one direction):
  alpha is the collective's per-call latency on this GPU's links (NCCL's tuner model,
  :meth:`engine.deploy.hardware.CollectiveModel.latency`), beta the link's bandwidth
* SOL(step) = max of the three, the bound is the largest term (one function computes them for
  every path: :mod:`engine.deploy.roofline`); a phase's no-overlap time (``t_sol``) is the sum of
  its steps: one kernel after another, none hiding another's time.
* The phase's lower bound (``t_bound``, docs/deployment.md "Two times per point"): each resource
  serves one thing at a time but resources overlap freely, so no schedule of the phase's work
  (kernels, collectives, micro-batches, in any order or overlap) beats the busiest resource:
  max(sum of t_compute (the tensor cores), sum of t_memory (HBM), and per link class the sum of
  t_comm of the steps on it). ``t_comm_stream``: the no-overlap time of the ``comm`` steps alone
  (what a second micro-batch can hide, engine.deploy.sol's two-batch schedule).
"""
from __future__ import annotations

from itertools import chain
from typing import Mapping

import numpy as np

from typing import TYPE_CHECKING

from engine.language.memo import remembered, remembered_for
from engine.deploy import roofline
from engine.deploy.compiled_tables import _Tables
from engine.deploy.compiled_totals import _Totals
from engine.deploy.hardware import GPU
from engine.deploy.point_values import _ids

if TYPE_CHECKING:    # the compile path (sympy) is imported where a program is compiled: a program
    from engine.deploy.device_program import Program     # from a build's document never loads it


BOUNDS = ("compute", "memory", "comm")


#: (id(GPU), operand dtypes, links, collective shapes) -> (the GPU, their peaks, bandwidths and
#: per-call latencies): the programs of a model use a handful of each, and every program asks
#: every GPU type of the grid (the GPU is held: its id names it while the entry lives).
_KIND_RATES: dict[tuple, tuple] = {}


def _kind_rates(gpu: GPU, dtypes: tuple, links: tuple, colls: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Peak FLOP/s per operand dtype, bytes/s per link and seconds per call per collective shape
    (0 for none) on ``gpu``: read from the GPU once per distinct (GPU, kinds) (read-only arrays)."""
    key = (id(gpu), dtypes, links, colls)
    found = _KIND_RATES.get(key)
    if found is None or found[0] is not gpu:
        if len(_KIND_RATES) > 50_000:
            _KIND_RATES.clear()
        rates = (np.array([gpu.peak_flops(d) for d in dtypes], dtype=float),
                 np.array([link_bandwidth(gpu, link) for link in links], dtype=float),
                 np.array([gpu.collective_latency(*c) if c else 0.0 for c in colls], dtype=float))
        for r in rates:
            r.flags.writeable = False
        found = _KIND_RATES[key] = (gpu, *rates)
    return found[1:]


class CompiledProgram(_Tables, _Totals):
    """A program's per-step totals as numpy functions of (batch, seq, ctx, kv_bytes).

    Compiled once per program (GPU-independent); a GPU only supplies the peaks, bandwidths and
    links the times divide by. Inputs broadcast: ``batch`` of shape (n, 1) and ``ctx`` of shape
    (1, m) evaluate the n x m grid, each sub-expression at the shape it depends on. The columns
    (:meth:`columns`) are :class:`~engine.deploy.compiled_tables._Tables`', the phase sums
    (:meth:`totals`, :meth:`step_time`) :class:`~engine.deploy.compiled_totals._Totals`'.
    """

    def __init__(self, program: Program, compiled: list | None = None):
        self.program = program
        # ``compiled``: each step's five entries made elsewhere (engine.deploy.stored: from the build's
        # trees; its steps then carry what the rates read: dtype, link, collective, kind, repeat)
        if compiled is None:
            from engine.deploy.step_functions import _step_functions
            compiled = [_step_functions(s) for s in program.steps]
        self._columns = [[c[i] for c in compiled] for i in range(4)]
        # collectives (alone or fused): calls per step, each paying the per-call latency
        self._calls = [c[4] for c in compiled]
        self._rates: dict[str, tuple[np.ndarray, np.ndarray, float, np.ndarray]] = {}
        self._stacked_rates: dict[tuple, tuple] = {}    # rates_for's per-GPU rates side by side, per GPU list
        self._layouts: dict[tuple, tuple] = {}     # column indices -> their table layout (_table_layout())
        self._evaluated: dict[tuple, dict[int, np.ndarray]] = {}     # evaluate()'s columns per point set
        self._kernels: tuple[list[int], np.ndarray] | None = None
        self._key: tuple | None = None              # evaluation_key(), made on first use
        #: prefill working sets already computed (engine.deploy.sol.prefill_working_set: a function
        #: of the program and the points only), keyed by one (prompts, prompt, prompt, KV bytes)
        #: point, or by ("points", shape, bytes) of a set of distinct (prompt, KV bytes) points
        self.working_sets: dict[tuple, np.ndarray] = {}
        # a program's steps use a handful of dtypes, links and collective shapes: rates are looked
        # up once per distinct one and spread to the steps by index (hundreds of steps, many GPUs)
        self._kinds = [_distinct(s.compute_dtype for s in program.steps),
                       _distinct(s.link for s in program.steps),
                       _distinct((s.collective, s.ranks, s.nodes) if s.collective else None for s in program.steps)]
        #: the steps a second micro-batch's kernels can hide (inserted collectives, kind ``comm``)
        self._comm_steps = np.array([s.kind == "comm" for s in program.steps], dtype=bool)
        self._bound_rows: tuple | None = None       # _bound_terms' step indices, made on first use

    def evaluation_key(self) -> tuple:
        """A key two programs share when they give the same numbers at the same points on the same
        GPUs: the ids of their columns' entries (the step functions and constants, step by step:
        the same objects, so the same values) and each step's rate kinds (operand dtype, link,
        collective shape: the same rates on any GPU). Structures built apart (other domains, token
        regimes, frameworks) often hold other program objects with the very same entries; the
        grid evaluates one of them for all (:func:`engine.deploy.sol.phases_many`). An id names
        its entry while this program lives (it holds its entries): compare keys of live programs only."""
        if self._key is None:
            (dtypes, d_at), (links, l_at), (colls, c_at) = self._kinds
            self._key = (len(self._calls), _ids(chain(*self._columns, self._calls)),
                         tuple(dtypes), d_at.tobytes(), tuple(links), l_at.tobytes(), tuple(colls), c_at.tobytes(),
                         self._comm_steps.tobytes())
        return self._key

    def kernel_steps(self) -> tuple[list[int], np.ndarray]:
        """Indices of the steps that run a kernel (not communication, repeated at least once) and
        their repeats as floats: what a prefill working set looks at (computed once per program)."""
        if self._kernels is None:
            repeats = [_repeat(s.repeat) if s.kind != "comm" else 0.0 for s in self.program.steps]
            keep = [i for i, r in enumerate(repeats) if r > 0]
            self._kernels = (keep, np.array([repeats[i] for i in keep]))
        return self._kernels

    def rates(self, gpu: GPU) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        """Per step: peak FLOP/s of its operand dtype and its link's bytes/s; HBM bytes/s; and per
        step the seconds of latency each call of a collective costs (0 for compute steps)."""
        if gpu.key not in self._rates:
            (dtypes, d_at), (links, l_at), (colls, c_at) = self._kinds
            peaks, bandwidths, latencies = _kind_rates(gpu, tuple(dtypes), tuple(links), tuple(colls))
            self._rates[gpu.key] = (peaks[d_at], bandwidths[l_at], gpu.hbm_bytes_per_s, latencies[c_at])
        return self._rates[gpu.key]

    def latency(self, index: int, args, alphas) -> np.ndarray | float:
        """Per-call latency x calls of step ``index`` (seconds)."""
        calls = self._calls[index]
        return (calls(*args) if callable(calls) else calls) * alphas[index]

    def rates_for(self, gpus: list[GPU], index) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per-point rates when points run on different GPUs: ``index`` picks a GPU per point;
        returns peaks, links and per-call latencies of shape (steps, points) and HBM bandwidth of
        shape (points,)."""
        index = np.asarray(index)
        key = tuple(g.key for g in gpus)
        stacked = self._stacked_rates.get(key)
        if stacked is None:       # (steps, GPUs) per rate, once per GPU list (the grid asks per bucket)
            per_gpu = [self.rates(g) for g in gpus]
            stacked = self._stacked_rates[key] = (np.stack([r[0] for r in per_gpu], axis=1),
                                                  np.stack([r[1] for r in per_gpu], axis=1),
                                                  np.array([r[2] for r in per_gpu]),
                                                  np.stack([r[3] for r in per_gpu], axis=1))
        peaks, links, hbm, alphas = stacked
        if index.ndim == 1 and len(index) and (index == index[0]).all():
            # one GPU for every point (the usual call): its per-step rates as one (steps, 1) column
            # that broadcasts over the points, not copied per point (each point divides by the same
            # numbers); HBM bandwidth stays per point (it gives the sums their shape)
            one = index[:1]
            return peaks[:, one], links[:, one], hbm[index], alphas[:, one]
        return peaks[:, index], links[:, index], hbm[index], alphas[:, index]

    def evaluate(self, gpu: GPU, batch, seq, ctx, kv_bytes, weights: bool = False) -> dict[str, np.ndarray]:
        """Arrays of shape (steps, *broadcast shape): flops, bytes, comm_bytes, t_compute, t_memory,
        t_comm, t_sol (and weight_bytes when asked): :meth:`step_times` on ``gpu`` of
        :meth:`point_columns` at the points."""
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        # the columns depend on the point only, not the GPU: a structure shared by several GPU
        # types (the build's per-op tables) evaluates them once per point set
        key = tuple((a.shape, a.tobytes()) for a in args)
        columns = self._evaluated.get(key)
        if columns is None:
            columns = self._evaluated[key] = {}
        missing = tuple(i for i in ((0, 1, 2, 4, 3) if weights else (0, 1, 2, 4)) if i not in columns)
        if missing:          # in one table (one layout, one gather): the same floats as column by column
            for i, column in zip(missing, self.columns(missing, args, shape)):
                column.flags.writeable = False              # shared: no caller may change it
                columns[i] = column
        out = self.step_times(gpu, columns[0], columns[1], columns[2], columns[4])
        if weights:
            out["weight_bytes"] = columns[3]
        return out

    def point_columns(self, batch, seq, ctx, kv_bytes) -> np.ndarray:
        """The GPU-independent columns of :meth:`evaluate` at the points (1-d arrays of one length,
        or broadcastable): FLOPs, HBM bytes, link bytes and collective calls per step, one array of
        shape (4, steps, *shape), this call's own. Any GPU's times at any of these points are
        :meth:`step_times` of them (:meth:`step_sol` of a gather of their points: a pure copy), the
        floats :meth:`evaluate` gives there: every column is per point, so the columns of many GPUs'
        points are evaluated once, together (engine.deploy.plan.expected_phase_times_many)."""
        args = [np.asarray(v, dtype=float) for v in (batch, seq, ctx, kv_bytes)]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        return self.columns((0, 1, 2, 4), args, shape)

    def step_sol(self, gpu: GPU, columns: np.ndarray) -> np.ndarray:
        """:meth:`step_times`' ``t_sol`` on ``gpu`` from :meth:`point_columns`' (4, steps, points)
        array ``columns``, which it overwrites (the caller's own copy): the same operations in the
        same order per element, so the same floats, without the other terms' arrays."""
        peaks, links, hbm, alphas = self.rates(gpu)
        flops, traffic, comm, calls = columns
        latency = np.multiply(calls, alphas[:, None], out=calls)      # calls x per-call latency
        return roofline.times(flops, traffic, comm, latency, peaks[:, None], hbm, links[:, None],
                              into=True, sol_out=flops)[3]

    def step_times(self, gpu: GPU, flops, traffic, comm, calls) -> dict[str, np.ndarray]:
        """Per step and point on ``gpu``, from :meth:`point_columns`' four columns (steps, ...):
        flops, bytes, comm_bytes (the columns themselves), t_compute, t_memory, t_comm (its calls x
        the per-call latency added) and t_sol (the largest of the three). Elementwise: each point's
        times are those of its own columns."""
        peaks, links, hbm, alphas = self.rates(gpu)
        expand = (slice(None),) + (None,) * (np.ndim(flops) - 1)
        latency = calls * alphas[expand]       # calls x per-call latency
        t_compute, t_memory, t_comm, t_sol = roofline.times(flops, traffic, comm, latency, peaks[expand], hbm,
                                                            links[expand])
        return {"flops": flops, "bytes": traffic, "comm_bytes": comm, "t_compute": t_compute,
                "t_memory": t_memory, "t_comm": t_comm, "t_sol": t_sol}


_REPEATS: dict = {}     # a step's repeat (a sympy number) -> its float
_REPEATS_BY_ID: dict[int, tuple] = {}   # id(a repeat) -> (it, its float)


def _repeat(expr) -> float:
    """``float(expr)`` of a step's repeat, once per distinct repeat (a handful per model; the
    conversion goes through sympy's evalf, and every program of every structure asks). Found by
    object first (the steps of a model's programs hold a few repeat objects, asked per step and
    group: a lookup by value compares sympy numbers in Python); then by value."""
    return remembered_for(_REPEATS_BY_ID, expr,
                          lambda: remembered(_REPEATS, expr, lambda: float(expr), 100_000), 100_000)


def _distinct(values) -> tuple[list, np.ndarray]:
    """The distinct values in first-seen order, and each value's position among them."""
    found: dict = {}
    at = [found.setdefault(v, len(found)) for v in values]
    return list(found), np.array(at, dtype=np.intp)


def link_bandwidth(gpu: GPU, link: str) -> float:
    if link == "scale_up":
        return gpu.scale_up_bytes_per_s
    if link == "scale_out":
        return gpu.scale_out_bytes_per_s
    return float("inf")


def compile_program(program: Program) -> CompiledProgram:
    return CompiledProgram(program)


def intensity(flops, traffic):
    """Arithmetic intensity in FLOP per HBM byte (inf where nothing is read); arrays or numbers."""
    flops, traffic = np.asarray(flops, dtype=float), np.asarray(traffic, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(traffic > 0, flops / np.where(traffic > 0, traffic, 1.0), np.inf)


def scenario_point(phase: str, input_len: int, output_len: int, decode_seq: int = 1) -> Mapping[str, int]:
    """The (seq, ctx) a phase runs at: prefill the prompt; decode one token at the last position
    (``decode_seq`` with speculative decoding: the last token and the drafts it verifies)."""
    if phase == "prefill":
        return {"seq": input_len, "ctx": input_len}
    return {"seq": decode_seq, "ctx": input_len + output_len}
