"""Managed sessions: the Runtime protocol, in-process (`LocalRuntime`) and over HTTP
(`HttpRuntime`, against `tether serve`)."""

from typing import TYPE_CHECKING

from tether.runtime.base import (
    Capabilities,
    CapabilityRefused,
    Runtime,
    SessionRef,
    SessionSpec,
    SessionStatus,
    validate_capabilities,
)
from tether.runtime.local import LocalRuntime
from tether.runtime.worker import Worker

if TYPE_CHECKING:
    from tether.runtime.http import HttpRuntime

__all__ = [
    "Capabilities",
    "CapabilityRefused",
    "HttpRuntime",
    "LocalRuntime",
    "Runtime",
    "SessionRef",
    "SessionSpec",
    "SessionStatus",
    "Worker",
    "validate_capabilities",
]


def __getattr__(name: str) -> object:
    # The HTTP client (httpx) loads only for those who use it: an in-process runtime does
    # not pay its import time, nor carry its objects through every full collection.
    if name == "HttpRuntime":
        from tether.runtime.http import HttpRuntime

        return HttpRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
