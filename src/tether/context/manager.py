"""What the loop calls before each model request: build the policy's view of the next request,
run the policy, check and append what it returns. Also the retry after a provider's
context-overflow error. The request itself is then built from the fold, as always.

Owns turning an `Agent(context=...)` setting into a `ContextManager`. The decisions are the
policy's; the meaning of the events it returns is the fold's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import TYPE_CHECKING

from tether import eager
from tether.context.policy import DefaultPolicy
from tether.context.tokens import (
    RequestEstimator,
    context_window,
    encoding_name,
    load_encoding,
)
from tether.context.view import ContextPolicy, ContextView, check_events
from tether.errors import ContextOverflow, UsageError
from tether.events import ContextCompacted, ModelFailed
from tether.messages import canonical_json
from tether.providers.base import Caller, Model
from tether.session.log import SessionLog
from tether.tools.base import Toolbox

if TYPE_CHECKING:
    from tether.settings import ModelSettings

ContextSetting = bool | ContextPolicy


class ContextManager:
    """One per agent; holds no session state but caches (encodings, per-folder token sums)."""

    def __init__(
        self,
        policy: ContextPolicy,
        model: Model,
        *,
        window: int | None = None,
        estimator: RequestEstimator | None = None,
    ) -> None:
        self.policy = policy
        self.model = model
        known_window, known_output = context_window(model.name)
        self.window = window or getattr(policy, "window", None) or known_window
        self.known_output = known_output
        # The default policy acts before a request only against a known window.
        self._idle = isinstance(policy, DefaultPolicy) and self.window is None
        # None: made at the first request, with tiktoken's encoding where it loads.
        self._estimator = estimator
        self._fixed: tuple[str | None, int, str] | None = None

    async def _ready_estimator(self) -> RequestEstimator:
        if self._estimator is None:
            name = encoding_name(self.model.name)
            encoding = await load_encoding(name) if name else None
            self._estimator = RequestEstimator(encoding)
        return self._estimator

    def _fixed_text(self, system: str | None, toolbox: Toolbox) -> str:
        """What every request carries besides its messages: the system prompt and tools."""
        if self._fixed is None or self._fixed[:2] != (system, id(toolbox)):
            tools = canonical_json(
                [{"n": s.name, "d": s.description, "p": s.parameters} for s in toolbox.specs]
            )
            self._fixed = (system, id(toolbox), (system or "") + tools)
        return self._fixed[2]

    def budget(self, max_output: int | None) -> int | None:
        """Input tokens a request may use: the window less what is kept for the answer."""
        if self.window is None:
            return None
        reserve = max_output or min(self.known_output or self.window // 4, self.window // 4)
        return max(1, self.window - reserve)

    async def view(
        self,
        log: SessionLog,
        toolbox: Toolbox,
        max_output: int | None,
        overflowed: bool = False,
        caller: Caller | None = None,
        settings: ModelSettings | None = None,
    ) -> ContextView:
        folder = log.folder
        estimator = await self._ready_estimator()
        fixed = self._fixed_text(folder.system, toolbox)
        sizer = estimator.sizer(folder, len(fixed))
        return ContextView(
            session_id=log.session_id,
            model=self.model.name,
            system=folder.system,
            messages=folder.messages,
            seqs=folder.message_seqs,
            estimate=estimator.estimate(folder, sizer, fixed),
            budget=self.budget(max_output),
            sizer=sizer,
            overflowed=overflowed,
            caller=caller,
            settings=settings,
        )

    async def decide(
        self, view: ContextView, log: SessionLog | None = None
    ) -> list[ContextCompacted]:
        """The policy's events for `view`. A policy that waits (a summary's model call) first
        has `log` commit what it holds (`SessionLog.hold`), so a finished tool's result never
        waits on a model; most decisions wait on nothing and keep it for the request's commit."""
        result = self.policy(view)
        if inspect.iscoroutine(result):  # run it until it first waits, if it ever does
            started = eager.start(result)
            result = started.rest() if isinstance(started, eager.Suspended) else started
        if inspect.isawaitable(result):
            if log is not None:
                await log.flush()
            result = await result
        events = list(result)
        check_events(view, events)
        return events

    async def before_request(
        self,
        log: SessionLog,
        toolbox: Toolbox,
        max_output: int | None,
        caller: Caller | None = None,
        settings: ModelSettings | None = None,
    ) -> str | None:
        """Append what the policy decides for the next request, if anything. When the policy
        failed, nothing is appended and the answer is why: the caller ends the turn with it,
        by name (a bug in a custom policy must still end the turn, never the loop)."""
        if self._idle:
            return None
        if self._estimator is None:
            await log.flush()  # the first request may load an encoding: nothing held waits on it
        try:
            view = await self.view(log, toolbox, max_output, caller=caller, settings=settings)
            events = await self.decide(view, log)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            return f"context policy failed: {type(exc).__name__}: {exc}"
        if events:
            await log.append(*events)
        return None

    async def after_overflow(
        self,
        log: SessionLog,
        toolbox: Toolbox,
        max_output: int | None,
        error: ContextOverflow,
        caller: Caller | None = None,
        settings: ModelSettings | None = None,
    ) -> bool:
        """The provider refused the request as too large: record the failure with what the
        policy compacts, and say whether one more attempt is worth making. A policy that
        fails here leaves the turn to end with the provider's error."""
        try:
            view = await self.view(
                log, toolbox, max_output, overflowed=True, caller=caller, settings=settings
            )
            events = await self.decide(view)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception:
            return False
        if not events:
            return False
        failed = ModelFailed(error.kind, str(error), error.status, error.retryable, error.attempts)
        await log.append(failed, *events)
        return True


def make_context(setting: ContextSetting | None, model: Model) -> ContextManager | None:
    """`True` (the default policy), `False` or None (off), a `DefaultPolicy` (its summarizer
    defaults to the agent's model), or any policy function."""
    if setting is None or setting is False:
        return None
    if setting is True:
        return ContextManager(DefaultPolicy(summarizer=model), model)
    if isinstance(setting, DefaultPolicy) and setting.summarizer is None:
        return ContextManager(dataclasses.replace(setting, summarizer=model), model)
    if not callable(setting):
        raise UsageError(f"context= takes True, False or a policy function, not {setting!r}")
    return ContextManager(setting, model)
