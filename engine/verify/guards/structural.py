"""structural guard: config fields that shape the computation reach an op, with their value.

``corpus/verification.yaml`` (``structural``) lists them: RoPE base and scaling, partial rotary,
sliding-window and chunk sizes. The config snapshot records each one present in config.json even
when the spec ignores it, so "declared in config but used by no op" is visible and an error.
A field counts as used when a node of the named op binds the named dim from a model dim whose
expression reads the field; its numeric value must then equal the config's.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

from engine.language import expr
from engine.verify.guards import Context, Finding

NAME = "structural"
EVIDENCE = "config structural fields"


def lookup(config: dict, path: str):
    value = config
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def active(ctx: Context, entry) -> bool:
    config = ctx.evidence.config
    value = lookup(config, entry.field)
    if value is None or value is False:
        return False
    return not any(config.get(k) == v for k, v in entry.unless.items())


def evidence(ctx: Context) -> str:
    fields = [e.field for e in ctx.registry.structural if active(ctx, e)]
    return "config " + (", ".join(fields) if fields else "(no structural fields)")


def dim_reads(ctx: Context) -> dict[str, set[tuple]]:
    """Model dim name -> the config paths its expression reads (transitively through other dims)."""
    reads: dict[str, set[tuple]] = {}
    config = ctx.evidence.config
    for name, text in ctx.model.dims.items():
        seen: set[tuple] = set()

        def resolve(path: tuple, seen=seen):
            seen.add(path)
            value = config
            for key in path:
                value = value[key]
            return value

        names = {d: sympy.Symbol(d) for d in reads}
        try:
            value = expr.evaluate(text, expr.Scope(names, resolve))
        except (expr.ExprError, KeyError, IndexError, TypeError):
            value = None
        for sym in getattr(value, "free_symbols", ()):
            seen |= reads.get(sym.name, set())
        reads[name] = seen
    return reads


@lru_cache(maxsize=256)
def _nsimplify(kind: type, value) -> sympy.Expr:
    return sympy.nsimplify(value)


def _exact(value) -> sympy.Expr:
    """``sympy.nsimplify(value)`` (slow on a float: it searches for the rational), once per value;
    keyed by type too, so 1 and 1.0 and True stay apart."""
    try:
        hash(value)
    except TypeError:
        return sympy.nsimplify(value)
    return _nsimplify(type(value), value)


def _reads_field(paths: set[tuple], field: str) -> bool:
    want = tuple(field.split("."))
    return any(p[:len(want)] == want or want[:len(p)] == p for p in paths)


def _users(ctx: Context, reads: dict[str, set[tuple]], entry, field: str) -> list[str]:
    """The nodes of the entry's op whose entry dim is bound from a model dim reading ``field``."""
    users = []
    for uid, row in ctx.symbolic.rows.items():
        # any stack: DeepSeek-V4-Pro's main RoPE base shapes only its MTP layer
        if row.op != entry.op or entry.dim not in row.dim_values:
            continue
        symbols = getattr(row.dim_values[entry.dim], "free_symbols", set())
        paths = set().union(*(reads.get(s.name, set()) for s in symbols)) if symbols else set()
        if _reads_field(paths, field):
            users.append(uid)
    return users


def check(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    reads = dim_reads(ctx)
    for entry in ctx.registry.structural:
        if not active(ctx, entry):
            continue
        value = lookup(ctx.evidence.config, entry.field)
        users = _users(ctx, reads, entry, entry.field)
        alias = lookup(ctx.evidence.config, entry.same_as) if entry.same_as else None
        if alias is not None and alias != value:
            # one setting written twice with two values: which one the code reads is not ours to guess
            out.append(Finding(NAME, "error", "", f"config.{entry.field} = {value} but config.{entry.same_as} = "
                               f"{alias}: the config states {entry.doc} twice, differently",
                               "check the published config.json; the modeling code reads one of them"))
            continue
        if not users and alias is not None and _users(ctx, reads, entry, entry.same_as):
            continue   # the same value under its other path reaches the op (checked under that entry)
        if not users:
            out.append(Finding(NAME, "error", "", f"config.{entry.field} = {value} ({entry.doc}) is declared "
                               f"but no {entry.op} op binds its {entry.dim!r} from it",
                               f"bind a dim to config.{entry.field} and pass it to the {entry.op} "
                               f"node's dims ({entry.dim}: <dim>)"))
            continue
        if not entry.compare:
            continue
        want = _exact(value)
        for uid in users:
            got = ctx.numeric.rows[uid].dim_values[entry.dim]
            if sympy.simplify(got - want) != 0:
                out.append(Finding(NAME, "error", uid, f"binds {entry.dim} = {got}, but config.{entry.field} "
                                   f"= {value}", f"bind {entry.dim} to config.{entry.field} itself"))
    return out
