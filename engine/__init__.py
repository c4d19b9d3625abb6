"""ArchLedger engine: load the corpus, evaluate specs (numbers and formulas from one walk).

Layer: engine (imports only the standard library, sympy, pyyaml and itself; never site_builder).
Public entry points live in :mod:`engine.api`.
"""
