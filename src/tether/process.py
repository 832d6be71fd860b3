"""Process-wide settings for a process that hosts many sessions (the CLI, workers, servers).

A library does not touch them by itself; the `tether` command calls `configure_gc()`, and
an application hosting thousands of sessions may call it too.
"""

from __future__ import annotations

import gc

# With thousands of live sessions the default thresholds make CPython run many full
# collections over a large, mostly long-lived heap: measured at 10,000 sessions, 19 full
# collections took 7.2 s of a 13 s run. Larger thresholds keep young collections cheap and
# make full ones rare; reference counting still frees almost everything at once.
GC_THRESHOLDS = (10_000, 100, 100)


def configure_gc() -> None:
    """Raise the collector's thresholds and freeze what start-up allocated (modules,
    classes), so later collections do not scan it again."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
