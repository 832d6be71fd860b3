"""Managed sessions: the Runtime protocol, in-process (`LocalRuntime`) and over HTTP
(`HttpRuntime`, against `tether serve`)."""

from tether.runtime.base import (
    Capabilities,
    CapabilityRefused,
    Runtime,
    SessionRef,
    SessionSpec,
    SessionStatus,
    validate_capabilities,
)
from tether.runtime.http import HttpRuntime
from tether.runtime.local import LocalRuntime
from tether.runtime.worker import Worker

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
