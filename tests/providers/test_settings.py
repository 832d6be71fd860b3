"""`ModelSettings` on the wire: the JSON body each codec sends to a real loopback server for
every setting, checked against the official SDKs' request types where there are some; the
settings a wire API cannot honour refused when the request is built; `extra` merged last;
`timeout` per attempt; `OPENROUTER_BASE_URL`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest

from tether import Agent, Limits, ModelSettings, Reasoning
from tether.errors import ConnectionFailed, UsageError
from tether.messages import user
from tether.providers.anthropic import encode_request
from tether.providers.base import Model, ModelRequest
from tether.providers.endpoints import configured_endpoints
from tether.providers.ollama import OllamaModel
from tether.providers.registry import model_from_string
from tether.store import MemoryStore

from .fake_servers import FakeServer, Reply
from .test_loopback import ADD, DIALECTS, PLAN, build
from .toy_dialects import HANDLERS, ToyModel

SDK_PARAMS: dict[str, pydantic.TypeAdapter[Any]] = {
    "anthropic": pydantic.TypeAdapter(anthropic.types.MessageCreateParams),
    "openai": pydantic.TypeAdapter(openai.types.chat.CompletionCreateParams),
    "openrouter": pydantic.TypeAdapter(openai.types.chat.CompletionCreateParams),
    "openai-responses": pydantic.TypeAdapter(openai.types.responses.ResponseCreateParams),
}
LOOKUP = ADD.__class__("lookup", "Look a thing up.", {"type": "object", "properties": {}})


async def sent(
    dialect: str,
    settings: ModelSettings,
    *,
    tools: tuple[Any, ...] = (ADD,),
    cap: int | None = 1000,
    stream: bool = False,
    model: Model | None = None,
) -> Any:
    """The JSON body a request with these settings puts on the wire (a real server's view)."""
    async with FakeServer(HANDLERS[dialect](ToyModel(PLAN))) as server:
        chosen = (
            build(dialect, server.url, stream) if model is None else _pointed(model, server.url)
        )
        request = ModelRequest(
            chosen.name, "Be brief.", (user("add"),), tools, cap, settings=settings
        )
        await chosen.complete(request)
        await chosen.aclose()  # type: ignore[attr-defined]
    body = server.requests[0].json()
    kind = "openrouter" if chosen.name.startswith("openrouter:") else dialect
    if kind in SDK_PARAMS:
        SDK_PARAMS[kind].validate_python(body)
    return body


def _pointed(model: Model, url: str) -> Model:
    return model_from_string(model.name, api_key="sk-loopback", base_url=url + "/v1", stream=False)


# --- every setting at once ----------------------------------------------------------------


async def test_anthropic_gets_each_setting_by_its_own_name() -> None:
    settings = ModelSettings(
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=300,
        stop=["END"],
        tool_choice="add",
        parallel_tool_calls=False,
    )
    body = await sent("anthropic", settings)
    assert body["temperature"] == 0.5 and body["top_p"] == 0.9
    assert body["max_tokens"] == 300
    assert body["stop_sequences"] == ["END"]
    assert body["tool_choice"] == {"type": "tool", "name": "add", "disable_parallel_tool_use": True}
    assert "seed" not in body and "thinking" not in body


async def test_openai_chat_gets_each_setting_by_its_own_name() -> None:
    settings = ModelSettings(
        temperature=1.5,
        top_p=0.9,
        max_output_tokens=300,
        stop=["END", "STOP"],
        seed=7,
        tool_choice="add",
        parallel_tool_calls=False,
    )
    body = await sent("openai", settings)
    assert (body["temperature"], body["top_p"], body["seed"]) == (1.5, 0.9, 7)
    assert body["max_completion_tokens"] == 300
    assert body["stop"] == ["END", "STOP"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert body["parallel_tool_calls"] is False


async def test_openai_responses_gets_each_setting_by_its_own_name() -> None:
    settings = ModelSettings(
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=300,
        tool_choice="add",
        parallel_tool_calls=True,
    )
    body = await sent("openai-responses", settings)
    assert (body["temperature"], body["top_p"]) == (0.5, 0.9)
    assert body["max_output_tokens"] == 300
    assert body["tool_choice"] == {"type": "function", "name": "add"}
    assert body["parallel_tool_calls"] is True
    assert "stop" not in body and "seed" not in body


async def test_ollama_gets_sampling_settings_as_options() -> None:
    settings = ModelSettings(
        temperature=0.5, top_p=0.9, max_output_tokens=300, stop=["END"], seed=7
    )
    body = await sent("ollama", settings)
    assert body["options"] == {
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
        "num_predict": 300,
    }
    assert "tool_choice" not in body and body["tools"]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_the_tighter_of_the_request_cap_and_the_settings_cap_is_sent(dialect: str) -> None:
    field = {
        "anthropic": "max_tokens",
        "openai": "max_completion_tokens",
        "openai-responses": "max_output_tokens",
    }
    tighter_request = await sent(dialect, ModelSettings(max_output_tokens=300), cap=200)
    tighter_settings = await sent(dialect, ModelSettings(max_output_tokens=300), cap=None)
    if dialect == "ollama":
        tighter_request, tighter_settings = tighter_request["options"], tighter_settings["options"]
    name = field.get(dialect, "num_predict")
    assert (tighter_request[name], tighter_settings[name]) == (200, 300)


# --- tool_choice --------------------------------------------------------------------------


WIRE_CHOICES: dict[str, dict[str, Any]] = {
    "anthropic": {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}},
    "openai": {"auto": "auto", "required": "required", "none": "none"},
    "openai-responses": {"auto": "auto", "required": "required", "none": "none"},
}


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
@pytest.mark.parametrize("dialect", ["anthropic", "openai", "openai-responses"])
async def test_tool_choice_words_become_each_apis_own(dialect: str, choice: str) -> None:
    body = await sent(dialect, ModelSettings(tool_choice=choice))
    assert body["tool_choice"] == WIRE_CHOICES[dialect][choice]
    assert "parallel_tool_calls" not in body


async def test_anthropic_turns_parallel_calls_off_inside_tool_choice() -> None:
    serial = await sent("anthropic", ModelSettings(parallel_tool_calls=False))
    assert serial["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    required = await sent(
        "anthropic", ModelSettings(tool_choice="required", parallel_tool_calls=False)
    )
    assert required["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    # `none` takes no such field: no call is made at all
    none = await sent("anthropic", ModelSettings(tool_choice="none", parallel_tool_calls=False))
    assert none["tool_choice"] == {"type": "none"}
    parallel = await sent("anthropic", ModelSettings(parallel_tool_calls=True))
    assert "tool_choice" not in parallel


@pytest.mark.parametrize("dialect", ["anthropic", "openai", "openai-responses", "ollama"])
async def test_with_no_tools_offered_tool_choice_auto_and_parallel_calls_are_not_sent(
    dialect: str,
) -> None:
    body = await sent(
        dialect, ModelSettings(tool_choice="auto", parallel_tool_calls=False), tools=()
    )
    assert "tool_choice" not in body and "parallel_tool_calls" not in body
    assert "tools" not in body


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_tool_choice_naming_a_tool_not_offered_is_refused_naming_it(dialect: str) -> None:
    with pytest.raises(UsageError, match=r"'search'.*add, lookup"):
        await sent(dialect, ModelSettings(tool_choice="search"), tools=(ADD, LOOKUP))
    with pytest.raises(UsageError, match="required"):
        await sent(dialect, ModelSettings(tool_choice="required"), tools=())


async def test_ollama_honours_tool_choice_none_by_offering_no_tools() -> None:
    body = await sent("ollama", ModelSettings(tool_choice="none"))
    assert "tools" not in body
    auto = await sent("ollama", ModelSettings(tool_choice="auto", parallel_tool_calls=True))
    assert auto["tools"] and "tool_choice" not in auto


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (ModelSettings(tool_choice="required"), "tool_choice 'required'"),
        (ModelSettings(tool_choice="add"), "tool_choice 'add'"),
        (ModelSettings(parallel_tool_calls=False), "parallel_tool_calls"),
    ],
)
async def test_ollama_refuses_what_its_api_cannot_do(settings: ModelSettings, named: str) -> None:
    with pytest.raises(UsageError, match=named):
        await sent("ollama", settings)


@pytest.mark.parametrize(
    ("dialect", "settings", "named"),
    [
        ("anthropic", ModelSettings(seed=1), "seed"),
        ("anthropic", ModelSettings(temperature=1.5), "temperature from 0 to 1"),
        ("openai-responses", ModelSettings(stop=["END"]), "stop"),
        ("openai-responses", ModelSettings(seed=1), "seed"),
    ],
)
async def test_a_setting_the_api_cannot_honour_is_refused_and_nothing_is_sent(
    dialect: str, settings: ModelSettings, named: str
) -> None:
    async with FakeServer(HANDLERS[dialect](ToyModel(PLAN))) as server:
        model = build(dialect, server.url, False)
        with pytest.raises(UsageError, match=named):
            await model.complete(
                ModelRequest(model.name, None, (user("hi"),), (ADD,), settings=settings)
            )
    assert server.requests == []


# --- reasoning ----------------------------------------------------------------------------


async def test_anthropic_thinks_with_the_budget_derived_from_an_effort() -> None:
    body = await sent(
        "anthropic", ModelSettings(reasoning=Reasoning(effort="high")), tools=(), cap=None
    )
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    # thinking counts in max_tokens: the usual cap is added to the budget
    assert body["max_tokens"] == 16384 + 16384
    capped = await sent(
        "anthropic", ModelSettings(reasoning=Reasoning(budget_tokens=2000)), tools=(), cap=3000
    )
    assert capped["thinking"]["budget_tokens"] == 2000 and capped["max_tokens"] == 3000


@pytest.mark.parametrize(
    ("settings", "tools", "named"),
    [
        (ModelSettings(reasoning=Reasoning(budget_tokens=500)), (), "at least 1024"),
        (
            ModelSettings(reasoning=Reasoning(budget_tokens=4000), tool_choice="required"),
            (ADD,),
            "tool_choice auto or none",
        ),
        (ModelSettings(reasoning=Reasoning(effort="low"), temperature=0.2), (), "temperature"),
        (
            ModelSettings(reasoning=Reasoning(budget_tokens=4000), max_output_tokens=2000),
            (),
            "above the thinking budget",
        ),
    ],
)
async def test_anthropic_refuses_thinking_it_cannot_do(
    settings: ModelSettings, tools: tuple[Any, ...], named: str
) -> None:
    with pytest.raises(UsageError, match=named):
        await sent("anthropic", settings, tools=tools)


async def test_openai_gets_the_effort_derived_from_a_budget() -> None:
    chat = await sent("openai", ModelSettings(reasoning=Reasoning(budget_tokens=20000)))
    assert chat["reasoning_effort"] == "high" and "reasoning" not in chat
    responses = await sent(
        "openai-responses", ModelSettings(reasoning=Reasoning(budget_tokens=1024))
    )
    assert responses["reasoning"] == {"effort": "low"}


async def test_openrouter_gets_its_own_reasoning_object() -> None:
    openrouter = model_from_string("openrouter:anthropic/claude-sonnet-4.5", api_key="sk-x")
    effort = await sent(
        "openai", ModelSettings(reasoning=Reasoning(effort="medium")), model=openrouter
    )
    assert effort["reasoning"] == {"effort": "medium"} and "reasoning_effort" not in effort
    budget = await sent(
        "openai", ModelSettings(reasoning=Reasoning(budget_tokens=3000)), model=openrouter
    )
    assert budget["reasoning"] == {"max_tokens": 3000}
    assert budget["max_tokens"] == 1000 and "max_completion_tokens" not in budget


# --- extra --------------------------------------------------------------------------------


async def test_extra_is_merged_into_the_body_last_as_a_merge_patch() -> None:
    body = await sent(
        "openai",
        ModelSettings(
            temperature=0.5,
            extra={
                "temperature": 0.1,
                "user": "u1",
                "stream_options": None,
                "metadata": {"a": "b"},
            },
        ),
        stream=True,
    )
    assert body["temperature"] == 0.1 and body["user"] == "u1" and body["metadata"] == {"a": "b"}
    assert "stream_options" not in body and body["stream"] is True


async def test_extra_merges_into_nested_objects_such_as_ollama_options() -> None:
    async with FakeServer(HANDLERS["ollama"](ToyModel(PLAN))) as server:
        model = OllamaModel("qwen3", host=server.url, options={"num_ctx": 4096, "top_k": 20})
        settings = ModelSettings(
            temperature=0.3, extra={"options": {"num_ctx": 8192, "top_k": None}, "think": True}
        )
        await model.complete(ModelRequest(model.name, None, (user("hi"),), settings=settings))
        await model.aclose()
    body = server.requests[0].json()
    assert body["options"] == {"num_ctx": 8192, "temperature": 0.3}
    assert body["think"] is True


async def test_anthropic_extra_reaches_fields_tether_does_not_model() -> None:
    body = await sent("anthropic", ModelSettings(extra={"top_k": 5, "metadata": {"user_id": "u1"}}))
    assert body["top_k"] == 5 and body["metadata"] == {"user_id": "u1"}


# --- timeout ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_timeout_bounds_one_attempt_whole_and_fails_it_as_a_retryable_connection_failure(
    stream: bool,
) -> None:
    resume = asyncio.Event()
    # The answer starts and then stalls forever: only the settings' timeout ends the wait.
    reply = Reply(
        chunks=[b'{"id": "msg_1", ', b'"type": "message"}'],
        headers={"content-type": "application/json"},
        hold_at=1,
        resume=resume,
    )
    async with FakeServer(lambda _: reply) as server:
        model = build("anthropic", server.url, stream)
        request = ModelRequest(model.name, None, (user("hi"),), settings=ModelSettings(timeout=0.2))
        try:
            with pytest.raises(ConnectionFailed, match=r"0\.2 s timeout") as caught:
                await model.complete(request)
        finally:
            resume.set()
            await model.aclose()  # type: ignore[attr-defined]
    assert caught.value.retryable


# --- OPENROUTER_BASE_URL ------------------------------------------------------------------


def test_openrouter_base_url_comes_from_the_environment_like_the_others() -> None:
    env = {"OPENROUTER_API_KEY": "sk-x", "OPENROUTER_BASE_URL": "https://gateway.example/or/v1"}
    model = model_from_string("openrouter:openai/gpt-4.1", env=env)
    assert model.endpoint_url == "https://gateway.example/or/v1/chat/completions"  # type: ignore[attr-defined]
    explicit = model_from_string(
        "openrouter:openai/gpt-4.1", env=env, base_url="https://other.example/v1"
    )
    assert explicit.endpoint_url == "https://other.example/v1/chat/completions"  # type: ignore[attr-defined]
    default = model_from_string("openrouter:openai/gpt-4.1", env={"OPENROUTER_API_KEY": "k"})
    assert default.endpoint_url == "https://openrouter.ai/api/v1/chat/completions"  # type: ignore[attr-defined]
    assert "https://gateway.example/or/v1" in configured_endpoints(env, ())


async def test_openrouter_from_the_environment_reaches_that_server() -> None:
    async with FakeServer(HANDLERS["openai"](ToyModel(PLAN))) as server:
        env = {"OPENROUTER_API_KEY": "sk-x", "OPENROUTER_BASE_URL": server.url + "/v1"}
        model = model_from_string("openrouter:openai/gpt-4.1", env=env)
        await model.complete(
            ModelRequest(model.name, None, (user("hi"),), settings=ModelSettings(seed=3))
        )
        await model.aclose()  # type: ignore[attr-defined]
    assert server.requests[0].path == "/v1/chat/completions"
    assert json.loads(server.requests[0].body)["seed"] == 3


# --- through an agent ---------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_an_agents_settings_and_a_runs_reach_every_request_of_the_turn() -> None:
    async with FakeServer(HANDLERS["openai"](ToyModel(PLAN))) as server:
        model = build("openai", server.url, False)
        agent = Agent(
            model,
            tools=[add],
            store=MemoryStore(),
            limits=Limits(max_output_tokens=500),
            settings=ModelSettings(temperature=0.2, tool_choice="add", max_output_tokens=900),
        )
        result = await agent.run("add twice", settings=ModelSettings(seed=5, temperature=0.4))
        await agent.close()
        await model.aclose()  # type: ignore[attr-defined]
    assert result.output.strip() == "Results: 5, 42"
    bodies = [r.json() for r in server.requests]
    assert len(bodies) == 2
    for body in bodies:
        assert (body["temperature"], body["seed"], body["max_completion_tokens"]) == (0.4, 5, 500)
    # The forced call is made by the first answer; the turn's next request lets go (auto).
    assert bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert "tool_choice" not in bodies[1]


async def test_a_sticky_tool_choice_holds_for_every_request_of_the_turn() -> None:
    async with FakeServer(HANDLERS["openai"](ToyModel(PLAN))) as server:
        model = build("openai", server.url, False)
        agent = Agent(
            model,
            tools=[add],
            store=MemoryStore(),
            settings=ModelSettings(tool_choice="required", reset_tool_choice=False),
        )
        await agent.run("add twice")
        await agent.close()
        await model.aclose()  # type: ignore[attr-defined]
    choices = [r.json().get("tool_choice") for r in server.requests]
    assert len(choices) == 2 and set(choices) == {"required"}, choices


def test_anthropic_thinking_room_stays_within_the_models_known_limit() -> None:
    high = ModelSettings(reasoning=Reasoning(effort="high"))
    request = ModelRequest("m", None, (user("hi"),), settings=high)
    unknown = encode_request("some-new-model", request)
    assert unknown["max_tokens"] == 16384 + 16384
    with pytest.raises(UsageError, match=r"output cap \(8192 tokens\)"):
        encode_request("claude-3-5-haiku", request)
    low = ModelRequest("m", None, (user("hi"),), settings=ModelSettings(reasoning=Reasoning("low")))
    assert encode_request("claude-3-5-haiku", low)["max_tokens"] == 8192


async def test_interleaved_thinking_is_a_setting_sent_as_anthropics_beta_header() -> None:
    from tether.providers.anthropic import AnthropicModel

    thinking = Reasoning(effort="low", interleaved=True)
    async with FakeServer(HANDLERS["anthropic"](ToyModel([]))) as server:
        model = AnthropicModel("m", api_key="k", base_url=server.url, betas=("other-beta",))
        for settings in (ModelSettings(reasoning=thinking), None):
            await model.complete(ModelRequest("m", None, (user("hi"),), settings=settings))
        await model.aclose()
    with_it, without = (r.headers.get("anthropic-beta") for r in server.requests)
    assert with_it == "other-beta,interleaved-thinking-2025-05-14"
    assert without == "other-beta"  # the code's own betas, as ever
    assert server.requests[0].json()["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert (
        ModelSettings.from_json(ModelSettings(reasoning=thinking).to_json()).reasoning == thinking
    )
    # Settings without it keep the digest (and so the request hashes) they always had.
    assert "interleaved" not in Reasoning(effort="low").to_json()
