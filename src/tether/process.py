"""Process-wide settings for a process that hosts many sessions (the CLI, workers, servers).

The `tether` command calls `configure_gc()` at start. A library user's process gets the same
collector thresholds while it runs many sessions at once (`session_started`/`_finished`,
called by every run), and its own back when that load is gone: CPython's defaults make the
collector scan the whole heap again each time it grows by a quarter, and with 10,000 live
sessions that was half the CPU (`bench/bench_sessions.py`). An application that set its own
thresholds is left alone, and `TETHER_GC=off` turns the adjustment off.
"""

from __future__ import annotations

import gc
import os

# With thousands of live sessions the default thresholds make CPython run many full
# collections over a large, mostly long-lived heap: measured at 10,000 sessions, 19 full
# collections took 7.2 s of a 13 s run. Larger thresholds keep young collections cheap and
# make full ones rare; reference counting still frees almost everything at once.
GC_THRESHOLDS = (10_000, 100, 100)
# CPython's own thresholds: only these are raised, never an application's choice.
CPYTHON_THRESHOLDS = (700, 10, 10)
# Concurrent sessions from which the thresholds are raised; they are restored below half.
MANY_SESSIONS = 1_000


def configure_gc() -> None:
    """Raise the collector's thresholds and freeze what start-up allocated (modules,
    classes), so later collections do not scan it again."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class _Load:
    """Sessions running in this process, and whether their number raised the thresholds."""

    running = 0
    raised = False


def session_started() -> None:
    _Load.running += 1
    if (
        _Load.running >= MANY_SESSIONS
        and not _Load.raised
        and gc.get_threshold() == CPYTHON_THRESHOLDS
        and os.environ.get("TETHER_GC", "auto") != "off"
    ):
        gc.set_threshold(*GC_THRESHOLDS)
        _Load.raised = True


def session_finished() -> None:
    _Load.running -= 1
    if _Load.raised and _Load.running < MANY_SESSIONS // 2:
        _Load.raised = False
        if gc.get_threshold() == GC_THRESHOLDS:  # unless the application changed them since
            gc.set_threshold(*CPYTHON_THRESHOLDS)
