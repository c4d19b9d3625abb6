"""Property-based fuzzing of every file kind a pull request can touch, through the CLI's load path.

Issue 35. A copy of a small corpus (two models, one variant, one contract with two variants, every
component, table, fusion table and GPU file) is made once; each example breaks one file of one kind
(a spec, a component, a variant, slots, lineage, a fusion table, a GPU file, the collectives table,
a contract, the grid, a quant scheme, the dims table, the verification registry, a tensor manifest,
a source snapshot) by replacing, deleting or adding a value anywhere in it, or by damaging its
bytes, and runs ``archledger check`` (every input read as a build reads it, nothing evaluated).
Whatever the edit, the command ends with exit 0 and its one ``ok:`` line, or exit 2 and exactly one
``error:`` line on stderr: never a traceback, never another status, nothing written, within a time
cap (SIGALRM per example) and a memory cap (RLIMIT_AS's soft limit, set for the run).

Speed: files whose bytes were parsed before are not parsed again (tests.bad_input_helpers'
fixture; errors are never cached, so the broken file always meets the real loader), which keeps a
check near 30 ms; examples per kind are few and derandomized, so the module runs in well under a
minute on one core.
"""
from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import resource
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from engine.cli import main
from engine.verify import evidence
from tests.bad_input_helpers import fresh_api_cache, parse_each_yaml_once  # noqa: F401 (fixtures)
from tests.conftest import REPO

set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "archledger-hypothesis")   # not ./.hypothesis

#: Seconds one check may take (an ordinary one takes 0.03-0.5 s; a hang takes forever).
TIME_CAP_S = 20
#: Address space the run may add to what the process holds already (a check needs a few MB; an
#: input that expands without bound would hit this and fail the example with MemoryError).
MEMORY_CAP_BYTES = 2 << 30
EXAMPLES = 30
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much])

MODELS = ("Qwen--Qwen3-8B.yaml", "Qwen--Qwen3-32B.yaml")
FILES = {   # kind -> the file of the small checkout that its examples break
    "spec": "corpus/models/Qwen--Qwen3-8B.yaml",
    "component": "corpus/components/library/swiglu_mlp.yaml",
    "variant": "corpus/variants/Qwen3-32B-GDN.yaml",
    "slots": "corpus/slots.yaml",
    "lineage": "corpus/lineage.yaml",
    "fusion": "corpus/fusion/vllm.yaml",
    "gpu": "gpus/h100-sxm.yaml",
    "collectives": "gpus/collectives/nccl.yaml",
    "contract": "corpus/contracts/attention/contract.yaml",
    "grid": "corpus/grid.yaml",
    "quant-scheme": "corpus/quant/fp8_block128.yaml",
    "dims": "corpus/dims.yaml",
    "verification": "corpus/verification.yaml",
    "tensor-manifest": "corpus/snapshots/Qwen--Qwen3-8B.tensors.yaml",
    "source-snapshot": "corpus/snapshots/Qwen--Qwen3-8B.source.yaml",
}

#: Values put anywhere: every kind, the bounds' edges and beyond, scenario names, hostile text.
HOSTILE = st.sampled_from([
    [], {}, [1, 2], ["a", ["b"]], {"k": "v"}, {"value": 1e-300}, {"value": 1, "alt": 1e30}, "", "x", "seq",
    "batch * 2", "config.nope", "H999", "../../etc/passwd", "a\nb", "\u202e\u0000", "x" * 5000, 0, -1, 1, 3,
    2 ** 20 + 1, 2 ** 100, 2 ** 127, 0.5, 1e-300, 1e30, -1e30, True, False, None, [[[[["deep"]]]]],
])
#: Raw damage: bytes no YAML reader should choke on.
DAMAGE = st.sampled_from([b"\xff\xfe", b"\x00", b"\t- [", b"{", b"&a [*a]", b"\xed\xa0\x80", b": :", b"\n  - \n"])


def _paths(value, prefix=()) -> list[tuple]:
    """Every place in parsed YAML: mapping keys and list indices, depth first."""
    out = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append(prefix + (key,))
            out.extend(_paths(item, prefix + (key,)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.append(prefix + (i,))
            out.extend(_paths(item, prefix + (i,)))
    return out


def _parent(data, path):
    for step in path[:-1]:
        data = data[step]
    return data


@st.composite
def broken(draw, original: bytes) -> bytes:
    """``original`` with one value replaced, deleted or added (anywhere), or its bytes damaged."""
    how = draw(st.sampled_from(["replace", "replace", "delete", "add", "bytes"]))
    if how == "bytes":
        at = draw(st.integers(0, len(original)))
        return original[:at] + draw(DAMAGE) + original[at + draw(st.integers(0, 3)):]
    data = copy.deepcopy(yaml.safe_load(original))
    path = draw(st.sampled_from(_paths(data)))
    parent = _parent(data, path)
    if how == "replace":
        parent[path[-1]] = draw(HOSTILE)
    elif how == "delete":
        del parent[path[-1]]
    else:
        target = parent[path[-1]]
        key = draw(st.sampled_from(["colour", "value", "doc", "gpu", "name", "0"]))
        if isinstance(target, dict):
            target[key] = draw(HOSTILE)
        elif isinstance(target, list):
            target.append(draw(HOSTILE))
        else:
            parent[path[-1]] = {key: target}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1 << 16).encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def small_checkout(tmp_path_factory) -> Path:
    """corpus/ with two models (one the variant's base), one variant and one contract of two
    variants, plus gpus/: everything a check reads, each kind present."""
    root = tmp_path_factory.mktemp("fuzz-files")

    def ignore(folder, names):
        here = Path(folder)
        keep = {"models": MODELS, "variants": ("Qwen3-32B-GDN.yaml",), "attention": ("contract.yaml", "mha.yaml",
                                                                                       "gqa.yaml")}.get(here.name)
        if here.name == "snapshots":
            return [n for n in names if not n.startswith(("Qwen--Qwen3-8B.", "Qwen--Qwen3-32B.", "Qwen--Qwen3-32B-FP8", "contract."))]   # with Qwen3-32B's checkpoints' evidence
        return [n for n in names if n not in keep] if keep else []

    shutil.copytree(REPO / "corpus", root / "corpus", ignore=ignore)
    (root / "corpus" / "components" / "drafts").mkdir(exist_ok=True)
    shutil.copytree(REPO / "gpus", root / "gpus")
    contract = root / FILES["contract"]
    contract.write_text(re.sub(r"order: \[.*\]", "order: [mha, gqa]", contract.read_text()))
    return root


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time (what a write would change)."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            stat = os.stat(os.path.join(folder, name))
            out[os.path.relpath(os.path.join(folder, name), root)] = (stat.st_size, stat.st_mtime_ns)
    return out


def run_check() -> tuple[int, str, str]:
    """``archledger check`` in-process: (exit status, stdout, stderr); any exception escapes."""
    evidence._registry.cache_clear()   # per process by path; a command is one process, these runs are not
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["check"])
        except SystemExit as exc:   # argparse; check takes no input it could refuse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def assert_ok_or_one_line(code: int, stdout: str, stderr: str, what: str) -> None:
    """Exit 0 with one ``ok:`` line, or exit 2 with one ``error: <place>: ...`` line; nothing else."""
    assert "Traceback" not in stdout + stderr, f"{what}: a traceback: {stderr[-800:]}"
    if code == 0:
        assert stderr == "" and stdout.startswith("ok: ") and stdout.count("\n") == 1, (what, stdout, stderr)
        return
    assert code == 2, f"{what}: exit {code}: {stderr[:400]!r}"
    assert stdout == "", f"{what}: printed {stdout[:200]!r}"
    assert stderr.startswith("error: ") and stderr.endswith("\n") and stderr.count("\n") == 1, \
        f"{what}: not one line: {stderr[:600]!r}"
    assert re.match(r"error: [^\s:]+(:\d+)?: ", stderr), f"{what}: no file in {stderr[:300]!r}"


@contextlib.contextmanager
def capped():
    """RLIMIT_AS's soft limit at the process's size plus MEMORY_CAP_BYTES while inside (restored
    after; the hard limit is never touched); SIGALRM after TIME_CAP_S for each :func:`timed` call."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as handle:
        size = int(handle.read().split()[0]) * resource.getpagesize()
    cap = size + MEMORY_CAP_BYTES
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def timed(call):
    def expire(signum, frame):
        raise TimeoutError(f"the check ran over {TIME_CAP_S} s: some input hangs it")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TIME_CAP_S)
    try:
        return call()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", FILES)
def test_fuzz_a_file_kind_through_check(kind, small_checkout, monkeypatch):
    monkeypatch.chdir(small_checkout)
    target = small_checkout / FILES[kind]
    original = target.read_bytes()
    assert timed(run_check)[0] == 0, "the small checkout itself must load"
    outcomes = {0: 0, 2: 0}

    @FUZZ
    @given(broken(original))
    def check(data):
        target.write_bytes(data)
        before = _listing(small_checkout)
        try:
            code, stdout, stderr = timed(run_check)
        except Exception as exc:   # noqa: BLE001 — any escape is the failure this test looks for
            raise AssertionError(f"{kind}: {type(exc).__name__}: {exc} (input {data[:300]!r})") from exc
        finally:
            target.write_bytes(original)
        assert_ok_or_one_line(code, stdout, stderr, f"{kind} ({data[:200]!r})")
        after = _listing(small_checkout)
        after[FILES[kind]] = before[FILES[kind]]   # the harness itself restored it
        assert after == before, f"{kind}: check wrote {sorted(set(after) ^ set(before))[:5]}"
        outcomes[code] += 1

    with capped():
        check()
    # the edits reach the loader's refusals, not only harmless corners (a fuzz that never fails a
    # file would prove nothing)
    assert outcomes[2] >= EXAMPLES // 3, outcomes


def test_the_harness_notices_a_traceback_and_a_second_line():
    """The checks above must be able to fail, or a passing fuzz run proves nothing."""
    for code, stdout, stderr in ((2, "", "error: corpus/x.yaml:1: a: b\nmore\n"),
                                 (1, "", "Traceback (most recent call last):\n"),
                                 (2, "", "error: no place given\n"),
                                 (0, "ok: x\n", "warning\n")):
        with pytest.raises(AssertionError):
            assert_ok_or_one_line(code, stdout, stderr, "planted")
    assert_ok_or_one_line(2, "", "error: corpus/x.yaml:3: a.b: expected text — write text\n", "fine")


def test_the_memory_cap_holds_inside_and_is_lifted_after():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with capped():
        with pytest.raises(MemoryError):
            bytearray(MEMORY_CAP_BYTES + (1 << 30))
    assert resource.getrlimit(resource.RLIMIT_AS) == before
