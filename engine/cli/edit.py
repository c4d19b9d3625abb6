"""``archledger edit``: swap a module of a model, bind its new dims, see every number old -> new.

Layer: engine.cli. ``archledger edit MODEL --swap 'layers[dense,moe].attention=dsa_attention' --bind
index_n_heads=64 ...`` builds a what-if variant on the fly (the same checks as
``corpus/variants/*.yaml``: unbound dims and misfits are one-line errors), evaluates it and its base
with the same walk, deploys both with the same planner on ``--gpu``/``--config`` and prints per
layer group and for the whole model old -> new (engine.playground.variant.METRICS). ``archledger edit
corpus/variants/x.yaml`` or ``--variant NAME`` does the same for a saved variant; ``--save FILE``
writes the variant's YAML; ``--json`` prints the comparison as data.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from engine.cli import units
from engine.cli.deploy import positive_int
from engine.language.errors import SpecError, Where


def add_parser(sub, parents=()) -> None:
    p = sub.add_parser("edit", parents=list(parents), help="what-if: swap a module, bind dims, see old -> new",
                       description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", help="base model (HF id or unique suffix), or a corpus/variants/*.yaml file")
    p.add_argument("--variant", help="a variant of corpus/variants/ by name")
    p.add_argument("--swap", action="append", default=[], metavar="SWAP",
                   help="layers[TEMPLATES].SLOT=COMPONENT(OPT=VALUE,...); TEMPLATES may end with `if <condition on layer>`")
    p.add_argument("--bind", action="append", default=[], metavar="DIM=VALUE",
                   help="a dim the new component needs (its dims.yaml name or the config field a corpus model binds it to)")
    p.add_argument("--name", help="the variant's name (default: base name + component)")
    p.add_argument("--gpu", default="H200", help="GPU name from gpus/")
    p.add_argument("--config", help="parallel config, e.g. tp8-ep8 (default: the fewest GPUs holding both sides)")
    p.add_argument("--framework", default="vllm", help="fusion table (vllm, sglang) or none")
    p.add_argument("--kv-dtype", default="bf16", help="KV cache dtype (bf16, fp8)")
    p.add_argument("--batch", type=positive_int, default=1, help="requests per replica")
    p.add_argument("--context", type=positive_int, default=8192,
                   help="tokens: KV per request, the prompt prefilled in one step, the decode step's context")
    p.add_argument("--save", metavar="FILE", help="write the variant as corpus/variants YAML")
    p.add_argument("--json", action="store_true", help="the comparison as JSON")
    p.set_defaults(func=run)


def variant_from_args(args, corpus):
    """The variant the arguments name or build."""
    from engine.playground import playground_sol, variant as playground_variant
    from engine.language import variants as variant_rules
    from engine.language import file_schemas     # here, not at the top: it brings sympy (`--help` stays light)
    from engine.language.names import check_name
    from engine.language.reader import Reader
    cli = Where("<command line>")
    if args.variant:
        if args.swap or args.bind:
            raise SpecError(cli.at("--variant"), "--variant takes no --swap/--bind", "edit the variant's YAML instead")
        return corpus.find_variant(args.variant)
    if not args.model:
        raise SpecError(cli, "no model", "write `archledger edit MODEL --swap ...` or `--variant NAME`")
    if args.model.endswith((".yaml", ".yml")):
        path = Path(args.model)
        if not path.is_file():
            raise SpecError(cli, f"no file {args.model}", "pass a corpus/variants/<name>.yaml file")
        if args.swap or args.bind:
            raise SpecError(cli.at("--swap"), "a variant file takes no --swap/--bind", "edit the file instead")
        check_name(path.stem, cli, "variant file name", "my-variant.yaml")
        return variant_rules.load(Reader(path.resolve(), corpus.root, file_schemas.VARIANT), path.stem, corpus)
    if not args.swap:
        raise SpecError(cli.at("--swap"), "nothing to swap", "add --swap 'layers[TEMPLATES].SLOT=COMPONENT'")
    base = corpus.find_model(args.model)
    swaps = [playground_variant.parse_swap(text) for text in args.swap]
    binds = [playground_variant.parse_bind(corpus, text) for text in args.bind]
    name = args.name or re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{base.model_id.split('/')[-1]}-"
                                + "-".join(s.fill.component for s in swaps)).strip("-.")
    check_name(name, cli.at("--name"), "variant name", "--name V3-with-DSA")
    return variant_rules.resolve(corpus, name, base.model_id, swaps, binds, cli, name)


def run(args: argparse.Namespace) -> int:
    from engine.playground import playground_sol, variant as playground_variant
    from engine.deploy.hardware import find_gpu, load_gpus
    from engine.language.api import evaluate_spec
    from engine.language.corpus import load_corpus
    import yaml
    corpus = load_corpus(args.corpus)
    variant = variant_from_args(args, corpus)
    gpu = find_gpu(load_gpus(args.gpus_root), args.gpu)
    if args.config:
        config = playground_variant.parse_config(args.config)
    else:
        config = playground_sol.default_config([evaluate_spec(corpus, corpus.models[variant.base]),
                                        evaluate_spec(corpus, variant.spec)], gpu)
    setting = playground_variant.Setting(gpu, config, args.framework, args.kv_dtype, args.batch, args.context)
    result = playground_variant.compare(corpus, variant, setting)
    if args.save:
        text = yaml.safe_dump(playground_variant.variant_yaml(variant), sort_keys=False, width=100)
        Path(args.save).write_text(text)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print_table(result)
    if args.save:
        print(f"\nsaved {args.save}")
    return 0


def _fmt(key: str, value) -> str:
    if value is None:
        return "—"
    if key.endswith("_s"):
        return units.seconds(value)
    return units.si(value, "B" if "bytes" in key else "")


def _delta(old, new) -> str:
    if old is None or new is None or old == 0:
        return "new" if old in (None, 0) and new else ""
    return f"{(new - old) / old:+.1%}"


def print_table(result: dict) -> None:
    from engine.playground.variant import METRICS
    s = result["setting"]
    print(f"{result['model_id']}  [{result['label']}: not a published model]  from {result['variant_of']}")
    for swap in result["swaps"]:
        print(f"  swap {swap}")
    for dim, b in result["binds"].items():
        print(f"  bind {dim} = {b['bound']}  ({b['src']})")
    print(f"  on {s['n_gpus']} x {s['gpu']} ({s['config']}, {s['framework']}, KV {s['kv_dtype']}), batch {s['batch']}, "
          f"context {s['context']:,} tokens (prefill of the whole prompt, decode step at that context)")
    if not (result["fits"]["old"] and result["fits"]["new"]):
        print(f"  fits: old {'yes' if result['fits']['old'] else 'NO'}, new {'yes' if result['fits']['new'] else 'NO'}")
    blocks = [("whole model", result["model"]["old"], result["model"]["new"])]
    blocks += [(f"{g['group']}  ({g['layers_old']} -> {g['layers_new']} layers)", g["old"], g["new"])
               for g in result["groups"]]
    for title, old, new in blocks:
        print(f"\n{title}")
        for key, label, _ in METRICS:
            o, n = (old or {}).get(key), (new or {}).get(key)
            print(f"  {label:20s} {_fmt(key, o):>12s} -> {_fmt(key, n):>12s}  {_delta(o, n)}")
