"""A model with a small window that checks every request it gets, and a tool whose outputs
have random sizes up to 200 KB. Shared by the context tests, the resume worker and the bench.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.context.summary import SUMMARY_SYSTEM
from tether.errors import ContextOverflow
from tether.messages import Message, Text, ToolCall, Usage, canonical_json
from tether.providers.base import ModelRequest, ModelResponse
from tether.tools.base import Tool, make_tool

SYSTEM = "You read documents one after another and keep notes."
FIRST = "Read documents 1 to N with fetch, one at a time, then say done."
MAX_OUTPUT_SIZE = 200_000

# A tokenizer of the model's own, unlike tether's estimate: runs of up to four word
# characters, and each punctuation mark, are one token each.
_TOKEN = re.compile(r"\w{1,4}|[^\w\s]")
_rng = random.Random(6)
_WORDS = [
    "".join(_rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_rng.randint(2, 9)))
    for _ in range(5_000)
]
_CORPUS = " ".join(_rng.choice(_WORDS) for _ in range(120_000))  # about 700 KB


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def request_body(request: ModelRequest) -> str:
    """The neutral request in canonical JSON: what must be byte-identical after a resume."""
    return canonical_json(
        {
            "model": request.model,
            "system": request.system,
            "messages": [m.to_json() for m in request.messages],
            "tools": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ],
            "max_output_tokens": request.max_output_tokens,
        }
    )


def document(n: int) -> str:
    """Document `n`: a deterministic slice of the corpus, 0 to 200 KB long."""
    rng = random.Random(n)
    size = rng.randint(0, MAX_OUTPUT_SIZE)
    start = rng.randint(0, len(_CORPUS) - size)
    return _CORPUS[start : start + size]


def fetch_tool(output_cap: int) -> Tool:
    async def fetch(n: int) -> str:
        """Fetch document n."""
        return document(n)

    return make_tool(fetch, effect="read", output_cap=output_cap)


def request_problems(request: ModelRequest, window: int, system: str, first: Message) -> list[str]:
    """What is wrong with a request: over the window, a call without its result (or a
    result without its call), the system prompt or the first message missing."""
    problems: list[str] = []
    tokens = count_tokens(request_body(request))
    if tokens + (request.max_output_tokens or 0) > window:
        problems.append(f"{tokens} input tokens + {request.max_output_tokens} output > {window}")
    if request.system != system:
        problems.append("the system prompt is missing")
    if not request.messages or request.messages[0] != first:
        problems.append("the first user message is missing")
    messages = request.messages
    for i, message in enumerate(messages):
        asked = [c.id for c in message.tool_calls]
        if asked:
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered = [] if following is None else [r.call_id for r in following.tool_results]
            if following is None or following.role != "tool" or answered != asked:
                problems.append(f"calls {asked} at message {i} lack their results")
        if message.role == "tool":
            before = messages[i - 1].tool_calls if i else ()
            if [r.call_id for r in message.tool_results] != [c.id for c in before]:
                problems.append(f"results at message {i} have no calls before them")
    return problems


@dataclass
class WindowedModel:
    """Asks for `fetch(n)` with n one more than the latest call in the transcript (so neither
    compaction nor a resume in another process resets it), and answers "done" after `steps`.

    Every request is checked (`problems` collects what is wrong). A request over
    `overflow_window` is refused with `ContextOverflow`, as a provider whose window is smaller
    than the catalog says would. Summary requests (no tools) get a short summary."""

    window: int
    steps: int
    first: Message
    system: str = SYSTEM
    name: str = "windowed"
    overflow_window: int | None = None
    problems: list[str] = field(default_factory=list)
    bodies: list[str] = field(default_factory=list)  # every step request, canonical JSON
    tokens_sent: list[int] = field(default_factory=list)  # input tokens of each step request
    summaries: int = 0
    overflows: int = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = request_body(request)
        tokens = count_tokens(body)
        if request.system == SUMMARY_SYSTEM:
            return self._summary(request, tokens)
        if self.overflow_window is not None and tokens > self.overflow_window:
            self.overflows += 1
            raise ContextOverflow(
                f"prompt is too long: {tokens} tokens > {self.overflow_window} maximum",
                status=400,
            )
        self.problems += request_problems(request, self.window, self.system, self.first)
        self.bodies.append(body)
        self.tokens_sent.append(tokens)
        n = latest_call_number(request.messages) + 1
        if n > self.steps:
            reply = Message("assistant", (Text("done"),))
        else:
            reply = Message("assistant", (ToolCall(f"f{n}", "fetch", {"n": n}),))
        return ModelResponse(
            reply,
            "tool_calls" if reply.tool_calls else "end_turn",
            usage=Usage(tokens, 12),
        )

    def _summary(self, request: ModelRequest, tokens: int) -> ModelResponse:
        self.summaries += 1
        if tokens + (request.max_output_tokens or 0) > self.window:
            self.problems.append(f"summary request of {tokens} tokens > window {self.window}")
        read = sorted(int(x) for x in re.findall(r'fetch \{"n":(\d+)\}', request.messages[0].text))
        span = f"documents {read[0]} to {read[-1]}" if read else "no documents"
        return ModelResponse(
            Message("assistant", (Text(f"Read {span}; each was a list of words."),)),
            usage=Usage(tokens, 15),
        )


def latest_call_number(messages: Sequence[Message]) -> int:
    for message in reversed(messages):
        for call in reversed(message.tool_calls):
            return int(str(call.arguments["n"]))
    return 0
