"""Deployment: a spec's evaluation on GPUs under a parallel config -> compiled programs -> SOL times.

Layer: engine.deploy (imports engine.language; never engine.verify or engine.batch). Reading order:
hardware (GPU files), parallel (configs and the device mesh) -> placement (split propagation and
communication) -> fusion (framework kernels) -> cost (compiled step costs) -> structure (the
types: Options, Scenario, Structure) -> planner (:func:`plan`, :func:`place`) -> sol (Plan,
Deployment: speed-of-light results at scenario points) -> disagg (a prefill pool and a decode pool:
KV transfer, pool ratio; ``archledger disagg``) -> sizing (the configs and batches, aggregated and
disaggregated, that meet a latency SLA, and the throughput front: ``archledger plan``).

The names below are the package's public interface (``from engine.deploy import Options,
Scenario, plan``).
"""
from engine.deploy.fusion_table import load_tables
from engine.deploy.hardware import find_gpu, load_gpus
from engine.deploy.parallel import ParallelConfig
from engine.deploy.planner import build_structure, place, plan
from engine.deploy.legality import check, configs_for
from engine.deploy.plan import Deployment, Plan
from engine.deploy.structure import MAX_BATCH, MAX_TOKENS, PHASES, Options, Scenario, Structure, tokens_per_device

__all__ = ["MAX_BATCH", "MAX_TOKENS", "PHASES", "Deployment", "Options", "ParallelConfig", "Plan", "Scenario",
           "Structure", "build_structure", "check", "configs_for", "find_gpu", "load_gpus", "load_tables", "place",
           "plan", "tokens_per_device"]
