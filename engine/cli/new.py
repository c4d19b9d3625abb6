"""``archledger new HF_ID --config PATH``: a verified spec for a checkpoint of a known family.

Layer: engine.cli; the work is :func:`engine.verify.scaffold.scaffold`. Exit codes: 0 written and
verified with equal parameter counts, 1 written with lines a person must settle (printed one each),
2 refused (the one-line error; nothing written).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub, parents=()) -> argparse.ArgumentParser:
    new = sub.add_parser(
        "new", parents=list(parents), help="write, record and verify the spec of a checkpoint of a known family",
        description="Write corpus/models/<org>--<name>.yaml from the closest corpus spec of the config's family "
                    "(or --like), copy config.json into corpus/snapshots/ with its sha256, add the lineage entry, "
                    "record evidence on the meta device, validate, and print ArchLedger's parameter count beside "
                    "transformers'. Lists one line per thing a person must add.")
    new.add_argument("model", metavar="HF_ID", help="the checkpoint's Hub id, org/name")
    new.add_argument("--config", required=True, metavar="PATH", help="its published config.json")
    new.add_argument("--like", metavar="MODEL", help="the corpus model to start from (default: the closest of the family)")
    new.add_argument("--force", action="store_true", help="overwrite an existing spec (or checkpoint entry) of this id")
    new.add_argument("--checkpoint", action="store_true",
                     help="add it as a published checkpoint (another storage of the same architecture) of --like MODEL "
                          "(default: the family's closest model) instead of writing a spec: its config must differ from "
                          "the base's only in quantization_config")
    new.add_argument("--format", metavar="NAME", help="with --checkpoint: its weight-format name (default: what its repo "
                                                    "name adds to the base's, lower case, e.g. fp8)")
    new.set_defaults(func=cmd_new)
    return new


def cmd_new(args: argparse.Namespace) -> int:
    if args.checkpoint:
        return _checkpoint(args)
    if args.format:
        from engine.language.errors import SpecError, Where
        raise SpecError(Where("<command line>", 0, "--format"), "--format names a checkpoint's weight format",
                        "add --checkpoint (or leave out --format)")
    from engine.verify.scaffold import scaffold
    result = scaffold(Path(args.corpus), args.model, Path(args.config), args.like, args.force,
                      progress=lambda line: print(line, file=sys.stderr))
    return _report(result, f"{args.model}: verified, like {result.base}, with no hand edit",
                   f"{args.model}: {len(result.todo)} thing(s) to add by hand (base {result.base}):")


def _checkpoint(args: argparse.Namespace) -> int:
    """``--checkpoint``: exit 0 added and verified, 1 nothing written (the lines say why), 2 refused."""
    from engine.verify.add_checkpoint import add_checkpoint
    result = add_checkpoint(Path(args.corpus), args.model, Path(args.config), args.like, args.force, args.format,
                            progress=lambda line: print(line, file=sys.stderr))
    return _report(result, f"{args.model}: verified as a checkpoint of {result.base}, with no hand edit",
                   f"{args.model}: not added to {result.base} (nothing written); {len(result.todo)} thing(s) to settle:")


def _report(result, done: str, todo: str) -> int:
    """Print the files written, both parameter counts, the notes, then ``done`` (exit 0) or
    ``todo`` and one line per thing to settle (exit 1): ``new`` with or without --checkpoint."""
    for path in result.files:
        print(f"wrote {path}")
    ours = f"{result.ours:,}" if result.ours is not None else "(does not evaluate)"
    theirs = f"{result.theirs:,}" if result.theirs is not None else "(transformers cannot build it)"
    print(f"parameters: ArchLedger {ours}, transformers (meta device) {theirs}")
    for line in result.notes:
        print(f"note: {line}")
    if result.done:
        print(done)
        return 0
    print(todo)
    for line in result.todo:
        print(f"  - {line}")
    return 1
