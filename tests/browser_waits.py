"""Bounded waits for the browser tests: nothing a test asks of a page may wait forever.

Playwright's own waits (``goto``, ``wait_for_function``, ``wait_for_selector``, a locator's action)
end at the page's default timeout, but ``page.evaluate`` has none: its client sends the driver no
time limit, so a script whose promise never settles (a data file never answered, an event never
fired, an animation frame never drawn) held its test, and the pytest-xdist worker running it,
forever. :func:`awaited` is ``evaluate`` for such a script, bounded; tests/conftest.py's
``_browser_test_limit`` bounds whatever else a browser test could wait on (issue 42: a third
worker once sat five minutes in Playwright's event loop on a page that never answered).
"""
from __future__ import annotations

import contextlib
import itertools
import signal
import time
import traceback
from pathlib import Path

#: How long a page has to settle a script's promise, and the pages' default timeout in the browser
#: tests (tests/test_site_browser.py ``TIMEOUT_MS`` is this figure).
PAGE_WAIT_MS = 20_000

#: The most seconds one browser test may take (tests/conftest.py ``_browser_test_limit``). Every wait
#: a test makes of a page is bounded on its own (Playwright's default timeout, :func:`awaited`); this
#: bounds whatever is left (a script that never yields, a renderer that stalls): generous, as a busy
#: two-core host slows every page.
BROWSER_TEST_LIMIT_S = 300.0

TESTS = Path(__file__).resolve().parent

#: A window property per call, so two calls on one page never read each other's outcome.
_SLOTS = itertools.count()


def awaited(page, script: str, arg=None, *, what: str, timeout_ms: int = PAGE_WAIT_MS):
    """``page.evaluate(script, arg)`` for a function ``script`` that returns a promise, bounded by
    ``timeout_ms``. The promise is started by an evaluate that returns at once, its outcome kept in a
    window property and waited for with ``wait_for_function``, whose time limit the Playwright
    driver enforces (it holds even when the page's own timers never run). Returns what the promise
    resolved to (serialized as ``evaluate`` would); raises AssertionError naming ``what`` when the
    page has not settled it in time, or with the page's error when it rejected."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    slot = f"__archAwaited{next(_SLOTS)}"
    page.evaluate(f"""arg => {{
        window[{slot!r}] = null;
        Promise.resolve().then(() => ({script})(arg)).then(
            v => {{ window[{slot!r}] = {{ok: true, v}}; }},
            e => {{ window[{slot!r}] = {{ok: false, e: String((e && e.stack) || e)}}; }});
    }}""", arg)
    try:
        handle = page.wait_for_function(f"() => window[{slot!r}]", polling=20, timeout=timeout_ms)
    except PlaywrightTimeout:
        raise AssertionError(f"waited {timeout_ms / 1000:g} s for {what}: the page never answered") from None
    outcome = handle.json_value()
    handle.dispose()
    if not outcome["ok"]:
        raise AssertionError(f"{what} failed in the page: {outcome['e']}")
    return outcome.get("v")


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Raises AssertionError in this thread (which must be the main thread: a SIGALRM timer) when the
    block still runs ``seconds`` after it began, naming ``what`` and the innermost line of the tests
    it was running (the wait). Playwright stays usable after the failure (measured: the page and the
    browser answer the next call). A limit already running around this one keeps its own end."""
    def expired(signum, frame):
        ours = [f for f in _waiting_stack(frame) if Path(f.filename).parent == TESTS]
        where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} `{ours[-1].line}`" if ours else "outside the tests"
        raise AssertionError(f"{what}: still waiting after {seconds:g} s, at {where}")

    began = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expired)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:        # the enclosing limit's time left (at least a moment, so it still fires)
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - began), 0.001))


def _waiting_stack(frame) -> traceback.StackSummary:
    """The frames that wait, outermost first: ``frame``'s stack, or, where Playwright's sync API runs
    its event loop in a greenlet of its own (it switches there while a call waits), the stack of the
    greenlet it switched from, which holds the test's call."""
    stack = traceback.extract_stack(frame)
    try:
        import greenlet
    except ImportError:          # no Playwright: the signal arrived in the test's own frames
        return stack
    waiting = greenlet.getcurrent().parent
    while waiting is not None and waiting.gr_frame is None:
        waiting = waiting.parent
    return traceback.extract_stack(waiting.gr_frame) + stack if waiting is not None else stack


def hovered_tip(page, target, *, timeout_ms: int = PAGE_WAIT_MS) -> str:
    """The text of the formula tooltip (``#tip``) shown by hovering ``target`` (a locator), hovered
    again until it shows or ``timeout_ms`` ends. Why again: a page that is still laying out (a chart
    drawn above a table after the data is ready) can move the number from under a pointer that does
    not move, and the browser's boundary events then hide the tooltip for good (a loaded CI host:
    20 s with the tooltip hidden after one hover). Raises AssertionError when it never shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    tip, end = page.locator("#tip"), time.monotonic() + timeout_ms / 1000
    while True:
        target.hover()
        try:
            tip.wait_for(state="visible", timeout=2_000)
            return tip.inner_text()
        except PlaywrightTimeout:
            if time.monotonic() > end:
                raise AssertionError(f"no tooltip after hovering for {timeout_ms / 1000:g} s") from None
            page.mouse.move(0, 0)         # leave, so the next hover enters it afresh
