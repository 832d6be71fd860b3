"""What tests and demos need: the scripted model and the conformance suites."""

from tether.testing.runtime_conformance import (
    FORK_CHECKS,
    RUNTIME_CHECKS,
    run_runtime_conformance,
)
from tether.testing.scripted import (
    Delay,
    Fail,
    Hang,
    Say,
    ScriptedCall,
    ScriptedModel,
    Truncated,
    call,
    say,
)
from tether.testing.store_conformance import STORE_CHECKS, run_store_conformance

__all__ = [
    "FORK_CHECKS",
    "RUNTIME_CHECKS",
    "STORE_CHECKS",
    "Delay",
    "Fail",
    "Hang",
    "Say",
    "ScriptedCall",
    "ScriptedModel",
    "Truncated",
    "call",
    "run_runtime_conformance",
    "run_store_conformance",
    "say",
]
