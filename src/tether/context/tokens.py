"""Token accounting for the next request: how many tokens a text, a message and a whole request
take, by tiktoken for the OpenAI families (when it is installed and its encoding loads) and by
characters over a calibrated ratio for everything else. It measures; the policy decides.

The ratio is calibrated from the fold (`Folder.calibration`: the transcript characters of the
last answered request and the input tokens the provider counted for it), so any process that
folds the same log estimates the same numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Protocol

from tether.fold import Folder
from tether.messages import (
    IMAGE_TOKENS,
    Image,
    Message,
    Text,
    ToolCall,
    ToolResult,
    canonical_json,
)
from tether.providers import catalog

# Before any answer has calibrated it: fewer characters per token than the usual rule of four,
# so an uncalibrated estimate errs on the large side.
DEFAULT_CHARS_PER_TOKEN = 3.0
# A calibrated ratio is kept within these bounds: one odd report must not make the estimate absurd.
MIN_CHARS_PER_TOKEN, MAX_CHARS_PER_TOKEN = 0.5, 8.0
# Per message, the chat framing a provider adds around its content (role, separators).
MESSAGE_OVERHEAD_TOKENS = 4
# Loading an encoding may try the network once; past this it is given up for the process.
ENCODING_LOAD_SECONDS = 5.0


class Encoding(Protocol):
    """What tether uses of a `tiktoken.Encoding`."""

    def encode_ordinary(self, text: str) -> list[int]: ...


def bare_model_name(name: str) -> str:
    """`openai:gpt-4o` and `openrouter/openai/gpt-4o` name the model `gpt-4o`."""
    return name.rsplit(":", 1)[-1].rsplit("/", 1)[-1]


def encoding_name(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI model family, or None for any other model."""
    bare = bare_model_name(model)
    if bare.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "chatgpt-")):
        return "o200k_base"
    if bare[:2] in ("o1", "o3", "o4"):
        return "o200k_base"
    if bare.startswith(("gpt-4", "gpt-3.5")):
        return "cl100k_base"
    return None


_loaded: dict[str, Encoding | None] = {}


async def load_encoding(name: str) -> Encoding | None:
    """The named tiktoken encoding, or None when tiktoken is not installed or the encoding
    cannot be loaded (it is fetched once from the network unless TIKTOKEN_CACHE_DIR has it).
    A failure is remembered: the calibrated estimate serves for the rest of the process."""
    if name in _loaded:
        return _loaded[name]
    try:
        import tiktoken
    except ImportError:
        _loaded[name] = None
        return None
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Encoding | None] = loop.create_future()

    def load() -> None:
        try:
            found: Encoding | None = tiktoken.get_encoding(name)
        except Exception:  # no network, no cache, a bad file: all mean "estimate instead"
            found = None
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, done, found)

    # A daemon thread: a download that hangs must not hold up the process's exit either.
    threading.Thread(target=load, name="tether-tiktoken", daemon=True).start()
    try:
        encoding = await asyncio.wait_for(done, ENCODING_LOAD_SECONDS)
    except TimeoutError:
        encoding = None
    _loaded[name] = encoding
    return encoding


def _settle(future: asyncio.Future[Encoding | None], value: Encoding | None) -> None:
    if not future.done():  # the waiter may have given up already
        future.set_result(value)


def context_window(model: str) -> tuple[int | None, int | None]:
    """The catalog's (context window, output limit) of a model, None where unknown."""
    info = catalog.lookup(model) or catalog.lookup(bare_model_name(model))
    if info is None:
        return None, None
    return info.context_window, info.max_output_tokens


def calibrated_chars_per_token(folder: Folder, fixed_chars: int) -> float:
    """Characters per token as the provider counted the last answered request."""
    if folder.calibration is None:
        return DEFAULT_CHARS_PER_TOKEN
    chars, tokens = folder.calibration
    ratio = (chars + fixed_chars) / max(tokens, 1)
    return min(max(ratio, MIN_CHARS_PER_TOKEN), MAX_CHARS_PER_TOKEN)


class Sizer(Protocol):
    """Tokens of a text and of a message, by one measure."""

    def text(self, text: str) -> int: ...

    def message(self, message: Message) -> int: ...


def image_count(message: Message) -> int:
    """The images in `message`: its own and its results'."""
    count = 0
    for part in message.parts:
        if isinstance(part, Image):
            count += 1
        elif isinstance(part, ToolResult) and part.images:
            count += len(part.images)
    return count


def without_images(message: Message) -> Message:
    parts = tuple(
        replace(p, images=()) if isinstance(p, ToolResult) else p
        for p in message.parts
        if not isinstance(p, Image)
    )
    return Message(message.role, parts)


@dataclass(frozen=True, slots=True)
class CharSizer:
    """Characters of the canonical JSON form over a (calibrated) ratio."""

    chars_per_token: float

    def text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def message(self, message: Message) -> int:
        body = message.canonical()
        # Canonical JSON escapes every quote inside a string, so this marks image parts (or,
        # rarely, a call's arguments holding that pair: then no image is found below).
        if '"type":"image"' not in body:
            return math.ceil(len(body) / self.chars_per_token)
        # Each image counts as the fixed estimate, never by its base64.
        body = without_images(message).canonical()
        return math.ceil(len(body) / self.chars_per_token) + image_count(message) * IMAGE_TOKENS


@dataclass(frozen=True, slots=True)
class EncodingSizer:
    """Tokens as tiktoken counts them, plus the framing of each message and call."""

    encoding: Encoding

    def text(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    def message(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD_TOKENS
        for part in message.parts:
            if isinstance(part, Text):
                total += self.text(part.text)
            elif isinstance(part, ToolCall):
                raw = part.raw_arguments or canonical_json(part.arguments)
                total += MESSAGE_OVERHEAD_TOKENS + self.text(part.name) + self.text(raw)
            elif isinstance(part, ToolResult):
                total += MESSAGE_OVERHEAD_TOKENS + self.text(part.content)
                total += len(part.images) * IMAGE_TOKENS
            else:  # an image: the fixed estimate, never its base64
                total += IMAGE_TOKENS
        return total


class _Running:
    """Encoded tokens of one folder's messages, summed as messages come; recounted only
    after a compaction changed old messages."""

    __slots__ = ("compactions", "counted", "total")

    def __init__(self) -> None:
        self.compactions = -1
        self.counted = 0
        self.total = 0


class RequestEstimator:
    """The input tokens of the next request of a session, in O(new messages) per step."""

    def __init__(self, encoding: Encoding | None = None) -> None:
        self.encoding = encoding
        self._running: weakref.WeakKeyDictionary[Folder, _Running] = weakref.WeakKeyDictionary()

    def sizer(self, folder: Folder, fixed_chars: int) -> Sizer:
        if self.encoding is not None:
            return EncodingSizer(self.encoding)
        return CharSizer(calibrated_chars_per_token(folder, fixed_chars))

    def estimate(self, folder: Folder, sizer: Sizer, fixed_text: str) -> int:
        """`fixed_text`: what every request carries besides the messages (system, tools)."""
        if isinstance(sizer, CharSizer):
            return sizer.text(fixed_text) + math.ceil(
                folder.transcript_chars / sizer.chars_per_token
            )
        running = self._running.setdefault(folder, _Running())
        if running.compactions != folder.compactions or running.counted > len(folder.messages):
            running.compactions, running.counted, running.total = folder.compactions, 0, 0
        for message in folder.messages[running.counted :]:
            running.total += sizer.message(message)
        running.counted = len(folder.messages)
        return sizer.text(fixed_text) + running.total
