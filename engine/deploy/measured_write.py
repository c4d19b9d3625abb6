"""Writing a measured kernel table (``gpus/measured/``): one text form for every writer.

Layer: engine.deploy. ``benchmarks/import_kernels.py`` (tables from the public
aiconfigurator-core package) and ``archledger kernelbench`` (tables measured on this machine,
engine.deploy.kernelbench) write the same schema (engine.language.file_schemas.MEASURED) read by
engine.deploy.measured; this module is their one serializer.

Invariants: latencies carry 4 significant digits (:func:`sig4`: finer than any source's repeat
noise); rows are row-major over the axes, the last innermost (:func:`grid_rows`: the loader's
order); the text is block-style YAML with each row and axis as one flow list per line, so a diff
reads line by line (:func:`dump_yaml`).
"""
from __future__ import annotations

import itertools


def sig4(x: float) -> float:
    """``x`` to 4 significant digits (the table's precision)."""
    return float(f"{x:.4g}")


def grid_rows(points: dict[tuple, float], axes: list[list]) -> list[list[float]]:
    """Latencies row-major over ``axes`` (the last innermost), one list per row of the last axis."""
    heads = list(itertools.product(*axes[:-1]))
    return [[points[(*head, v)] for v in axes[-1]] for head in heads]


def dump_yaml(mapping: dict, head: str) -> str:
    """The YAML text of one table: ``head`` (comment lines saying how it was made), block style,
    the latency rows (and axis values) as one flow list per line."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def flow(dumper, value):     # lists of numbers on one line
        flat = all(isinstance(x, (int, float)) for x in value)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flat)
    Dumper.add_representer(list, flow)
    return head + yaml.dump(mapping, Dumper=Dumper, sort_keys=False, width=100000, allow_unicode=True)
