"""ArchLedger engine: load the corpus, evaluate specs (numbers and formulas from one walk).

Layer: engine (imports only the standard library, sympy, pyyaml and itself; never site_builder).
Public entry points live in :mod:`engine.api` (evaluation) and :mod:`engine.deploy` (plans).
Packages by concern (docs/architecture.md): spec (the language and its evaluation) <- deploy and
verify <- build (the batch build) <- cli; imports only go downward (tests/test_layering.py).
"""
