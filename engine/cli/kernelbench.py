"""``archledger kernelbench``: measure GEMM, attention and NCCL on this machine's GPU with torch and
write tables in the schema of ``gpus/measured/``, so ``deploy`` and ``plan`` calibrate to it.

Layer: engine.cli. The parser imports nothing heavy (``--help`` stays fast); torch is imported
when the bench runs (engine.deploy.kernelbench: absent, one line, exit 2).
"""
from __future__ import annotations

import argparse
import functools
import shlex
import sys
from pathlib import Path

from engine.language.errors import SpecError, Where


def _list(kind):
    def parse(text: str) -> list:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list") from None
        if not values:
            raise argparse.ArgumentTypeError("an empty list")
        return values
    return parse


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _shape(text: str) -> tuple[int, int]:
    n, sep, k = text.partition("x")
    if not sep:
        raise ValueError(text)
    return _positive(n), _positive(k)


def add_parser(sub, parents=()):
    p = sub.add_parser("kernelbench", parents=list(parents),
                       help="measure GEMM, attention and NCCL on this GPU (torch) into gpus/measured/ tables",
                       description=__doc__.split("\n\n")[0],
                       epilog="Needs torch (pip install -e '.[oracle]'). --device cpu checks the plumbing, its "
                              "times are not a GPU's. Exit status 2 on bad input, a missing torch or an existing "
                              "file without --force; nothing is written then.")
    # its own dest: `args.out` is the project's output folder (engine.cli.dispatch fills it in)
    p.add_argument("--out", dest="tables_out", metavar="DIR", default=None,
                   help="measured-tables folder written into (<gpu>/<framework>-<version>/<kernel>-<variant>.yaml); "
                        "default: the checkout's gpus/measured/, which deploy and plan read")
    p.add_argument("--gpu-name", default=None,
                   help="the `gpu:` name of gpus/*.yaml the tables are for (default on cuda: the one the device "
                        "name contains; required with --device cpu)")
    p.add_argument("--framework", default="vllm",
                   help="framework the tables are filed under (a fusion table of corpus/fusion/: vllm, sglang); "
                        "its version: the installed package's, else torch<version>")
    p.add_argument("--classes", type=_list(str), default="gemm,attention,nccl",
                   help="kernel classes, comma-separated: gemm, attention, nccl")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when torch sees one")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: two values per axis, one TP size, few repeats (coarse tables)")
    p.add_argument("--model", action="append", default=None, metavar="ID",
                   help="derive the GEMM shapes from this model only (repeatable; default: every corpus model)")
    p.add_argument("--tokens", type=_list(_positive), default=None, help="GEMM m values (default 1..8192 "
                   "in powers of two; --quick: 1,16)")
    p.add_argument("--gemm-shapes", type=_list(_shape), default=None, metavar="NxK,...",
                   help="measure these (n, k) instead of the corpus's, e.g. 4096x4096,14336x4096")
    p.add_argument("--force", action="store_true", help="overwrite existing table files")
    p.set_defaults(func=run)
    return p


def _version(framework: str, torch) -> str:
    """The installed framework's version, else torch's (the tables are filed under it)."""
    import importlib.metadata
    try:
        return importlib.metadata.version(framework)
    except importlib.metadata.PackageNotFoundError:
        return "torch" + str(torch.__version__).split("+")[0]


def _gpu_name(args, gpus: dict, torch, device: str) -> str:
    from engine.deploy.hardware import find_gpu
    if args.gpu_name:
        return find_gpu(gpus, args.gpu_name).key
    if device == "cpu":
        raise SpecError(Where("<command line>", field="--gpu-name"), "--device cpu needs the GPU the tables are filed for",
                        "add --gpu-name NAME (one of: " + ", ".join(sorted(gpus)) + ")")
    name = torch.cuda.get_device_name()
    found = [key for key in gpus if key.lower() in name.lower().split()]
    if len(found) != 1:
        raise SpecError(Where("<command line>", field="--gpu-name"), f"cannot tell which GPU file {name!r} is",
                        "add --gpu-name NAME (one of: " + ", ".join(sorted(gpus)) + ")")
    return found[0]


def _command(args, device: str) -> str:
    """The command line of this run, every option spelled out (its defaults included)."""
    words = ["archledger", "kernelbench", "--device", device, "--framework", args.framework,
             "--classes", ",".join(args.classes)]
    for flag, value in (("--gpu-name", args.gpu_name), ("--out", args.tables_out),
                        ("--tokens", args.tokens and ",".join(map(str, args.tokens))),
                        ("--gemm-shapes", args.gemm_shapes and ",".join(f"{n}x{k}" for n, k in args.gemm_shapes))):
        if value:
            words += [flag, str(value)]
    for model in args.model or ():
        words += ["--model", model]
    words += [flag for flag, on in (("--quick", args.quick), ("--force", args.force)) if on]
    return shlex.join(words)


def run(args) -> int:
    from engine.deploy import kernelbench as kb
    unknown = [c for c in args.classes if c not in kb.CLASSES]
    if unknown:
        raise SpecError(Where("<command line>", field="--classes"), f"unknown kernel class {unknown[0]!r}",
                        "use any of: " + ", ".join(kb.CLASSES))
    try:
        torch = kb.require_torch()
    except kb.KernelbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from engine.deploy.fusion_table import load_tables
    from engine.deploy.hardware import load_gpus
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecError(Where("<command line>", field="--device"), "torch sees no CUDA device",
                        "run on a GPU machine, or --device cpu to check the plumbing")
    if args.framework not in load_tables(Path(args.corpus) / "fusion"):
        raise SpecError(Where("<command line>", field="--framework"), f"unknown framework {args.framework!r}",
                        "use one of: " + ", ".join(sorted(load_tables(Path(args.corpus) / "fusion"))))
    gpus = load_gpus(args.gpus_root)
    bench = kb.Bench(torch, device, _gpu_name(args, gpus, torch, device), args.framework,
                     _version(args.framework, torch), _command(args, device),
                     warmup=1 if args.quick else 3, reps=3 if args.quick else 20)
    out = Path(args.tables_out) if args.tables_out else Path(args.gpus_root) / "measured"
    heads = _head_dims(args) if "attention" in args.classes else []
    kb.refuse_existing(kb.planned(bench, args.classes, heads), out, args.force)
    tables = []
    if "gemm" in args.classes:
        tables.append(_gemm(args, bench, kb))
    if "attention" in args.classes:
        for d in heads:
            kb.say(f"attention, head size {d}")
            tables += kb.attention_tables(bench, d, args.quick)
    if "nccl" in args.classes:
        tables += kb.collective_tables(bench, args.quick)
    for note in bench.notes:
        print(note, file=sys.stderr)
    if not tables:
        print("error: no table measured — nothing written", file=sys.stderr)
        return 2
    written = kb.write_tables(tables, out, gpus, args.force)
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} tables for {bench.gpu} ({bench.framework} {bench.version}) measured on "
          f"{bench.device_name} with torch {torch.__version__}")
    return 0


@functools.lru_cache(maxsize=2)
def _dims(corpus: str, models: tuple | None) -> dict:
    from engine.deploy.kernel_shapes import corpus_dims
    from engine.language.corpus import load_corpus
    return corpus_dims(load_corpus(Path(corpus)), models)


def _corpus_dims(args) -> dict:
    """The bound dims of the models the shapes come from (the corpus is loaded once per run)."""
    return _dims(args.corpus, tuple(args.model) if args.model else None)


def _gemm(args, bench, kb) -> dict:
    from engine.deploy import kernel_shapes as ks
    limit = 2 if args.quick else ks.AXIS_LIMIT
    if args.gemm_shapes:
        pairs = set(args.gemm_shapes)
    else:
        pairs = ks.gemm_pairs(_corpus_dims(args), (1,) if args.quick else ks.TP)
    ns, kk = ks.gemm_axes(pairs, limit)
    tokens = sorted(set(args.tokens)) if args.tokens else (ks.QUICK_TOKENS if args.quick else ks.TOKENS)
    if len(tokens) < 2:
        tokens = ks.spread(tokens, 2)
    kb.say(f"gemm: {len(tokens)} token counts x {len(ns)} n x {len(kk)} k")
    return kb.gemm_table(bench, tokens, ns, kk)


def _head_dims(args) -> list[int]:
    from engine.deploy.kernel_shapes import head_dims
    dims = head_dims(_corpus_dims(args)) or [128]
    if args.quick:      # one head size: the imported tables' 128 where the corpus has it
        return [128] if 128 in dims else dims[:1]
    return dims
