"""The installed versions of the libraries whose release can change the bytes a build writes.

Layer: engine.batch (imports nothing of the engine). The build's input hashes cover the engine's
own sources (:func:`engine.batch.results.shared_hash`); these versions join them, so upgrading
sympy or polars re-evaluates every model instead of publishing results of two library versions
side by side (a restored model carried over while a changed one is computed anew). The site's
render key covers :data:`SITE` the same way (``site_builder.render``).

Invariant: :func:`fingerprint` is a pure function of the names and the versions
:func:`installed_version` reports; a library that is not installed reads as ``absent``.
"""
from __future__ import annotations

from importlib import metadata

#: What the evaluation's numbers and the results' bytes depend on: the symbolic algebra and its
#: arbitrary precision (sympy, mpmath), the compiled formulas' arithmetic (numpy), the Parquet
#: writer and the tables (polars), and the YAML reader (pyyaml: what a spec parses to).
RESULTS = ("sympy", "mpmath", "numpy", "polars", "pyyaml")
#: What the rendered pages depend on besides the results: templates, markdown, charts, graph layout.
SITE = ("jinja2", "markupsafe", "markdown-it-py", "altair", "grandalf", "polars")


def installed_version(name: str) -> str:
    """The installed distribution's version, or ``absent``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def fingerprint(names: tuple[str, ...] = RESULTS) -> bytes:
    """``name==version`` of each library, one a line, in the given order (hashed with the sources)."""
    return "".join(f"{name}=={installed_version(name)}\n" for name in names).encode()
