"""Tools: typed Python functions the model may call."""

from tether.tools.base import Tool, Toolbox, make_tool, tool
from tether.tools.schema import ToolContext

__all__ = ["Tool", "ToolContext", "Toolbox", "make_tool", "tool"]
