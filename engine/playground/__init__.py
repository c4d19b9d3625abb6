"""The playground and variants: a model with a module swapped or dims bound, old -> new.

Layer: engine.playground (on engine.deploy and engine.language; the build writes its documents,
``archledger edit`` prints them). ``whatif`` evaluates a variant with the same walk and the same
planner as the model (``archledger edit``, the playground's data); ``playground_sol`` exports the
live prefill and decode SOL times as formula trees over the dims the reader enters.
"""
