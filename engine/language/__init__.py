"""The spec language and its evaluation: load the corpus, walk a spec under two bindings.

Layer: engine.language, the bottom concern (imports only itself and engine.project). Reading order:
yamlio, expr (safe formulas) -> ir, corpus (the loader) -> shapes, ops (the primitive-op registry)
-> streams, evaluate (the walk) -> storage, kv, quantities (numbers from node rows) -> api.
"""
