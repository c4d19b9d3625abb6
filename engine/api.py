"""The public entry point: ``from engine.api import evaluate, evaluate_spec, Evaluation``.

Layer: engine (a facade over :mod:`engine.language.api`, where the code lives; it imports nothing else).
"""
from engine.language.api import Evaluation, evaluate, evaluate_spec

__all__ = ["Evaluation", "evaluate", "evaluate_spec"]
