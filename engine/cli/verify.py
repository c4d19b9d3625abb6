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

from engine.language.errors import SpecError, Where


def registry(root: Path):
    """The corpus's verification registry (engine.verify.evidence, imported here: it loads the
    spec language and sympy, which the parser and ``--help`` must not)."""
    from engine.verify.evidence import registry as read
    return read(root)


def add_parsers(sub, parents=()) -> None:
    snap = sub.add_parser(
        "snapshot", parents=list(parents), help="record a model's evidence: config fields, tensor manifest, forward source",
        description="Record the evidence a spec is verified against. Default: everything from the "
                    "Hugging Face Hub (safetensors headers by range requests, no weights). "
                    "--checkpoint DIR reads a local checkpoint; --meta builds the transformers "
                    "modeling code on the meta device (needs --config, offline); --config alone "
                    "refreshes only the config fields.")
    snap.add_argument("model", nargs="?", help="the model's HF id (its spec must be in corpus/models/)")
    snap.add_argument("--all", action="store_true",
                      help="with --meta: re-record every model's modeling-code evidence from its published "
                           "config.json with the installed transformers and print what changed (with --force: "
                           "move the oracle pin to the installed release)")
    snap.add_argument("--config", help="config.json to read instead of the Hub's / the checkpoint's")
    snap.add_argument("--checkpoint", help="local checkpoint directory (safetensors + config.json)")
    snap.add_argument("--meta", action="store_true", help="manifest from the transformers modeling code")
    snap.add_argument("--hub", action="store_true", help="read the Hub even when --config is given")
    snap.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: main)")
    snap.add_argument("--endpoint", default=None, help="Hub endpoint (default: huggingface.co or HF_ENDPOINT)")
    snap.add_argument("--force", action="store_true",
                      help="rewrite evidence recorded with another transformers release than the installed one "
                           "(with --all: bump the pinned release)")
    snap.set_defaults(func=cmd_snapshot)

    val = sub.add_parser("validate", parents=list(parents), help="run the verification guards (exit 1 on errors)")
    val.add_argument("models", nargs="*", help="models to check (default: all)")
    val.add_argument("--json", action="store_true", help="structured output: guard, severity, node, message, hint")
    val.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from engine.language.corpus import load_corpus
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
    # a spec declaring `unverified:` is expected to lack evidence: listed with its reason, not a failure
    declared = {m.model_id: m.unverified for m in models if m.unverified}
    if args.json:
        print(json.dumps([r.as_dict() | ({"unverified": declared[r.model_id]} if r.model_id in declared else {})
                          for r in reports], indent=2))
        return 0 if all(r.verified or r.model_id in declared for r in reports) else 1
    print("\n\n".join(render_text(r) for r in reports))
    for mid, why in declared.items():
        print(f"\n{mid}: unverified as its spec declares: {why}")
    failed = [r.model_id for r in reports if not r.verified and r.model_id not in declared]
    warnings = sum(1 for r in reports for f in r.findings if f.severity == "warning")
    print(f"\n{len(reports)} models: {len(reports) - len(failed) - len(declared)} verified, {len(failed)} with errors"
          + (f" ({', '.join(failed)})" if failed else "")
          + (f", {len(declared)} declared unverified" if declared else "") + f"; {warnings} warnings")
    return 0 if not failed else 1


def _source_from_transformers(config: dict) -> tuple[str, dict, dict[str, str]] | None:
    from engine.verify import modeling_code
    from engine.verify.evidence import forward_excerpts
    try:
        label, provenance, text = modeling_code.source_evidence(config)
    except (modeling_code.ModelingCodeError, ImportError, KeyError):
        return None
    return label, provenance, forward_excerpts(text)


def _installed_vs_pin(corpus) -> tuple[str, str | None]:
    """(installed transformers release, the corpus' pinned one); one-line error without transformers."""
    try:
        import transformers
    except ImportError:
        raise SpecError(Where("archledger snapshot"), "transformers is not installed",
                        "pip install -e '.[oracle]'") from None
    return transformers.__version__, registry(corpus.root).oracle


def cmd_snapshot_all(args: argparse.Namespace) -> int:
    """``snapshot --all --meta``: every modeling-code model re-recorded together, what changed, validate."""
    from engine.language.corpus import load_corpus
    from engine.language.yamlio import loads_json as strict_json
    from engine.verify import modeling_code, rerecord
    from engine.verify.snapshot import snapshot_files, write_atomic
    from engine.verify.validate import validate
    where = Where("archledger snapshot --all")
    if args.model or not args.meta or args.checkpoint or args.config or args.hub:
        raise SpecError(where, "--all takes no model, only --meta (each model's config is its published "
                        "corpus/snapshots/<org>--<name>.config.json)", "run: archledger snapshot --all --meta")
    corpus = load_corpus(args.corpus)
    installed, pin = _installed_vs_pin(corpus)
    bump = installed != pin
    if bump and not args.force:
        raise SpecError(where, f"the corpus pins transformers {pin} (corpus/verification.yaml oracle) and "
                        f"{installed} is installed — nothing was written",
                        f"pass --force to move the pin to {installed} and re-record every model, or "
                        f"pip install transformers=={pin}")

    # NaN/Infinity in a config.json is refused where the snapshot records it (config_text)
    loads_json = functools.partial(strict_json, keep_non_finite=True)

    def build(model, config_path):
        config = loads_json(config_path.read_text())
        manifest = modeling_code.meta_manifest(config, corpus.schemes, f"hf:{model.model_id}",
                                               registry(corpus.root).prefixes)
        return manifest, _source_from_transformers(config)

    try:
        done = rerecord.rerecord(corpus, build)
    except modeling_code.ModelingCodeError as exc:
        raise SpecError(where, str(exc)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(where, f"cannot read a published config.json: {exc}") from None
    files = {}
    for item in done:
        name = item.model.model_id.replace("/", "--")
        config = loads_json((corpus.root / "snapshots" / f"{name}.config.json").read_text())
        files.update(snapshot_files(corpus, item.model, config, f"hf:{item.model.model_id} config.json",
                                    item.manifest, item.source))
    if bump:
        files.update(rerecord.pin_files(corpus.root, installed))
    write_atomic(files)
    print(f"re-recorded {len(done)} models with transformers {installed}"
          + (f" (pin moved from {pin}: corpus/verification.yaml, pyproject.toml)" if bump else ""))
    for item in done:
        print(f"{item.model.model_id}: " + ("unchanged" if not item.changes else "; ".join(item.changes)))
    from engine.verify import evidence
    evidence.clear_registry()   # the pin may have moved: read corpus/verification.yaml again
    corpus = load_corpus(args.corpus)
    failed = []
    for item in done:
        report = validate(corpus, corpus.models[item.model.model_id])
        if not report.verified:
            failed.append(item.model.model_id)
            for finding in report.errors:
                print(f"  {item.model.model_id}: {finding.one_line()}")
    print(f"{len(done)} models: {len(done) - len(failed)} verified, {len(failed)} with errors"
          + (f" ({', '.join(failed)}): fix the specs or anchors, then archledger validate" if failed else ""))
    return 0 if not failed else 1


def cmd_snapshot(args: argparse.Namespace) -> int:
    if getattr(args, "all", False):
        return cmd_snapshot_all(args)
    if not args.model:
        raise SpecError(Where("archledger snapshot"), "no model given", "name one (its HF id), or pass --all --meta")
    from engine.verify import checkpoint_headers as headers
    from engine.verify import modeling_code
    from engine.language.corpus import load_corpus
    from engine.verify.evidence import forward_excerpts
    from engine.verify.snapshot import (fields_read, manifest_from_scan, snapshot_files, transformers_changes,
                                         write_atomic)
    from engine.language.yamlio import refuse_non_finite
    from engine.language.yamlio import loads_json as strict_json
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
            installed, pin = _installed_vs_pin(corpus)
            if pin is not None and installed != pin:
                raise SpecError(where, f"the corpus pins transformers {pin} (corpus/verification.yaml oracle) "
                                f"and {installed} is installed — nothing was written",
                                f"pip install transformers=={pin}, or move every model to {installed} at once: "
                                "archledger snapshot --all --meta --force")
            config = loads_json(Path(args.config).read_text())
            config_source = f"hf:{repo} config.json"
            refuse_non_finite(fields_read(corpus, model, config))   # before transformers sees it
            manifest = modeling_code.meta_manifest(config, corpus.schemes, f"hf:{repo}",
                                                  registry(corpus.root).prefixes)
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
