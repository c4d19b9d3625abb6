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
import sys
from types import ModuleType

# The names are resolved on first use (PEP 562), not imported here: a submodule's import runs this
# file first, and importing the planner here would bring the spec walk and sympy into a command that
# reads a build's formula document only (engine/cli/deploy_fast.py imports engine.deploy.stored).
_WHERE = {"load_tables": "fusion_table", "find_gpu": "hardware", "load_gpus": "hardware",
          "ParallelConfig": "parallel", "build_structure": "planner", "place": "planner", "plan": "planner",
          "check": "legality", "configs_for": "legality", "Deployment": "plan", "Plan": "plan",
          "MAX_BATCH": "structure", "MAX_TOKENS": "structure", "PHASES": "structure", "Options": "structure",
          "Scenario": "structure", "Structure": "structure", "tokens_per_device": "structure"}

__all__ = ["MAX_BATCH", "MAX_TOKENS", "PHASES", "Deployment", "Options", "ParallelConfig", "Plan", "Scenario",
           "Structure", "build_structure", "check", "configs_for", "find_gpu", "load_gpus", "load_tables", "place",
           "plan", "tokens_per_device"]


class _Package(ModuleType):
    """This package, where the name ``plan`` stays the planner's function (as when the names were
    imported here): importing the submodule ``engine.deploy.plan`` would otherwise bind the name to
    the submodule (it is still ``sys.modules["engine.deploy.plan"]``, which ``from engine.deploy.plan
    import ...`` reads)."""

    def __setattr__(self, name, value):
        if name == "plan" and isinstance(value, ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value          # resolved once
    return value
