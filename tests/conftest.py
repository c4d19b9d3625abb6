"""Shared fixtures: the corpus is loaded once and each model evaluated once per session."""
from __future__ import annotations

import functools
import gc
import json
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from engine.api import Evaluation, evaluate_spec
from engine.language.corpus import Corpus, load_corpus
from tests.browser_waits import BROWSER_TEST_LIMIT_S, time_limit

REPO = Path(__file__).resolve().parent.parent
#: Published config.json files, copied byte for byte into the corpus beside each snapshot
#: (corpus/snapshots/README.md names the source and sha256 of each). ARCHLEDGER_HF_CONFIGS may
#: point at another folder of ``<org>--<name>.json`` files.
SNAPSHOTS = REPO / "corpus" / "snapshots"
HF_CONFIGS = Path(os.environ["ARCHLEDGER_HF_CONFIGS"]) if os.environ.get("ARCHLEDGER_HF_CONFIGS") else None

#: Specs that declare themselves unverified (a top-level ``unverified: <why>``: transformers lacks the
#: architecture; tests/test_unverified.py covers them): no published count checks them, so the
#: per-model tests, which compare with published facts, run over the other specs (MODEL_IDS).
DECLARED_UNVERIFIED = sorted(p.stem.replace("--", "/", 1) for p in (REPO / "corpus" / "models").glob("*.yaml")
                             if re.search(r"(?m)^unverified:", p.read_text()))
MODEL_IDS = sorted(p.stem.replace("--", "/", 1) for p in (REPO / "corpus" / "models").glob("*.yaml")
                   if p.stem.replace("--", "/", 1) not in DECLARED_UNVERIFIED)

#: The pytest-xdist group (``--dist loadgroup``) of the tests that evaluate every corpus model: they run
#: on one worker, so each model's evaluation (cached per process: :func:`evaluation`) and its oracle
#: build are paid once per suite, not once per worker the tests were spread over (about 0.3 CPU-s a
#: model a worker at 38 models; it grows with the corpus).
EVERY_MODEL = pytest.mark.xdist_group("every_model")


#: The mark of an ungrouped test that runs alone for 5 s or more on a quiet host (a run's
#: ``--durations``): :func:`pytest_collection_modifyitems` hands such tests out first.
LONG = pytest.mark.long


def pytest_collection_modifyitems(items):
    """Moves the tests marked ``long`` ahead of the others, each side in collection order (a stable
    sort: nothing else moves). ``--dist loadgroup`` hands out the xdist groups first, largest first,
    then the ungrouped tests one at a time in this order, so a long test collected near the end ran
    alone while the other worker had nothing left: tests/test_yaml_fast.py's consistency test, the
    last of them, kept one worker 26 s after the other had finished (measured at a load of 6)."""
    items.sort(key=_after_the_long_ones)


def _after_the_long_ones(item) -> bool:
    return item.get_closest_marker("long") is None


def pytest_configure(config):
    """One parse cache for the whole run (engine.language.parse_cache, ``$ARCHLEDGER_CACHE``): made by
    the run's first process and inherited by every pytest-xdist worker and every process a test
    starts (a build's subprocess, its ``--jobs`` workers, a command), so the measured kernel tables
    and the corpus's YAML are parsed once per run instead of once per process (2-3 CPU-s each).
    The entries are content-addressed (an edited file or loader is another key), so no test can
    read another's stale parse; the user's own cache folder is never read or written. Removed at
    the end of the run (:func:`pytest_unconfigure`)."""
    config.addinivalue_line("markers", "long: runs alone for 5 s or more; scheduled before the short tests")
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tempfile.mkdtemp(prefix="archledger-test-cache-")
        config._archledger_cache = folder
        os.environ["ARCHLEDGER_CACHE"] = folder


def pytest_unconfigure(config):
    """Removes the run's parse cache, then collects the garbage pytest's end-of-run check of
    unraisable exceptions would (``_pytest.unraisableexception.cleanup``: five full collections, run
    after this hook while its hook still records what a finalizer raises) and freezes what is left
    alive, so its collections find nothing more to do. A process that built every model holds
    millions of live objects (the evaluation's memos), and each full collection walks them all
    (about 4.6 s each, measured: 23 s of the every-model worker's end); here a collection runs again
    only while the last one freed something (at most the same five), so every unreachable object
    is collected as before, and an exception its finalizer raises is reported as before."""
    folder = getattr(config, "_archledger_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    for _ in range(5):
        if not gc.collect():
            break
    gc.freeze()


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    return _session_corpus()


@functools.lru_cache(maxsize=None)
def _session_corpus() -> Corpus:
    """The corpus, read once per process for :func:`_evaluation` (the tests never edit corpus/; each
    read re-checks all its specs: about 0.3 CPU-s, which every model's evaluation paid again)."""
    return load_corpus()


@functools.lru_cache(maxsize=None)
def _evaluation(model_id: str) -> Evaluation:
    corpus = _session_corpus()
    return evaluate_spec(corpus, corpus.models[model_id])


@pytest.fixture(scope="session")
def evaluation():
    """``evaluation(model_id)`` -> the model's Evaluation (cached for the session)."""
    return _evaluation


@pytest.fixture(scope="module")
def oracle_installed():
    """Skips the module's tests where the oracle extra (torch, transformers) is not installed. A
    module asks for it (``pytest.mark.usefixtures``) instead of calling ``pytest.importorskip`` at
    its top: every pytest-xdist worker collects every module, and importing torch and transformers
    while collecting cost each worker about 3 CPU-s, the worker that runs none of the oracle's tests
    too. The check now runs where the tests run, with the same skip."""
    why = "the transformers oracle is not installed: pip install -e '.[oracle]' (torch, transformers)"
    pytest.importorskip("torch", reason=why)
    pytest.importorskip("transformers", reason=why)


def hf_config(model_id: str) -> dict:
    """The model's published config.json (an external fact, kept byte for byte in the corpus)."""
    return json.loads(hf_config_path(model_id).read_text())


def hf_config_path(model_id: str) -> Path:
    name = model_id.replace("/", "--")
    path = HF_CONFIGS / f"{name}.json" if HF_CONFIGS else SNAPSHOTS / f"{name}.config.json"
    assert path.exists(), f"published config missing: {path} (see corpus/snapshots/README.md)"
    return path


@pytest.fixture(scope="session")
def _chromium():
    """One headless Chromium per test process (Debian's ``chromium-headless-shell``, else its
    ``chromium``: site_builder.screenshots.chromium_path; driven by Playwright, never a
    Playwright-downloaded browser), started by the first module that asks for :func:`browser` and
    closed at the end of the session. Each module used to start its own: about 1.1 CPU-s and 3-4 s
    of wall each (the Playwright driver and the browser), in some 20 modules. Missing, the browser
    tests fail; they do not skip (CI installs it: .ci/run)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the Python package `playwright` is not installed: pip install -e '.[test]'", pytrace=False)
    from site_builder.screenshots import launch
    with sync_playwright() as p:
        try:
            chromium = launch(p)        # the binary and flags `archledger screenshots` uses
        except RuntimeError as exc:
            pytest.fail(f"{exc}: apt-get install -y chromium-headless-shell (CI does this in .ci/run)", pytrace=False)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def browser(_chromium):
    """The process's Chromium for one module. A module shares no state with another: each page
    lives in its own browser context (cookies, storage, cache, routes), and a context the module
    left open is closed when it ends; a module starting with a context still open is an error of
    the one before."""
    assert not _chromium.contexts, f"{len(_chromium.contexts)} browser context(s) left open by an earlier module"
    yield _chromium
    for context in list(_chromium.contexts):
        context.close()


@pytest.fixture(autouse=True)
def _browser_test_limit(request):
    """Fails a test that uses the browser and still runs ``BROWSER_TEST_LIMIT_S`` seconds after it
    started (tests/browser_waits.py :func:`time_limit`: the failure names the line of the tests it
    waits on): ``page.evaluate`` has no time limit, so a page that never answered held its
    pytest-xdist worker forever (issue 42: one worker sat five minutes in Playwright's event loop).
    Its module's fixtures, set up before it, are not counted. Tests without the browser, and a
    process whose tests do not run on the main thread (where no signal can reach), are not timed."""
    if "browser" not in request.fixturenames or threading.current_thread() is not threading.main_thread():
        yield
        return
    with time_limit(BROWSER_TEST_LIMIT_S, request.node.nodeid):
        yield
