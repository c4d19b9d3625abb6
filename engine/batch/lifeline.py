"""A worker process's tie to the process that started it: it dies when that process dies.

Layer: engine.batch; the standard library only, so a site render worker (which imports nothing of
the engine's evaluation) and a build worker arm it alike.

Invariant: after :func:`die_with` returns, the calling process exits (status 1 or SIGKILL) soon
after ``parent`` is gone, however the parent died (a SIGKILL leaves no chance to clean up): on
Linux the kernel sends SIGKILL (prctl PR_SET_PDEATHSIG); elsewhere, and as a backstop, a daemon
thread exits the worker when its parent pid changes (it is re-parented once the parent is gone).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time


def die_with(parent: int) -> None:
    """Arm both ways of dying with ``parent`` (a pid) in the calling process."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)     # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:       # the parent died before the death signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
