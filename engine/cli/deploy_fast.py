"""``archledger deploy`` answered from a built checkout's formula document (issue 42's fast path).

Layer: engine.cli. The build writes every structure the grid evaluated as formula trees
(``<out>/results/formulas/<model>.json``, engine/batch/deploy_export.py). When the build's inputs
are this checkout's, its document gives the very numbers compiling the spec gives
(engine.deploy.stored: each tree in its compiled function's order, tests/test_stored_consistency.py),
so deploy evaluates those instead of walking, placing and compiling the spec.

Taken only when all of these hold, else None (the caller compiles, with its usual errors):

* the build's inputs are unchanged: the corpus folder is byte-identical to the one the build read
  and the shared hash (GPU files, measured tables, fusion tables, grid, engine sources, library
  versions) is the build's (engine.batch.built.unchanged: then every model's input hash is the
  manifest's); the model's document matches its manifest record (size and SHA-256) and says its
  trees are in evaluation order;
* the query names one model of the corpus the build read (the same rule as the compile path,
  engine.language.names.pick_model) and the build published its document;
* the options are a cell the document holds: the GPU and parallel config (no ``--gpus-per-node``,
  no context parallelism) of one of its options under that framework, a KV dtype it evaluated,
  the checkpoint's own weights, bf16 activations, the build's HBM share and prefill budget, the
  framework's own overlap, no MTP.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.language.errors import SpecError

#: the options the grid evaluates a cell with besides the ones the document lists (engine.deploy.Options'
#: defaults, engine.batch.grid_eval; checked against the document's budget and HBM share too)
WEIGHT_FORMAT = "checkpoint"
ACT_DTYPE = "bf16"


def stored_deployment(args):
    """The :class:`engine.deploy.plan.Deployment` of ``args`` from the build's document, or None."""
    if args.mtp or args.acceptance is not None or args.gpus_per_node is not None or args.cp > 1 \
            or args.weight_format != WEIGHT_FORMAT or args.act_dtype != ACT_DTYPE:
        return None
    found = _document(Path(args.out) / "results", args.model, Path(args.corpus), Path(args.gpus_root))
    if found is None:
        return None
    from engine.deploy.stored import Document
    try:
        doc = Document(found)
    except ValueError:
        return None
    if args.hbm_fraction != doc.doc["hbm_fraction"] or args.prefill_tokens != doc.doc["budget"]:
        return None
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.deploy.parallel import ParallelConfig
    from engine.deploy.plan import Deployment, Plan
    from engine.deploy.structure import Options, Scenario, tokens_per_device
    try:
        gpu = find_gpu(load_gpus(args.gpus_root), args.gpu)
        replica = args.tp * args.pp * args.cp
        gpus = args.gpus if args.gpus is not None else replica
        if gpus % replica:
            return None
        config = ParallelConfig(tp=args.tp, ep=args.ep, dp_attn=args.dp_attn, pp=args.pp, cp=args.cp,
                                cp_kind=args.cp_kind, dp=gpus // replica)
        scenario = Scenario(batch=args.batch, input_len=args.input, output_len=args.output)
    except SpecError:            # the compile path says it, after the model's own errors
        return None
    option = doc.option(gpu.key, f"{config.n_gpus}-{config.label()}-d{gpu.scale_up_domain}", args.framework)
    if option is None or args.kv_dtype not in option["kv_dtypes"] or \
            (args.overlap is not None and args.overlap != option["overlap"]):
        return None
    options = Options(framework=args.framework, kv_dtype=args.kv_dtype, act_dtype=args.act_dtype,
                      weight_format=args.weight_format, hbm_fraction=args.hbm_fraction,
                      prefill_tokens=args.prefill_tokens, overlap=option["overlap"])
    tokens = tokens_per_device(config, scenario, options.prefill_tokens, options.decode_seq)
    plan = Plan(doc.structure(option, config, options, tokens), gpu)
    return Deployment.build(plan, scenario, tables=doc)


def _document(results: Path, query: str, corpus: Path, gpu_root: Path) -> dict | None:
    """The model's formula document when the build in ``results`` can answer (module doc), else None."""
    from engine.batch import built, publish
    from engine.language.names import pick_model, slug
    try:
        manifest = json.loads((results / "manifest.json").read_text())
        build = built.Built(manifest)
        model_id, _ = pick_model(query, built.corpus_models(build))
        entry = manifest["models"][model_id] if model_id else None
        name = f"formulas/{slug(model_id)}.json" if model_id else ""
        record = entry["files"][name] if entry else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record is None or not build.grid_path().is_file() or \
            not built.unchanged(build, corpus, gpu_root) or not publish.matches(results / name, record):
        return None
    try:
        return json.loads((results / name).read_text())
    except (OSError, ValueError):
        return None
