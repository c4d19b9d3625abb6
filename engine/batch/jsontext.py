"""The one compact JSON encoder of the build's files and the site's data: the standard library only.

Layer: engine.batch (engine.batch.export and engine.batch.deploy_export write the results' JSON
with it; site_builder.data writes the site's JSON data with it). It lives apart from
engine.batch.export, which imports sympy and the spec language, so that a site render imports
nothing of the evaluation to encode.

Invariant: :func:`compact_json` gives exactly ``json.dumps(value, separators=(",", ":"))``'s text
for every value that ``json.dumps`` encodes without error. Only the check for circular references
is left out (about a tenth of the encoding time on the site's documents, and 12% on a model's
megabyte of formula trees), and the encoder object is made once rather than per call; a cyclic
value, which none of these trees of plain values is, raises ``RecursionError`` instead of
``ValueError``, so it is refused either way and no text is written.
"""
from __future__ import annotations

import json

#: ``json.dumps(value, separators=(",", ":"))``'s text (the module's invariant).
compact_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
