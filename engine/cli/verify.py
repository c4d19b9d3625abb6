"""``archledger snapshot`` (record evidence) and ``archledger validate`` (run the guards).

Layer: engine.cli. Exit codes: 0 verified / written, 1 a model has guard errors, 2 bad input
(a spec or evidence file that cannot be read; the one-line error names file, line and field).
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from engine.spec.errors import SpecError, Where


def add_parsers(sub, parents=()) -> None:
    snap = sub.add_parser(
        "snapshot", parents=list(parents), help="record a model's evidence: config fields, tensor manifest, forward source",
        description="Record the evidence a spec is verified against. Default: everything from the "
                    "Hugging Face Hub (safetensors headers by range requests, no weights). "
                    "--checkpoint DIR reads a local checkpoint; --meta builds the transformers "
                    "modeling code on the meta device (needs --config, offline); --config alone "
                    "refreshes only the config fields.")
    snap.add_argument("model", help="the model's HF id (its spec must be in corpus/models/)")
    snap.add_argument("--config", help="config.json to read instead of the Hub's / the checkpoint's")
    snap.add_argument("--checkpoint", help="local checkpoint directory (safetensors + config.json)")
    snap.add_argument("--meta", action="store_true", help="manifest from the transformers modeling code")
    snap.add_argument("--hub", action="store_true", help="read the Hub even when --config is given")
    snap.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: main)")
    snap.add_argument("--endpoint", default=None, help="Hub endpoint (default: huggingface.co or HF_ENDPOINT)")
    snap.add_argument("--force", action="store_true",
                      help="rewrite evidence recorded with another transformers release than the installed one")
    snap.set_defaults(func=cmd_snapshot)

    val = sub.add_parser("validate", parents=list(parents), help="run the verification guards (exit 1 on errors)")
    val.add_argument("models", nargs="*", help="models to check (default: all)")
    val.add_argument("--json", action="store_true", help="structured output: guard, severity, node, message, hint")
    val.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from engine.spec.corpus import load_corpus
    from engine.verify.validate import render_text, validate
    corpus = load_corpus(args.corpus)
    models = [corpus.find_model(m) for m in args.models] if args.models else list(corpus.models.values())
    reports = []
    for i, model in enumerate(models, 1):
        if not args.json and sys.stderr.isatty():
            print(f"\rvalidating {i}/{len(models)} {model.model_id[:50]:50s}", end="", file=sys.stderr, flush=True)
        reports.append(validate(corpus, model))
    if not args.json and sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0 if all(r.verified for r in reports) else 1
    print("\n\n".join(render_text(r) for r in reports))
    failed = [r.model_id for r in reports if not r.verified]
    warnings = sum(1 for r in reports for f in r.findings if f.severity == "warning")
    print(f"\n{len(reports)} models: {len(reports) - len(failed)} verified, {len(failed)} with errors"
          + (f" ({', '.join(failed)})" if failed else "") + f"; {warnings} warnings")
    return 0 if not failed else 1


def _source_from_transformers(config: dict) -> tuple[str, dict, dict[str, str]] | None:
    from engine.verify import modeling_code
    from engine.verify.evidence import forward_excerpts
    try:
        label, text = modeling_code.modeling_source(config)
    except (modeling_code.ModelingCodeError, ImportError, KeyError):
        return None
    return label, {"kind": "modeling-code", "file": label}, forward_excerpts(text)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from engine.verify import checkpoint_headers as headers
    from engine.verify import modeling_code
    from engine.spec.corpus import load_corpus
    from engine.verify.evidence import forward_excerpts
    from engine.verify.snapshot import (fields_read, manifest_from_scan, snapshot_files, transformers_changes,
                                         write_atomic)
    from engine.spec.yamlio import refuse_non_finite
    from engine.spec.yamlio import loads_json as strict_json
    # NaN/Infinity in a config.json is refused where the snapshot records it (config_text)
    loads_json = functools.partial(strict_json, keep_non_finite=True)

    corpus = load_corpus(args.corpus, missing_snapshots_ok=True)
    model = corpus.find_model(args.model)
    repo = model.model_id
    where = Where("archledger snapshot")
    manifest = source = None
    try:
        if args.checkpoint:
            folder = Path(args.checkpoint)
            config_path = Path(args.config) if args.config else folder / "config.json"
            config = loads_json(config_path.read_text())
            config_source = f"dir:{folder} config.json" if not args.config else f"{config_path}"
            scan = headers.read_local(folder)
            manifest = manifest_from_scan(scan, f"hf:{repo}")
            own = sorted(folder.glob("modeling_*.py"))
            if own:
                source = (f"{folder.name}/{own[0].name}", {"kind": "checkpoint", "file": own[0].name},
                          forward_excerpts(own[0].read_text()))
            else:
                source = _source_from_transformers(config)
        elif args.meta:
            if not args.config:
                raise SpecError(where, "--meta needs --config", "pass the model's config.json")
            config = loads_json(Path(args.config).read_text())
            config_source = f"hf:{repo} config.json"
            refuse_non_finite(fields_read(corpus, model, config))   # before transformers sees it
            manifest = modeling_code.meta_manifest(config, corpus.schemes, f"hf:{repo}")
            source = _source_from_transformers(config)
        elif args.config and not args.hub:
            config = loads_json(Path(args.config).read_text())
            config_source = f"hf:{repo} config.json"
        else:
            kw = {"endpoint": args.endpoint}
            config = loads_json(headers.hub_file_text(repo, "config.json", args.revision, **kw))
            scan = headers.read_hub(repo, args.revision, **kw)
            config_source = f"{scan.source} config.json"
            manifest = manifest_from_scan(scan, f"hf:{repo}")
            code = [f for f in headers.hub_file_names(repo, args.revision, **kw)
                    if f.startswith("modeling_") and f.endswith(".py")]
            if code:
                text = headers.hub_file_text(repo, code[0], args.revision, **kw)
                source = (f"{scan.source} {code[0]}", {"kind": "checkpoint", "file": code[0]},
                          forward_excerpts(text))
            else:
                source = _source_from_transformers(config)
        files = snapshot_files(corpus, model, config, config_source, manifest, source)
        changes = transformers_changes(corpus, model, manifest, source)
        if changes and not getattr(args, "force", False):
            raise SpecError(where, "; ".join(changes) + " — nothing was written",
                            "install the recorded transformers release to refresh the same evidence, or pass "
                            "--force to re-record it with this one (then review the diff)")
    except headers.HeaderError as exc:
        raise SpecError(where, str(exc)) from None
    except modeling_code.ModelingCodeError as exc:
        raise SpecError(where, str(exc)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(where, f"cannot read config.json: {exc}", "pass --config path/to/config.json") from None
    write_atomic(files)
    for path in files:
        print(f"wrote {path}")
    return 0
