"""Token accounting: tiktoken for the OpenAI families when it can load, a calibrated estimate
otherwise, and the catalog's window and output limit."""

from __future__ import annotations

import math
import sys

import pytest
import tiktoken

from tether import Agent
from tether.context import tokens
from tether.context.manager import ContextManager
from tether.context.policy import DefaultPolicy
from tether.context.tokens import (
    DEFAULT_CHARS_PER_TOKEN,
    CharSizer,
    EncodingSizer,
    RequestEstimator,
    calibrated_chars_per_token,
    context_window,
    encoding_name,
)
from tether.events import (
    ContextCompacted,
    Event,
    ModelRequested,
    ModelResponded,
    Payload,
    SessionCreated,
    UserMessage,
)
from tether.fold import Folder
from tether.messages import Message, Text, Usage, user
from tether.session.log import SessionLog
from tether.store.memory import MemoryStore
from tether.testing import ScriptedModel


def _bytes_encoding() -> tiktoken.Encoding:
    """A real tiktoken encoding built offline: one token per byte, no merges."""
    ranks = {bytes([i]): i for i in range(256)}
    return tiktoken.Encoding(
        name="bytes", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={}
    )


def _folder(payloads: list[Payload]) -> Folder:
    return Folder().apply_all(Event("s", i, f"e{i}", "t", p) for i, p in enumerate(payloads, 1))


def test_openai_families_are_counted_with_their_encoding_and_others_are_not() -> None:
    assert encoding_name("openai:gpt-4o-mini") == "o200k_base"
    assert encoding_name("gpt-5") == encoding_name("o3-mini") == "o200k_base"
    assert encoding_name("openrouter/openai/gpt-4.1") == "o200k_base"
    assert encoding_name("gpt-4-turbo") == encoding_name("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_name("claude-sonnet-4-5") is None
    assert encoding_name("ollama:llama3.2") is None


def test_the_catalog_gives_window_and_output_limit_whatever_the_prefix() -> None:
    assert context_window("anthropic:claude-sonnet-4-5-20250929") == (200_000, 64_000)
    assert context_window("openai:gpt-4o") == (128_000, 16_384)
    assert context_window("scripted") == (None, None)


def test_the_estimate_is_calibrated_by_what_the_provider_counted() -> None:
    log: list[Payload] = [SessionCreated("m", system="s"), UserMessage(user("x" * 900))]
    folder = _folder(log)
    assert calibrated_chars_per_token(folder, 100) == DEFAULT_CHARS_PER_TOKEN
    request_chars = folder.transcript_chars
    log += [
        ModelRequested("m", "h", 1),
        ModelResponded(Message("assistant", (Text("ok"),)), usage=Usage(500, 2)),
    ]
    folder = _folder(log)
    ratio = calibrated_chars_per_token(folder, 100)
    assert ratio == pytest.approx((request_chars + 100) / 500)
    # Estimated afresh for exactly what was counted, the estimate is the provider's count.
    sizer = CharSizer(ratio)
    assert sizer.text("f" * 100) + math.ceil(request_chars / ratio) == pytest.approx(500, abs=2)


def test_an_absurd_report_cannot_make_the_estimate_absurd() -> None:
    log: list[Payload] = [SessionCreated("m"), UserMessage(user("hello"))]
    log += [
        ModelRequested("m", "h", 1),
        ModelResponded(Message("assistant", ()), usage=Usage(1_000_000, 1)),
    ]
    assert calibrated_chars_per_token(_folder(log), 0) == tokens.MIN_CHARS_PER_TOKEN


def test_with_an_encoding_messages_are_counted_once_and_again_after_a_compaction() -> None:
    estimator = RequestEstimator(_bytes_encoding())
    log: list[Payload] = [
        SessionCreated("m"),
        UserMessage(user("abcd")),
        ModelResponded(Message("assistant", (Text("xy"),))),
    ]
    folder = _folder(log)
    sizer = estimator.sizer(folder, 0)
    assert isinstance(sizer, EncodingSizer)
    overhead = tokens.MESSAGE_OVERHEAD_TOKENS
    assert estimator.estimate(folder, sizer, "sys") == 3 + (4 + overhead) + (2 + overhead)
    folder.apply(Event("s", 4, "e4", "t", UserMessage(user("z" * 10))))
    assert estimator.estimate(folder, sizer, "sys") == 3 + 6 + 2 * overhead + 10 + overhead
    folder.apply(Event("s", 5, "e5", "t", ContextCompacted(3, 3, "S")))
    expected = 3 + sum(sizer.message(m) for m in folder.messages)
    assert estimator.estimate(folder, sizer, "sys") == expected


async def test_without_tiktoken_an_openai_model_falls_back_to_the_calibrated_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # as if it were not installed
    monkeypatch.setattr(tokens, "_loaded", {})
    assert await tokens.load_encoding("o200k_base") is None
    model = ScriptedModel(["fine"], name="openai:gpt-4o")
    agent = Agent(model, store=MemoryStore(), context=DefaultPolicy())
    result = await agent.run("hello")
    assert result.output == "fine"
    assert isinstance(agent.engine.context, ContextManager)
    log_view = await agent.engine.context.view(
        await _log(agent, result.session_id), agent.toolbox, None
    )
    assert isinstance(log_view.sizer, CharSizer)
    assert log_view.budget == 128_000 - 16_384  # the window less the catalog's output limit


async def _log(agent: Agent, session_id: str) -> SessionLog:
    return await SessionLog.load(agent.store, session_id)


async def test_a_manager_with_an_encoding_estimates_every_request_by_it() -> None:
    model = ScriptedModel(["one", "two"], name="openai:gpt-4o")
    agent = Agent(model, store=MemoryStore(), context=False)
    result = await agent.run("hello there")
    manager = ContextManager(DefaultPolicy(), model, estimator=RequestEstimator(_bytes_encoding()))
    view = await manager.view(await _log(agent, result.session_id), agent.toolbox, 500)
    assert isinstance(view.sizer, EncodingSizer)
    fixed = len("[]")  # no system prompt, no tools
    assert view.estimate == fixed + sum(view.sizer.message(m) for m in view.messages)
    assert view.budget == 128_000 - 500
