"""Which config fields of one model's snapshot a piece of work read, and what each held.

Layer: engine.language (imports nothing of the engine). The build shares one evaluation between
two models whose evaluation inputs are equal up to identity (:mod:`engine.batch.twins`); a config
snapshot differs between such twins in fields nothing reads (a generation default, a field in
another layout), so what must be equal is every field the first model's evaluation *read*. The
walk reports each read here (:meth:`engine.language.evaluate.Walker.config`); :func:`recording`
collects them for one snapshot while a model's work runs.

Invariant: a read is recorded whether it finds the field or not (its :func:`outcome`: a missing
field raises, and a caller that catches the error behaves differently than with the field
present); reads of a dim's binding text are not reported (their values stand for them:
:mod:`engine.batch.twins`). Recording is off unless a :func:`recording` is open, and only reads
of its snapshot (the very object: a spec's variants and picks keep it) are kept.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

_OPEN: list[tuple[Any, dict]] = []      # the open recordings: (the snapshot, path -> outcome)


@contextlib.contextmanager
def recording(snapshot: Any) -> Iterator[dict]:
    """Collect, into the yielded dict (config path -> its :func:`outcome`), every
    read of ``snapshot``'s fields while the block runs. One recording at a time (a nested one
    replaces the outer one until it ends)."""
    reads: dict = {}
    _OPEN.append((snapshot, reads))
    try:
        yield reads
    finally:
        _OPEN.pop()


def outcome(read: Callable[[tuple], Any], path: tuple) -> tuple:
    """What ``read(path)`` gives, as recorded: ``("value", value)``, or ``("raised", the error's
    type name)`` (a missing field raises KeyError, a non-finite one SpecError)."""
    try:
        return ("value", read(path))
    except Exception as exc:        # every failure is an outcome a caller may catch and act on
        return ("raised", type(exc).__name__)


def noted(snapshot: Any, path: tuple, read: Callable[[tuple], Any]) -> Any:
    """``read(path)``, reported to the open recording when it records ``snapshot`` (its outcome,
    :func:`outcome`, the error raised again)."""
    if not (_OPEN and _OPEN[-1][0] is snapshot):
        return read(path)
    found = outcome(read, path)
    _OPEN[-1][1].setdefault(path, found)
    return found[1] if found[0] == "value" else read(path)      # (read again: the error itself, raised)
