"""The threads sync tools run on: daemon threads, so a call left running when its run stopped
never holds the process open at exit (a `ThreadPoolExecutor`'s threads are joined then).

Owns starting threads as calls need them and reusing idle ones; what a call's result means
is `tools.run`'s.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

Work = tuple[Future[Any], Callable[[], Any]]


class DaemonThreads:
    """Up to `size` daemon threads, each started when a call finds none idle and kept for
    the next calls. A call's thread cannot be stopped: its caller may stop waiting for it."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._work: queue.SimpleQueue[Work] = queue.SimpleQueue()
        # Released by a thread each time it is free for one more call (as the standard
        # executor counts its idle threads).
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._started = 0

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._work.put((future, fn))
        if self._idle.acquire(blocking=False):
            return future
        with self._lock:
            if self._started < self._size:
                self._started += 1
                name = f"{self._name}_{self._started}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            future, fn = self._work.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # the caller's to judge, as with any executor
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn  # a finished call's result is not kept alive by an idle thread
            self._idle.release()
