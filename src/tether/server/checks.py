"""The experiment checks a server runs to report on a tenant's experiment. A log is tenant
input, so the check it names is imported and called only when it is a plain public function
defined in its module and the operator's `--allow-check` patterns allow it
(`Published.check`); otherwise its runs' pass and score are unknown.

Nothing of it runs on the event loop: the import and each call happen in a thread of their
own with a time limit (`SECONDS`). A thread cannot be stopped, so one that overruns is left
to finish on its own (a daemon: it never holds up the server's exit); at most `THREADS` are
alive at once, and a check that overran once is not called again for that report.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tether.errors import UsageError
from tether.experiment.plan import Check, CheckValue
from tether.published import Published

T = TypeVar("T")
SECONDS = 5.0  # a check's import, or one call of it on one run
THREADS = 4  # check threads alive at once in this process, overrunning ones included
NOT_RUN = "not run on the server: its MODULE:NAME is not allowed by --allow-check"
_alive = threading.BoundedSemaphore(THREADS)


class Busy(Exception):
    """Every check thread is taken (by checks that overran, most likely)."""


async def in_thread(fn: Callable[[], T], seconds: float = SECONDS) -> T:
    """`fn()` in a daemon thread, awaited for at most `seconds` (`TimeoutError`)."""
    if not _alive.acquire(blocking=False):
        raise Busy(f"the server's {THREADS} check threads are all taken")
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if done.done():  # it overran: nobody waits any more
            return
        if error is None:
            done.set_result(value)
        else:
            done.set_exception(error)

    def run() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = fn()
        except Exception as exc:
            error = exc
        except BaseException as exc:  # e.g. SystemExit: the server's to decide, not a check's
            error = RuntimeError(f"{type(exc).__name__} raised")
        finally:
            _alive.release()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="tether-check", daemon=True).start()
    return await asyncio.wait_for(done, seconds)


def _call(check: Check, result: Any) -> CheckValue:
    """The check's value; an async check is run to its end on a loop of this thread's."""
    value = check(result)
    if inspect.isawaitable(value):
        awaitable: Awaitable[CheckValue] = value

        async def finish() -> CheckValue:
            return await awaitable

        return asyncio.run(finish())
    return value


async def resolve(
    code: Published | None, refs: Sequence[str]
) -> tuple[dict[str, Check], dict[str, str]]:
    """The checks the server may run, by ref, each called off the event loop within its
    time limit; and what was decided for every ref (`"run"`, or why not)."""
    found: dict[str, Check] = {}
    decided: dict[str, str] = {}
    for ref in dict.fromkeys(refs):
        if code is None or not code.permits_check(ref):
            decided[ref] = NOT_RUN
            continue
        try:
            check = await in_thread(functools.partial(code.check, ref))
        except UsageError as exc:  # it names only the type of what it found
            decided[ref] = f"not run on the server: {str(exc)[:300]}"
            continue
        except (TimeoutError, Busy) as exc:
            decided[ref] = f"not run on the server: {_late(exc)}"
            continue
        decided[ref] = "run"
        found[ref] = _timed(ref, check, decided)
    return found, decided


def _late(exc: BaseException) -> str:
    return f"it took longer than {SECONDS:g} s" if isinstance(exc, TimeoutError) else str(exc)


def _timed(ref: str, check: Check, decided: dict[str, str]) -> Check:
    """`check`, called in a thread within the limit; once it overran (or no thread was
    free), not called again: its later runs fail with the same reason."""

    async def run(result: Any) -> CheckValue:
        if decided[ref] != "run":
            raise TimeoutError(decided[ref])
        try:
            return await in_thread(lambda: _call(check, result))
        except (TimeoutError, Busy) as exc:
            decided[ref] = f"stopped on the server: {_late(exc)} on a run"
            raise TimeoutError(decided[ref]) from None

    return run
