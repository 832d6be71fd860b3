"""tether: a durable, provider-neutral agent runtime.

The session is an append-only log of typed events; the transcript is a pure fold of it.
"""

from typing import TYPE_CHECKING

from tether.agent import Agent, RunResult
from tether.errors import TetherError
from tether.events import SCHEMA_VERSION, Event
from tether.fold import Folder, Transcript, fold
from tether.limits import Limits
from tether.messages import Image, Message, Text, ToolCall, ToolResult, Usage
from tether.published import model_factory
from tether.scheduler.retry import RetryPolicy
from tether.state import SessionView, validate_observation
from tether.store import open_store
from tether.tools import ToolContext, tool

if TYPE_CHECKING:
    from tether.output import OutputMissing, OutputType
    from tether.settings import ModelSettings, Reasoning


def __getattr__(name: str) -> object:
    """`tether.__version__`, read from the package metadata when first asked: reading it
    parses the metadata file, which every process would otherwise pay for at import.
    `ModelSettings`, `Reasoning`, `OutputType` and `OutputMissing` are loaded when first asked
    for, for the same reason."""
    if name in ("ModelSettings", "Reasoning"):
        from tether import settings

        return getattr(settings, name)
    if name in ("OutputType", "OutputMissing"):
        from tether import output

        return getattr(output, name)
    if name != "__version__":
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__all__ = [
    "SCHEMA_VERSION",
    "Agent",
    "Event",
    "Folder",
    "Image",
    "Limits",
    "Message",
    "ModelSettings",
    "OutputMissing",
    "OutputType",
    "Reasoning",
    "RetryPolicy",
    "RunResult",
    "SessionView",
    "TetherError",
    "Text",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "Transcript",
    "Usage",
    "fold",
    "model_factory",
    "open_store",
    "tool",
    "validate_observation",
]
