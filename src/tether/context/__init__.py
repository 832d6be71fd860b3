"""Context-window management: token accounting, the policy that clears and compacts the
transcript before a request passes its budget, and large tool outputs kept as blobs.

Everything a policy decides is a `context.compacted` event; the fold applies it, so a
fresh process rebuilds the same requests from the log.
"""

from __future__ import annotations

from tether.context.blobs import blob_refs, read_blob
from tether.context.manager import ContextManager, ContextSetting, make_context
from tether.context.policy import DefaultPolicy
from tether.context.view import ContextPolicy, ContextView

__all__ = [
    "ContextManager",
    "ContextPolicy",
    "ContextSetting",
    "ContextView",
    "DefaultPolicy",
    "blob_refs",
    "make_context",
    "read_blob",
]
