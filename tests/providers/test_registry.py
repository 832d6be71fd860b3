"""Model specs: every prefix builds its codec, keys come from the environment, errors name
what is missing before any request."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError, UsageError
from tether.providers.anthropic import AnthropicModel
from tether.providers.base import Model
from tether.providers.ollama import OllamaModel
from tether.providers.openai_chat import OpenAIChatModel
from tether.providers.openai_responses import OpenAIResponsesModel
from tether.providers.registry import model_from_string

ENV = {
    "ANTHROPIC_API_KEY": "sk-ant",
    "OPENAI_API_KEY": "sk-oai",
    "OPENROUTER_API_KEY": "sk-or",
}


def _url(model: object) -> str:
    return model._endpoint.url  # type: ignore[attr-defined, no-any-return]


def test_each_prefix_builds_its_codec_with_default_hosts() -> None:
    cases = {
        "anthropic:claude-sonnet-4-5": (AnthropicModel, "https://api.anthropic.com/v1/messages"),
        "openai:gpt-4.1": (OpenAIChatModel, "https://api.openai.com/v1/chat/completions"),
        "openai-responses:gpt-4.1": (OpenAIResponsesModel, "https://api.openai.com/v1/responses"),
        "openrouter:anthropic/claude-sonnet-4.5": (
            OpenAIChatModel,
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        "ollama:qwen3:8b": (OllamaModel, "http://localhost:11434/api/chat"),
        "vllm:meta-llama/Llama-3.1-8B-Instruct": (
            OpenAIChatModel,
            "http://localhost:8000/v1/chat/completions",
        ),
    }
    for spec, (cls, url) in cases.items():
        model = model_from_string(spec, env=ENV)
        assert isinstance(model, cls) and isinstance(model, Model)
        assert model.name == spec
        assert _url(model) == url


def test_hosts_come_from_the_environment() -> None:
    env = {
        **ENV,
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/",
        "OPENAI_BASE_URL": "http://127.0.0.1:8/v1",
        "OLLAMA_HOST": "10.0.0.2:11434",
        "VLLM_BASE_URL": "http://gpu:8000/v1",
    }
    assert _url(model_from_string("anthropic:m", env=env)) == "http://127.0.0.1:9/v1/messages"
    assert _url(model_from_string("openai:m", env=env)) == "http://127.0.0.1:8/v1/chat/completions"
    assert _url(model_from_string("ollama:m", env=env)) == "http://10.0.0.2:11434/api/chat"
    assert _url(model_from_string("vllm:m", env=env)) == "http://gpu:8000/v1/chat/completions"
    assert (
        _url(model_from_string("openai:m", env=env, base_url="http://x/v1"))
        == "http://x/v1/chat/completions"
    )


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4.1", "OPENAI_API_KEY"),
        ("openai-responses:gpt-4.1", "OPENAI_API_KEY"),
        ("openrouter:x/y", "OPENROUTER_API_KEY"),
    ],
)
def test_a_missing_key_is_a_config_error_naming_the_variable(spec: str, variable: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        model_from_string(spec, env={})
    assert model_from_string(spec, env={}, api_key="given") is not None


def test_local_servers_need_no_key() -> None:
    assert isinstance(model_from_string("ollama:qwen3", env={}), OllamaModel)
    assert isinstance(model_from_string("vllm:m", env={}), OpenAIChatModel)


def test_openai_compatible_takes_its_base_url_after_the_last_at() -> None:
    model = model_from_string("openai-compatible:org/model@v2@http://127.0.0.1:8080/v1", env={})
    assert isinstance(model, OpenAIChatModel)
    assert model.model == "org/model@v2"
    assert _url(model) == "http://127.0.0.1:8080/v1/chat/completions"
    assert (
        model_from_string("openai-compatible:m", env={}, base_url="https://h/v1").name
        == "openai-compatible:m"
    )
    with pytest.raises(UsageError, match="base URL"):
        model_from_string("openai-compatible:m", env={})


@pytest.mark.parametrize(
    "spec", ["gemini:pro", "scripted:demo", "claude-sonnet-4-5", "openai:", ""]
)
def test_unknown_or_malformed_specs_name_the_known_prefixes(spec: str) -> None:
    with pytest.raises(
        UsageError, match="anthropic, openai, openai-responses, openrouter"
    ) as caught:
        model_from_string(spec, env=ENV)
    assert not isinstance(caught.value, ConfigError)


def test_stream_flag_reaches_the_codec() -> None:
    model = model_from_string("anthropic:m", env=ENV, stream=True)
    assert model.streaming  # type: ignore[attr-defined]
