"""A prefill config's staircase: its points by TTFT with the running best requests/s.

Layer: engine.serving (numpy only). The pairing's rule (:mod:`engine.serving.pairing`) and the sizing
page's data (site_builder/sizing.py) read it from here, so a site render worker, which evaluates
nothing, does not import the pairing (and, through it, the spec language and sympy).
"""
from __future__ import annotations

import numpy as np


def staircase(ttft, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One prefill config's points as :func:`engine.serving.pairing.prefill_choice` reads them (and the sizing page, as
    data: site_builder/sizing.py): TTFTs ascending (a stable sort), their batches, the most
    requests/s (batch / TTFT) within each TTFT and the first point reaching it."""
    order = np.argsort(np.asarray(ttft), kind="stable")
    t, b = np.asarray(ttft)[order], np.asarray(batch)[order]
    x = b / t
    return t, b, np.maximum.accumulate(x), prefix_argmax(x)


def prefix_argmax(x: np.ndarray) -> np.ndarray:
    """Index of the maximum of x[:i + 1] for every i (the first one on ties: the shorter TTFT)."""
    idx = np.arange(len(x))
    before = np.concatenate(([-np.inf], np.maximum.accumulate(x)[:-1]))
    return np.maximum.accumulate(np.where(x > before, idx, 0))
