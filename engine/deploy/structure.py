"""The types a deployment plan is made of: options, scenario points and the compiled structure.

Layer: engine.deploy. This module owns the types; :mod:`engine.deploy.planner` builds a
:class:`Structure` (placement, fusion, compilation) and :mod:`engine.deploy.sol` evaluates it at
scenario points (:class:`engine.deploy.plan.Plan`, :class:`engine.deploy.plan.Deployment`). Neither
of those imports the other's internals, and neither is imported here.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

from engine.language import kv, symbols
from engine.language.formula_tree import run_arrays
from engine.language.errors import SpecError, Where
import engine.deploy.rules as rules
from engine.deploy.admission import NO_ADMISSION, Admission
from engine.deploy.parallel import ParallelConfig, is_count

if TYPE_CHECKING:    # annotations only: a stored deploy (engine/cli/deploy_fast.py) never loads sympy or the walk
    import sympy
    from engine.language.api import Evaluation
    from engine.deploy.cost import CompiledProgram
    from engine.deploy.device_program import Program

PHASES = ("prefill", "decode")
#: Bounds of a scenario point (also the grid's, engine.batch.grid). Far above any served model (16M
#: tokens of context, a million concurrent requests per replica) and low enough that every count
#: derived from them (KV elements x context x batch, FLOPs) stays exact and far from overflowing.
MAX_TOKENS = 2 ** 24
MAX_BATCH = 2 ** 20
ACT_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
# LENGTH (the ``length`` dim symbol) and rules' MTP_TOKENS, MTP_ACCEPTANCE, TOKENS_PER_STEP are
# sympy objects, given on first use by ``__getattr__`` below
PREFILL_TOKENS = 8192
#: Share of a GPU's memory a deployment may use (weights, prefill working set, KV): vLLM's default
#: ``gpu_memory_utilization`` (vllm/config/cache.py). Every default of ``--hbm-fraction`` is this one.
HBM_FRACTION = 0.9
#: Speculative decoding with the model's own MTP modules (docs/deployment.md "Speculative decoding
#: with MTP"): k draft tokens per step, each kept with probability a once the drafts before it were
#: (chain acceptance), so a step emits E = sum_{i=0..k} a^i tokens per request on average.
#: The stack of a model's multi-token-prediction modules (``stacks: mtp`` in its spec).
MTP_STACK = "mtp"


def __getattr__(name: str):
    if name == "LENGTH":
        return symbols.dim(symbols.LENGTH)
    if name in ("MTP_TOKENS", "MTP_ACCEPTANCE", "TOKENS_PER_STEP"):
        return getattr(rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tokens_per_step(mtp_tokens: int, acceptance: float) -> float:
    """:data:`TOKENS_PER_STEP` at k = ``mtp_tokens``, a = ``acceptance`` (1 when k = 0)."""
    import sympy
    return float(rules.TOKENS_PER_STEP.subs({rules.MTP_TOKENS: int(mtp_tokens),
                                             rules.MTP_ACCEPTANCE: sympy.Rational(acceptance)}).doit())


@dataclass(frozen=True, slots=True)
class Options:
    """Everything besides GPU and parallel config that changes the answer."""

    framework: str = "none"          # fusion table (corpus/fusion/<name>.yaml) or "none"
    kv_dtype: str = "bf16"
    act_dtype: str = "bf16"
    weight_format: str = "checkpoint"  # or a quant scheme name applied to every matrix
    hbm_fraction: float = HBM_FRACTION
    #: Chunked prefill's token budget per step and attention replica (vLLM ``max_num_batched_tokens``:
    #: 8192 for the OpenAI server on GPUs of 70 GiB or more, EngineArgs.get_batch_defaults; SGLang's
    #: ``chunked_prefill_size``). It sets the prefill working set reserved next to the KV cache and
    #: the prefill schedule (:func:`prefill_steps`).
    prefill_tokens: int = PREFILL_TOKENS
    #: Speculative decoding with the model's MTP stack: draft tokens per decode step, one per MTP
    #: module (0 = off: the main stack alone, every number as without these options), and the
    #: acceptance rate of each draft given the ones before it were accepted.
    mtp_tokens: int = 0
    mtp_acceptance: float = 0.0
    #: How a step's kernels and collectives overlap in the schedule estimate (engine.deploy.sol):
    #: ``none`` (one after another) or ``two_batch`` (two half-batches, one's collectives hidden
    #: behind the other's kernels), a policy the framework's fusion table declares under ``overlap:``;
    #: empty: the framework's default (engine.deploy.fusion_table.overlap_default), set when a structure is built.
    overlap: str = ""

    @property
    def decode_seq(self) -> int:
        """Tokens per request the main stack runs in a decode step: the last accepted token plus
        the k drafts it verifies."""
        return 1 + self.mtp_tokens


@dataclass(frozen=True, slots=True)
class Scenario:
    batch: int = 1
    input_len: int = 4096
    output_len: int = 1024

    def __post_init__(self):
        """Refuse points outside the bounds (:data:`MAX_TOKENS`, :data:`MAX_BATCH`) with one line naming
        the option: a prompt of 1e15 tokens once overflowed int64 and published a negative KV size."""
        for name, option, low, high, example in (("batch", "--batch", 1, MAX_BATCH, 8),
                                                 ("input_len", "--input", 1, MAX_TOKENS, 4096),
                                                 ("output_len", "--output", 0, MAX_TOKENS, 1024)):
            value = getattr(self, name)
            if not is_count(value, low, high):
                raise SpecError(option_where(option), f"{name} must be an integer from {low} to {high:,}, "
                                f"got {repr(value)[:60]}",
                                f"write e.g. {option} {example} (at most {high:,} = 2**{high.bit_length() - 1})")


def option_where(field_name: str) -> Where:
    return Where("<command line>", field=field_name)


def _schedule(config: ParallelConfig, want: str, batch, input_len=0, prefill_tokens: int = PREFILL_TOKENS,
              decode_seq: int = 1):
    """``want`` of :data:`engine.deploy.rules.SCHEDULE` (the rule's one definition) at these points."""
    env = {"batch": batch, "input_len": input_len, "pp": config.pp, "dp_attn": config.dp_attn, "cp": config.cp,
           "prefill_tokens": prefill_tokens, "decode_seq": decode_seq}
    return run_arrays(rules.SCHEDULE, env, only=(want,))[want]


def micro_batches(config: ParallelConfig, batch):
    """Micro-batches in flight through the pipeline: one per stage, at most one per request."""
    return _schedule(config, "micro_batches", batch)


def program_batch(config: ParallelConfig, batch):
    """The batch a device program runs at, per micro-batch: DP-attention replicas hold whole
    requests, so every rank works at the fullest replica's ceil(batch / dp_attn) (with fewer
    requests than replicas some ranks idle; a fraction of a request is never spread over them)."""
    return _schedule(config, "program_batch", np.asarray(batch))


def requests_per_replica(config: ParallelConfig, batch):
    """Requests on the fullest attention replica: ceil(batch / dp_attn) (replicas hold whole requests)."""
    return _schedule(config, "per_rank", np.asarray(batch))


def step_tokens(config: ParallelConfig, prefill_tokens: int = PREFILL_TOKENS) -> int:
    """Prompt tokens one attention replica prefills per step: the budget on each of its cp
    context-parallel ranks (each takes a 1/cp share of the step's tokens)."""
    return prefill_tokens * config.cp


def prefill_steps(config: ParallelConfig, batch, input_len, prefill_tokens: int = PREFILL_TOKENS):
    """Prefill steps (pipeline micro-batches) of the fullest replica under chunked prefill: its
    ceil(batch / dp_attn) x input_len prompt tokens run in ceil(tokens / :func:`step_tokens`) steps
    (a step holds at most the token budget; a prompt longer than it is chunked over several steps),
    and at least one per pipeline stage (:func:`micro_batches`)."""
    return _schedule(config, "prefill_steps", batch, np.asarray(input_len), prefill_tokens)


def prefill_program_batch(config: ParallelConfig, batch, input_len, prefill_tokens: int = PREFILL_TOKENS):
    """The batch the prefill program runs at per step: the fullest replica's requests spread over its
    :func:`prefill_steps` (a fraction of a prompt is a chunk), times dp_attn like :func:`program_batch`."""
    return _schedule(config, "prefill_batch", batch, np.asarray(input_len), prefill_tokens)


def tokens_per_device(config: ParallelConfig, scenario: Scenario,
                      prefill_tokens: int = PREFILL_TOKENS, decode_seq: int = 1) -> dict[str, int]:
    """Tokens one device works on per kernel call, by phase (what fusion size limits are stated in);
    prefill's are one chunked-prefill step's; decode's ``decode_seq`` per request (MTP verification)."""
    prefill, decode = device_tokens(config, scenario.batch, scenario.input_len, prefill_tokens, decode_seq)
    return {"prefill": int(prefill), "decode": int(decode)}


def regime(limits: list[int], tokens: int | None) -> int:
    """How many of ``limits`` a token count exceeds (a limit is inclusive: tokens <= limit fuses;
    0 without limits, where tokens is None): the fusion regime of :func:`tokens_per_device`'s count."""
    return 0 if not limits or tokens is None else bisect_left(limits, tokens)


def device_tokens(config: ParallelConfig, batch, input_len, prefill_tokens: int = PREFILL_TOKENS,
                  decode_seq: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """:func:`tokens_per_device`'s (prefill, decode) at numbers or arrays of batches and prompts
    (whole numbers as floats): the grid asks it for every (batch, prompt) of a config at once."""
    env = {"batch": batch, "input_len": input_len, "pp": config.pp, "dp_attn": config.dp_attn, "cp": config.cp,
           "prefill_tokens": prefill_tokens, "decode_seq": decode_seq}
    out = run_arrays(rules.SCHEDULE, env, only=("prefill_device_tokens", "decode_device_tokens"))
    return out["prefill_device_tokens"], out["decode_device_tokens"]


_KV_FNS: dict = {}


class Formulas:
    """A structure's symbolic side: per phase the fused program under the symbolic binding
    (formulas over dims and parallel degrees) and the unfused one, and the weights-per-GPU formula.
    Given, or made on first read by ``make`` (() -> the three): no number of a structure reads
    them (the SOL and expected times, memory, the per-op values are the numeric programs'), so
    an estimate (:func:`engine.deploy.planner.plan`) places and fuses under the symbolic binding
    only when a formula is read (per-op rows, ``deploy``'s output). Made once, then kept; the
    same objects whichever came first."""

    __slots__ = ("_make", "_value")

    def __init__(self, formulas=None, unfused=None, weight=None, make=None):
        self._make = make
        self._value = None if make is not None else (formulas, unfused, weight)

    @property
    def value(self) -> tuple:
        """(formulas per phase, unfused formulas per phase, the weight formula)."""
        if self._value is None:
            self._value = self._make()
            self._make = None
        return self._value

    def __getstate__(self):          # a pickled structure carries its formulas, never the maker
        return self.value

    def __setstate__(self, value):
        self._make, self._value = None, value


@dataclass
class Structure:
    """What a (model, config, options, fusion table, GPU arch and domain) compiles to, GPU-free:
    the device programs of both phases (numeric, and symbolic for formulas: :class:`Formulas`),
    before and after fusion, compiled for vectorized evaluation, with weights and KV per GPU."""

    ev: Evaluation
    config: ParallelConfig
    options: Options
    domain: int
    programs: dict[str, Program]
    symbolic: Formulas
    unfused: dict[str, Program]
    compiled: dict[str, CompiledProgram]
    weight_bytes_per_gpu: float
    kv_device_per_request: sympy.Expr        # in `length` and `kv_bytes`
    #: The framework's runtime reserve per GPU (its fusion table's ``runtime_reserve``; 0 for none)
    reserve_bytes_per_gpu: float = 0.0
    #: The framework's KV paging and admission policy (its fusion table's ``kv_admission``; for
    #: none token pages, no headroom): what the steady-state capacity reads (engine.deploy.admission)
    admission: Admission = NO_ADMISSION
    #: The expert routing an expert-parallel fused MoE's measured table is read at (its fusion
    #: table's ``moe_routing``; ``balanced`` for none): engine.deploy.measured
    moe_routing: str = "balanced"

    def __post_init__(self):
        fn = _KV_FNS.get(self.kv_device_per_request)
        if fn is None:       # structures of one placement share the expression: compiled once
            if len(_KV_FNS) > 1024:
                _KV_FNS.clear()
            from engine.deploy.step_functions import KV_BYTES
            fn = _KV_FNS[self.kv_device_per_request] = symbols.checked_lambdify(
                (symbols.dim(symbols.LENGTH), KV_BYTES), self.kv_device_per_request, modules=list(symbols.NUMPY_MODULES))

        self.kv_device_fn = kv_device(fn)

    @property
    def formulas(self) -> dict[str, Program]:
        """Per phase, the fused program under the symbolic binding."""
        return self.symbolic.value[0]

    @property
    def unfused_formulas(self) -> dict[str, Program]:
        """Per phase, the unfused program under the symbolic binding."""
        return self.symbolic.value[1]

    @property
    def weight_formula(self) -> sympy.Expr:
        """Weights on the fullest pipeline stage, as a formula over dims and degrees."""
        return self.symbolic.value[2]

    @property
    def max_context(self) -> int:
        """The model's longest context (past it a point is extrapolated)."""
        return int(self.ev.numeric.max_context)

    def request_bytes_fn(self, stack: str, part: str | None = None):
        """Cache bytes per request of one stack (engine.language.kv.request_bytes_fn)."""
        return kv.request_bytes_fn(self.ev.numeric, stack, part)


def kv_device(fn):
    """A structure's ``kv_device_fn`` from the compiled KV-per-GPU expression ``fn(length, kv_bytes)``."""
    def kv_device_fn(length, kv_bytes):
        """KV bytes per request on one GPU, shaped like ``length`` x ``kv_bytes`` even when the
        expression is constant (a pipeline stage holding only fixed-size states)."""
        length, kv_bytes = np.asarray(length, dtype=float), np.asarray(kv_bytes, dtype=float)
        return np.broadcast_to(np.asarray(fn(length, kv_bytes), dtype=float),
                               np.broadcast_shapes(length.shape, kv_bytes.shape))
    return kv_device_fn
