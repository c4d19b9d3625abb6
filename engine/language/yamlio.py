"""Safe YAML reading that remembers line numbers, so every error can point at file:line.

Layer: engine.language. Only ``yaml.SafeLoader`` is used (specs arrive in pull requests). Mappings load as
:class:`LineDict`, a ``dict`` that also knows the line of each key; lists as :class:`LineList`.

Every corpus file (specs, components, snapshots, manifests, quant schemes, GPUs, fusion tables,
the grid) is read here, so the limits that keep hostile input from hanging or crashing a command
live here once, each a one-line :class:`SpecError` with file:line:

* at most :data:`MAX_FILE_BYTES` bytes, read with a bounded read (a FIFO or a 50 MB file never
  reaches the parser); UTF-8 only (a BOM is fine), a bad byte is named by offset and line;
* at most :data:`MAX_DEPTH` levels of nesting (PyYAML composes recursively: 10,000 levels would
  end in RecursionError), checked in ``compose_node`` before it recurses;
* aliases may stand for at most :data:`MAX_ALIAS_NODES` nodes in total (the corpus shares a few
  small fills with ``&name``/``*name``; nested aliases "billion laughs" expand exponentially and
  hang every consumer that walks the data); an alias of its own enclosing value is refused;
* numbers are finite and within ±``MAX_MAGNITUDE`` (2**128; no dim, count, size or rate is near);
  ``.nan``/``.inf`` never reach arithmetic;
* text has no lone surrogates (``"\\ud800"``), which cannot be printed or encoded later;
* the top level is a mapping (an empty file or a list says so, instead of a TypeError later).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from engine.language import parse_cache
from engine.language.errors import SpecError, Where
from engine.language.schema import check as check_schema

from engine.project import MAX_FILE_BYTES  # noqa: E402  (the one cap on an input file's bytes)

#: Bound on every number's magnitude (and denominator; engine.language.expr holds formulas to it too).
#: Real dims, counts, byte totals and FLOP formulas' coefficients are far below 2**128 (~3.4e38);
#: anything near it is an attack or a typo.
MAX_MAGNITUDE = 2 ** 128
#: Corpus files nest at most 9 levels deep (a stack's graph's node's dims); 64 is far above.
MAX_DEPTH = 64
#: Nodes that aliases may add when expanded, over one file. The corpus's aliases (shared fills
#: in the DeepSeek-V4 and GLM-5.2 specs) add about 200 in the largest case.
MAX_ALIAS_NODES = 5000


class _Refused(yaml.YAMLError):
    """A limit of this loader was hit at ``mark``; carries its own hint (not 'check indentation')
    and the field path where it was hit (filled in by ``compose_node``; None while unknown)."""

    def __init__(self, mark: Any, problem: str, hint: str, path: tuple | None = None):
        super().__init__(problem)
        self.mark, self.problem, self.hint, self.path = mark, problem, hint, path


def _short(text: str, limit: int = 24) -> str:
    """A scalar quoted for a message, cut short (a hostile scalar can be a megabyte long)."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return repr(text if len(text) <= limit else text[:limit] + "...")


class LineDict(dict):
    """A mapping from YAML with ``line`` (1-based, of the mapping) and ``key_lines`` per key."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    """A sequence from YAML with ``line`` (1-based) and ``item_lines``, the line of each item."""

    line: int = 0
    item_lines: tuple = ()

    def line_of_item(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


#: Scalars whose construction can fail or needs a bound: checked while composing, where the
#: field path is known (PyYAML would construct them later, with no path).
_CHECKED_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "timestamp"))


class _Loader(yaml.SafeLoader):
    """SafeLoader with the depth, alias, surrogate and number limits of this module."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._checks()

    def _checks(self) -> None:
        self._depth = 0
        self._path: tuple = ()             # keys / indices from the top to the node being composed
        self._sizes: dict[int, int] = {}   # id(node) -> nodes it stands for, aliases expanded
        self._alias_nodes = 0

    def compose_node(self, parent: Any, index: Any) -> yaml.Node:
        outer = self._path
        if isinstance(index, yaml.ScalarNode):   # a mapping value: index is its key
            self._path = outer + (index.value,)
        elif isinstance(index, int):             # a sequence item
            self._path = outer + (index,)
        try:
            return self._compose(parent, index)
        except _Refused as exc:
            if exc.path is None:
                exc.path = self._path
            raise
        finally:
            self._path = outer

    def _compose(self, parent: Any, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)   # an undefined alias is PyYAML's to report
            if node is not None:
                size = self._sizes.get(id(node))
                if size is None:   # the anchored node is still being composed: a cycle
                    raise _Refused(event.start_mark, f"alias *{event.anchor} refers to the value "
                                   "that contains it", "write the value out instead of the alias")
                self._alias_nodes += size
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise _Refused(event.start_mark, f"aliases expand to more than {MAX_ALIAS_NODES} "
                                   "values", "write the value out, or share fewer and smaller values")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:   # before recursing: 10,000 levels would blow the stack
                raise _Refused(self.peek_event().start_mark, f"nested more than {MAX_DEPTH} levels deep",
                               "flatten the structure (no corpus file needs more than a few levels)")
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.ScalarNode):
            if not node.value.isascii():
                _no_surrogates(node)
            if node.tag in _CHECKED_TAGS:
                self.construct_object(node)   # cached; construction reuses it
            size = 1
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._sizes[id(child)] for child in node.value)
        else:
            size = 1 + sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
        self._sizes[id(node)] = size
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML lets ValueError & co. escape for scalars such as ``!!float x`` or ``2024-13-45``."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, OverflowError, KeyError) as exc:
            raise _Refused(node.start_mark, f"cannot read {_short(str(node.value))} "
                           f"as {node.tag.rsplit(':', 1)[-1]}",
                           "quote the value if it is text, or write a plain number") from None


def _field(path: tuple) -> str:
    """('dims', 'd_ff') -> 'dims.d_ff'; ('a', 0, 'b') -> 'a[0].b'; keys shortened and escaped."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part.encode("ascii", "backslashreplace").decode("ascii")
            text = text if len(text) <= 40 else text[:40] + "..."
            out += f".{text}" if out else text
    return out if len(out) <= 80 else out[:80] + "..."


def _no_surrogates(node: yaml.ScalarNode) -> None:
    """A lone surrogate (from a ``\\ud800`` escape) cannot be encoded; printing it later crashes."""
    for offset, char in enumerate(node.value):
        if "\ud800" <= char <= "\udfff":
            raise _Refused(node.start_mark, f"text has a lone surrogate U+{ord(char):04X} "
                           f"(character {offset + 1} of the value)",
                           "write the character itself, or a \\U escape of a real code point")


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    try:
        value = loader.construct_yaml_int(node)
    except ValueError:   # Python refuses to convert more than 4300 decimal digits
        if not re.fullmatch(r"[-+]?[0-9_]+", node.value):
            raise
        value = MAX_MAGNITUDE + 1
    if abs(value) > MAX_MAGNITUDE:
        raise _Refused(node.start_mark, f"number {_short(node.value)} is beyond ±2**128",
                       "write the real value (no dim, count or size is this large)")
    return value


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> float:
    value = loader.construct_yaml_float(node)
    if not math.isfinite(value):
        raise _Refused(node.start_mark, f"{_short(node.value)} is not a finite number",
                       "write a finite number, or quote it if it is text")
    if abs(value) > MAX_MAGNITUDE:
        raise _Refused(node.start_mark, f"number {_short(node.value)} is beyond ±2**128",
                       "write the real value (no dim, count, size or rate is this large)")
    return value


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key_node.value if isinstance(key_node, yaml.ScalarNode) else '[...]'!r} "
                "is not a name (quote it if it is one)",
                key_node.start_mark)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = tuple(child.start_mark.line + 1 for child in node.value)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


try:
    from yaml._yaml import CParser       # present where PyYAML was built with libyaml
except ImportError:                      # without it every file is read by _Loader
    CParser = type("CParser", (), {})


class _FastLoader(CParser, _Loader):
    """:class:`_Loader` with libyaml's scanner and parser (C; parsing was most of a command's time:
    the 16 measured tables a deployment reads took 1.4 s, 0.3 s this way) under the same Python
    composer, checks and constructors, so the same limits hold and the same values come out.
    :func:`load_yaml` reads a file with it first and, on any error, again with :class:`_Loader`:
    every message (and every refusal) is then PyYAML's own, as it was before."""

    # composition in Python (the C parser's own would skip _Loader.compose_node and its limits)
    get_single_node = yaml.composer.Composer.get_single_node
    get_node = yaml.composer.Composer.get_node
    check_node = yaml.composer.Composer.check_node

    def __init__(self, stream: str):
        CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._checks()


#: libyaml, where PyYAML was built with it (else every file is read by :class:`_Loader`).
_FAST = hasattr(CParser, "get_event")


def _parse(text: str) -> Any:
    """The file's value: libyaml's parse where it succeeds (text PyYAML's reader accepts), else PyYAML's."""
    if _FAST and not yaml.reader.Reader.NON_PRINTABLE.search(text):
        try:
            return yaml.load(text, Loader=_FastLoader)  # noqa: S506 — SafeConstructor, _Loader's checks
        except Exception:       # noqa: BLE001 — any refusal is re-read below for PyYAML's message
            pass
    return yaml.load(text, Loader=_Loader)  # noqa: S506 — _Loader derives from SafeLoader


#: What an empty or non-mapping file is told to write, unless the caller knows better.
TOP_LEVEL_HINT = "write the `key: value` fields this file holds (see the files beside it)"


def read_text(path: Path, display: str, cap: int = MAX_FILE_BYTES) -> str:
    """A text file of the repository (a corpus file, a docs page), read with a bounded read (a FIFO
    or a 50 MB file is never read whole) and decoded as UTF-8 (a BOM is fine); a file over ``cap``
    bytes, unreadable or not UTF-8 is a one-line :class:`SpecError` naming ``display`` (and the
    line of a bad byte)."""
    try:
        with open(path, "rb") as handle:   # bounded: never read more than the cap (+1 to notice)
            data = handle.read(cap + 1)
    except OSError as exc:
        raise SpecError(Where(display), f"cannot read file ({exc.strerror})") from None
    if len(data) > cap:
        raise SpecError(Where(display), f"file is larger than {cap // (1 << 20)} MiB "
                        f"(the cap for a corpus file)", "split it, or record less (corpus files are "
                        "a few KB)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SpecError(Where(display, line), f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start})", "save the file as UTF-8") from None


def load_yaml(path: Path, display: str | None = None, *, mapping: bool = True,
              hint: str = TOP_LEVEL_HINT, schema: Any = None) -> Any:
    """Parse one corpus YAML file safely; anything wrong is a one-line :class:`SpecError`.

    With ``mapping`` (every corpus file today) the top level must be a mapping; ``hint`` says
    what to write when it is not (e.g. how to regenerate a recorded file). ``schema`` (a node of
    :mod:`engine.language.file_schemas`) is checked on the parsed value before it is returned, so a
    value of the wrong kind or out of its range never reaches the caller.
    """
    name = display or str(path)
    text = read_text(path, name)
    value = parse_cache.get(text)      # a built checkout's earlier parse of this very text
    try:
        if value is parse_cache.MISS:
            value = _parse(text)
            parse_cache.put(text, value)
    except _Refused as exc:
        raise SpecError(Where(name, exc.mark.line + 1 if exc.mark else 0, _field(exc.path or ())),
                        exc.problem, exc.hint) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        problem = f"invalid YAML: {exc.problem or exc.context}"
        raise SpecError(Where(name, line), problem,
                        "check indentation, colons and quoting around this line") from None
    except yaml.reader.ReaderError as exc:   # a control character; position is in characters
        line = text[: exc.position].count("\n") + 1
        raise SpecError(Where(name, line), f"invalid YAML: unacceptable character "
                        f"U+{exc.character if isinstance(exc.character, int) else 0:04X} ({exc.reason})",
                        "remove control characters; write plain text") from None
    except yaml.YAMLError as exc:
        raise SpecError(Where(name), f"invalid YAML: {exc}") from None
    if mapping and not isinstance(value, dict):
        if value is None:
            raise SpecError(Where(name, 1), "file is empty (or only comments)", hint)
        got = "a list" if isinstance(value, list) else f"a single value {_short(str(value))}"
        raise SpecError(Where(name, getattr(value, "line", 1)), f"expected a mapping at the top level, "
                        f"got {got}", hint)
    if schema is not None:
        check_schema(schema, value, name)
    return value


_JSON_NON_FINITE = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')


class NonFinite(float):
    """A ``NaN``/``Infinity`` a config.json holds in a field nothing reads yet (Nemotron-H's
    ``time_step_limit: [0.0, Infinity]``): a float for the modeling code, refused by
    :func:`refuse_non_finite` the moment a spec or snapshot would record it."""

    token: str
    doc: str
    pos: int

    def __new__(cls, token: str, doc: str, pos: int) -> "NonFinite":
        value = super().__new__(cls, token.replace("Infinity", "inf"))
        value.token, value.doc, value.pos = token, doc, pos
        return value

    def __reduce__(self):
        return (float, (float(self),))   # a copy (transformers deep-copies configs) is a plain float

    def error(self) -> json.JSONDecodeError:
        return json.JSONDecodeError(f"{self.token} is not a number JSON allows (write a finite number)",
                                    self.doc, self.pos)


def loads_json(text: str, keep_non_finite: bool = False) -> Any:
    """``json.loads`` for input that feeds a spec or snapshot (a model's config.json).

    Python's json accepts ``NaN``/``Infinity``/``-Infinity`` (not JSON); they would reach the
    snapshot as ``.nan`` and the arithmetic as nonsense. They raise :class:`json.JSONDecodeError`
    at their position, like any other syntax error, so callers need no new except clause.
    With ``keep_non_finite`` they load as :class:`NonFinite` values instead, for a caller that
    records only some fields and checks those with :func:`refuse_non_finite`.
    """
    positions = iter(m for m in _JSON_NON_FINITE.finditer(text) if m[1])

    def constant(token: str) -> Any:
        found = next(m for m in positions if m[1] == token)
        value = NonFinite(token, text, found.start(1))
        if not keep_non_finite:
            raise value.error()
        return value

    return json.loads(text, parse_constant=constant)


def refuse_non_finite(value: Any) -> None:
    """Raise the :class:`json.JSONDecodeError` of the first :class:`NonFinite` inside ``value``."""
    if isinstance(value, NonFinite):
        raise value.error()
    if isinstance(value, dict):
        for item in value.values():
            refuse_non_finite(item)
    elif isinstance(value, list):
        for item in value:
            refuse_non_finite(item)
