"""Context management over a 1,000-step session with tool outputs of random sizes up to 200 KB
(cut at 6,000 characters), against a model with a 16,000-token window: what building a request
costs at step 1,000 over step 10, and the tokens sent per step, with the default policy and
with none (beside it, the bare-loop baseline).

    .venv/bin/python bench/bench_context.py

Request build cost: from the previous step's last commit to the model holding the request
(limits check, context policy, `model.requested` commit, request), plus encoding the wire
body with the OpenAI Chat codec. Medians of steps 6-15 and 991-1,000.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from common import bare_loop
from context.support import FIRST, SYSTEM, count_tokens, fetch_tool, latest_call_number
from tether import Agent, Limits
from tether.context import DefaultPolicy
from tether.context.summary import SUMMARY_SYSTEM
from tether.events import ContextCompacted, Event, ModelFailed, ModelRequested
from tether.messages import Message, Text, ToolCall, Usage, canonical_json
from tether.providers.base import ModelRequest, ModelResponse
from tether.providers.openai_chat import encode_request
from tether.store import MemoryStore

STEPS, WINDOW, OUTPUT_CAP, MAX_OUTPUT = 1_000, 16_000, 6_000, 1_000
EARLY, LATE = range(6, 16), range(STEPS - 9, STEPS + 1)


class BenchModel:
    """Fetches documents 1..STEPS, then answers. Counts each request's tokens with the
    model's own tokenizer (per message, cached: the no-policy transcript reaches 6 MB) and
    times the build of the sampled requests."""

    name = "windowed"

    def __init__(self) -> None:
        self.tokens_sent: list[int] = []
        self.build_ms: dict[int, float] = {}
        self.prepare_ms: list[float] = []  # every step, without the wire encoding
        self.last_commit = 0.0
        self._counted: dict[int, tuple[Message, int]] = {}
        self._fixed = 0

    def observe(self, event: Event) -> None:
        # What the request build appends itself does not restart its clock.
        if not isinstance(event.payload, ModelRequested | ContextCompacted | ModelFailed):
            self.last_commit = time.perf_counter()

    def _tokens(self, request: ModelRequest) -> int:
        total = self._fixed or count_tokens(
            canonical_json([request.system, [t.parameters for t in request.tools]])
        )
        self._fixed = total
        for m in request.messages:
            seen = self._counted.get(id(m))
            if seen is None or seen[0] is not m:
                seen = (m, count_tokens(canonical_json(m.to_json())))
                self._counted[id(m)] = seen
            total += seen[1]
        return total

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.system == SUMMARY_SYSTEM:
            text = Text(f"Read documents up to {latest_call_number(request.messages)}.")
            return ModelResponse(Message("assistant", (text,)), usage=Usage(1_000, 20))
        step = len(self.tokens_sent) + 1
        self.prepare_ms.append((time.perf_counter() - self.last_commit) * 1000)
        if step in EARLY or step in LATE:
            json.dumps(encode_request("gpt-4o", request))
            self.build_ms[step] = (time.perf_counter() - self.last_commit) * 1000
        tokens = self._tokens(request)
        self.tokens_sent.append(tokens)
        n = latest_call_number(request.messages) + 1
        if n > STEPS:
            return ModelResponse(Message("assistant", (Text("done"),)), usage=Usage(tokens, 5))
        call = ToolCall(f"f{n}", "fetch", {"n": n})
        return ModelResponse(Message("assistant", (call,)), "tool_calls", usage=Usage(tokens, 12))


async def run(policy: DefaultPolicy | bool) -> tuple[BenchModel, int, float]:
    model = BenchModel()
    store = MemoryStore()
    agent = Agent(
        model,
        tools=[fetch_tool(OUTPUT_CAP)],
        system=SYSTEM,
        limits=Limits(max_steps=STEPS + 10, max_output_tokens=MAX_OUTPUT),
        store=store,
        context=policy,
        on_event=model.observe,
    )
    started = time.perf_counter()
    result = await agent.run(FIRST)
    elapsed = time.perf_counter() - started
    assert result.output == "done", result
    events = await store.read(result.session_id)
    compactions = sum(isinstance(e.payload, ContextCompacted) for e in events)
    return model, compactions, elapsed


def report(label: str, model: BenchModel, compactions: int, elapsed: float) -> float:
    early = statistics.median(model.build_ms[s] for s in EARLY)
    late = statistics.median(model.build_ms[s] for s in LATE)
    sent = model.tokens_sent
    first, last = model.prepare_ms[:100], model.prepare_ms[STEPS - 100 : STEPS]
    amortized = statistics.mean(last) / statistics.mean(first)
    print(
        f"{label:<16} build @10 {early:7.3f} ms  @1000 {late:8.3f} ms  ratio {late / early:6.2f}  |"
        f"  tokens/step mean {statistics.mean(sent):>9,.0f}  max {max(sent):>9,}"
        f"  total {sum(sent):>13,}  |  {compactions:>4} context events  {elapsed:6.1f} s\n"
        f"{'':<16} mean over steps 1-100 {statistics.mean(first):.3f} ms, 901-1000 "
        f"{statistics.mean(last):.3f} ms (ratio {amortized:.2f}; every step, summaries included, no wire encoding)"
    )
    return late / early


async def main() -> None:
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    started = time.perf_counter()
    await bare_loop(STEPS)
    bare = (time.perf_counter() - started) / STEPS * 1000
    print(f"bare asyncio loop (no runtime, no context, tiny outputs): {bare:.4f} ms/step\n")
    with_policy, events, elapsed = await run(DefaultPolicy(window=WINDOW))
    ratio = report("default policy", with_policy, events, elapsed)
    without, none, elapsed = await run(False)
    report("no policy", without, none, elapsed)
    saved = sum(without.tokens_sent) / sum(with_policy.tokens_sent)
    print(
        f"\nbuild cost at step 1,000 over step 10 with the policy: {ratio:.2f} (target <= 1.5); "
        f"tokens sent over the session: {saved:.1f}x fewer with the policy; "
        f"largest request with the policy {max(with_policy.tokens_sent):,} tokens "
        f"(budget {WINDOW - MAX_OUTPUT:,}), without {max(without.tokens_sent):,}"
    )


if __name__ == "__main__":
    asyncio.run(main())
