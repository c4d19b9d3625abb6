"""Checked values of the grid file's blocks: a whole number within a bound, a short list, a list of
allowed names, each refused in one line (file:line: field: problem — what to write).

Layer: engine.language (on the corpus reader). The build's grid (engine/batch/grid.py) and the serving
answers' ``sizing:`` block (engine/serving/fronts.py) read the same file with the same rules.
"""
from __future__ import annotations

from typing import Any

from engine.language.names import shown_value
from engine.language.reader import Reader
from engine.language.errors import SpecError, Where

#: Longest list a grid block may hold: every list is evaluated in every combination, so each list
#: is short (engine/batch/grid.py bounds the product).
MAX_LIST = 64


def count_field(item: Any, where: Where, high: int, what: str, allow_tp: bool = False) -> int | str:
    """One whole number from 1 to ``high`` (or ``tp`` where a degree may follow the TP group)."""
    if allow_tp and item == "tp":
        return item
    also = " or `tp`" if allow_tp else ""
    if isinstance(item, bool) or not isinstance(item, int) or item < 1:
        raise SpecError(where, f"{shown_value(item)} is not a positive integer", f"write {what} from 1 to {high:,}{also}")
    if item > high:
        raise SpecError(where, f"{item:,} is more than {high:,}",
                        f"write {what} from 1 to {high:,}{also} (the grid's bound: see engine/batch/grid.py)")
    return item


def list_field(reader: Reader, parent, key: str, field: str, empty_ok: bool = False) -> list:
    """The list at ``parent[key]``: non-empty unless ``empty_ok``, at most :data:`MAX_LIST` long."""
    value = parent.get(key)
    where = reader.where(parent, field, key)
    if not isinstance(value, list) or (not value and not empty_ok):
        raise SpecError(where, f"expected a {'' if empty_ok else 'non-empty '}list, got {shown_value(value)}",
                        f"write `{key}: [a, b]`")
    if len(value) > MAX_LIST:
        raise SpecError(where, f"{len(value)} entries, more than {MAX_LIST}",
                        f"list at most {MAX_LIST} values (every combination of the lists is evaluated)")
    return value


def choices_field(reader: Reader, parent, key: str, field: str, allowed, empty_ok: bool = False) -> tuple[str, ...]:
    """The list at ``parent[key]`` (:func:`list_field`), each entry one of ``allowed``."""
    value = list_field(reader, parent, key, field, empty_ok)
    for i, item in enumerate(value):
        if not isinstance(item, str) or item not in allowed:
            raise SpecError(reader.where(parent, f"{field}[{i}]", key), f"unknown {key.rstrip('s')} {shown_value(item)}",
                            "use one of: " + ", ".join(allowed))
    return tuple(value)
