"""The planner's per-evaluation cache of a row's stored weights is keyed by the row object: a row
made and dropped by a caller (the playground splices short-lived rows into an evaluation's plans)
must never hand its storage to a later row that happens to get the same ``id``."""
from __future__ import annotations

import dataclasses

from engine.deploy import Options
from engine.deploy import planner
from engine.language.api import evaluate_spec
from engine.language.corpus import load_corpus


def test_a_dropped_rows_storage_never_answers_for_a_later_row():
    corpus = load_corpus()
    ev = evaluate_spec(corpus, corpus.models["Qwen/Qwen3-8B"])
    row = next(r for r in ev.numeric.rows.values() if r.leaves)
    weights = planner._weights_fn(ev, Options())
    for i in range(10):
        # same uid, another leaf name each time: its storage must name this round's leaf
        kept = tuple(dataclasses.replace(leaf, key=f"round{i}.{leaf.key}") for leaf in row.leaves)
        made = dataclasses.replace(row, leaves=kept)
        assert [entry[0].key for entry in weights(made)] == [leaf.key for leaf in kept], f"round {i}: another row's storage"
        del made
