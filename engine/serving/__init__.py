"""Serving answers: how many GPUs of which kind serve a model under a TTFT/TPOT SLA.

Layer: engine.serving (on engine.deploy and engine.language; engine.batch writes its tables, the
commands print them). ``sizing`` searches configs and batches (``archledger plan``), ``retime``
ranks the served points on one time, ``disagg`` joins a prefill pool to a decode pool
(``archledger disagg``), ``disagg_sizing`` pairs the searched pools (the sizing page's
disaggregated answer), ``fronts`` precomputes the grid's ``sizing:`` scenarios as Parquet and
``steady`` states the rule the fronts serve by. Nothing here evaluates a spec or places a model:
that is engine.deploy's planner and sol.
"""
