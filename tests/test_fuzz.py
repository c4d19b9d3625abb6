"""Property-based fuzzing of the two parsers hostile spec text reaches: engine.language.expr and engine.language.yamlio.

Issue 12. Whatever the text, the expression evaluator and the YAML loader either answer or raise
their one documented error (ExprError / SpecError, one line), within a deadline, without running
code or touching the filesystem. Answers are checked too: an evaluated expression holds only
bounded, finite numbers; loaded YAML holds only finite bounded numbers, printable text, and is
small enough to walk (no alias bomb survives the loader).

"Never touches the filesystem" is checked three ways: the working directory is an empty temporary
folder that must stay empty, no PWNED file appears anywhere we look, and an audit hook
(sys.addaudithook) records any attempt to open a file for writing, run a program or eval/exec a
code string while the code under test runs. The hook is process-wide and cannot be removed, so it
only records while armed, and it is armed around the call under test only (Hypothesis itself
execs generated code and writes its cache, which is pointed at a temp folder, not the repo).
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from engine.language import expr, parse_cache, yamlio
from engine.language.errors import SpecError

REPO = Path(__file__).resolve().parent.parent
PWNED = "PWNED"
EVIL = f"__import__('os').system('touch {PWNED}')"
BOUND = expr.MAX_MAGNITUDE
# the deadline is per example and catches an input the parsers choke on (an alias bomb, a
# power tower): those take minutes, an ordinary document milliseconds. 10 s, not less: a loaded
# 2-core CI host once took 2.4 s on an ordinary document, and a timing is not what this checks.
FAST = settings(max_examples=200, deadline=timedelta(seconds=10), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "archledger-hypothesis")   # not ./.hypothesis


# -- the sandbox -------------------------------------------------------------------------------------

_AUDIT: dict = {"armed": False, "seen": []}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_RUNS = ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "subprocess.Popen", "pty.spawn",
         "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link", "os.truncate",
         "shutil.rmtree", "shutil.copyfile", "shutil.move", "socket.connect")


def _hook(event: str, args: tuple) -> None:
    if not _AUDIT["armed"]:
        return
    if event == "open":
        mode, flags = (args + (None, None))[1:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writes:
            _AUDIT["seen"].append(f"open {args[0]!r} {mode!r}")
    elif event == "exec":
        # Module imports exec code from files (sympy imports lazily); eval/exec of a string has
        # a pseudo file name like "<string>".
        name = getattr(args[0], "co_filename", "")
        if name.startswith("<"):
            _AUDIT["seen"].append(f"exec of {name}")
    elif event in _RUNS:
        _AUDIT["seen"].append(event)


sys.addaudithook(_hook)


@contextlib.contextmanager
def armed():
    """Record what the code under test attempts (see _hook) while in this block."""
    _AUDIT["armed"] = True
    try:
        yield
    finally:
        _AUDIT["armed"] = False


@contextlib.contextmanager
def sandbox(seconds: int = 60):
    """cwd in an empty temp folder, SIGALRM after ``seconds``; on exit the folder must be empty
    and the audit hook must have seen nothing."""
    def expire(signum, frame):
        raise TimeoutError(f"the fuzzer ran over {seconds} s: some input hangs")
    old_cwd = os.getcwd()
    previous = signal.signal(signal.SIGALRM, expire)
    # the run's parse cache (tests/conftest.py) off: the parsers under fuzz must touch no file, and
    # the cache's own writes are tests/test_measured_table_cache.py's
    cache = os.environ.get(parse_cache.ENV)
    os.environ[parse_cache.ENV] = ""
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        signal.alarm(seconds)
        _AUDIT["seen"] = []
        try:
            yield Path(folder)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(old_cwd)
            if cache is None:
                os.environ.pop(parse_cache.ENV, None)
            else:
                os.environ[parse_cache.ENV] = cache
            left = sorted(os.listdir(folder))
        assert left == [], f"the fuzzed code created {left} in the working directory"
    assert _AUDIT["seen"] == [], f"the fuzzed code tried: {_AUDIT['seen'][:5]}"
    for place in (REPO, REPO / "corpus", Path(tempfile.gettempdir())):
        assert not (place / PWNED).exists(), f"an expression ran code ({place / PWNED})"


def test_the_sandbox_notices_writes_and_eval():
    """The checks above must be able to fail, or a passing fuzz run proves nothing."""
    for attempt in (lambda: open("x.txt", "w").close(), lambda: eval("1 + 1"),   # noqa: S307
                    lambda: os.mkdir("d")):
        with pytest.raises(AssertionError):
            with sandbox(), armed():
                attempt()


# -- expressions -----------------------------------------------------------------------------------

X = sympy.Symbol("x", positive=True, integer=True)
NUMERIC = {"x": sympy.Integer(4096), "n": sympy.Integer(7), "layer": sympy.Integer(3), "flag": True, "kind": "full"}
SYMBOLIC = {**NUMERIC, "x": X, "n": sympy.Symbol("n", positive=True, integer=True)}
CONFIG = {"a": 128, "big": 2 ** 127, "huge": 10 ** 60, "nan": float("nan"), "inf": float("inf"), "tiny": 1e-300,
          "half": 0.5, "s": "full", "none": None, "lst": [1, "full", 2.5, None], "nested": {"b": 3}}


def resolve(path: tuple):
    value = CONFIG
    for key in path:
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        else:
            raise KeyError(key)
    return value


LEAVES = st.one_of(
    st.integers(-100, 100).map(str),
    st.sampled_from(["0", "1", "2", "3", "64", "65", "128", "0.5", "0.0", "True", "False", "'full'", "''"]),
    # the numbers at and past the bounds get a branch of their own, so they are drawn often
    st.one_of(st.integers(2 ** 120, 10 ** 45).map(str),
              st.sampled_from(["1e999", "-1e999", "1e-300", "1.5e300", "1e308", "1e38", "2**64", "(2**64)",
                               "2**128", "0.5**64", str(2 ** 128), str(2 ** 128 + 1)])),
    st.sampled_from(["x", "n", "layer", "flag", "kind", "nope", "_x", "__builtins__", "config", "config.a",
                     "config.big", "config.huge", "config.nan", "config.inf", "config.tiny", "config.half",
                     "config.s", "config.none", "config.lst", "config.lst[0]", "config.lst[layer]",
                     "config.lst[99]", "config.nested", "config.nested.b", "config.__class__", "config.a.__class__", "x.real"]),
    st.sampled_from(["\uff58", "\U0001d431", "x\u00a0", "\ud800", "\u00df", "\u212a", "\x00"]),
    st.sampled_from([EVIL, "__import__('os')", f"open('{PWNED}', 'w')", "().__class__.__bases__[0]",
                     "lambda: 1", "[t for t in config.lst]", "exec('1')", "(y := 1)", "f'{x}'", "b'x'"]),
)

BINARY = ["+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=", ">", ">=", "and", "or", "in", "not in"]


def _extend(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(BINARY), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.sampled_from(["**"]), st.integers(0, 70)).map(lambda t: f"{t[0]} ** {t[2]}"),
        st.tuples(st.sampled_from(["-", "+", "not "]), children).map("".join),
        st.tuples(st.sampled_from(["ceil", "floor", "len"]), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["min", "max", "count", "ceil"]), st.lists(children, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(children, st.integers(1, 120)).map(lambda t: "(" * t[1] + t[0] + ")" * t[1]),
        st.tuples(st.sampled_from(["-", "not ", "+"]), st.integers(1, 220), children).map(
            lambda t: t[0] * t[1] + t[2]),
    )


GRAMMAR = st.recursive(LEAVES, _extend, max_leaves=24)
TOKENS = st.lists(st.sampled_from(["x", "n", "1", "0", "2", "64", "1e999", "config", ".", "a", "lst", "[", "]",
                                   "(", ")", "+", "-", "*", "**", "/", "//", "%", " ", ",", "<", "==", "if",
                                   "else", "not", "and", "min", "max", "ceil", "'", "_", "\uff58", "\ud800",
                                   "\x00", "\n", "\\", "#", ":", "lambda", "__class__"]),
                  max_size=80).map("".join)
# Also what YAML hands over as numbers (int, float, bool) and non-text values.
VALUES = st.one_of(st.integers(-(2 ** 200), 2 ** 200), st.floats(allow_nan=True, allow_infinity=True),
                   st.booleans(), st.none(), st.lists(st.integers(), max_size=2))


def _numbers_bounded(value) -> None:
    """What the evaluator returns holds only finite numbers within the bounds."""
    if not isinstance(value, sympy.Basic):
        assert isinstance(value, (bool, str, list)), f"unexpected result type {type(value).__name__}"
        return
    for node in sympy.preorder_traversal(value):
        assert node not in (sympy.nan, sympy.zoo, sympy.oo, -sympy.oo), f"non-finite result {value}"
        if isinstance(node, sympy.Rational):
            assert abs(node.p) <= BOUND and node.q <= BOUND, f"unbounded number in {value}"
        if isinstance(node, sympy.Pow) and node.exp.is_Integer:
            assert abs(int(node.exp)) <= expr.MAX_EXPONENT, f"unbounded exponent in {value}"


def _evaluate_or_refuse(text) -> None:
    for names in (NUMERIC, SYMBOLIC):
        try:
            with armed():
                value = expr.evaluate(text, expr.Scope(names, resolve))
        except expr.ExprError as exc:
            message = str(exc)
            assert "\n" not in message and exc.hint, f"bad error for {text!r}: {message!r}"
            message.encode("utf-8")   # printable
            continue
        # ast.parse would fold look-alike letters (full-width, math-bold) into ASCII names
        assert not isinstance(text, str) or text.isascii(), f"non-ASCII text was evaluated: {text!r}"
        _numbers_bounded(value)


@pytest.mark.long
def test_fuzz_expressions_from_the_grammar():
    expr.evaluate("ceil(x / 128) + min(x, 2) % 3", expr.Scope(SYMBOLIC))   # warm sympy's lazy imports

    @FAST
    @given(GRAMMAR)
    def check(text):
        _evaluate_or_refuse(text)

    with sandbox():
        check()


def test_fuzz_expressions_from_raw_tokens_and_values():
    @FAST
    @given(st.one_of(TOKENS, VALUES))
    def check(text):
        _evaluate_or_refuse(text)

    with sandbox():
        check()


# -- YAML -------------------------------------------------------------------------------------------

SCALARS = st.sampled_from([
    "word", "'quoted'", '"dq"', "1", "-7", "0x1F", "0o17", "1_000", "190:20:30", "1.5", ".5", "1e999", "1.0e+999",
    ".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1.0e+39", "9" * 60, "9" * 5000, "~", "null", "yes", "no", "true",
    "2024-01-01", "2024-13-45", '"\\ud800"', '"\\udfff x"', '"\\U0001F600"', '"\\x00"', '"\\0"',
    "!!float abc", "!!int x", "!!timestamp x", "!!binary abc", "!!binary ====", "!!set {a, b}", "!!omap [a]",
    "!!python/object/apply:os.system ['touch PWNED']", "!!str 1", "!!bool maybe", "!!null x", "!!map [1]",
    "''", "x" * 300, "a: b", "- a", "[", "}", "&", "*", "!", "%YAML 1.1", "---", "...",
])
ANCHORS = st.integers(0, 4).map(lambda i: f"a{i}")


def _yaml_extend(children):
    return st.one_of(
        st.lists(children, max_size=6).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(st.sampled_from(["k", "j", "<<", "1", "null", "'q'", "[a]"]), children), max_size=4).map(
            lambda items: "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"),
        st.tuples(ANCHORS, children).map(lambda t: f"&{t[0]} {t[1]}"),
        ANCHORS.map(lambda a: f"*{a}"),
        st.tuples(st.integers(1, 150), children).map(lambda t: "[" * t[0] + t[1] + "]" * t[0]),
    )


FLOW = st.recursive(SCALARS, _yaml_extend, max_leaves=20)


def _laughs(levels: int, width: int) -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines)


DOCUMENTS = st.one_of(
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "notes", "dims"]), FLOW), max_size=6).map(
        lambda items: "\n".join(f"{k}: {v}" for k, v in items) + "\n"),
    st.tuples(st.integers(1, 12), st.integers(1, 12)).map(lambda t: _laughs(*t) + "\n"),
    st.integers(1, 3000).map(lambda d: "a: " + "[" * d + "]" * d + "\n"),
    st.integers(1, 300).map(lambda d: "".join("  " * i + f"k{i}:\n" for i in range(d)) + "  " * d + "v\n"),
    FLOW,
)


def _walk_bounded(value, budget: int) -> None:
    """Walk the loaded data as a consumer would, refusing to go past ``budget`` visits."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        assert seen <= budget, "loaded data expands past the alias budget (an alias bomb got through)"
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
        elif isinstance(item, float):
            assert math.isfinite(item) and abs(item) <= BOUND, f"number {item!r} got through"
        elif isinstance(item, int) and not isinstance(item, bool):
            assert abs(item) <= BOUND, "a huge int got through"
        elif isinstance(item, str):
            item.encode("utf-8")   # no lone surrogate


def _load_or_refuse(folder: Path, data: bytes) -> None:
    path = folder / "fuzz.yaml"
    path.write_bytes(data)
    try:
        with armed():
            value = yamlio.load_yaml(path, "corpus/fuzz.yaml", mapping=False)
    except SpecError as exc:
        message = exc.one_line()
        assert message.startswith("corpus/fuzz.yaml") and "\n" not in message, message
        message.encode("utf-8")
        return
    finally:
        path.unlink()
    _walk_bounded(value, 4 * len(data) + yamlio.MAX_ALIAS_NODES + 10)


def test_fuzz_yaml_documents():
    with sandbox() as folder:
        scratch = folder / "scratch"
        scratch.mkdir()   # holds the one input file the harness writes; removed below

        @FAST
        @given(DOCUMENTS)
        def check(text):
            _load_or_refuse(scratch, text.encode("utf-8", "surrogatepass"))

        try:
            check()
        finally:
            scratch.rmdir()


def test_fuzz_yaml_bytes():
    with sandbox() as folder:
        scratch = folder / "scratch"
        scratch.mkdir()

        @FAST
        @given(st.one_of(st.binary(max_size=400),
                         st.tuples(st.binary(max_size=40), DOCUMENTS).map(
                             lambda t: t[1].encode("utf-8", "surrogatepass") + t[0])))
        def check(data):
            _load_or_refuse(scratch, data)

        try:
            check()
        finally:
            scratch.rmdir()


def test_a_mapping_is_required_at_the_top_unless_asked(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("- a\n")
    assert yamlio.load_yaml(path, mapping=False) == ["a"]
    with pytest.raises(SpecError, match="expected a mapping at the top level, got a list"):
        yamlio.load_yaml(path)
