"""Every error tether raises, in one tree. Vendor and library exceptions are translated into
these at the adapter boundary (provider codecs, stores), nowhere else.

    TetherError
    ├── UsageError               built or called wrongly (bad model string, bad tool, bad URL)
    │   ├── ConfigError          configuration that cannot be used (missing key, bad store URL)
    │   └── IdempotencyConflict  an idempotency key used again for a different request
    ├── ProviderError            a model call failed: status, body, retryable, retry_after
    │   ├── RateLimited          429 rate limit: retry after a wait
    │   ├── Overloaded           529 / overloaded_error: retry after a wait
    │   ├── QuotaExhausted       out of credit: never retried
    │   ├── ContextOverflow      the request is larger than the model's window
    │   ├── AuthenticationError  401 / 403: never retried
    │   ├── BadRequest           400 / 404 / 422: never retried
    │   ├── ServerError          5xx: retried
    │   ├── ConnectionFailed     no answer from the host: retried
    │   ├── EndpointBlocked      the endpoint policy refused the connection: never retried
    │   ├── GatewayBusy          the model gateway's queue is full: not sent, never retried
    │   └── ScriptExhausted      the scripted test model has no reply left
    ├── EffectUnknown            a tool cannot tell whether its effect happened (answered
    │                            `unknown_effect`, never repeated)
    ├── LimitExceeded            a limit was reached where a stop reason cannot be used
    ├── QuotaExceeded            a tenant's quota refuses this now: try after retry_after
    ├── Parked                   the model gateway parked the call: the run stops, unwritten
    ├── HandedOver               the run was stopped to be continued elsewhere, unwritten
    └── StoreError               the event store refused or failed
        ├── Conflict             stale expected_seq: someone else appended first
        ├── LeaseLost            this worker no longer holds the session's lease
        ├── LeaseHeld            another worker holds the session's lease
        │   └── ExperimentRunning  another process runs the experiment (holds its claim)
        ├── SessionNotFound      no session with that id
        ├── CorruptLog           the stored log cannot be read as events
        └── StoreUnavailable     the store cannot take a write and a read now (readiness)
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


class TetherError(Exception):
    """Root of every error tether raises."""


class UsageError(TetherError):
    """Something was built or called wrongly."""


class ConfigError(UsageError):
    """Configuration that cannot be used."""


class KeyMissing(ConfigError):
    """A provider model needs an API key this process does not have. Its message names the
    variable, for the operator; a server tells a tenant only that the model is unavailable."""


class IdempotencyConflict(UsageError):
    """An idempotency key was used again with a different request."""


class ProviderError(TetherError):
    """A model call failed. `kind` is the stable class name recorded in `model.failed`."""

    kind = "provider_error"
    retryable = False
    # Attempts made before this error was raised; the model gateway sets it after retries.
    attempts = 1

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body
        self.retry_after = retry_after
        if retryable is not None:
            self.retryable = retryable


class RateLimited(ProviderError):
    kind = "rate_limited"
    retryable = True


class Overloaded(ProviderError):
    kind = "overloaded"
    retryable = True


class QuotaExhausted(ProviderError):
    kind = "quota_exhausted"


class ContextOverflow(ProviderError):
    kind = "context_overflow"


class AuthenticationError(ProviderError):
    kind = "authentication"


class BadRequest(ProviderError):
    kind = "bad_request"


class ServerError(ProviderError):
    kind = "server_error"
    retryable = True


class ConnectionFailed(ProviderError):
    kind = "connection_failed"
    retryable = True


class EndpointBlocked(ProviderError):
    """A guarded model client refused to connect: the host resolves to an address the
    operator did not allow (see `tether.providers.endpoints`)."""

    kind = "endpoint_blocked"


class GatewayBusy(ProviderError):
    """The model gateway refused to queue the call (its queue is full, or the wait for a place
    passed its deadline). Nothing was sent to the backend."""

    kind = "gateway_busy"


class ScriptExhausted(ProviderError):
    kind = "script_exhausted"


class EffectUnknown(TetherError):
    """Raised by a tool whose call was cut off where its effect may or may not have happened
    (a connection lost mid-call): the call is answered `unknown_effect`, as the recovery rules
    answer a started `write`, and is never sent again."""


class LimitExceeded(TetherError):
    """A limit was reached where a turn's stop reason cannot carry it."""


class QuotaExceeded(TetherError):
    """A tenant's quota (sessions running at once, starts per minute) refuses the request
    now; nothing was created. `retry_after`: seconds until trying again may succeed."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Parked(TetherError):
    """The model gateway cannot send this call for `seconds` (the backend's budget is spent,
    or its circuit is open), and the caller asked to be parked rather than wait that long.
    Not a failure: the run stops without writing, its model request left open, and the
    worker runs the session again when the wait is over (a worker never sleeps inside a
    call holding a lease)."""

    def __init__(self, seconds: float, reason: str) -> None:
        super().__init__(f"parked for {seconds:.1f} s: {reason}")
        self.seconds = seconds
        self.reason = reason


class HandedOver(TetherError):
    """The run was stopped for the session to be continued by another runner (its worker is
    shutting down): it wrote nothing more, left its turn open and let its lease go."""


class StoreError(TetherError):
    """The event store refused or failed."""


class Conflict(StoreError):
    """A stale `expected_seq`: another writer appended first."""

    def __init__(self, session_id: str, expected_seq: int, actual_seq: int) -> None:
        super().__init__(
            f"session {session_id}: append expected seq {expected_seq}, the log is at {actual_seq}"
        )
        self.session_id = session_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class LeaseLost(StoreError):
    """This worker's lease on the session is gone; it must stop without writing."""


class LeaseHeld(StoreError):
    """Another worker holds an unexpired lease on the session."""

    def __init__(self, session_id: str, owner: str, expires: float) -> None:
        until = datetime.fromtimestamp(expires, UTC).strftime("%H:%M:%S UTC")
        left = max(0.0, expires - time.time())
        super().__init__(
            f"session {session_id} is being run by {owner}: its lease runs until {until} "
            f"(in {left:.0f} s), unless that worker lets it go sooner"
        )
        self.session_id = session_id
        self.owner = owner
        self.expires = expires


class ExperimentRunning(LeaseHeld):
    """Another process runs the experiment now (holds its claim, `experiment.claim`): this
    one refuses to run it beside it, which would run its missing runs twice."""

    def __init__(self, experiment_id: str, owner: str, expires: float) -> None:
        until = datetime.fromtimestamp(expires, UTC).strftime("%H:%M:%S UTC")
        StoreError.__init__(
            self,
            f"experiment {experiment_id} is being run by {owner}: one process runs an "
            f"experiment at a time; run it again once that one has ended (if it died, its "
            f"claim runs out at {until})",
        )
        self.session_id = f"experiment:{experiment_id}"
        self.experiment_id = experiment_id
        self.owner = owner
        self.expires = expires


class SessionNotFound(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in this store")
        self.session_id = session_id


class CorruptLog(StoreError):
    """A stored event cannot be read back."""


class StoreUnavailable(StoreError):
    """The store cannot take a write and a read now: `Store.ready` says why (the database
    is down or read-only, or its file was deleted or replaced under the open store)."""
