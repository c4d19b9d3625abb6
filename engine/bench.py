"""``archledger bench``: time loading and evaluating the whole corpus (numeric + symbolic).

Layer: engine. Reports the best of ``--repeat`` runs for: loading + schema-checking the corpus,
and per model the two walks plus the overview (params, checkpoint tensors, KV). Figures go in
README; tests never assert timings.
"""
from __future__ import annotations

import time

from engine.api import evaluate_spec
from engine.corpus import load_corpus


def run(args) -> int:
    repeat = max(1, args.repeat)
    load_times, model_times = [], {}
    for _ in range(repeat):
        start = time.perf_counter()
        corpus = load_corpus(args.corpus)
        load_times.append(time.perf_counter() - start)
        for model in corpus.models.values():
            start = time.perf_counter()
            evaluate_spec(corpus, model).overview()
            model_times.setdefault(model.model_id, []).append(time.perf_counter() - start)
    best = {k: min(v) for k, v in model_times.items()}
    print(f"corpus load + schema check: {min(load_times) * 1000:8.1f} ms  ({len(best)} models)")
    for model_id, seconds in sorted(best.items(), key=lambda kv: -kv[1]):
        print(f"  {model_id:45s} {seconds * 1000:8.1f} ms  (numeric + symbolic walk + overview)")
    total = min(load_times) + sum(best.values())
    print(f"whole corpus: {total:.2f} s; slowest model {max(best.values()):.2f} s "
          f"(target < 2 s per model); best of {repeat}")
    return 0
