"""Model providers: the neutral model protocol and one codec per wire API."""

from tether.providers.base import Delta, Model, ModelRequest, ModelResponse, ToolSpec

__all__ = ["Delta", "Model", "ModelRequest", "ModelResponse", "ToolSpec"]
